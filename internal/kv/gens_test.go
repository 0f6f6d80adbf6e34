package kv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// peerMap maps a shared pool file the way a one-sided writer in another
// process does, and returns the mapping with its generation words.
func peerMap(t *testing.T, path string) ([]byte, SharedGens) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(st.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	h, err := ParseSharedHeader(mem)
	if err != nil {
		t.Fatal(err)
	}
	gens, err := SharedGensOf(mem, h)
	if err != nil {
		t.Fatal(err)
	}
	return mem, gens
}

// The shared file's generation word of a page (I6, the writer's fence in
// memory): open at exactly the page's generation while it is Reserved for
// its owner's one transfer write, closed (0) by everything else: the write
// arriving (inline or one-sided notice), decode's own first Put, a
// quarantine (an abort), a release, a lease expiry. A re-allocation opens
// it at the new generation only.
func TestSharedGenerationWords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.shm")
	p := newPool(t, 4, func(c *Config) { c.SharedFile = path; c.Order = LIFO })
	_, gens := peerMap(t, path)
	if len(gens) != 4 {
		t.Fatalf("%d generation words for 4 pages", len(gens))
	}
	for pg := range gens {
		if gens.Open(uint32(pg), gens[pg].Load()) {
			t.Fatalf("free page %d is open to a writer", pg)
		}
	}
	a := owner("a", 1)
	refs, err := p.Reserve(a, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if !gens.Open(r.Page, r.Gen) || gens.Open(r.Page, r.Gen-1) || gens.Open(r.Page, r.Gen+1) {
			t.Fatalf("reserved page %d gen %d: word %d", r.Page, r.Gen, gens[r.Page].Load())
		}
	}
	img := make([]byte, tg.PageBytes())
	if err := p.WritePage(a, refs[0], tg.PageSize, img); err != nil {
		t.Fatal(err)
	}
	if err := p.MarkWritten(a, refs[1], 1); err != nil {
		t.Fatal(err)
	}
	if err := p.View(a, refs).Put(0, 2*tg.PageSize, make([]float32, tg.KVDim), make([]float32, tg.KVDim)); err != nil {
		t.Fatal(err)
	}
	for i, what := range []string{"inline write", "one-sided notice", "decode's Put"} {
		if gens.Open(refs[i].Page, refs[i].Gen) {
			t.Errorf("page open after its %s", what)
		}
	}
	if !gens.Open(refs[3].Page, refs[3].Gen) {
		t.Fatal("an untouched reserved page closed")
	}
	// An abort quarantines the pages: closed at once, long before the lease.
	p.Quarantine(a, refs, time.Unix(100, 0))
	if gens.Open(refs[3].Page, refs[3].Gen) {
		t.Fatal("a quarantined page is still open to its writer")
	}
	p.Expire(time.Unix(200, 0))
	b := owner("b", 2)
	again, err := p.Reserve(b, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if gens.Open(r.Page, r.Gen) {
			t.Fatalf("page %d open at a's old generation %d after re-use", r.Page, r.Gen)
		}
	}
	if !gens.Open(again[0].Page, again[0].Gen) {
		t.Fatal("b's page is not open at b's generation")
	}
	if err := p.Release(b, again); err != nil {
		t.Fatal(err)
	}
	if gens.Open(again[0].Page, again[0].Gen) {
		t.Fatal("a released page is open")
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// Item 11's choice: a shared pool never trusts a hash recorded when a page
// was written, even an inline write's, because a peer mapping the file can
// change the bytes afterwards (a stalled writer): Digest hashes what the
// memory holds at the commit. The expected digests come from a heap pool
// given the same bytes.
func TestSharedPoolDigestsMemoryNotRecordedHash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.shm")
	p := newPool(t, 2, func(c *Config) { c.SharedFile = path })
	heap := newPool(t, 2)
	peer, _ := peerMap(t, path)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	href, _ := heap.Reserve(a, 1)
	img := make([]byte, tg.PageBytes())
	for i := range img {
		img[i] = byte(i*5 + 1)
	}
	if _, err := p.WritePageSum(a, refs[0], tg.PageSize, img); err != nil {
		t.Fatal(err)
	}
	// The late writer lands other bytes in the page after the write.
	late := make([]byte, tg.PageBytes())
	for i := range late {
		late[i] = 0xA5
	}
	off := p.SharedOffset(refs[0])
	copy(peer[off:off+int64(tg.PageBytes())], late)
	if err := heap.WritePage(a, href[0], tg.PageSize, late); err != nil {
		t.Fatal(err)
	}
	got, err := p.Digest(a, refs, tg.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := heap.Digest(a, href, tg.PageSize)
	if got != want {
		t.Fatalf("the shared pool's digest %x is not that of the bytes it holds (%x): a recorded hash was trusted", got, want)
	}
}
