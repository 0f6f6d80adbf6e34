package engine

import (
	"context"
	"net/http"
	"sync"
)

// gate is an engine's admission bound: a fixed number of request slots,
// refused at once when full (a bounded engine says "overloaded" rather than
// queueing without bound), and closed for good at shutdown.
type gate struct {
	slots  chan struct{}
	mu     sync.Mutex
	closed bool
	flight sync.WaitGroup
}

func newGate(n int) *gate { return &gate{slots: make(chan struct{}, n)} }

// admit takes a slot or refuses at once. The returned release is idempotent.
func (g *gate) admit() (func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errf(CodeShutdown, http.StatusServiceUnavailable, nil, "the engine is shutting down")
	}
	select {
	case g.slots <- struct{}{}:
	default:
		return nil, errf(CodeOverloaded, http.StatusTooManyRequests, nil,
			"the engine is at its concurrency limit (%d requests); retry later", cap(g.slots))
	}
	g.flight.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			<-g.slots
			g.flight.Done()
		})
	}, nil
}

// close refuses every later admit and waits for admitted requests to
// release their slots, until ctx ends.
func (g *gate) close(ctx context.Context) error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	return waitGroup(ctx, &g.flight)
}
