package kv

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The tenant page counts (hold.go) while releases big enough to scrub
// with the pool lock dropped (scrubUnlockedBytes) run beside reservations,
// inserts, lookups, strangers' releases (violations that quarantine),
// one-sided quarantines with drain acks, evictions and lease expiry in
// other goroutines: the window in which a page is out of service under
// its scrubber is one TestHoldCountsEqualRecount (one goroutine, small
// pages) never opens. Audit, which compares the counts with a full
// recount, holds at every check and at the end, when nothing is held.
func TestHoldCountsWithUnlockedScrubs(t *testing.T) {
	// 512 KiB pages: a release of two or more scrubs unlocked.
	g := Geometry{Layers: 1, KVDim: 1024, PageSize: 64, Type: F32}
	if 2*g.PageBytes() < scrubUnlockedBytes {
		t.Fatalf("pages of %d bytes: two do not reach the unlocked scrub", g.PageBytes())
	}
	const pages = 24
	weight := func(t string) int { return map[string]int{"a": 1, "b": 2, "c": 3}[t] }
	p, err := New(Config{Geometry: g, Pages: pages, Lease: time.Millisecond, Scrub: ScrubZero, CacheWeight: weight})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	img := make([]byte, g.PageBytes())
	tenants := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	var idMu sync.Mutex
	next := uint32(0)
	newOwner := func(tenant string) Owner {
		idMu.Lock()
		defer idMu.Unlock()
		next++
		return Owner{Tenant: tenant, ID: ID{byte(next), byte(next >> 8), byte(next >> 16), 0xab}}
	}
	errs := make(chan error, 16)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range 200 {
				tn := tenants[r.IntN(len(tenants))]
				o := newOwner(tn)
				keys := make([]BlockKey, 1+r.IntN(3))
				for i := range keys {
					keys[i] = BlockKey{byte(i), tn[0], byte(r.IntN(2))}
				}
				refs, err := p.Lookup(o, keys)
				if err != nil {
					continue
				}
				all, err := p.Extend(o, refs, 1+r.IntN(4))
				if err != nil {
					if len(refs) > 0 {
						_ = p.Release(o, refs)
					}
					continue
				}
				for _, ref := range all[len(refs):] {
					_ = p.WritePage(o, ref, g.PageSize, img)
				}
				_ = p.Seal(o, all)
				for i, ref := range all {
					if i < len(keys) {
						_, _ = p.Insert(o, ref, keys[i])
					}
				}
				switch r.IntN(5) {
				case 0:
					// A stranger of the same tenant releases one page: a
					// violation that quarantines it.
					_ = p.Release(newOwner(tn), all[r.IntN(len(all)):][:1])
					_ = p.Release(o, all)
				case 1:
					p.Quarantine(o, all, time.Time{})
					if r.IntN(2) == 0 {
						p.DrainAck(o, all)
					}
				default:
					_ = p.Release(o, all)
				}
				switch r.IntN(4) {
				case 0:
					p.EvictIdle(r.IntN(3))
				case 1:
					p.Expire(time.Now().Add(time.Hour))
				}
				if r.IntN(8) == 0 {
					if err := p.audit(); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.Expire(time.Now().Add(time.Hour))
	p.Expire(time.Now().Add(2 * time.Hour))
	p.EvictIdle(-1)
	if err := p.audit(); err != nil {
		t.Fatal(err)
	}
	if len(p.holding) != 0 || p.FreePages() != pages {
		t.Fatalf("a whole pool: %d tenants counted holding pages, %d of %d pages free", len(p.holding), p.FreePages(), pages)
	}
}
