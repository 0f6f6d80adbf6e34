package kv

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// A claimed page is written without the pool lock: another handoff's
// Reserve, a decode sequence's growth and every other call of the pool go
// on while the fill runs.
func TestFillClaimHoldsNoLock(t *testing.T) {
	p := newPool(t, 4)
	h, other := owner("t", 1), owner("u", 2)
	refs, _ := p.Reserve(h, 1)
	f, err := p.ClaimFill(h, refs[0], tg.PageSize, tg.PageBytes())
	if err != nil {
		t.Fatal(err)
	}
	endOnExit(t, f)
	copy(f.Dst, image(h, refs[0].Gen, 0, tg.PageSize))
	done := make(chan error, 1)
	go func() {
		// Under the lock, this would wait for End below: it must not.
		r, err := p.Reserve(other, 1)
		if err == nil {
			err = p.Release(other, r)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Reserve waited for a fill in flight: the claim holds the pool lock")
	}
	if _, n, _ := p.PageData(h, refs[0]); n != 0 {
		t.Fatalf("page marked %d slots written before the fill ended (I4)", n)
	}
	sum, err := f.End(nil)
	if err != nil {
		t.Fatal(err)
	}
	q := newPool(t, 1)
	qr, _ := q.Reserve(h, 1)
	want, _ := q.WritePageSum(h, qr[0], tg.PageSize, image(h, refs[0].Gen, 0, tg.PageSize))
	if sum != want {
		t.Fatalf("claim's sum %+v, WritePageSum's %+v", sum, want)
	}
	if _, n, _ := p.PageData(h, refs[0]); n != tg.PageSize {
		t.Fatalf("filled page holds %d slots", n)
	}
	if err := p.Audit(); err != nil {
		t.Fatal(err)
	}
}

// I6: a Release of a page with a fill in flight returns at once (it does
// not wait for the filler), but the page does not reach the free list:
// no Reserve can take it until the fill has ended, its bytes are scrubbed
// when it is freed, and the filler learns its write was dropped.
func TestFillReleaseFencesThePage(t *testing.T) {
	for _, sc := range []ScrubMode{ScrubZero, ScrubPoison, ScrubOff} {
		p := newPool(t, 1, func(c *Config) { c.Scrub = sc })
		a, b := owner("a", 1), owner("b", 2)
		f, refs := claimedPage(t, p, a)
		img := image(a, refs[0].Gen, 0, tg.PageSize)
		copy(f.Dst[:len(img)/2], img)
		released := make(chan error, 1)
		go func() { released <- p.Release(a, refs) }()
		select {
		case err := <-released:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Release waited for the fill in flight")
		}
		if err := p.Audit(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Reserve(b, 1); !errors.Is(err, ErrNoCapacity) {
			t.Fatalf("scrub %v: Reserve during the released page's fill: %v, want no capacity (the page must not be free, I6)", sc, err)
		}
		copy(f.Dst[len(img)/2:], img[len(img)/2:]) // the filler writes on
		if _, err := f.End(nil); !errors.Is(err, ErrLateWrite) {
			t.Fatalf("scrub %v: End of a released page's fill: %v, want a late write", sc, err)
		}
		if err := p.CheckDrained(); err != nil {
			t.Fatalf("scrub %v: %v", sc, err)
		}
		br, err := p.Reserve(b, 1)
		if err != nil {
			t.Fatal(err)
		}
		data, n, _ := p.PageData(b, br[0])
		if n != 0 || bytes.Contains(data, img[:64]) {
			t.Fatalf("scrub %v: the next owner got %d written slots, a's bytes %v", sc, n, bytes.Contains(data, img[:64]))
		}
		p.Release(b, br)
	}
}

// I6 for one-sided fencing: a page quarantined (or acknowledged as
// drained) while a fill writes it is not freed by its lease or by the
// acknowledgement until the fill has ended; then it is, scrubbed.
func TestFillFencedAgainstExpireAndDrainAck(t *testing.T) {
	for _, how := range []string{"expire", "drainack"} {
		p := newPool(t, 1)
		a := owner("a", 1)
		f, refs := claimedPage(t, p, a)
		p.Quarantine(a, refs, time.Unix(1, 0))
		switch how {
		case "expire":
			if n := p.Expire(time.Unix(100, 0)); n != 0 {
				t.Fatalf("Expire freed %d pages while a fill writes one (I6)", n)
			}
		case "drainack":
			p.DrainAck(a, refs)
		}
		if p.FreePages() != 0 {
			t.Fatalf("%s freed a page while a fill writes it (I6)", how)
		}
		if err := p.Audit(); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		copy(f.Dst, image(a, refs[0].Gen, 0, tg.PageSize))
		if _, err := f.End(nil); !errors.Is(err, ErrLateWrite) {
			t.Fatalf("%s: End: %v, want a late write", how, err)
		}
		if how == "expire" {
			if n := p.Expire(time.Unix(100, 0)); n != 1 {
				t.Fatalf("Expire after the fill ended freed %d pages, want 1", n)
			}
		}
		if err := p.CheckDrained(); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if d := p.mem[:tg.PageBytes()]; !bytes.Equal(d, make([]byte, len(d))) {
			t.Fatalf("%s: the freed page still holds the dropped fill's bytes", how)
		}
	}
}

// A second write to a page while a fill writes it is a duplicate write
// (the page is quarantined, I8), and the fill's bytes are then dropped:
// never marked written, scrubbed.
func TestFillInFlightRefusesASecondWrite(t *testing.T) {
	p := newPool(t, 2)
	a := owner("a", 1)
	f, refs := claimedPage(t, p, a)
	img := image(a, refs[0].Gen, 0, tg.PageSize)
	if _, err := p.WritePageSum(a, refs[0], tg.PageSize, img); !errors.Is(err, ErrDuplicateWrite) {
		t.Fatalf("write during a fill: %v, want a duplicate write", err)
	}
	if _, err := p.ClaimFill(a, refs[0], tg.PageSize, tg.PageBytes()); err == nil {
		t.Fatal("a second claim of a page with a fill in flight")
	}
	copy(f.Dst, img)
	if _, err := f.End(nil); !errors.Is(err, ErrLateWrite) {
		t.Fatalf("End of a fill on a quarantined page: %v, want a late write", err)
	}
	if _, n, _ := p.PageData(a, refs[0]); n != 0 {
		t.Fatalf("quarantined page marked %d slots written", n)
	}
	if d := p.mem[int(refs[0].Page)*tg.PageBytes():][:tg.PageBytes()]; bytes.Contains(d, img[:64]) {
		t.Fatal("the dropped fill's bytes stayed in the quarantined page")
	}
	if err := p.Release(a, refs); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// Close waits for a fill in flight: a shared mapping must not go away
// under a filler.
func TestFillCloseWaits(t *testing.T) {
	p := newPool(t, 1)
	a := owner("a", 1)
	f, _ := claimedPage(t, p, a)
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a fill was in flight")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := f.End(nil); err == nil {
		t.Fatal("a fill ending after Close was kept")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits after the fill ended")
	}
}

// Property (run it with -race): an owner's fill racing its own Release,
// a one-sided quarantine, an expiry and the next owners' reservations
// never lets a later owner see the earlier owner's bytes, never frees a
// page twice or early (Audit after each owner's turn), and leaves no
// fill's bytes in a drained pool.
func TestFillReleaseRaceProperty(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		p := newPool(t, 2)
		var wg sync.WaitGroup
		var mu sync.Mutex // guards the shared result fields below
		var leaks []string
		for w := range 3 {
			o := owner("t", byte(w+1))
			delay := time.Duration(rng.IntN(200)) * time.Microsecond
			fail := rng.IntN(4) == 0
			how := rng.IntN(3)
			wg.Add(1)
			go func() {
				defer wg.Done()
				refs, err := p.Reserve(o, 1)
				if err != nil {
					return // the others hold the pages
				}
				data, _, _ := p.PageData(o, refs[0])
				if bytes.IndexByte(data, 0xEE) >= 0 {
					mu.Lock()
					leaks = append(leaks, "a reserved page holds an earlier fill's bytes")
					mu.Unlock()
				}
				fillDone := make(chan error, 1)
				go func() {
					_, err := p.FillPageSum(o, refs[0], tg.PageSize, tg.PageBytes(), func(dst []byte) error {
						for i := range dst {
							dst[i] = 0xEE // this owner's bytes, as no scrub writes them
						}
						time.Sleep(delay)
						if fail {
							return errors.New("bad tag")
						}
						return nil
					})
					fillDone <- err
				}()
				time.Sleep(delay / 2)
				switch how {
				case 0:
					p.Release(o, refs)
				case 1:
					p.Quarantine(o, refs, time.Unix(1, 0))
					p.Expire(time.Unix(100, 0))
					p.Expire(time.Unix(100, 0))
				case 2:
					p.Quarantine(o, refs, time.Time{})
					p.DrainAck(o, refs)
				}
				<-fillDone
				if err := p.Audit(); err != nil {
					mu.Lock()
					leaks = append(leaks, err.Error())
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		// A fill that came after its page's release quarantined the page
		// (a released write, I8): the first Expire starts its lease.
		p.Expire(time.Unix(1000, 0))
		p.Expire(time.Unix(2000, 0))
		if len(leaks) > 0 {
			t.Fatalf("seed %d: %v", seed, leaks)
		}
		if err := p.CheckDrained(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if bytes.IndexByte(p.mem, 0xEE) >= 0 {
			t.Fatalf("seed %d: a drained pool still holds a fill's bytes", seed)
		}
	}
}

// claimedPage reserves one page for o and claims a fill of all of it,
// ended when the test stops if it has not been (endOnExit).
func claimedPage(t *testing.T, p *Pool, o Owner) (*Fill, []PageRef) {
	t.Helper()
	refs, err := p.Reserve(o, 1)
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.ClaimFill(o, refs[0], tg.PageSize, tg.PageBytes())
	if err != nil {
		t.Fatal(err)
	}
	endOnExit(t, f)
	return f, refs
}

// endOnExit ends f if the test stops before it does: the pool's Close
// (a cleanup registered earlier, so run later) waits for every fill.
func endOnExit(t *testing.T, f *Fill) {
	t.Cleanup(func() {
		if !f.ended {
			f.End(errors.New("the test stopped"))
		}
	})
}
