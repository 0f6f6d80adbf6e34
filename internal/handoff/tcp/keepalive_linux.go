package tcp

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT: the longest data written may stay
// unacknowledged before the kernel closes the connection.
func setUserTimeout(tc *net.TCPConn, d time.Duration) error {
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	}); err != nil {
		return err
	}
	return serr
}

// userTimeout reads TCP_USER_TIMEOUT back (tests).
func userTimeout(tc *net.TCPConn) (time.Duration, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var ms int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		ms, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil {
		return 0, err
	}
	return time.Duration(ms) * time.Millisecond, serr
}

const userTimeoutSupported = true

// unread is how many bytes wait unread in nc's receive queue (SIOCINQ):
// 0 when nc is not a socket or the kernel does not say.
func unread(nc net.Conn) int {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	if err := rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return 0
	}
	return n
}
