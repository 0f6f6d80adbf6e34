package engine

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// heldCommit passes a prefill worker's calls to its decode worker and
// holds the Commit until released: the test decides when the commit
// lands relative to an abort. It keeps the Commit for a repeat.
type heldCommit struct {
	handoff.Decode
	at      chan struct{} // closed when the Commit arrives
	release chan struct{} // the Commit goes on when closed
	done    chan error    // the Commit's answer
	commit  *handoff.Commit
}

// heldCommitRig is a decode worker of 40 pages and a prefill worker whose
// link to it is a heldCommit with room for answers Commit answers; both
// close when the test ends (the prefill worker first).
func heldCommitRig(t *testing.T, m *toy, answers int) (*DecodeWorker, *PrefillWorker, *heldCommit) {
	t.Helper()
	dw := toyDecodeWorker(t, m, 40)
	g := &heldCommit{Decode: dw, at: make(chan struct{}), release: make(chan struct{}), done: make(chan error, answers)}
	pw, err := NewPrefillWorker(toyConfig(m, 40), g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pw.Close)
	return dw, pw, g
}

func (g *heldCommit) Commit(ctx context.Context, c *handoff.Commit) error {
	g.commit = c
	close(g.at)
	<-g.release
	err := g.Decode.Commit(ctx, c)
	g.done <- err
	return err
}

// An abort racing the commit of the same handoff on a decode worker
// (DecodeWorker.Abort and Commit each take the receiver's lock and the
// worker's lock in turn, so they interleave) never leaks the committed
// pages and never leaves the sequence decoding: in every interleaving,
// forced with the worker's test hooks, the decode pool is whole again
// once the handoff is over and its stream (open before, or opened after
// the abort) ends with an error, never with tokens of a full run. The
// schedules:
//   - commit whole in the gap: the abort looks at the handoff (not
//     committed yet), the whole Commit runs, then the receiver's abort
//     (which does nothing to an accepted commit) and the rest of Abort;
//   - commit split by the abort: the receiver accepts the commit in the
//     gap, the whole rest of Abort runs, then the worker's half of
//     Commit;
//
// Each with the router's stream opened before the prefill (the usual
// order) and after the abort (a stream whose Stream call was slower than
// the prefill's commit on another connection).
func TestAbortRacingCommitLeaksNothing(t *testing.T) {
	m := newToy()
	for _, sched := range []string{"commit whole in the gap", "commit split by the abort"} {
		for _, streamFirst := range []bool{true, false} {
			name := sched + "/stream after"
			if streamFirst {
				name = sched + "/stream before"
			}
			t.Run(name, func(t *testing.T) {
				dw, pw, g := heldCommitRig(t, m, 2)
				ctx := context.Background()
				p := prompt(5, 9)
				id := newID()
				res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "t", PromptTokens: len(p), MaxTokens: 30, Model: FingerprintOf(m)})
				if err != nil {
					t.Fatal(err)
				}
				var ts handoff.TokenStream
				if streamFirst {
					if ts, err = dw.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true}); err != nil {
						t.Fatal(err)
					}
				}
				// Set before the prefill starts: the prefill worker's own
				// Abort (after its refused commit) reads them too.
				var commitErr error
				resume := make(chan struct{})
				switch sched {
				case "commit whole in the gap":
					dw.hooks = &decodeHooks{abortChecked: once(func() {
						close(g.release)
						commitErr = <-g.done
					})}
				case "commit split by the abort":
					accepted := make(chan struct{})
					dw.hooks = &decodeHooks{
						commitAccepted: once(func() { close(accepted); <-resume }),
						abortChecked: once(func() {
							close(g.release)
							<-accepted
						}),
					}
				}
				pres := make(chan error, 1)
				go func() {
					_, err := pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "t", Tokens: p, Reservation: res, Model: FingerprintOf(m)})
					pres <- err
				}()
				select {
				case <-g.at:
				case <-time.After(30 * time.Second):
					t.Fatal("the prefill never committed")
				}
				if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "the client left"}); err != nil {
					t.Fatal(err)
				}
				select {
				case <-g.release:
				default:
					close(g.release)
					close(resume)
					t.Fatal("the abort never reached its hook: the schedule was not forced")
				}
				if sched == "commit split by the abort" {
					// The worker's half of the Commit runs now, after the
					// whole abort.
					close(resume)
					commitErr = <-g.done
				}
				select {
				case err := <-pres:
					t.Logf("commit answered %v; prefill %v", commitErr, err)
				case <-time.After(30 * time.Second):
					t.Fatal("the prefill did not end")
				}
				if !streamFirst {
					// The router's stream arrives after the abort: it is
					// told the handoff ended, at once or as its only item.
					if ts, err = dw.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true}); err != nil {
						ts = nil
					}
				}
				if ts != nil {
					// Before any Tick: the abort itself ends the stream.
					if n, err := drainStream(t, ts); err == nil {
						t.Fatalf("the aborted handoff's stream ended without an error after %d tokens: the abort was lost", n)
					}
				}
				// Far past every timeout: stale handoffs are forgotten,
				// leases and tombstones expire.
				dw.Tick(time.Now().Add(time.Hour))
				waitDrained(t, dw.Pool(), pw.Pool())
				dw.mu.Lock()
				left := len(dw.handoffs)
				dw.mu.Unlock()
				if left != 0 {
					t.Fatalf("%d handoffs still known to the decode worker", left)
				}
			})
		}
	}
}

