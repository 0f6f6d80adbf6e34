package kv

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Red team (session 20): fills racing every way a page can leave its
// owner at once — Release, Quarantine then DrainAck or Expire, a
// duplicate write's violation, a Seal — while other tenants reserve the
// same few pages. A fill writes its tenant's marker byte over the page
// until it ends; a page that reached another owner while a fill still
// wrote it shows the marker (and, under -race, a data race). After the
// storm the pool drains and holds no marker.
func TestRT13FillStorm(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 15
	}
	for seed := range seeds {
		p := newPool(t, 3)
		var clock atomic.Int64 // the lease clock, in seconds
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []string
		report := func(s string) {
			mu.Lock()
			bad = append(bad, s)
			mu.Unlock()
		}
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
				mark := byte(0x10 + w)
				for it := range 40 {
					o := Owner{Tenant: string(rune('a' + w)), ID: ID{byte(w), byte(it), byte(seed)}}
					refs, err := p.Reserve(o, 1)
					if err != nil {
						time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
						continue
					}
					if data, _, err := p.PageData(o, refs[0]); err == nil {
						for _, b := range data {
							if b >= 0x10 && b < 0x14 {
								report("a reserved page holds a fill's marker")
								break
							}
						}
					}
					f, err := p.ClaimFill(o, refs[0], tg.PageSize, tg.PageBytes())
					if err != nil {
						report("claim: " + err.Error())
						continue
					}
					fail := rng.IntN(4) == 0
					spin := rng.IntN(300)
					done := make(chan error, 1)
					go func() {
						for range spin {
							for i := range f.Dst {
								f.Dst[i] = mark
							}
						}
						var ferr error
						if fail {
							ferr = errors.New("bad tag")
						}
						_, err := f.End(ferr)
						done <- err
					}()
					held, waited := true, false
					switch rng.IntN(7) {
					case 0:
						p.Release(o, refs)
						held = false
					case 1:
						p.Quarantine(o, refs, time.Unix(clock.Load()+1, 0))
						p.Expire(time.Unix(clock.Add(2), 0))
						held = false
					case 2:
						p.Quarantine(o, refs, time.Time{})
						p.DrainAck(o, refs)
						held = false
					case 3:
						// A replayed or injected write of the page: a
						// violation that quarantines it.
						// A claim succeeds only once the first fill has
						// ended unwritten (failed: the page stays Reserved
						// and its owner may write it once, as after a
						// failed FillPageSum); it must be ended, or the
						// pool's Close waits for it.
						if f2, err := p.ClaimFill(o, refs[0], tg.PageSize, tg.PageBytes()); err == nil {
							if err1 := <-done; err1 == nil || !fail {
								report("a second claim of a page with a fill in flight")
							}
							waited = true
							f2.End(errors.New("replayed"))
						}
					case 4:
						p.Seal(o, refs)
					case 5:
						p.Expire(time.Unix(clock.Add(5), 0))
					}
					ended := rng.IntN(2) == 0
					if ended && !waited {
						<-done
					}
					if held {
						p.Release(o, refs)
					}
					if !ended && !waited {
						<-done
					}
					if err := p.Audit(); err != nil {
						report(err.Error())
					}
				}
			}()
		}
		wg.Wait()
		p.Expire(time.Unix(clock.Add(1000), 0))
		p.Expire(time.Unix(clock.Add(1000), 0))
		if len(bad) > 0 {
			t.Fatalf("seed %d: %v", seed, bad[0])
		}
		if err := p.CheckDrained(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for _, b := range p.mem {
			if b >= 0x10 && b < 0x14 {
				t.Fatalf("seed %d: a drained pool still holds a fill's marker", seed)
			}
		}
	}
}
