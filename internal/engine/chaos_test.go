package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// chaosLink aborts a random share of handoffs at a random page write, on
// the link between prefill and decode.
type chaosLink struct {
	handoff.Decode
	mu  sync.Mutex
	rng *rand.Rand
	off bool
}

func (c *chaosLink) Write(ctx context.Context, ws []handoff.PageWrite) error {
	c.mu.Lock()
	hit := !c.off && c.rng.IntN(8) == 0
	c.mu.Unlock()
	if hit {
		_ = c.Decode.Abort(ctx, &handoff.Abort{Handoff: ws[0].Handoff, Reason: "chaos"})
	}
	return c.Decode.Write(ctx, ws)
}

// TestChaos: many concurrent requests from several tenants through small
// LIFO pools, over every transport, while the link aborts handoffs
// mid-transfer and clients cancel mid-stream. Whatever ends well is exactly
// the reference output (a cancelled one, a prefix of it); whatever was hit
// ends in an error; and every pool comes back entirely free.
func TestChaos(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := newAbortRig(t, transport, nil)
		link := &chaosLink{Decode: r.tp.Decode, rng: rand.New(rand.NewPCG(7, uint64(len(transport))))}
		r.tp.Decode = link
		rng := rand.New(rand.NewPCG(11, 13))
		type job struct {
			req      *Request
			cancelAt int // cancel after this many tokens; -1 never
		}
		var jobs []job
		for i := 0; i < 48; i++ {
			c := -1
			if rng.IntN(4) == 0 {
				c = rng.IntN(6)
			}
			jobs = append(jobs, job{&Request{Tenant: []string{"a", "b", "c"}[i%3], Prompt: prompt(i, 1+rng.IntN(20)), MaxTokens: 1 + rng.IntN(10), IgnoreEOS: true}, c})
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		done, failed, cancelled := 0, 0, 0
		for _, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var s Stream
				var err error
				for {
					s, err = r.eng.Submit(context.Background(), j.req)
					var ee *Error
					if errors.As(err, &ee) && (ee.Code == CodeOverloaded || ee.Code == CodeKVCapacity) {
						time.Sleep(time.Millisecond)
						continue
					}
					break
				}
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				var toks []int32
				var final Event
				for ev := range s.Events() {
					if ev.Done || ev.Err != nil {
						final = ev
						continue
					}
					toks = append(toks, ev.Token)
					if len(toks) == j.cancelAt {
						s.Cancel()
					}
				}
				want := toyReference(r.m, j.req.Prompt, j.req.MaxTokens, true)
				mu.Lock()
				defer mu.Unlock()
				var ee *Error
				switch {
				case final.Done:
					done++
					if !slices.Equal(toks, want) {
						t.Errorf("finished %v, want %v", toks, want)
					}
				case errors.As(final.Err, &ee) && ee.Code == CodeCancelled:
					cancelled++
					if len(toks) > len(want) || !slices.Equal(toks, want[:len(toks)]) {
						t.Errorf("cancelled stream %v is not a prefix of %v", toks, want)
					}
				case final.Err != nil:
					failed++
				default:
					t.Errorf("stream ended without a terminal event")
				}
			}()
		}
		wg.Wait()
		t.Logf("%s: %d done, %d cancelled, %d failed closed", transport, done, cancelled, failed)
		if failed == 0 || done == 0 {
			t.Errorf("the chaos did not bite (%d failed) or nothing survived it (%d done)", failed, done)
		}
		link.mu.Lock()
		link.off = true
		link.mu.Unlock()
		r.after(t)
	})
}
