package node

import (
	"context"
	"errors"
	"fmt"

	"sluice/internal/handoff"
)

// Checker is a connection to a peer role that can say whether the peer is
// reachable now (tcp.Client and tcp.Redialer: Check).
type Checker interface {
	Check(ctx context.Context) error
}

// Peer is one connection a router depends on, named by the role at its
// other end.
type Peer struct {
	Role string
	Conn Checker
}

// CheckPeers is a readiness check (router.Config.Ready): nil when every
// peer is reachable. A connection is only up after the authenticated
// handshake, which is also where roles compare model fingerprints (I13),
// so a peer serving another model is not ready either. The error names the
// role and the failure's stable code only (/ready is unauthenticated: no
// addresses, no peer messages); the tcp layer logs the details.
func CheckPeers(ctx context.Context, peers []Peer) error {
	for _, p := range peers {
		if err := p.Conn.Check(ctx); err != nil {
			code := "unreachable"
			var he *handoff.Error
			if errors.As(err, &he) {
				code = string(he.Code)
			}
			return fmt.Errorf("the %s worker is not ready (%s)", p.Role, code)
		}
	}
	return nil
}

// Ready is the stack's readiness check: every connection between its
// roles is up. In-process transports and the colocated engine have none
// and are always ready.
func (s *Stack) Ready(ctx context.Context) error {
	if s.cluster != nil {
		return s.cluster.Clusters[0].Ready(ctx)
	}
	return CheckPeers(ctx, s.peers)
}

// CheckAnyPeer is nil when at least one of peers is reachable (a prefill
// worker with several decode workers can serve while one of them is
// down); otherwise it is the first peer's failure, as CheckPeers says it.
func CheckAnyPeer(ctx context.Context, peers []Peer) error {
	var first error
	for _, p := range peers {
		err := CheckPeers(ctx, []Peer{p})
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}
