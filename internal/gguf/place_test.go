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
	const lots = 20 << 30
	for _, c := range []struct {
		size, huge int64
		thp        bool
		room       int64
		want       Memory
	}{
		{620 * mb, 98 * mb, true, lots, MemoryCopy},  // small folios: copy
		{620 * mb, 584 * mb, true, lots, MemoryMap},  // 94% on 2 MiB pages: share
		{620 * mb, 558 * mb, true, lots, MemoryMap},  // exactly 90%
		{620 * mb, 557 * mb, true, lots, MemoryCopy}, // just under
		{620 * mb, 0, false, lots, MemoryMap},        // no anonymous THP: a copy gains nothing
		{620 * mb, -1, true, lots, MemoryMap},        // smaps unreadable: do not guess
		{autoCopyMin - 1, 0, true, lots, MemoryMap},  // small: the caches hold it
		{autoCopyMin, 0, true, lots, MemoryCopy},
		{620 * mb, 0, true, 1240 * mb, MemoryCopy}, // twice its size to spare
		{620 * mb, 0, true, 1239 * mb, MemoryMap},  // a container that holds it about once
		{620 * mb, 0, true, -1, MemoryMap},         // room unknown
	} {
		if got := decideMemory(c.size, c.huge, c.thp, c.room); got != c.want {
			t.Errorf("decideMemory(%d, %d, %v, %d) = %v, want %v", c.size, c.huge, c.thp, c.room, got, c.want)
		}
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
