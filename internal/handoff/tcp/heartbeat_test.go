package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// into records when each chunk began to be written into the dialed
	// side's socket (0) and the dialing side's (1).
	into [2]writeLog
}

// writeLog is when a direction's writes began.
type writeLog struct {
	mu    sync.Mutex
	began []time.Time
}

func (l *writeLog) mark(at time.Time) {
	l.mu.Lock()
	l.began = append(l.began, at)
	l.mu.Unlock()
}

// firstAfter is the first write that began after at.
func (l *writeLog) firstAfter(at time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.began {
		if b.After(at) {
			return b, true
		}
	}
	return time.Time{}, false
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
			pipe := func(dst, src net.Conn, into *writeLog) {
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
						began := time.Now()
						if _, werr := dst.Write(b[:n]); werr != nil {
							return
						}
						into.mark(began)
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
			go pipe(out, in, &g.into[0])
			go pipe(in, out, &g.into[1])
		}
	}()
	return g
}

// A peer that stops (SIGSTOP: connection open, nothing sent) is declared
// dead at the first watchdog wake past DeadAfter of watched silence: the
// call waiting on it fails with ErrTransport naming the silence, and the
// server side ends the connection too and says why.
//
// How soon is judged by the watchdog's own wakes, not by the wall clock:
// on a loaded machine its wakes come late and only DeadAfter/4 of a late
// wake's gap counts as silence (watch: a stall of this side is not the
// peer's), so the wall time to the death grows with the load (seen: 1.1 s
// for a 400 ms limit at load 24). The test records the client's wakes
// (Config.onWake) and recounts, by that rule, the watched time from the
// freeze (or the last byte read, if one came after it) to the wake that
// declared: more than DeadAfter plus DeadAfter/4 means it was declared
// late. While idle before the freeze, a death is judged as in
// TestHeartbeatKeepsSlowPeerAlive (the gate shares the starved process).
func TestHeartbeatDeclaresStoppedPeerDead(t *testing.T) {
	const dead = 400 * time.Millisecond
	for round := 1; ; round++ {
		void := stoppedPeerRound(t, dead)
		if void == "" {
			return
		}
		if round == 3 {
			t.Fatalf("the machine kept the test's own idle link silent past the limit in 3 rounds in a row; last: %s", void)
		}
		t.Logf("round %d void: %s", round, void)
	}
}

