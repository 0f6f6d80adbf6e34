package handoff_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// gatedCall is one handoff's Write call of four sealed pages whose opens
// report on started and wait for gate.
type gatedCall struct {
	id      handoff.Reservation
	src     *handoff.PoolSource
	gate    chan struct{}
	open    func() // closes gate, once
	started chan int
	done    chan error
}

func startGatedCall(t *testing.T, r *handofftest.Rig, n int) *gatedCall {
	t.Helper()
	ctx := context.Background()
	id := handofftest.ID(n)
	src := r.Sequence(t, id, "acme", 16, byte(n))
	res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	c := &gatedCall{id: *res, src: src, gate: make(chan struct{}), started: make(chan int, len(res.Pages)), done: make(chan error, 1)}
	c.open = sync.OnceFunc(func() { close(c.gate) })
	t.Cleanup(c.open) // before the rig's pools close: Close waits for the fills
	ws, _ := sealedBatch(t, id, res, src, c.gate, c.started, -1)
	go func() { c.done <- r.Server.Write(ctx, ws) }()
	return c
}

// opening waits up to wait for k more records of c to be in their opens
// and reports how many were.
func opening(c *gatedCall, k int, wait time.Duration) int {
	deadline := time.After(wait)
	for i := range k {
		select {
		case <-c.started:
		case <-deadline:
			return i
		}
	}
	return k
}

// finish lets c's opens end and checks the call succeeded.
func (c *gatedCall) finish(t *testing.T) {
	t.Helper()
	c.open()
	if err := <-c.done; err != nil {
		t.Fatal(err)
	}
}

// A call's records open on every core the process may use but one: the
// decode step's (one core of two: one goroutine; of four: three). An
// opener waits for its pages before it lets go, so more than that many
// records of the call would be in their opens at once if the bound let
// them.
func TestOpensLeaveTheDecodeStepACore(t *testing.T) {
	for _, procs := range []int{2, 4} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			setProcs(t, procs)
			r := handofftest.New(t, handofftest.Options{})
			c := startGatedCall(t, r, 1)
			if got := opening(c, procs-1, 10*time.Second); got != procs-1 {
				t.Fatalf("GOMAXPROCS %d: %d records in their opens, want %d", procs, got, procs-1)
			}
			if got := opening(c, 1, 200*time.Millisecond); got != 0 {
				t.Fatalf("GOMAXPROCS %d: %d records opened at once, the bound is %d (one core for the decode step)", procs, procs, procs-1)
			}
			c.gate <- struct{}{} // one open ends: the next record takes its opener
			if got := opening(c, 1, 10*time.Second); got != 1 {
				t.Fatalf("GOMAXPROCS %d: the next record did not open once an opener was free", procs)
			}
			c.finish(t)
		})
	}
}

// setProcs sets GOMAXPROCS to n until t and its cleanups (registered
// later, so run first: the gates opened, the pools closed) are done.
func setProcs(t *testing.T, n int) {
	old := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// The bound holds over every call of the process, not per call: calls
// that arrive while every opener is taken wait, each then gets one in
// arrival order (not the first of them every opener), and all complete.
func TestOpenersBoundedAcrossCalls(t *testing.T) {
	setProcs(t, 3) // two openers
	r := handofftest.New(t, handofftest.Options{})
	first := startGatedCall(t, r, 1)
	if got := opening(first, 2, 10*time.Second); got != 2 {
		t.Fatalf("a call alone: %d records in their opens, want 2", got)
	}
	second := startGatedCall(t, r, 2)
	waitFor(t, "the second call to wait for an opener", func() bool { return handoff.OpenersWaiting() == 1 })
	third := startGatedCall(t, r, 3)
	waitFor(t, "the third call to wait for an opener", func() bool { return handoff.OpenersWaiting() == 2 })
	if n := len(second.started) + len(third.started); n != 0 {
		t.Fatalf("%d records of other calls opened while the first held every opener", n)
	}
	first.finish(t)
	if opening(second, 1, 10*time.Second) != 1 || opening(third, 1, 10*time.Second) != 1 {
		t.Fatal("the waiting calls did not get an opener each")
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(second.started) + len(third.started); n != 0 {
		t.Fatalf("%d more records opened with two calls holding the two openers", n)
	}
	second.finish(t)
	third.finish(t)
	for _, c := range []*gatedCall{first, second, third} {
		if err := r.Server.Commit(context.Background(), &handoff.Commit{Handoff: c.id.Handoff, Tokens: 16, Digest: mustDigest(t, c.src), FirstToken: 1}); err != nil {
			t.Fatal(err)
		}
		r.Dec.Release(c.id.Handoff)
		r.ReleaseSource(t, c.src)
	}
	r.CheckDrained(t)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}
