package tcp

import (
	"context"
	"errors"
	"net"
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
	s1, err := NewServer(Config{Secret: secret}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	go s1.Serve(l)
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

// I13 in readiness: a peer that comes back on its address with another
// model is not "up": the probe's redial fails the handshake with
// ErrModelMismatch, so /ready stays 503 and says why.
func TestCheckRefusesPeerOfAnotherModel(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Model: modelA})
	s1, err := NewServer(Config{Secret: secret, Model: modelA}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	go s1.Serve(l)
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
