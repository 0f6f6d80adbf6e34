package tcp

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// gatedPrefill holds every call until release closes (or the call's
// context ends: the router's close frame).
type gatedPrefill struct {
	started chan struct{}
	release chan struct{}
	n       atomic.Int32
}

func (p *gatedPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	p.n.Add(1)
	p.started <- struct{}{}
	select {
	case <-p.release:
		return &handoff.PrefillResult{FirstToken: 1, Tokens: len(r.Tokens)}, nil
	case <-ctx.Done():
		return nil, handoff.ErrAborted.With("the router gave the prompt up")
	}
}

// More Prefill calls than the server's MaxInflight on one connection
// from a client with a larger bound (a peer that does not keep to the
// server's; same-bound clients wait at their end, Client.sem), each
// slower than the heartbeat's dead-after: the calls past the bound wait
// for a slot at the server, and the connection, which every tenant's
// calls share, stays up. The server's reader, waiting for a slot, reads
// nothing meanwhile; its watchdog must not count that as the router's
// silence (it would declare the connection dead after DeadAfter and tear
// every call on it).
func TestFullConnectionStaysAlive(t *testing.T) {
	p := &gatedPrefill{started: make(chan struct{}, 8), release: make(chan struct{})}
	// DeadAfter well above a loaded machine's scheduling stalls (the
	// client's watchdog must not fire), the hold well above DeadAfter.
	cfg := Config{Secret: secret, MaxInflight: 2, DeadAfter: 500 * time.Millisecond}
	addr, s := serve(t, cfg, nil, p)
	ccfg := cfg
	ccfg.overBound = 8
	c := dial(t, addr, ccfg)
	errc := make(chan error, 3)
	for i := range 3 {
		go func() {
			_, err := c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(i), Tenant: "t", Tokens: []int32{1}})
			errc <- err
		}()
	}
	<-p.started
	<-p.started
	time.Sleep(4 * cfg.DeadAfter)
	if s.slotWaits.Load() == 0 {
		t.Fatal("the server's reader never waited for a slot: the test tests nothing")
	}
	close(p.release)
	for range 3 {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("a Prefill call on a connection with more calls than MaxInflight: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a Prefill call never returned")
		}
	}
}

// Call ids wrap after 2^32 calls on a connection; an id still pending (a
// token stream opened 2^32 calls ago) is skipped, so a reply to one call
// never answers another.
func TestCallIDWrapSkipsPending(t *testing.T) {
	cl := &Client{pending: map[uint32]*call{}}
	old := &call{reply: make(chan *frame, 1)}
	id, err := cl.register(old)
	if err != nil || id != 1 {
		t.Fatalf("first id %d %v, want 1", id, err)
	}
	cl.next = ^uint32(0) - 1
	var got []uint32
	for range 3 {
		id, err := cl.register(&call{reply: make(chan *frame, 1)})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if want := []uint32{^uint32(0), 2, 3}; !slices.Equal(got, want) {
		t.Fatalf("ids after the wrap %v, want %v (0 is the connection's, 1 still pending)", got, want)
	}
	if cl.pending[1] != old {
		t.Fatal("the pending call's id was given to another call")
	}
}

// MaxInflight Prefill calls hold a connection (prompts queued and
// computing at the worker): a short call behind them (the router's Load
// probe) is answered while they run, and the router's close frame giving
// one prompt up reaches it. Neither may wait for a slot behind those
// prompts: a reader stopped on the short call would read no close frame
// until some prompt ended by itself.
func TestShortCallsAndClosesNotBehindPrefills(t *testing.T) {
	p := &gatedPrefill{started: make(chan struct{}, 8), release: make(chan struct{})}
	defer close(p.release)
	cfg := Config{Secret: secret, MaxInflight: 2, DeadAfter: -1}
	addr, _ := serve(t, cfg, nil, p)
	c := dial(t, addr, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}})
		first <- err
	}()
	<-p.started
	go func() {
		_, _ = c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(2), Tenant: "t", Tokens: []int32{1}})
	}()
	<-p.started
	load := make(chan error, 1)
	go func() {
		_, err := c.Load(context.Background())
		load <- err
	}()
	select {
	case err := <-load:
		// gatedPrefill reports no load: any answer is the call's own.
		if !errors.Is(err, handoff.ErrState) {
			t.Fatalf("Load beside the prompts: %v, want the worker's answer", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Load call waited behind MaxInflight prompts")
	}
	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, handoff.ErrAborted) {
			t.Fatalf("the given-up prompt answered %v, want the worker's aborted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the close frame never reached its call")
	}
}

// Close frames for ids that are not a live call's (one never used, a
// call that already ended, thousands of them) are ignored: they end no
// other call, and the connection carries on.
func TestStrayClosesEndNoCall(t *testing.T) {
	p := &gatedPrefill{started: make(chan struct{}, 8), release: make(chan struct{})}
	cfg := Config{Secret: secret}
	addr, _ := serve(t, cfg, nil, fakePrefill{got: make(chan *handoff.PrefillRequest, 4)})
	c := dial(t, addr, cfg)
	if _, err := c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}}); err != nil {
		t.Fatal(err)
	}
	ended := lastID(c) // the call that just ended
	addr2, _ := serve(t, cfg, nil, p)
	c2 := dial(t, addr2, cfg)
	res := make(chan error, 1)
	go func() {
		_, err := c2.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(2), Tenant: "t", Tokens: []int32{1}})
		res <- err
	}()
	<-p.started
	live := lastID(c2)
	for id := uint32(1); id <= 5000; id++ {
		if id == live {
			continue
		}
		if err := c2.c.send(tStreamClose, id); err != nil {
			t.Fatal(err)
		}
		if err := c.c.send(tStreamClose, ended); err != nil {
			t.Fatal(err)
		}
	}
	close(p.release)
	if err := <-res; err != nil {
		t.Fatalf("a live call beside stray closes: %v", err)
	}
	for _, cl := range []*Client{c, c2} {
		if _, err := cl.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(3), Tenant: "t", Tokens: []int32{1}}); err != nil {
			t.Fatalf("a call after the stray closes: %v", err)
		}
	}
}

// lastID is the id cl gave its latest call.
func lastID(cl *Client) uint32 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.next
}
