//go:build !linux

package tcp

import (
	"net"
	"time"
)

// setUserTimeout: TCP_USER_TIMEOUT is Linux's; elsewhere the keep-alive
// probes bound an idle connection and unacknowledged data waits for the
// system's retransmission limit.
func setUserTimeout(*net.TCPConn, time.Duration) error { return nil }

func userTimeout(*net.TCPConn) (time.Duration, error) { return 0, nil }

const userTimeoutSupported = false

// unread: the receive queue is looked at on Linux only (heartbeat.go).
func unread(net.Conn) int { return 0 }
