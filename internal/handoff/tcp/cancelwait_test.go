package tcp

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// More prompts than MaxInflight on one connection (a router whose
// --max-concurrency is above 64), client and worker with the same bound:
// the calls past it wait at the client, unsent, so the worker's reader
// never stops and a close frame giving a running prompt up reaches it at
// once. A prompt given up while it waits was never sent: it ends at once
// and the worker never sees it. Neither close may queue behind the call
// past the bound: sent, that call would stop the worker's reader until
// some prompt ended by itself.
func TestCloseNotBehindCallPastBound(t *testing.T) {
	p := &gatedPrefill{started: make(chan struct{}, 8), release: make(chan struct{})}
	defer close(p.release)
	cfg := Config{Secret: secret, MaxInflight: 2, DeadAfter: -1}
	addr, _ := serve(t, cfg, nil, p)
	c := dial(t, addr, cfg)
	prefill := func(ctx context.Context, i int) <-chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(i), Tenant: "t", Tokens: []int32{1}})
			errc <- err
		}()
		return errc
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := prefill(ctx1, 1)
	<-p.started
	prefill(context.Background(), 2)
	<-p.started
	ctx3, cancel3 := context.WithCancel(context.Background())
	third := prefill(ctx3, 3)
	// The third call is past the bound: nothing tells the test when it
	// is waiting for its slot, and any moment is fine (before it waits,
	// it finds ctx3 ended).
	time.Sleep(50 * time.Millisecond)
	cancel3()
	endsWith(t, third, handoff.ErrAborted, "a prompt given up while it waited for a slot")
	cancel1()
	endsWith(t, first, handoff.ErrAborted, "the given-up running prompt (its close frame must not wait behind a call past the bound)")
	if n := p.n.Load(); n != 2 {
		t.Fatalf("the worker saw %d prompts, want 2 (the third was given up unsent)", n)
	}
	// Its slot is free again: a new prompt runs.
	fourth := prefill(context.Background(), 4)
	select {
	case <-p.started:
	case err := <-fourth:
		t.Fatalf("a prompt after the closes: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a prompt after the closes never started")
	}
}

// A worker that never answers the close frame of a prompt the router
// gave up (it stopped reading: half-open, or stuck) cannot hold the
// router's call: within CancelWait the call ends with ErrTransport and
// the connection is closed, freeing every call slot and the client's
// goroutines. With no heartbeat (--peer-timeout 0) nothing else would
// end the wait; a peer that keeps sending heartbeats is not declared dead
// by them either; and when the socket is full (a large frame ahead of the
// close, which the peer does not read), the close's own send, blocked for
// WriteTimeout, is inside the bound too.
func TestUnconfirmedCancelEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dead  time.Duration
		pings bool
		full  bool
	}{
		{"no-heartbeat", -1, false, false},
		{"pinging-peer", 400 * time.Millisecond, true, false},
		{"full-socket", -1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan struct{})
			addr := fakeServer(t, func(nc net.Conn) {
				c := fakeServerConn(nc)
				if c == nil {
					return
				}
				if f, err := c.read(); err != nil || f.typ != tPrefill {
					return
				}
				close(got)
				// Reads nothing more (the close frame stays in the
				// socket) and answers nothing; alive, when pinging.
				for {
					time.Sleep(20 * time.Millisecond)
					if tc.pings {
						if c.send(tPing, 0) != nil {
							return
						}
					} else if _, err := nc.Write(nil); err != nil {
						return
					}
				}
			})
			cfg := Config{Secret: secret, DeadAfter: tc.dead, CancelWait: 300 * time.Millisecond, WriteTimeout: time.Minute}
			c := dial(t, addr, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}})
				errc <- err
			}()
			<-got
			if tc.full {
				// A frame larger than the loopback socket's buffers
				// (the peer reads none of it): its send holds the
				// connection's writer for WriteTimeout.
				go c.c.send(tLoad, 1<<20, make([]byte, 15<<20))
			}
			// Well past the heartbeat's limit: a pinging peer is alive.
			time.Sleep(2 * cfg.CancelWait)
			start := time.Now()
			cancel()
			endsWith(t, errc, handoff.ErrTransport, "a given-up prompt the worker never confirmed")
			// Generous for a loaded machine, far below WriteTimeout.
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("a given-up prompt took %v to end (CancelWait %v)", d, cfg.CancelWait)
			}
			select {
			case <-c.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the client's reader outlived the closed connection")
			}
			c.mu.Lock()
			n := len(c.pending)
			c.mu.Unlock()
			if n != 0 || c.psem.inUse() != 0 || c.sem.inUse() != 0 {
				t.Fatalf("after the connection closed: %d calls pending, %d+%d slots held", n, c.psem.inUse(), c.sem.inUse())
			}
			if c.Err() == nil {
				t.Fatal("the connection is still up")
			}
		})
	}
}

// The server gives a call's slot back before it sends the reply, so the
// client, which takes the slot again for its next call once the reply
// arrived, never sends a call past the server's bound: the server's
// reader never stops for a slot (and never holds a close frame back),
// however slowly the call's goroutine finishes after its reply.
func TestSlotFreedBeforeReply(t *testing.T) {
	cfg := Config{Secret: secret, MaxInflight: 1, DeadAfter: -1}
	s, err := NewServer(cfg, nil, fakePrefill{got: make(chan *handoff.PrefillRequest, 16)})
	if err != nil {
		t.Fatal(err)
	}
	// The call's goroutine lingers after its reply: long enough that the
	// client's next call arrives meanwhile.
	s.afterReply = func() { time.Sleep(20 * time.Millisecond) }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	c := dial(t, l.Addr().String(), cfg)
	for i := range 5 {
		if _, err := c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(i), Tenant: "t", Tokens: []int32{1}}); err != nil {
			t.Fatal(err)
		}
		// A short call too (the other bound).
		if _, err := c.Load(context.Background()); !errors.Is(err, handoff.ErrState) {
			t.Fatalf("Load: %v, want the worker's answer", err)
		}
	}
	if n := s.slotWaits.Load(); n != 0 {
		t.Fatalf("the server's reader waited %d times for a slot behind a client within the bound", n)
	}
}

