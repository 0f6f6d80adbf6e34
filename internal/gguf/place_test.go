package gguf

import (
	"bytes"
	"testing"
)

func TestParseMemory(t *testing.T) {
	for _, m := range []Memory{MemoryAuto, MemoryMap, MemoryCopy} {
		got, err := ParseMemory(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMemory(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMemory("hugepages"); err == nil {
		t.Error("ParseMemory accepted an unknown placement")
	}
}

func TestDecideMemory(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		size, huge int64
		thp        bool
		want       Memory
	}{
		{620 * mb, 98 * mb, true, MemoryCopy},  // small folios: copy
		{620 * mb, 584 * mb, true, MemoryMap},  // 94% on 2 MiB pages: share
		{620 * mb, 558 * mb, true, MemoryMap},  // exactly 90%
		{620 * mb, 557 * mb, true, MemoryCopy}, // just under
		{620 * mb, 0, false, MemoryMap},        // no anonymous THP: a copy gains nothing
		{620 * mb, -1, true, MemoryMap},        // smaps unreadable: do not guess
		{autoCopyMin - 1, 0, true, MemoryMap},  // small: the caches hold it
		{autoCopyMin, 0, true, MemoryCopy},
	} {
		if got := decideMemory(c.size, c.huge, c.thp); got != c.want {
			t.Errorf("decideMemory(%d, %d, %v) = %v, want %v", c.size, c.huge, c.thp, got, c.want)
		}
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

func TestPlaceParsedIsNoOp(t *testing.T) {
	data, err := sampleWriter(t).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.Place(MemoryCopy)
	if err != nil || p.Memory != MemoryMap {
		t.Fatalf("Place on a parsed file: %v, %v", p, err)
	}
	if &f.data[0] != &data[0] {
		t.Error("Place moved the bytes of a file it does not own")
	}
	if !bytes.Equal(f.data, data) {
		t.Error("bytes changed")
	}
}
