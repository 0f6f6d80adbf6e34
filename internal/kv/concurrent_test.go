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

// A release of 1 MiB or more scrubs without the pool lock. Meanwhile the
// pages are out of service: another owner reserving, a timer expiring
// leases and a late double release must neither get them nor free them
// twice; afterwards they are scrubbed and free.
func TestBigReleaseScrubsUnlocked(t *testing.T) {
	g := Geometry{Layers: 4, KVDim: 256, PageSize: 16, Type: F32} // 128 KiB pages
	p, err := New(Config{Geometry: g, Pages: 24, Order: LIFO})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if 8*g.PageBytes() < scrubUnlockedBytes {
		t.Fatal("test geometry too small to take the unlocked path")
	}
	a, b := owner("a", 1), owner("b", 2)
	for round := range 20 {
		refs, err := p.Reserve(a, 16)
		if err != nil {
			t.Fatal(err)
		}
		v := p.View(a, refs)
		row := make([]float32, g.KVDim)
		for i := range row {
			row[i] = float32(round + 1)
		}
		for l := range g.Layers {
			for pos := range 16 * g.PageSize {
				if err := v.Put(l, pos, row, row); err != nil {
					t.Fatal(err)
				}
			}
		}
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); p.Release(a, refs) }()
		go func() {
			defer wg.Done()
			for range 50 {
				if r, err := p.Reserve(b, 2); err == nil {
					for _, x := range r {
						for _, f := range pageFloats(p, x.Page) {
							if f != 0 {
								t.Error("a reservation got an unscrubbed page")
								return
							}
						}
					}
					p.Release(b, r)
				}
				p.Expire(time.Unix(int64(round*100), 0))
			}
		}()
		go func() { defer wg.Done(); p.Release(a, refs[:1]) }() // may be a double release
		wg.Wait()
		p.Expire(time.Unix(1e9, 0))
		p.Expire(time.Unix(2e9, 0))
		if err := p.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range p.f32 {
		if f != 0 {
			t.Fatalf("float %d not scrubbed", i)
		}
	}
}
