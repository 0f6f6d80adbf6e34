package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// A prompt the router gives up (its Prefill call's context ends) at any
// point of its life at the prefill worker leaves both pools whole and
// the two workers agreeing: ended before its pages were needed (ctx done
// before the call), while it waits in the queue for prefill pages,
// mid-prompt, or in its last step (its pages then pushed, or not, with
// the push seeing the ctx). The call answers aborted exactly when decode
// accepted no commit of it, and a prompt stopped at step `at` runs no step
// after it.
func TestPrefillCancelAtEveryPoint(t *testing.T) {
	const steps = 40 // prompt(7, 200): 40 chunks of 5 tokens
	for _, after := range []bool{false, true} {
		for _, point := range []string{"before", "queue", "step 0", "step 2", "last step"} {
			t.Run(fmt.Sprintf("%s/after=%v", point, after), func(t *testing.T) {
				m := newToy()
				at := map[string]int{"step 0": 0, "step 2": 2, "last step": steps - 1, "queue": 0}[point]
				if point == "before" {
					at = -1
				}
				sm := &stepCounter{toy: m, at: at, entered: make(chan struct{}), release: make(chan struct{})}
				released := false
				release := func() {
					if !released {
						released = true
						close(sm.release)
					}
				}
				defer release()
				dw := toyDecodeWorker(t, m, 128)
				pcfg := toyConfig(m, 64) // 256 tokens: one 200-token prompt at a time
				pcfg.Model = sm
				pcfg.HandoffAfterPrefill = after
				pw, err := NewPrefillWorker(pcfg, dw)
				if err != nil {
					t.Fatal(err)
				}
				defer pw.Close()
				bg := context.Background()
				p := prompt(7, 200)
				call := func(ctx context.Context) (*handoff.PrefillRequest, chan error) {
					id := newID()
					res, err := dw.Reserve(bg, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: len(p), MaxTokens: 4, Model: FingerprintOf(m)})
					if err != nil {
						t.Fatal(err)
					}
					r := &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: p, Reservation: res, Model: FingerprintOf(m)}
					errc := make(chan error, 1)
					go func() {
						_, err := pw.Prefill(ctx, r)
						errc <- err
					}()
					return r, errc
				}
				wait := func(errc chan error) error {
					select {
					case err := <-errc:
						return err
					case <-time.After(60 * time.Second):
						release()
						t.Fatal("a Prefill call never returned")
						return nil
					}
				}
				ctx, cancel := context.WithCancel(bg)
				var reqs []*handoff.PrefillRequest
				var victim chan error
				switch point {
				case "before":
					cancel()
					r, errc := call(ctx)
					reqs, victim = append(reqs, r), errc
					release()
				case "queue":
					// A first prompt holds the prefill pool, gated in its
					// first step; the second waits for pages, and is given up.
					r0, first := call(bg)
					reqs = append(reqs, r0)
					<-sm.entered
					r, errc := call(ctx)
					reqs, victim = append(reqs, r), errc
					// Likely waiting for pages by now; given up before its
					// admission, it answers the same.
					time.Sleep(20 * time.Millisecond)
					cancel()
					if err := wait(errc); !errors.Is(err, handoff.ErrAborted) {
						t.Fatalf("given up in the queue: %v, want aborted", err)
					}
					victim = nil
					release()
					if err := wait(first); err != nil {
						t.Fatalf("the first prompt: %v", err)
					}
				default:
					r, errc := call(ctx)
					reqs, victim = append(reqs, r), errc
					<-sm.entered
					// Ended before the gated step returns: the batch reads
					// it at the boundary right after.
					cancel()
					release()
				}
				accepted := dw.ReceiverStats().Accepted
				if victim != nil {
					err := wait(victim)
					ran := sm.count()
					accepted = dw.ReceiverStats().Accepted
					switch {
					case err == nil && accepted != 1:
						t.Fatalf("the call succeeded but decode accepted %d commits", accepted)
					case err != nil && !errors.Is(err, handoff.ErrAborted):
						t.Fatalf("a given-up prompt answered %v, want aborted", err)
					case err != nil && accepted != 0:
						t.Fatalf("the call answered %v, yet decode accepted %d commits of it", err, accepted)
					case point != "last step" && err == nil:
						t.Fatalf("a prompt given up at %s was committed", point)
					case ran > at+1 && point != "before":
						t.Fatalf("the prompt ran %d steps, given up in step %d", ran, at)
					case point == "before" && ran != 0:
						t.Fatalf("a prompt given up before its call ran %d steps", ran)
					}
					t.Logf("%s: answered %v after %d steps; decode accepted %d", point, err, ran, accepted)
				} else if accepted != 1 {
					t.Fatalf("decode accepted %d commits, want the first prompt's", accepted)
				}
				// The router aborts what it gave up (and the test what it
				// did not stream); far past every lease and timeout, both
				// pools are whole.
				for _, r := range reqs {
					_ = dw.Abort(bg, &handoff.Abort{Handoff: r.Handoff, Reason: "test over"})
				}
				dw.Tick(time.Now().Add(time.Hour))
				waitDrained(t, pw.Pool(), dw.Pool())
			})
		}
	}
}
