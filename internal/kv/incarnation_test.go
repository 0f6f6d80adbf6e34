package kv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A decode worker restarted on the same SharedFile path gets a NEW file
// and a new incarnation: a writer still mapping the crashed incarnation's
// file (its posted one-sided writes land late, I6) writes into the old
// inode, never into the new pool's pages.
func TestRestartedSharedPoolIsANewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.shm")
	old := newPool(t, 3, func(c *Config) { c.SharedFile = path })
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	size := SharedHeaderBytes + 3*tg.PageBytes()
	stale, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(stale)
	h, err := ParseSharedHeader(stale)
	if err != nil || h.Incarnation != old.Incarnation() || h.Pages != 3 || h.Geometry != old.Geometry() {
		t.Fatalf("header %+v, %v; pool incarnation %x", h, err, old.Incarnation())
	}
	old.Close() // the crash

	p := newPool(t, 3, func(c *Config) { c.SharedFile = path })
	if p.Incarnation() == 0 || p.Incarnation() == old.Incarnation() {
		t.Fatalf("restarted pool incarnation %x, old %x", p.Incarnation(), old.Incarnation())
	}
	o := owner("a", 1)
	refs, err := p.Reserve(o, 3)
	if err != nil {
		t.Fatal(err)
	}
	// The old incarnation's writer lands a page everywhere it can.
	for i := SharedHeaderBytes; i < size; i++ {
		stale[i] = 0xA5
	}
	for i, b := range p.mem {
		if b != 0 {
			t.Fatalf("byte %d of the restarted pool is %#x: a write into the crashed incarnation's mapping reached it", i, b)
		}
	}
	if err := p.Release(o, refs); err != nil {
		t.Fatal(err)
	}
}
