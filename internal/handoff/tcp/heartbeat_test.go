package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// gate is a TCP proxy on loopback whose forwarding can be frozen (a peer
// stopped with SIGSTOP: its socket stays open, nothing moves) or slowed
// (every chunk held for delay: a peer starved of CPU, or a slow link).
type gate struct {
	addr   string
	frozen atomic.Bool
	closed atomic.Bool
	delay  atomic.Int64 // ns each chunk waits
}

func newGate(t *testing.T, to string) *gate {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{addr: l.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		g.closed.Store(true) // a frozen pipe lets go
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				return
			}
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				defer dst.Close()
				defer src.Close()
				b := make([]byte, 64<<10)
				for {
					n, err := src.Read(b)
					for g.frozen.Load() && !g.closed.Load() {
						time.Sleep(5 * time.Millisecond)
					}
					if d := g.delay.Load(); d > 0 {
						time.Sleep(time.Duration(d))
					}
					if n > 0 {
						if _, werr := dst.Write(b[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return g
}

// A peer that stops (SIGSTOP: connection open, nothing sent) is declared
// dead within DeadAfter plus a ping interval: the call waiting on it fails
// with ErrTransport naming the silence, and the server side ends the
// connection too and says why.
func TestHeartbeatDeclaresStoppedPeerDead(t *testing.T) {
	const dead = 400 * time.Millisecond
	block := make(chan struct{})
	defer close(block)
	var mu sync.Mutex
	var serverErr error
	s, err := NewServer(Config{Secret: secret, DeadAfter: dead}, slowDecode{block}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.OnError = func(_ net.Addr, err error) { mu.Lock(); serverErr = err; mu.Unlock() }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	g := newGate(t, l.Addr().String())
	c := dial(t, g.addr, Config{Secret: secret, DeadAfter: dead})
	// Alive and idle for several limits: the pings keep it up.
	time.Sleep(3 * dead)
	if err := c.Err(); err != nil {
		t.Fatalf("an idle connection died: %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Commit(context.Background(), &handoff.Commit{}) }() // waits on the server
	time.Sleep(dead / 4)
	start := time.Now()
	g.frozen.Store(true)
	select {
	case err := <-errc:
		took := time.Since(start)
		if !errors.Is(err, handoff.ErrTransport) || !strings.Contains(err.Error(), "declared dead") {
			t.Fatalf("the call on a stopped peer ended with %v, want ErrTransport naming the heartbeat", err)
		}
		if took > dead+dead/8+300*time.Millisecond {
			t.Fatalf("declared dead after %v, limit %v", took, dead)
		}
	case <-time.After(10 * dead):
		t.Fatalf("a stopped peer was not declared dead within %v", 10*dead)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		e := serverErr
		mu.Unlock()
		if e != nil {
			if !strings.Contains(e.Error(), "declared dead") {
				t.Fatalf("the server ended the connection with %v", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never declared the silent client dead")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A slow peer is not a dead one: every chunk held for a third of the limit
// (a peer starved of CPU, a slow link) and whole handoffs still go through
// over several limits' time, encrypted or not.
func TestHeartbeatKeepsSlowPeerAlive(t *testing.T) {
	const dead = 600 * time.Millisecond
	for _, enc := range []bool{false, true} {
		r := handofftest.New(t, handofftest.Options{})
		addr, _ := serve(t, Config{Secret: secret, DeadAfter: dead, Encrypt: enc}, r.Server, nil)
		g := newGate(t, addr)
		c := dial(t, g.addr, Config{Secret: secret, DeadAfter: dead})
		g.delay.Store(int64(dead / 3))
		start := time.Now()
		for i := 0; time.Since(start) < 3*dead; i++ {
			handofftest.Honest(t, r, c, i, 9, handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes(), Window: 2})
		}
		if err := c.Err(); err != nil {
			t.Fatalf("encrypt=%v: a slow peer was declared dead: %v", enc, err)
		}
		r.CheckDrained(t)
	}
}
