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
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			// A reader that holds off reading (a full connection) sees no
			// bytes however alive the peer is: not counted as silence.
			// held is loaded before lastRecv: resume touches lastRecv
			// before it lowers held.
			held := c.beat.held.Load() > 0
			if silent := now.Sub(time.Unix(0, c.beat.lastRecv.Load())); !held && silent > dead {
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

// deadErr is the watchdog's reason when it closed the connection.
func (c *conn) deadErr() error {
	if e := c.beat.dead.Load(); e != nil {
		return e
	}
	return nil
}