// stoppedPeerRound idles a connection through a gate for 3 limits, then
// freezes the gate under a waiting call. It returns "" when the client
// declared the frozen peer dead in time, or why the round is void (the
// idle connection ended after the gate wrote nothing for the limit).
func stoppedPeerRound(t *testing.T, dead time.Duration) string {
	t.Helper()
	block := make(chan struct{})
	defer close(block)
	var mu sync.Mutex
	var serverErr error
	s, err := NewServer(Config{Secret: secret, DeadAfter: dead}, slowDecode{block}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.OnError = func(_ net.Addr, err error) { mu.Lock(); serverErr = err; mu.Unlock() }
	srvErr := func() error { mu.Lock(); defer mu.Unlock(); return serverErr }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := &clockListener{Listener: l}
	go s.Serve(sc)
	t.Cleanup(func() { s.Close() })
	g := newGate(t, l.Addr().String())
	nc, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	cc := &clockedConn{Conn: nc}
	var wakes wakeLog
	c, err := NewClient(cc, Config{Secret: secret, DeadAfter: dead, onWake: wakes.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Alive and idle for several limits: the pings keep it up.
	time.Sleep(3 * dead)
	if c.Err() != nil {
		return whoDeclared(t, "an idle connection ended", c, cc, sc, g, srvErr, dead)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Commit(context.Background(), &handoff.Commit{}) }() // waits on the server
	time.Sleep(dead / 4)
	g.frozen.Store(true)
	frozen := time.Now()
	var callErr error
	select {
	case callErr = <-errc:
	case <-time.After(30 * time.Second): // a hang guard, not a measurement
		t.Fatal("a stopped peer was not declared dead within 30 s")
	}
	death, watched, ok := wakes.death(frozen, dead/4)
	if !ok || death.now.Before(frozen) {
		// Not the client's watchdog after the freeze (the gate holds the
		// server's close once frozen): the idle link went silent before.
		return whoDeclared(t, "the connection ended before the freeze", c, cc, sc, g, srvErr, dead)
	}
	if !errors.Is(callErr, handoff.ErrTransport) || !strings.Contains(callErr.Error(), "declared dead") {
		t.Fatalf("the call on a stopped peer ended with %v, want ErrTransport naming the heartbeat", callErr)
	}
	if watched > dead+dead/4 {
		t.Fatalf("declared dead after %v of watched time since the freeze (%v of wall time; watched silence %v), limit %v: not at the first wake past the limit",
			watched.Round(time.Millisecond), death.now.Sub(frozen).Round(time.Millisecond), death.silent.Round(time.Millisecond), dead)
	}
	t.Logf("declared dead %v after the freeze: %v of it watched", death.now.Sub(frozen).Round(time.Millisecond), watched.Round(time.Millisecond))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if e := srvErr(); e != nil {
			if !strings.Contains(e.Error(), "declared dead") {
				t.Fatalf("the server ended the connection with %v", e)
			}
			return ""
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never declared the silent client dead")
		}
	}
}

// wakeLog records a watchdog's wakes (Config.onWake).
type wakeLog struct {
	mu    sync.Mutex
	wakes []wake
}

func (l *wakeLog) add(_ *conn, w wake) {
	l.mu.Lock()
	l.wakes = append(l.wakes, w)
	l.mu.Unlock()
}

// death is the wake that declared the peer dead and the time watched from
// from (or from the last byte read before that wake, when later) to it,
// counting at most grace of each wake's gap, as watch does.
func (l *wakeLog) death(from time.Time, grace time.Duration) (w wake, watched time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range l.wakes {
		if !w.dead {
			continue
		}
		if w.lastRecv.After(from) {
			from = w.lastRecv
		}
		prev := from
		for _, v := range l.wakes[:i+1] {
			if !v.now.After(from) {
				continue
			}
			watched += min(v.now.Sub(prev), grace)
			prev = v.now
		}
		return w, watched, true
	}
	return wake{}, 0, false
}

// whoDeclared judges an ended connection (what says what the test was
// doing): by the client's watchdog, or the server's (the client then saw
// the connection end; the server says so a moment later). It fails the
// test when the declaring side was wrong by what the gate measured
// (judgeDeath), and otherwise says why the round is void.
func whoDeclared(t *testing.T, what string, c *Client, cc *clockedConn, sc *clockListener, g *gate, srvErr func() error, dead time.Duration) string {
	t.Helper()
	if d := c.c.deadErr(); d != nil {
		return what + ": " + judgeDeath(t, "client", d, cc, &g.into[1], dead)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if e := srvErr(); e != nil && strings.Contains(e.Error(), "declared dead") {
			return what + ": " + judgeDeath(t, "server", e, sc.conn.Load(), &g.into[0], dead)
		}
	}
	t.Fatalf("%s and neither end declared the other dead: client %v, server %v", what, c.Err(), srvErr())
	return ""
}

// Bytes from the peer that wait unread in the socket are life: a watchdog
// that wakes before its reader (the reader's goroutine starved while the
// watchdog ran, or the bytes came as it woke) must not declare the peer
// dead. Here no reader runs at all: the peer writes once and goes silent.
// Once the watchdog has counted more than the limit of silence it still
// holds off while the bytes wait (Linux: unread); they are then read
// around the reader, and the next wake declares the peer dead.
func TestHeartbeatBytesWaitingAreLife(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the receive queue is looked at on Linux only")
	}
	const dead = 200 * time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	go io.Copy(io.Discard, peer) // the pings
	if _, err := peer.Write([]byte("life")); err != nil {
		t.Fatal(err)
	}
	past := make(chan wake, 64)
	c := &conn{nc: nc, cfg: Config{DeadAfter: dead, WriteTimeout: 10 * time.Second, onWake: func(_ *conn, w wake) {
		if w.silent > dead {
			select {
			case past <- w:
			default:
			}
		}
	}}, fr: framer{maxFrame: 1 << 20}}
	stop := make(chan struct{})
	defer close(stop)
	go c.heartbeat(stop)
	for range 2 {
		select {
		case w := <-past:
			if w.dead || c.deadErr() != nil {
				t.Fatalf("declared dead (%v) with the peer's bytes waiting in the socket", c.deadErr())
			}
		case <-time.After(30 * time.Second): // a hang guard, not a measurement
			t.Fatal("the watchdog never counted the limit of silence")
		}
	}
	if n := unread(nc); n != 4 {
		t.Fatalf("%d bytes unread, want the peer's 4", n)
	}
	if _, err := io.ReadFull(nc, make([]byte, 4)); err != nil { // not through the watchdog's reader: lastRecv stays
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); c.deadErr() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the silent peer was not declared dead once nothing waited")
		}
	}
}

