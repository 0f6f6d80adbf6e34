package tcp

import (
	"net"
	"time"
)

// A peer that vanishes without closing its connection (a host frozen or
// powered off, a cable cut, a partition: a half-open connection) is seen
// by the heartbeat within --peer-timeout. With the heartbeat off
// (--peer-timeout 0), the kernel is what notices, and its defaults take
// minutes: keep-alive probes after 15 s idle, nine of them 15 s apart (Go's
// defaults), and for unacknowledged data about 15 retransmissions with
// backoff (15 minutes or more), the calls on the connection holding their
// slots all the while. So every connection's socket, on both ends, bounds
// it to Config.AckTimeout whatever the heartbeat: keep-alive probes after
// AckTimeout/4 idle, every AckTimeout/4, and TCP_USER_TIMEOUT (Linux) of
// AckTimeout for data the peer does not acknowledge; the kernel closes the
// connection then (every call on it fails with ErrTransport, as for any
// lost connection). Only a peer whose kernel does not answer counts: a
// process paused in a debugger or starved of CPU has its kernel acknowledge
// for it, so it keeps its connection.

// DefaultAckTimeout bounds a silent kernel (Config.AckTimeout).
const DefaultAckTimeout = 20 * time.Second

// keepAliveProbes is the number of unanswered keep-alive probes after
// which the connection is closed (the Linux TCP_USER_TIMEOUT then closes
// it at AckTimeout anyway, counted from the last acknowledgement).
const keepAliveProbes = 3

// tuneSocket applies the AckTimeout bound to nc when it is a TCP socket
// (a net.Pipe or another transport in tests is left alone).
func tuneSocket(nc net.Conn, ackTimeout time.Duration) {
	tc, ok := nc.(*net.TCPConn)
	if !ok || ackTimeout <= 0 {
		return
	}
	every := max(ackTimeout/(keepAliveProbes+1), time.Second)
	_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: every, Interval: every, Count: keepAliveProbes})
	_ = setUserTimeout(tc, ackTimeout)
}
