// Package testenv locates the test data: the repository's own testdata/
// first (the small models, vocabularies and llama.cpp reference outputs are
// committed there, so a fresh clone runs every test), then ../shared beside
// the repository (or $SLUICE_SHARED) for what is too big to commit (the
// bench-15M model, llama.cpp builds), which only benchmarks and `sluice
// bench` use. When a file is in neither place a test skips LOUDLY (the
// message starts with "SKIPPED" and scripts/test.sh lists every skip); under
// CI (CI=true) or with SLUICE_REQUIRE_SHARED=1 it fails instead.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	rootOnce sync.Once
	root     string
)

// ModuleRoot returns the directory holding go.mod, or "" when not found.
func ModuleRoot() string {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				return
			}
			dir = parent
		}
	})
	return root
}

// Required reports whether missing test data must fail the test.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SLUICE_REQUIRE_SHARED") == "1"
}

// DataDir returns the repository's testdata/ directory ("" when the module
// root is not found).
func DataDir() string {
	r := ModuleRoot()
	if r == "" {
		return ""
	}
	return filepath.Join(r, "testdata")
}

// SharedDir returns the shared/ directory: $SLUICE_SHARED if set, else
// ../shared next to the module root.
func SharedDir() string {
	if d := os.Getenv("SLUICE_SHARED"); d != "" {
		return d
	}
	r := ModuleRoot()
	if r == "" {
		return ""
	}
	return filepath.Join(filepath.Dir(r), "shared")
}

// Find returns the path of rel (e.g. "models/stories260K.gguf") in the
// repository's testdata/ or, failing that, in the shared directory, and
// whether it exists. When it exists in neither, the path returned is the
// shared one (for messages).
func Find(rel string) (string, bool) {
	for _, dir := range []string{DataDir(), SharedDir()} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return filepath.Join(SharedDir(), rel), false
}

// Shared returns the path of rel in testdata/ or the shared directory (see
// Find). When the file is in neither it skips the test with a message
// naming the file, or fails it under CI.
func Shared(t testing.TB, rel string) string {
	t.Helper()
	p, ok := Find(rel)
	if !ok {
		where := filepath.Join(DataDir(), rel) + " or " + p
		if Required() {
			t.Fatalf("test data %s is missing in %s; CI must have it (testdata/ is in the repository; the rest comes from ../shared)", rel, where)
		}
		t.Skipf("SKIPPED: test data %s not found in %s; this test did NOT run (the big files live in ../shared beside the repository)", rel, where)
	}
	return p
}

// Bench15MSize is the size in bytes of ../shared/models/bench-15M-q8_0.gguf.
const Bench15MSize = 26671680

// Bench15MHeader returns the bench-15M-q8_0 model file as far as metadata
// tests need it: the repository's copy of its header (metadata and tensor
// table, testdata/README.md) padded with zeros to the file's size, so a
// GGUF parser sees the real file's metadata and tensor table, with zero
// tensor data. The 26.7 MB file itself stays in ../shared.
func Bench15MHeader(t testing.TB) []byte {
	t.Helper()
	hdr, err := os.ReadFile(Shared(t, "models/bench-15M-q8_0.header.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(hdr) > Bench15MSize {
		t.Fatalf("bench-15M header of %d bytes is longer than the file (%d)", len(hdr), Bench15MSize)
	}
	full := make([]byte, Bench15MSize)
	copy(full, hdr)
	return full
}

var sluiceBin struct {
	once      sync.Once
	dir, path string
	err       error
}

// SluiceBinary builds the sluice command once per test binary and returns
// its path, for tests that run it as a process. A package that uses it
// removes the build with RemoveSluiceBinary after m.Run in its TestMain.
func SluiceBinary(t testing.TB) string {
	t.Helper()
	b := &sluiceBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "sluice-test-bin-"); b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "sluice")
		if out, err := exec.Command("go", "build", "-o", b.path, "sluice/cmd/sluice").CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build sluice: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveSluiceBinary removes what SluiceBinary built.
func RemoveSluiceBinary() {
	if sluiceBin.dir != "" {
		os.RemoveAll(sluiceBin.dir)
	}
}

// Buffer is a text buffer safe for concurrent writers: a log sink that
// handlers on other goroutines write to while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