// A slow peer is not a dead one: every chunk held for a third of the limit
// (a peer starved of CPU, a slow link) and whole handoffs still go through
// over several limits' time, encrypted or not.
//
// The server, the client and the gate that slows their link share this
// process, so a starved machine (the suite at load 20 under -race, the
// process stopped now and then) can keep the link silent past the limit
// by itself: the peer then really sent nothing for the limit and may be
// declared dead (seen 3 times in 200 rounds at load 15-25 with the process
// stopped 450 ms every 1.05 s: the gate had written nothing into the
// declaring side for 0.77-2.1 s). So a death fails the test only when the
// heartbeat was wrong by what the gate measured: a chunk began to be
// written into the declaring side's socket less than the limit after the
// last byte that side read (a live peer declared dead). A death after the
// gate wrote it nothing for the limit makes the round void: it is run
// again, at most 3 times.
func TestHeartbeatKeepsSlowPeerAlive(t *testing.T) {
	const dead = 600 * time.Millisecond
	for _, enc := range []bool{false, true} {
		for round := 1; ; round++ {
			void := slowPeerRound(t, dead, enc)
			if void == "" {
				break
			}
			if round == 3 {
				t.Fatalf("encrypt=%v: the machine kept the test's own link silent past the limit in 3 rounds in a row; last: %s", enc, void)
			}
			t.Logf("encrypt=%v: round %d void: %s", enc, round, void)
		}
	}
}

// slowPeerRound runs handoffs for 3 limits' time through a gate that holds
// every chunk a third of the limit. It returns "" when they all went
// through, or why the round is void; it fails the test when the heartbeat
// declared a live peer dead or the connection ended otherwise.
func slowPeerRound(t *testing.T, dead time.Duration, enc bool) string {
	t.Helper()
	r := handofftest.New(t, handofftest.Options{})
	s, err := NewServer(Config{Secret: secret, DeadAfter: dead, Encrypt: enc}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var serverErr error
	s.OnError = func(_ net.Addr, err error) { mu.Lock(); serverErr = err; mu.Unlock() }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc := &clockListener{Listener: l}
	go s.Serve(sc)
	t.Cleanup(func() { s.Close() })
	g := newGate(t, l.Addr().String())
	nc, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	cc := &clockedConn{Conn: nc}
	c, err := NewClient(cc, Config{Secret: secret, DeadAfter: dead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	g.delay.Store(int64(dead / 3))
	start := time.Now()
	for i := 0; time.Since(start) < 3*dead; i++ {
		err := handofftest.HonestErr(t, r, c, i, 9, handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes(), Window: 2})
		if err == nil {
			continue
		}
		if !errors.Is(err, handoff.ErrTransport) {
			t.Fatalf("encrypt=%v: %v", enc, err)
		}
		break
	}
	if c.Err() == nil {
		r.CheckDrained(t)
		return ""
	}
	srvErr := func() error { mu.Lock(); defer mu.Unlock(); return serverErr }
	return whoDeclared(t, fmt.Sprintf("encrypt=%v: the connection ended", enc), c, cc, sc, g, srvErr, dead)
}

// judgeDeath fails the test when name declared its peer dead (err)
// wrongly by what its socket (nc) and the gate's writes into it (into)
// show: it closed the connection less than dead after the last byte it
// read, or a chunk began to be written into its socket less than dead
// after that byte (a live peer). Otherwise the gate wrote it nothing for
// the limit, and it says why the round is void.
func judgeDeath(t *testing.T, name string, err error, nc *clockedConn, into *writeLog, dead time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); nc.closed.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	lastRead, closed := time.Unix(0, nc.last.Load()), time.Unix(0, nc.closed.Load())
	if nc.closed.Load() == 0 || closed.Sub(lastRead) < dead {
		t.Fatalf("the %s declared its peer dead (%v) %v after the last byte it read, limit %v", name, err, closed.Sub(lastRead).Round(time.Millisecond), dead)
	}
	if w, ok := into.firstAfter(lastRead); ok && w.Sub(lastRead) < dead {
		t.Fatalf("the %s declared a live peer dead (%v): the gate began writing into its socket %v after the last byte it read (limit %v)", name, err, w.Sub(lastRead).Round(time.Millisecond), dead)
	}
	return fmt.Sprintf("the %s declared its peer dead (%v) when the gate had written nothing into its socket for %v after the last byte it read (limit %v)", name, err, closed.Sub(lastRead).Round(time.Millisecond), dead)
}

// clockListener hands out clockedConns and keeps the last one.
type clockListener struct {
	net.Listener
	conn atomic.Pointer[clockedConn]
}

func (l *clockListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &clockedConn{Conn: nc}
	l.conn.Store(c)
	return c, nil
}

// clockedConn remembers when a Read last returned bytes (the last byte
// its owner read) and when it was first closed (a heartbeat watchdog
// closes the connection the moment it declares the peer dead), unix ns.
type clockedConn struct {
	net.Conn
	last, closed atomic.Int64
}

func (c *clockedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// SyscallConn reaches the socket (the watchdog looks at its receive
// queue: unread).
func (c *clockedConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func (c *clockedConn) Close() error {
	c.closed.CompareAndSwap(0, time.Now().UnixNano())
	return c.Conn.Close()
}