// stubbornPrefill runs every prompt until release, its context ended or
// not: a worker whose step runs long after the router's close frame.
type stubbornPrefill struct {
	started chan struct{}
	release chan struct{}
}

func (p *stubbornPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	p.started <- struct{}{}
	<-p.release
	return nil, handoff.ErrAborted.With("stopped at the step boundary")
}

// A worker that reads the close frame of a given-up prompt but answers
// only at its step boundary, long after: it acknowledges the close at
// once, so the router keeps the connection (its other calls go on), the
// caller leaves within CancelWait after the acknowledgement, and the
// call keeps its slot until the worker's answer arrives. Without the
// acknowledgement the connection, which every tenant's calls share, was
// closed as the connection of a worker that is gone.
func TestAckedCancelKeepsConnection(t *testing.T) {
	p := &stubbornPrefill{started: make(chan struct{}, 1), release: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(p.release) }) }
	cfg := Config{Secret: secret, DeadAfter: -1, CancelWait: 200 * time.Millisecond}
	addr, _ := serve(t, cfg, nil, p)
	// Registered after serve's: runs before the server's Close, which
	// waits for the prompt.
	t.Cleanup(release)
	c := dial(t, addr, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}})
		errc <- err
	}()
	<-p.started
	cancel()
	endsWith(t, errc, handoff.ErrTransport, "a given-up prompt whose worker answers late")
	if err := c.Err(); err != nil {
		t.Fatalf("the connection of a worker that acknowledged the close was closed: %v", err)
	}
	if c.psem.inUse() != 1 {
		t.Fatalf("%d prompt slots held while the worker still runs the prompt, want 1", c.psem.inUse())
	}
	if _, err := c.Load(context.Background()); !errors.Is(err, handoff.ErrState) {
		t.Fatalf("a call beside the late prompt: %v, want the worker's answer", err)
	}
	release()
	deadline := time.Now().Add(20 * time.Second)
	for c.psem.inUse() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the late answer never gave the prompt's slot back")
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.mu.Lock()
	n := len(c.pending)
	c.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d calls pending after the late answer", n)
	}
}

// endsWith waits for a call's end on errc (20 s: a loaded machine) and
// requires it to be want.
func endsWith(t *testing.T, errc <-chan error, want error, what string) {
	t.Helper()
	select {
	case err := <-errc:
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: did not end", what)
	}
}

// When a given-up prompt's CancelWait runs out just as the worker's word
// arrives (its answer, or the acknowledgement of the close), the word
// wins: the caller gets the answer, or waits on for it, and the
// connection every tenant's calls share stays up. The wait's select
// picks at random among ready cases, so the deadline must look at what
// arrived before it acts. The fake worker reads the close and stays
// silent until the wait's time is up (cancelTimeUp); then it sends its
// word, which the client's reader delivers before the wait looks again.
func TestCancelTimeUpPrefersWorkersWord(t *testing.T) {
	for _, word := range []string{"answer", "ack"} {
		t.Run(word, func(t *testing.T) {
			closed, speak := make(chan uint32, 1), make(chan struct{})
			addr := fakeServer(t, func(nc net.Conn) {
				c := fakeServerConn(nc)
				if c == nil {
					return
				}
				f, err := c.read()
				if err != nil || f.typ != tPrefill {
					return
				}
				if g, err := c.read(); err != nil || g.typ != tStreamClose {
					return
				}
				closed <- f.stream
				<-speak
				if word == "ack" {
					_ = c.send(tCloseAck, f.stream)
					// The answer, well within the wait the
					// acknowledgement starts.
					time.Sleep(20 * time.Millisecond)
				}
				_ = c.send(tError, f.stream, encError(handoff.ErrAborted.With("stopped at the step boundary")))
				for {
					if _, err := c.read(); err != nil {
						return
					}
				}
			})
			cfg := Config{Secret: secret, DeadAfter: -1, CancelWait: 200 * time.Millisecond}
			c := dial(t, addr, cfg)
			var k *call
			spoke := 0
			c.cancelTimeUp = func() {
				spoke++
				if spoke > 1 {
					return
				}
				close(speak)
				// On the caller's goroutine: no Fatal here.
				for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
					if word == "ack" && len(k.acked) == 1 || word == "answer" && len(k.reply) == 1 {
						return
					}
				}
				t.Errorf("the worker's %s was never delivered", word)
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}})
				errc <- err
			}()
			waitFor(t, "the prompt to be sent", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, p := range c.pending {
					k = p
				}
				return k != nil
			})
			cancel()
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				t.Fatal("the close frame never reached the worker")
			}
			endsWith(t, errc, handoff.ErrAborted, "a given-up prompt whose worker spoke as its wait ran out")
			if spoke == 0 {
				t.Fatal("the wait's time was never up")
			}
			if err := c.Err(); err != nil {
				t.Fatalf("the connection of a worker that spoke as the wait ran out was closed: %v", err)
			}
		})
	}
}
