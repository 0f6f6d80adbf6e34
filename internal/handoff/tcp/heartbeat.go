package tcp

import (
	"sync/atomic"
	"time"

	"sluice/internal/handoff"
)

// Heartbeats: hang detection without waiting for TCP keep-alive. After the
// handshake each side sends a Ping frame (connection-level, empty, sealed
// like every frame on an encrypted connection) whenever it has sent nothing
// for DeadAfter/8, and declares the peer dead when no byte at all has
// arrived from it for DeadAfter: the connection is closed, every call on it
// fails with ErrTransport naming the silence, and the layers above treat
// the peer as failed (the router retries or migrates; pages stay fenced by
// generation and lease exactly as for any dead connection: nothing is
// released early because a heartbeat stopped).
//
// The rule that tells a stopped peer from a slow one is "any byte", not
// "a ping in time": a peer busy sending a large frame keeps the line
// alive, and a peer starved of CPU (throttled to a few percent by a cgroup,
// a low scheduling class) still runs often enough to send a 32-byte frame
// in DeadAfter/8 of wall time; a peer stopped by SIGSTOP, a frozen VM or a
// hung kernel sends nothing, and is declared dead within DeadAfter plus
// one ping interval.
//
// Silence is counted only while this side watches. When this process did
// not run (a stall of its own: its CPU share starved on a loaded host, a
// cgroup throttle, a long GC, a SIGSTOP of this process), the peer's bytes
// may be sitting unread in the socket, and the watchdog may wake before
// the reader that would read them: only two ping intervals of each late
// wake's gap count as the peer's silence (watch). A stall of this side
// alone never kills a live peer; a dead peer is still declared after
// DeadAfter of watched silence (a few more wakes when every wake is late).
// And bytes that wait unread in the socket arrived: before it declares,
// the watchdog asks the kernel how many bytes wait (unread: SIOCINQ on
// Linux), and a peer whose bytes wait is alive, however late the reader
// (it has not run since they came: the goroutine starved while the
// watchdog ran, or they came as the watchdog woke). Elsewhere the queue
// is not looked at.

// DefaultDeadAfter is the silence after which a peer is declared dead.
const DefaultDeadAfter = 2 * time.Second

// tPing is the heartbeat frame type (connection-level, empty payload).
const tPing = 24

// beat is one connection's heartbeat state.
type beat struct {
	lastRecv atomic.Int64 // unix ns of the last byte read
	lastSend atomic.Int64 // unix ns of the last frame written
	// dead is why the watchdog closed the connection, if it did.
	dead atomic.Pointer[handoff.Error]
	// held counts the reader's waits that stop it reading (a server's
	// call waiting for a slot): the peer's silence is not measured then.
	held atomic.Int32
}

// holdOff marks the reader as not reading on purpose; resume ends that,
// and the peer's silence is counted from then.
func (b *beat) holdOff() { b.held.Add(1) }

func (b *beat) resume() {
	b.touchRecv()
	b.held.Add(-1)
}

func (b *beat) touchRecv() { b.lastRecv.Store(time.Now().UnixNano()) }
func (b *beat) touchSend() { b.lastSend.Store(time.Now().UnixNano()) }

// beatReader marks every read that returns bytes as a sign of life.
type beatReader struct {
	c *conn
}

func (r beatReader) Read(p []byte) (int, error) {
	n, err := r.c.nc.Read(p)
	if n > 0 {
		r.c.beat.touchRecv()
	}
	return n, err
}

// heartbeat runs until stop closes: it pings when the connection has been
// quiet for a ping interval and closes it when the peer has been silent for
// DeadAfter. It starts after the handshake.
func (c *conn) heartbeat(stop <-chan struct{}) {
	dead := c.cfg.DeadAfter
	if dead < 0 {
		return
	}
	every := dead / 8
	c.beat.touchRecv()
	c.beat.touchSend()
	w := newWatch(dead, time.Now())
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			// The wall time of this wake, not the tick's: after a stall
			// of this process the tick may be the time it was due.
			now := time.Now()
			// A reader that holds off reading (a full connection) sees no
			// bytes however alive the peer is: not counted as silence.
			// held is loaded before lastRecv: resume touches lastRecv
			// before it lowers held.
			held := c.beat.held.Load() > 0
			lastRecv := time.Unix(0, c.beat.lastRecv.Load())
			silent, isDead := w.wake(now, lastRecv, held)
			if isDead && unread(c.nc) > 0 {
				isDead = false // its bytes wait for the reader: alive
			}
			if c.cfg.onWake != nil {
				c.cfg.onWake(c, wake{now: now, lastRecv: lastRecv, silent: silent, dead: isDead})
			}
			if isDead {
				err := handoff.ErrTransport.With("the peer at %s sent nothing for %v (heartbeat limit %v): declared dead", c.nc.RemoteAddr(), silent.Round(time.Millisecond), dead)
				c.beat.dead.Store(err)
				c.nc.Close()
				return
			}
			if now.Sub(time.Unix(0, c.beat.lastSend.Load())) >= every {
				if err := c.send(tPing, 0); err != nil {
					return // the connection is failing; its reader says why
				}
			}
		}
	}
}

// wake is what the watchdog saw and judged at one of its wakes (tests
// record them: Config.onWake).
type wake struct {
	now, lastRecv time.Time
	silent        time.Duration // the peer's watched silence
	dead          bool
}

// deadErr is the watchdog's reason when it closed the connection.
func (c *conn) deadErr() error {
	if e := c.beat.dead.Load(); e != nil {
		return e
	}
	return nil
}

// watch is the watchdog's judgement apart from its clock and socket: fed
// each wake's wall time, the time of the last byte read and whether the
// reader holds off reading, it says how long the peer has been silent in
// watched time and whether that makes it dead.
//
// A wake's gap beyond two ping intervals (DeadAfter/4) is time this side
// did not run: it is not counted as the peer's silence, whoever was
// silent, because a peer's bytes sent meanwhile wait unread in the socket
// until this process runs again (TestHeartbeatSurvivesOwnStall). So a
// stall of any length costs a live peer at most DeadAfter/4 of its
// allowance, and a dead peer is declared once DeadAfter of silence was
// watched: within DeadAfter plus a ping interval when this side runs on
// time, after about 4 late wakes at worst. A Prefill call's cancel wait
// is judged the same way (Client.roundTripCancel: CancelWait in place of
// DeadAfter, the moment the call was given up, or its close
// acknowledged, in place of the last byte).
type watch struct {
	dead time.Duration
	// grace is the part of one wake's gap counted as silence.
	grace time.Duration
	prev  time.Time // the previous wake
	// unwatched is the time since lastRecv this side did not run,
	// beyond grace per wake; reset when a byte arrives.
	unwatched time.Duration
	lastRecv  time.Time
}

func newWatch(dead time.Duration, now time.Time) *watch {
	return &watch{dead: dead, grace: dead / 4, prev: now}
}

// wake reports the peer's watched silence at now and whether it exceeds
// the limit (never while held).
func (w *watch) wake(now, lastRecv time.Time, held bool) (silent time.Duration, dead bool) {
	if !lastRecv.Equal(w.lastRecv) {
		w.lastRecv, w.unwatched = lastRecv, 0
	}
	// Only the part of the gap after the last byte is the peer's silence.
	from := w.prev
	if lastRecv.After(from) {
		from = lastRecv
	}
	if gap := now.Sub(from); gap > w.grace {
		w.unwatched += gap - w.grace
	}
	w.prev = now
	silent = now.Sub(lastRecv) - w.unwatched
	return silent, !held && silent > w.dead
}
