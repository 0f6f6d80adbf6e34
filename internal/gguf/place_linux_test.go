package gguf

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func openSample(t *testing.T) (*File, []byte) {
	t.Helper()
	data, err := sampleWriter(t).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, data
}

// mappingOf returns the smaps header line of the mapping holding addr.
func mappingOf(t *testing.T, addr uintptr) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip("no /proc/self/smaps:", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok || strings.HasSuffix(f[0], ":") {
			continue
		}
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uintptr(a) <= addr && addr < uintptr(z) {
			return sc.Text()
		}
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}

func TestPlaceCopy(t *testing.T) {
	f, data := openSample(t)
	a, _ := f.Tensor("a")
	if m := mappingOf(t, uintptr(unsafe.Pointer(&f.data[0]))); !strings.HasSuffix(m, "x.gguf") {
		t.Fatalf("before Place the bytes are not the file's mapping: %s", m)
	}
	p, err := f.Place(MemoryCopy)
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory != MemoryCopy || p.Bytes != int64(len(data)) {
		t.Fatalf("placement %+v", p)
	}
	if !bytes.Equal(f.data, data) {
		t.Fatal("the copy differs from the file")
	}
	m := mappingOf(t, uintptr(unsafe.Pointer(&f.data[0])))
	if fs := strings.Fields(m); len(fs) != 5 || fs[4] != "0" || !strings.HasPrefix(fs[1], "r--p") {
		t.Errorf("the copy is not a private read-only anonymous mapping: %s", m)
	}
	if len(f.TensorData(a)) != 24 {
		t.Error("tensor data after the copy")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPlaceAutoSmallKeepsMapping(t *testing.T) {
	f, _ := openSample(t)
	before := &f.data[0]
	p, err := f.Place(MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory != MemoryMap || &f.data[0] != before {
		t.Errorf("a file below autoCopyMin was moved: %+v", p)
	}
	// Auto found the mapping in smaps (-1 would mean it never can).
	if p.HugeBytes < 0 {
		t.Errorf("auto could not read the mapping's page sizes: %+v", p)
	}
	if p, _ := f.Place(MemoryMap); p.Memory != MemoryMap || &f.data[0] != before {
		t.Errorf("mmap moved the bytes: %+v", p)
	}
}
