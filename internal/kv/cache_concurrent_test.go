package kv

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Sequences of two tenants, concurrently, over prompts that share pages,
// through a pool small enough that idle entries are evicted all the time:
// every block a sequence reads (cached by anyone or written by itself)
// holds exactly the rows its own tenant's chain key names, so a page of the
// other tenant, a stale page or a scrubbed one would show. With a public
// prefix (the operator's opt-in), prompts that start with page a share it
// across tenants, its rows named by no tenant, and every page after it is
// still the tenant's own. Run with -race.
func TestCacheConcurrent(t *testing.T) {
	for _, public := range []bool{false, true} {
		t.Run(map[bool]string{false: "private", true: "public-prefix"}[public], func(t *testing.T) { testCacheConcurrent(t, public) })
	}
}

func testCacheConcurrent(t *testing.T, public bool) {
	p := newPool(t, 10, func(c *Config) { c.Scrub = ScrubPoison })
	a, b, c := prompt(1, 1), prompt(2, 1), prompt(3, 1)
	prompts := [][]int32{slices.Concat(a, b), slices.Concat(a, c), slices.Concat(a, b, c), slices.Concat(c, b)}
	// content is what tenant's page of key holds: rows named by both, so
	// a page of the other tenant reads differently even under the same key.
	content := func(tenant string, k BlockKey) Owner {
		var id ID
		copy(id[:], k[:])
		return Owner{Tenant: tenant, ID: id}
	}
	var wg sync.WaitGroup
	var publicHits atomic.Int64
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := []string{"t1", "t2"}[w%2]
			for i := range 150 {
				o := Owner{Tenant: tenant, ID: ID{byte(w), byte(i), byte(i >> 8), 1}}
				pr := prompts[(w+i)%len(prompts)]
				keys, npub := PrefixKeys(testFP, saltOf(tenant), tg.PageSize, pr), 0
				if public && slices.Equal(pr[:tg.PageSize], a) {
					// The engine's chain: the public page, then the tenant's.
					npub = 1
					keys[0] = PrefixKeys(testFP, saltOf("public"), tg.PageSize, a)[0]
					for j := 1; j < len(keys); j++ {
						keys[j] = ChainKey(keys[j-1], testFP, saltOf(tenant), pr[j*tg.PageSize:(j+1)*tg.PageSize])
					}
				}
				owns := func(blk int) string { // whose rows block blk holds
					if blk < npub {
						return ""
					}
					return tenant
				}
				hits, err := p.LookupPublic(o, keys, npub)
				if err != nil {
					errs <- err
					return
				}
				if npub > 0 && len(hits) > 0 {
					publicHits.Add(1)
				}
				tbl, err := p.Extend(o, hits, len(keys)-len(hits))
				if errors.Is(err, ErrNoCapacity) {
					_ = p.Release(o, hits)
					time.Sleep(time.Microsecond)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				v := p.View(o, tbl)
				for l := range tg.Layers {
					for pos := len(hits) * tg.PageSize; pos < len(tbl)*tg.PageSize; pos++ {
						cw := content(owns(pos/tg.PageSize), keys[pos/tg.PageSize])
						if err := v.Put(l, pos, row(cw, 0, l, pos, false, tg.KVDim), row(cw, 0, l, pos, true, tg.KVDim)); err != nil {
							errs <- err
							return
						}
					}
				}
				if err := p.Seal(o, tbl[len(hits):]); err != nil {
					errs <- err
					return
				}
				for j := len(hits); j < len(tbl); j++ {
					insert := p.Insert
					if j < npub {
						insert = p.InsertPublic
					}
					if _, err := insert(o, tbl[j], keys[j]); err != nil {
						errs <- err
						return
					}
				}
				for blk := range tbl {
					cw := content(owns(blk), keys[blk])
					for l := range tg.Layers {
						k, vv, n, err := v.Block(l, blk)
						if err != nil || n != tg.PageSize {
							errs <- fmt.Errorf("read: %d %v", n, err)
							return
						}
						for s := range n {
							pos := blk*tg.PageSize + s
							if !sameBits(k[s*tg.KVDim:(s+1)*tg.KVDim], row(cw, 0, l, pos, false, tg.KVDim)) ||
								!sameBits(vv[s*tg.KVDim:(s+1)*tg.KVDim], row(cw, 0, l, pos, true, tg.KVDim)) {
								errs <- fmt.Errorf("tenant %s read rows that are not its chain's at block %d", tenant, blk)
								return
							}
						}
					}
				}
				if err := p.Release(o, tbl); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.CacheHits == 0 || st.CacheEvictions == 0 {
		t.Fatalf("no hits or no evictions: %+v", st)
	}
	if public && publicHits.Load() == 0 {
		t.Fatal("no lookup hit the public page")
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	p.EvictIdle(-1)
	if st := p.Stats(); st.Free != st.Pages || len(st.Violations) != 0 {
		t.Fatalf("pool not whole, or violations counted: %+v", st)
	}
}