// A peer's second Commit of an accepted handoff whose stream is not open
// yet is refused without ending the handoff (what the first commit
// verified stands): the stream opened after decodes the sequence to its
// end and the pool is whole after. (Ended by the refusal, the handoff
// would hold its committed pages with its failure recorded, and the
// stream or the stale sweep would forget it without releasing them.)
func TestRepeatedCommitBeforeStreamLeaksNothing(t *testing.T) {
	m := newToy()
	dw, pw, g := heldCommitRig(t, m, 1)
	close(g.release)
	ctx := context.Background()
	p := prompt(5, 9)
	id := newID()
	res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "t", PromptTokens: len(p), MaxTokens: 12, Model: FingerprintOf(m)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "t", Tokens: p, Reservation: res, Model: FingerprintOf(m)}); err != nil {
		t.Fatal(err)
	}
	if err := dw.Commit(ctx, g.commit); err == nil {
		t.Fatal("a repeated commit was accepted")
	}
	ts, err := dw.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := drainStream(t, ts); err != nil || n != 12 {
		t.Fatalf("the stream carried %d tokens and ended with %v, want all 12 and a normal end", n, err)
	}
	dw.Tick(time.Now().Add(time.Hour))
	waitDrained(t, dw.Pool(), pw.Pool())
}

// An Abort that overtakes its own Reserve while that Reserve lands in
// Abort's gap (after the worker's first look, before the receiver's
// abort): the receiver ends the new reservation (its pages come back at
// once) and the worker's second look ends its side, so the router's
// stream, opened after, is told at once instead of waiting for the
// handoff timeout, and the pool is whole without any Tick.
func TestAbortOvertakingReserveInTheGap(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 40)
	ctx := context.Background()
	id := newID()
	var rerr error
	dw.hooks = &decodeHooks{abortChecked: once(func() {
		_, rerr = dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "t", PromptTokens: 9, MaxTokens: 30, Model: FingerprintOf(m)})
	})}
	if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "the client left"}); err != nil {
		t.Fatal(err)
	}
	if rerr != nil {
		t.Fatalf("the Reserve in the gap: %v (the test needs it to land)", rerr)
	}
	if ts, err := dw.Stream(ctx, id, handoff.StreamParams{}); err == nil {
		if n, err := drainStream(t, ts); err == nil || n != 0 {
			t.Fatalf("the aborted reservation's stream carried %d tokens and ended with %v, want an error at once", n, err)
		}
	}
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatal(err)
	}
	dw.mu.Lock()
	left := len(dw.handoffs)
	dw.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d handoffs still known to the decode worker", left)
	}
}

// once is a hook that runs f at its first call only (the prefill
// worker's own Abort after a refused commit passes the same point).
func once(f func()) func(kv.ID) {
	var o sync.Once
	return func(kv.ID) { o.Do(f) }
}

// drainStream reads a token stream to its end: the tokens it carried and
// its terminal error (nil for a normal end). A stream still open after
// 20s fails the test.
func drainStream(t *testing.T, ts handoff.TokenStream) (int, error) {
	t.Helper()
	type end struct {
		n   int
		err error
	}
	ch := make(chan end, 1)
	go func() {
		n := 0
		for {
			tok, err := ts.Recv()
			switch {
			case err != nil:
				ch <- end{n, err}
				return
			case tok.Err != nil:
				ch <- end{n, tok.Err}
				return
			case tok.Done && tok.Finish == "cancelled":
				ch <- end{n, errors.New("cancelled")}
				return
			case tok.Done:
				ch <- end{n, nil}
				return
			}
			n++
		}
	}()
	select {
	case e := <-ch:
		return e.n, e.err
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end within 20s")
		return 0, nil
	}
}
