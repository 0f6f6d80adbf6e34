package kv

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// Workers reserve, write, read back, digest and release concurrently in a
// small LIFO pool while a forger replays released page tables. Run under
// -race (scripts/test.sh does). Every successful read must be the reader's
// own data; the pool must drain.
func TestConcurrentOwnersNeverSeeEachOther(t *testing.T) {
	p := newPool(t, 16)
	const workers, rounds = 6, 150
	var wg sync.WaitGroup
	stale := make(chan *View, 64)
	errs := make(chan error, workers+1)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				o := Owner{Tenant: string(rune('a' + w)), ID: ID{byte(w), byte(r)}}
				n := 1 + (w+r)%3
				refs, err := p.Reserve(o, n)
				if errors.Is(err, ErrNoCapacity) {
					time.Sleep(10 * time.Microsecond)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				v := p.View(o, refs)
				tokens := n*tg.PageSize - r%tg.PageSize
				failed := false
				for l := range tg.Layers {
					for pos := range tokens {
						g := refs[pos/tg.PageSize].Gen
						if err := v.Put(l, pos, row(o, g, l, pos, false, 4), row(o, g, l, pos, true, 4)); err != nil {
							failed = true // quarantined by the forger: fail closed
						}
					}
				}
				for b := 0; !failed && b < n; b++ {
					for l := range tg.Layers {
						k, _, cnt, err := v.Block(l, b)
						if err != nil {
							failed = true
							break
						}
						for i := range cnt {
							if !sameBits(k[i*4:i*4+4], row(o, refs[b].Gen, l, b*tg.PageSize+i, false, 4)) {
								errs <- errors.New("a read returned data its owner did not write")
								return
							}
						}
					}
				}
				if !failed {
					if _, err := p.Digest(o, refs, tokens); err != nil && !errors.Is(err, ErrQuarantined) {
						errs <- err
						return
					}
				}
				if err := p.Release(o, refs); err != nil {
					errs <- err
					return
				}
				select {
				case stale <- v:
				default:
				}
			}
		}()
	}
	done := make(chan struct{})
	var fg sync.WaitGroup
	fg.Add(1)
	go func() {
		defer fg.Done()
		for {
			select {
			case v := <-stale:
				if k, _, _, err := v.Block(0, 0); err == nil || k != nil {
					errs <- errors.New("a stale table read succeeded")
					return
				}
				p.Expire(time.Unix(0, 0).Add(time.Hour)) // stamp and free leases
			case <-done:
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	fg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	p.Expire(time.Unix(0, 0).Add(10 * time.Hour))
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Violations[KindStaleGeneration]+s.Violations[KindReleasedRead] == 0 {
		t.Fatalf("the forger never fired: %+v", s)
	}
}
