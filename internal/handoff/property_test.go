package handoff_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// Random interleavings of honest, corrupted, duplicated, misdirected and
// late messages from several handoffs against one Receiver over the real kv
// pool (LIFO reuse). Whatever happens: a handoff is accepted only if the
// decode pages hold exactly the prefill KV and the count is right (I5); a
// failed or aborted handoff leaves no page behind once drained (I6); the
// pool returns to full.
func TestReceiverRandomized(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := 0; seed < seeds; seed++ {
		runSeed(t, uint64(seed))
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
}

func runSeed(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	oneSided := rng.IntN(2) == 0
	var r *handofftest.Rig
	if oneSided {
		r = handofftest.New(t, handofftest.Options{Pages: 48, SharedFile: t.TempDir() + "/kv"})
	} else {
		r = handofftest.New(t, handofftest.Options{Pages: 48})
	}
	ctx := context.Background()
	type live struct {
		id    kv.ID
		src   *handoff.PoolSource
		res   *handoff.Reservation
		next  int
		bad   bool // a corrupted/foreign message was sent for it
		ended bool
	}
	var hs []*live
	for i := 0; i < 4; i++ {
		id := handofftest.ID(int(seed)*10 + i)
		tokens := 1 + rng.IntN(20)
		src := r.Sequence(t, id, []string{"a", "b"}[i%2], tokens, byte(i+1))
		res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: src.Owner.Tenant, PromptTokens: tokens, MaxTokens: rng.IntN(5)})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, &live{id: id, src: src, res: res})
	}
	write := func(h *live, b int) handoff.PageWrite {
		d, n, _ := h.src.Page(b)
		return handoff.PageWrite{Handoff: h.id, Block: b, Page: h.res.Pages[b], Slots: n, Data: d, Checksum: handoff.Checksum(d)}
	}
	for step := 0; step < 40; step++ {
		h := hs[rng.IntN(len(hs))]
		switch op := rng.IntN(10); {
		case op < 5 && h.next < len(h.res.Pages): // honest next write
			err := r.Server.Write(ctx, []handoff.PageWrite{write(h, h.next)})
			if err == nil {
				h.next++
			} else if !h.ended {
				t.Fatalf("honest write to a live handoff failed: %v", err)
			}
		case op == 5: // corrupted, stale, foreign or duplicated write
			b := rng.IntN(len(h.res.Pages))
			w := write(h, b)
			switch rng.IntN(4) {
			case 0:
				w.Checksum ^= 1
			case 1:
				w.Page.Gen++
			case 2:
				o := hs[rng.IntN(len(hs))]
				w.Page = o.res.Pages[0]
				if o == h && b == 0 {
					w.Page.Gen += 2
				}
			case 3:
				if b >= h.next {
					w.Slots = 0
				}
			}
			if err := r.Server.Write(ctx, []handoff.PageWrite{w}); err == nil {
				t.Fatalf("a bad write was applied: %+v", w)
			}
			h.bad, h.ended = true, true
		case op == 6: // abort
			r.Server.Abort(ctx, &handoff.Abort{Handoff: h.id, Reason: "random"})
			if r.Dec.Accepted(h.id) == nil {
				h.ended = true
			}
		default: // commit, honest or lying about the count or digest
			d, _ := h.src.Digest()
			c := &handoff.Commit{Handoff: h.id, Tokens: h.src.Tokens, Digest: d}
			lie := rng.IntN(3)
			if lie == 1 {
				c.Tokens--
			} else if lie == 2 {
				c.Digest = nil
			}
			err := r.Server.Commit(ctx, c)
			honest := lie == 0 && !h.bad && !h.ended && h.next == len(h.res.Pages)
			if err == nil {
				if !honest {
					t.Fatalf("a dishonest or incomplete handoff was accepted (lie %d, bad %v, %d/%d written)", lie, h.bad, h.next, len(h.res.Pages))
				}
				a := r.Dec.Accepted(h.id)
				if err := r.SameKV(a, h.src); err != nil {
					t.Fatal(err)
				}
			} else if honest && !errors.Is(err, handoff.ErrState) {
				t.Fatalf("an honest complete handoff was refused: %v", err)
			}
			if err != nil {
				h.ended = true
			}
		}
	}
	for _, h := range hs {
		if r.Dec.Accepted(h.id) != nil {
			_ = r.Dec.Release(h.id)
		} else {
			r.Server.Abort(ctx, &handoff.Abort{Handoff: h.id, Reason: "end"})
		}
		if oneSided && rng.IntN(2) == 0 {
			r.Server.Drained(ctx, h.id) // else the lease frees them
		}
		r.ReleaseSource(t, h.src)
	}
	r.Clock.Advance(time.Hour)
	r.CheckDrained(t)
}
