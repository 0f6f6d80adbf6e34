package kv

import (
	"errors"
	"testing"
)

// Drain accounting is honest about the prefix cache: an idle entry is
// neither a leak (CheckDrained passes) nor hidden (Drained counts it
// apart from free pages); a page a sequence still reads through the cache
// is held; and an idle entry whose bytes no longer match its seal is not
// counted as good (kv_corrupt), so a drain check cannot pass over it.
func TestDrainedReportsIdleCacheApart(t *testing.T) {
	p := newPool(t, 8)
	a := owner("t1", 1)
	refs, keys := cachedSeq(t, p, a, prompt(3, 2))
	if rep, err := p.Drained(); err == nil || rep.Held != 2 || rep.CacheIdle != 0 || rep.Free != 6 {
		t.Fatalf("while the writer reads its pages: %+v %v", rep, err)
	}
	if err := p.Release(a, refs); err != nil {
		t.Fatal(err)
	}
	rep, err := p.Drained()
	if err != nil || rep != (DrainReport{Pages: 8, Free: 6, CacheIdle: 2, Held: 0}) {
		t.Fatalf("after the release: %+v %v", rep, err)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Held() != 0 || s.InUse() != 2 {
		t.Fatalf("stats: held %d, in use %d", s.Held(), s.InUse())
	}
	// A reader holds them again: held, not idle.
	b := owner("t1", 2)
	hit, err := p.Lookup(b, keys)
	if err != nil || len(hit) != 2 {
		t.Fatal(hit, err)
	}
	if rep, err := p.Drained(); err == nil || rep.Held != 2 || rep.CacheIdle != 0 {
		t.Fatalf("while a reader holds the entries: %+v %v", rep, err)
	}
	img, _, err := p.PageData(b, hit[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(b, hit); err != nil {
		t.Fatal(err)
	}
	img[0] ^= 0x40 // an idle entry changed behind the cache's back
	if _, err := p.Drained(); err == nil || !errors.As(err, new(*Error)) || err.(*Error).Code != CodeCorrupt {
		t.Fatalf("a corrupted idle entry passed the drain check: %v", err)
	}
}
