// Package testenv locates the shared test data (../shared beside the
// repository) and decides what a test does when it is missing: on a user's
// fresh clone the test skips and says what was skipped; under CI (CI=true) or
// with SLUICE_REQUIRE_SHARED=1 it fails, so CI never skips silently.
package testenv

import (
	"os"
	"path/filepath"
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

// Required reports whether missing shared data must fail the test.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("SLUICE_REQUIRE_SHARED") == "1"
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

// Shared returns the path of rel inside the shared directory. When the file
// is missing it skips the test with a message naming the file, or fails it
// under CI.
func Shared(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(SharedDir(), rel)
	if _, err := os.Stat(p); err != nil {
		if Required() {
			t.Fatalf("shared test data %s is missing (%v); CI must run with ../shared beside the repository", p, err)
		}
		t.Skipf("SKIPPED: shared test data %s not found; this test needs ../shared (models, vocab, reference outputs) beside the repository", p)
	}
	return p
}
