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
	// Auto finds a mapping in smaps (-1 would mean it never can).
	if h := hugeMapped(f.data); h < 0 || h > int64(len(f.data)) {
		t.Errorf("auto could not read the mapping's page sizes: %d", h)
	}
	if p, _ := f.Place(MemoryMap); p.Memory != MemoryMap || &f.data[0] != before {
		t.Errorf("mmap moved the bytes: %+v", p)
	}
}

func TestRoomFrom(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mi := write("meminfo", "MemTotal:       24000000 kB\nMemFree:        1000 kB\nMemAvailable:   20000000 kB\n")
	limited, used := write("max", "3221225472\n"), write("current", "1073741824\n")
	unlimited := write("max-none", "max\n")
	missing := filepath.Join(dir, "none")
	for _, c := range []struct {
		name              string
		meminfo, max, cur string
		want              int64
	}{
		{"no cgroup limit file", mi, missing, missing, 20000000 << 10},
		{"cgroup without a limit", mi, unlimited, used, 20000000 << 10},
		{"container limit 3 GiB, 1 GiB used", mi, limited, used, 2 << 30},
		{"over its limit", mi, used, limited, 0},
		{"no meminfo", missing, limited, used, -1},
		{"meminfo without MemAvailable", write("old", "MemTotal: 1 kB\n"), limited, used, -1},
	} {
		if got := roomFrom(c.meminfo, c.max, c.cur); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	if MemoryRoom() <= 0 {
		t.Errorf("MemoryRoom() = %d on this machine", MemoryRoom())
	}
}

func TestSmapsHuge(t *testing.T) {
	smaps := []byte(`55d1c0000000-55d1c0400000 r--p 00000000 fd:00 12 /usr/bin/sluice
Size:               4096 kB
FilePmdMapped:      2048 kB
VmFlags: rd mr mw me
7f0000000000-7f0026c00000 r--s 00000000 fd:00 34 /models/tl-q4_K.gguf
Size:             634880 kB
Rss:              607632 kB
AnonHugePages:         0 kB
FilePmdMapped:     98304 kB
VmFlags: rd sh mr mw me ms hg
7f0026c00000-7f0026e00000 rw-p 00000000 00:00 0
FilePmdMapped:         0 kB
`)
	if got := smapsHuge(smaps, 0x7f0000000000); got != 98304<<10 {
		t.Errorf("mapping at 0x7f0000000000: %d bytes, want %d", got, 98304<<10)
	}
	if got := smapsHuge(smaps, 0x55d1c0000000); got != 2048<<10 {
		t.Errorf("first mapping: %d", got)
	}
	if got := smapsHuge(smaps, 0x7f0000001000); got != -1 {
		t.Errorf("no mapping starts there, got %d", got)
	}
	if got := smapsHuge([]byte("7f0000000000-7f0000200000 r--s 0 0 0 /x\nFilePmdMapped: lots\n"), 0x7f0000000000); got != -1 {
		t.Errorf("malformed line read as %d", got)
	}
}
