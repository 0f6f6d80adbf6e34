package tcp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/testenv"
	"sluice/internal/testnet"
)

// With the heartbeat off (--peer-timeout 0), a peer cut off by the network
// (a partition: no packet in either direction, its kernel answers nothing)
// is noticed by the kernel within AckTimeout on both ends, idle or not:
// keep-alive probes on the idle connection, TCP_USER_TIMEOUT on a call's
// unacknowledged request. Before, the idle connection stayed up for minutes
// (Go's keep-alive: 15 s, then nine probes 15 s apart) and a call's
// unacknowledged request for a quarter of an hour (retransmissions), the
// calls on the connection holding their slots all the while. The client
// and the server are in their own network namespaces (testnet), so the
// partition is a real one.
func TestCutOffPeerNoticedWithoutHeartbeat(t *testing.T) {
	if why := testnet.Available(); why != "" {
		if testenv.Required() {
			t.Fatalf("network namespaces cannot be made here (%s); CI runs as root with /dev/net/tun and must run this test", why)
		}
		t.Skipf("SKIPPED: %s; this test did NOT run", why)
	}
	const ack = 2 * time.Second
	for _, busy := range []bool{false, true} {
		name := "idle"
		if busy {
			name = "call in flight"
		}
		t.Run(name, func(t *testing.T) {
			n := testnet.New(1)
			defer n.Close()
			a, err := n.AddNode("router")
			if err != nil {
				t.Fatal(err)
			}
			b, err := n.AddNode("worker")
			if err != nil {
				t.Fatal(err)
			}
			l, err := b.Listen("tcp", b.HostPort(0))
			if err != nil {
				t.Fatal(err)
			}
			p := &gatedPrefill{started: make(chan struct{}, 8), release: make(chan struct{})}
			defer close(p.release)
			cfg := Config{Secret: secret, DeadAfter: -1, AckTimeout: ack}
			s, err := NewServer(cfg, nil, p)
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(l)
			defer s.Close()
			ccfg := cfg
			ccfg.DialContext = a.DialContext
			c, err := Dial(context.Background(), l.Addr().String(), ccfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// One prompt runs, so the connection is in use (its slot held).
			go func() {
				_, _ = c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(1), Tenant: "t", Tokens: []int32{1}})
			}()
			<-p.started
			time.Sleep(200 * time.Millisecond) // its frames acknowledged
			n.Isolate(b)
			start := time.Now()
			if busy {
				// A short call whose request the worker never acknowledges.
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
					defer cancel()
					_, _ = c.Load(ctx)
				}()
			}
			// Generous for a loaded machine (kernel timers do not wait for
			// a CPU), below Go's first keep-alive probe (15 s), far below
			// the system's defaults (2.5 minutes idle, 15 with data in
			// flight).
			limit := 5 * ack
			for c.Err() == nil {
				if time.Since(start) > limit {
					t.Fatalf("the client's connection to a cut-off worker still up after %v (AckTimeout %v)", time.Since(start), ack)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !errors.Is(c.Err(), handoff.ErrTransport) {
				t.Fatalf("the connection ended with %v, want a transport error", c.Err())
			}
			t.Logf("client noticed after %v: %v", time.Since(start).Round(time.Millisecond), c.Err())
			// The worker's end (idle there: its prompt waits) goes too.
			for open(s) > 0 {
				if time.Since(start) > limit {
					t.Fatalf("the worker's connection to a cut-off router still up after %v", time.Since(start))
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("worker noticed after %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

func open(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Both ends' sockets carry the bound: keep-alive on, TCP_USER_TIMEOUT set
// (Linux), on loopback too; AckTimeout < 0 leaves the system's defaults.
func TestSocketsCarryAckTimeout(t *testing.T) {
	for _, ack := range []time.Duration{0, 5 * time.Second, -1} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			nc, err := l.Accept()
			if err == nil {
				tuneSocket(nc, cfgAck(ack))
			}
			accepted <- nc
		}()
		nc, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		tuneSocket(nc, cfgAck(ack))
		snc := <-accepted
		l.Close()
		for _, c := range []net.Conn{nc, snc} {
			got, err := userTimeout(c.(*net.TCPConn))
			if err != nil {
				t.Fatal(err)
			}
			want := cfgAck(ack)
			if want < 0 {
				want = 0
			}
			if userTimeoutSupported && got != want {
				t.Fatalf("AckTimeout %v: TCP_USER_TIMEOUT %v, want %v", ack, got, want)
			}
			c.Close()
		}
	}
}

// cfgAck is AckTimeout after Config's defaults.
func cfgAck(d time.Duration) time.Duration {
	c, _ := Config{Secret: secret, AckTimeout: d}.withDefaults()
	return c.AckTimeout
}
