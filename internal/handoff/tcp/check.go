package tcp

import (
	"context"
	"time"
)

// checkTimeout bounds the dial a readiness check may make.
const checkTimeout = 2 * time.Second

// Check reports whether the connection is up: nil while it is, else why it
// died. It sends nothing: a peer that dies closes the connection (or TCP
// keep-alive notices), so the state is known without a round trip.
// Readiness probes call it.
func (cl *Client) Check(context.Context) error { return cl.Err() }

// Check reports whether the peer is reachable now: nil while the current
// connection is up; otherwise it dials once (authenticating, I12; bounded
// by ctx and a few seconds) and keeps the new connection for later calls,
// so a restarted peer is seen as soon as a probe asks.
func (r *Redialer) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	_, err := r.client(ctx)
	return err
}
