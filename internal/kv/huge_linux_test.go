package kv

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestHeapPoolAdvisesHugePages: a heap pool's 2 MiB aligned interior is
// advised MADV_HUGEPAGE (VmFlags "hg" in /proc/self/smaps), so decode's
// reads of K/V rows from pages anywhere in the pool do not take a TLB
// miss every few rows (huge_linux.go).
func TestHeapPoolAdvisesHugePages(t *testing.T) {
	g := Geometry{Layers: 2, KVDim: 256, PageSize: 16, Type: F16}
	p, err := New(Config{Geometry: g, Pages: (16 << 20) / g.PageBytes()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const huge = 2 << 20
	at := (uintptr(unsafe.Pointer(unsafe.SliceData(p.mem))) + huge - 1) &^ (huge - 1)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err) // Linux has it
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in, found := false, false
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		// A mapping's header line starts with its range "lo-hi" in hex.
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(at) >= a && uint64(at) < b
				continue
			}
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			found = true
			// A kernel built without transparent huge pages refuses the
			// advice (EINVAL), which the pool ignores: there the flag must
			// be absent and the pool work as before.
			if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage"); err != nil {
				if strings.Contains(line, " hg") {
					t.Fatalf("no transparent huge pages here, yet the pool's memory is flagged: %s", line)
				}
				continue
			}
			if !strings.Contains(line, " hg") {
				t.Fatalf("the pool's memory at %#x is not advised huge: %s", at, line)
			}
		}
	}
	if !found {
		t.Fatalf("no mapping holds the pool's memory at %#x", at)
	}
}
