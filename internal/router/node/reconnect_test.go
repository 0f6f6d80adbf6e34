package node

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"sluice/internal/gguf"
)

// connTracker is a listener factory that remembers the connections its
// listeners accept, so a test can drop them under a running stack (as a
// peer that restarts or a network that resets would).
type connTracker struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (ct *connTracker) listen() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return trackedListener{l, ct}, nil
}

// dropAll closes every connection accepted so far and returns how many.
func (ct *connTracker) dropAll() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	n := len(ct.conns)
	for _, c := range ct.conns {
		c.Close()
	}
	ct.conns = nil
	return n
}

type trackedListener struct {
	net.Listener
	ct *connTracker
}

func (l trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.ct.mu.Lock()
		l.ct.conns = append(l.ct.conns, c)
		l.ct.mu.Unlock()
	}
	return c, err
}

func loadBuiltIn(t testing.TB) *Model {
	t.Helper()
	m, err := LoadModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// `sluice serve` survives its roles' connections being dropped: like
// `sluice router`, it dials again on the next call. Before, serve held
// plain connections, and once one died every later request of every
// tenant failed with 502 until a restart. The requests in flight when the
// connections die may fail (their outcome is unknown, I5/I6: never
// retried), but promptly: a request whose prefill call died with its
// connection once hung until decode's two-minute handoff timeout (the
// guard below fails it long before); a bounded number of later ones must
// succeed with the output the stack gave before the drop.
func TestServeSurvivesDroppedConnections(t *testing.T) {
	m := loadBuiltIn(t)
	for _, transport := range []string{TransportTCP, TransportSHM} {
		t.Run(transport, func(t *testing.T) {
			ct := &connTracker{}
			s := serve(t, m, LocalConfig{Pools: Pools{Context: 128, PoolTokens: 512}, Transport: transport, Listen: ct.listen}, nil)
			req := job{prompt: "hello there", max: 6}
			// A hang guard, far above a request's few milliseconds, and
			// far below the decode worker's handoff timeout.
			call := func(c *openai.Client, j job) (result, error) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				res, err := complete(ctx, c, j)
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a request hung after the drop: %v", err)
				}
				return res, err
			}
			ref, err := call(s.client, req)
			if err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 20; round++ {
				if n := ct.dropAll(); n != 3 {
					t.Fatalf("dropped %d connections, want the 3 of the roles (router->decode, router->prefill, prefill->decode)", n)
				}
				// Each dropped connection can fail at most the call that
				// finds it dead; so within 4 requests one succeeds.
				ok := false
				var last error
				for i := 0; i < 4 && !ok; i++ {
					got, err := call(s.client, req)
					if err == nil {
						if got.text != ref.text {
							t.Fatalf("after the drop: %q, before: %q", got.text, ref.text)
						}
						ok = true
					}
					last = err
				}
				if !ok {
					t.Fatalf("round %d: no request succeeded after the roles' connections were dropped: %v", round, last)
				}
				for i := 0; i < 3; i++ {
					got, err := call(s.client, req)
					if err != nil || got.text != ref.text {
						t.Fatalf("round %d: request %d after the reconnect: %q %v", round, i, got.text, err)
					}
				}
			}
			waitPoolsFree(t, s.stack)
		})
	}
}
