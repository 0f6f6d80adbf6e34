package tcp

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// waitFor polls cond (bounded: a readiness probe must notice a dead peer
// within seconds, but the test asserts only that it does).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Check follows the peer: up while it serves, an error once it is gone
// (without any call having failed first), and for a Redialer up again as
// soon as the peer is back on its address.
func TestCheckFollowsThePeer(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, s1 := serve(t, Config{Secret: secret}, r.Server, nil)
	ctx := context.Background()
	rd, err := ConnectRedialer(ctx, addr, Config{Secret: secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	cl := dial(t, addr, Config{Secret: secret})
	if err := rd.Check(ctx); err != nil {
		t.Fatalf("redialer, peer up: %v", err)
	}
	if err := cl.Check(ctx); err != nil {
		t.Fatalf("client, peer up: %v", err)
	}
	s1.Close() // the peer dies
	waitFor(t, "client notices the dead peer", func() bool { return cl.Check(ctx) != nil })
	waitFor(t, "redialer notices the dead peer", func() bool { return rd.Check(ctx) != nil })
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot rebind %s: %v", addr, err)
	}
	s2, _ := NewServer(Config{Secret: secret}, r.Server, nil)
	go s2.Serve(l2)
	defer s2.Close()
	waitFor(t, "redialer sees the peer back", func() bool { return rd.Check(ctx) == nil })
	if err := cl.Check(ctx); err == nil {
		t.Fatal("a dead plain client reports up")
	}
}

// While a peer is down, readiness probes (unauthenticated, so possibly a
// flood) never queue behind a dial under way: a probe whose caller gave up
// returns at once, none starts a second dial, and a tenant's call waiting
// for the connection gets it as soon as the one dial ends, not after one
// dial per probe.
func TestRedialerProbesShareOneDial(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	rd := NewRedialer(addr, Config{Secret: secret})
	defer rd.Close()
	entered := make(chan struct{}, 1000)
	release := make(chan struct{})
	var dials atomic.Int32
	// A dial that hangs until released (a peer whose host does not
	// answer; here not even its own timeout ends it, so only a caller's
	// context can).
	rd.dial = func(ctx context.Context, addr string, cfg Config) (*Client, error) {
		dials.Add(1)
		entered <- struct{}{}
		<-release
		return Dial(ctx, addr, cfg)
	}
	first := make(chan error, 1)
	go func() { first <- rd.Check(context.Background()) }()
	<-entered

	const probes = 200
	gaveUp, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	var up atomic.Int32
	for range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if rd.Check(gaveUp) == nil {
				up.Add(1)
			}
		}()
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("probes queued behind the dial under way")
	}
	if n := up.Load(); n != 0 {
		t.Fatalf("%d probes reported a peer that is not connected as up", n)
	}

	tenant := make(chan error, 1)
	go func() {
		c, err := rd.client(context.Background())
		if err == nil {
			err = c.Err()
		}
		tenant <- err
	}()
	close(release)
	if err := <-tenant; err != nil {
		t.Fatalf("tenant call after the dial: %v", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the probe that started the dial: %v", err)
	}
	if err := rd.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for %d probes and a call, want 1 shared", n, probes+2)
	}
}

// I13 in readiness: a peer that comes back on its address with another
// model is not "up": the probe's redial fails the handshake with
// ErrModelMismatch, so /ready stays 503 and says why.
func TestCheckRefusesPeerOfAnotherModel(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Model: modelA})
	addr, s1 := serve(t, Config{Secret: secret, Model: modelA}, r.Server, nil)
	ctx := context.Background()
	rd, err := ConnectRedialer(ctx, addr, Config{Secret: secret, Model: modelA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := rd.Check(ctx); err != nil {
		t.Fatalf("same model: %v", err)
	}
	s1.Close()
	waitFor(t, "redialer notices the dead peer", func() bool { return rd.Check(ctx) != nil })
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot rebind %s: %v", addr, err)
	}
	r2 := handofftest.New(t, handofftest.Options{Model: modelB})
	s2, _ := NewServer(Config{Secret: secret, Model: modelB}, r2.Server, nil)
	go s2.Serve(l2)
	defer s2.Close()
	waitFor(t, "the probe reaches the new peer", func() bool { return !errors.Is(rd.Check(ctx), handoff.ErrTransport) })
	if err := rd.Check(ctx); !errors.Is(err, handoff.ErrModelMismatch) {
		t.Fatalf("peer of another model: %v, want model_mismatch", err)
	}
}

// A hung peer (its kernel completes the TCP connect, its handshake never
// answers) costs one caller DeadAfter, not every caller: once a caller has
// waited DeadAfter for the dial under way in vain, later callers fail at
// once with a transport error (the router reserves one request at a time,
// so a queue of requests paired with the hung worker would otherwise wait
// DeadAfter each, one after another). When the dial finally succeeds, the
// connection serves again.
func TestRedialerHungPeerCostsOneWait(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	const deadAfter = 2 * time.Second
	rd := NewRedialer(addr, Config{Secret: secret, DeadAfter: deadAfter})
	defer rd.Close()
	release := make(chan struct{})
	var dials atomic.Int32
	rd.dial = func(ctx context.Context, addr string, cfg Config) (*Client, error) {
		dials.Add(1)
		<-release
		return Dial(ctx, addr, cfg)
	}
	ctx := context.Background()
	began := time.Now()
	if _, err := rd.client(ctx); !errors.Is(err, handoff.ErrTransport) {
		t.Fatalf("first caller on a hung dial: %v, want a transport error", err)
	}
	if took := time.Since(began); took < deadAfter {
		t.Fatalf("first caller gave up after %v, before DeadAfter %v", took, deadAfter)
	}
	for i := range 5 {
		began = time.Now()
		if _, err := rd.client(ctx); !errors.Is(err, handoff.ErrTransport) {
			t.Fatalf("caller %d after an overdue dial: %v, want a transport error", i, err)
		}
		if took := time.Since(began); took > deadAfter/2 {
			t.Fatalf("caller %d after an overdue dial waited %v: each caller pays DeadAfter again", i, took)
		}
	}
	close(release)
	waitFor(t, "the dial completes and serves", func() bool { return rd.Check(ctx) == nil })
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials, want the one under way shared", n)
	}
}
