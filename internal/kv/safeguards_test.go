package kv

import (
	"errors"
	"math"
	"testing"
	"time"
)

// DESIGN.md asks that each safeguard stop the incident alone. At the pool,
// the incident is: tenant B is handed pages tenant A just released (LIFO)
// and attention reads slots B never wrote. Each row switches every pool
// safeguard off but one and checks that B gets either an error or bytes
// that are not A's; the all-off row shows the leak the hooks re-create.
func TestEachSafeguardAloneStopsStaleRead(t *testing.T) {
	for _, c := range []struct {
		name    string
		scrub   ScrubMode
		extent  bool // I4 on
		wantErr bool
		leak    bool
	}{
		{"all off (the incident)", ScrubOff, false, false, true},
		{"I7 scrub alone", ScrubZero, false, false, false},
		{"I7 poison alone", ScrubPoison, false, false, false},
		{"I4 extent alone", ScrubOff, true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t, 2, func(cfg *Config) {
				cfg.Scrub = c.scrub
				cfg.Unsafe.NoExtentCheck = !c.extent
				cfg.Unsafe.NoOwnerCheck = true // I3 cannot help here: B owns the pages
			})
			a, b := owner("A", 1), owner("B", 2)
			ra, _ := p.Reserve(a, 2)
			fill(t, p.View(a, ra), ra, 0, 8)
			p.Release(a, ra)
			rb, _ := p.Reserve(b, 2)
			vb := p.View(b, rb)
			g := rb[0].Gen
			if err := vb.Put(0, 0, row(b, g, 0, 0, false, 4), row(b, g, 0, 0, true, 4)); err != nil {
				t.Fatal(err)
			}
			leaked := false
			for blk := range 2 {
				k, _, n, err := vb.Block(0, blk)
				if err != nil {
					if !c.wantErr {
						t.Fatalf("block %d: %v", blk, err)
					}
					continue
				}
				for i := range n {
					if blk == 0 && i == 0 {
						continue // B's own token
					}
					for _, old := range ra {
						for pos := range 8 {
							if sameBits(k[i*4:i*4+4], row(a, old.Gen, 0, pos, false, 4)) {
								leaked = true
							}
						}
					}
					if c.scrub == ScrubPoison && math.Float32bits(k[i*4]) != PoisonBits {
						t.Fatalf("poisoned pool returned %#x", math.Float32bits(k[i*4]))
					}
				}
			}
			if leaked != c.leak {
				t.Fatalf("leak of A's rows = %v, want %v", leaked, c.leak)
			}
		})
	}
}

// The other half of the incident class: a page freed and reused while a
// one-sided transfer into it is still in flight (I6). Each safeguard alone:
// quarantine keeps the page away from B until the drain; the generation
// check (with no quarantine) catches the landed write and fails B closed.
// With both off, A's bytes become B's "data".
func TestEachSafeguardAloneStopsLateOneSidedWrite(t *testing.T) {
	for _, c := range []struct {
		name       string
		quarantine bool // I6 on: the aborted handoff's pages wait for the drain
		checks     bool // I3 on
	}{
		{"all off (the incident class)", false, false},
		{"I6 quarantine alone", true, false},
		{"I3 generation alone", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPool(t, 1, func(cfg *Config) { cfg.Unsafe.NoOwnerCheck = !c.checks })
			a, b := owner("A", 1), owner("B", 2)
			ra, _ := p.Reserve(a, 1)
			// The abort: A's handoff gives its page up while a write is in flight.
			if !c.quarantine {
				// The engine still asks for quarantine; the hook frees early.
				p.cfg.Unsafe.NoQuarantine = true
			}
			p.Quarantine(a, ra, time.Unix(100, 0))
			rb, err := p.Reserve(b, 1)
			if c.quarantine {
				if !errors.Is(err, ErrNoCapacity) {
					t.Fatalf("a fenced page was handed to B: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// A's one-sided write lands in the shared memory, then is announced.
			copy(pageFloats(p, rb[0].Page), row(a, ra[0].Gen, 0, 0, false, 4))
			err = p.MarkWritten(a, ra[0], 1)
			_, _, n, rerr := p.View(b, rb).Block(0, 0)
			if c.checks {
				if !errors.Is(err, ErrStaleGeneration) || rerr == nil {
					t.Fatalf("landed late write: mark %v, B's read %v (want both refused)", err, rerr)
				}
				return
			}
			if err != nil || rerr != nil || n != 1 {
				t.Fatalf("with every safeguard off the late write should pass unnoticed: %v %v n=%d", err, rerr, n)
			}
		})
	}
}
