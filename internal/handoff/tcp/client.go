package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Client is one authenticated connection to a worker. It implements
// handoff.Decode and handoff.Prefill; many calls and streams run on it at
// once. Every method returns only when the server's reply arrived, so the
// meaning of a nil error is exactly that of the interface (applied,
// verified, ...); a connection failure or an expired ctx before the reply
// is handoff.ErrTransport: the outcome is unknown and the caller must abort.
type Client struct {
	c       *conn
	mu      sync.Mutex
	next    uint32
	pending map[uint32]*call
	err     error // set once the connection is dead
	done    chan struct{}
	// sem and psem are the server's call slots (the smaller of the two
	// ends' Config.MaxInflight each, Prefill calls apart), taken here before a call is sent and given
	// back when its reply arrives: a client never has more calls at the
	// server than the server runs at once, so the server's reader never
	// stops on a call waiting for a slot, and every frame behind it (a
	// close frame giving a prompt up, a token stream's close, a
	// heartbeat) is read at once however many prompts a router keeps in
	// flight (--max-concurrency above 64). A call past the bound waits
	// here instead, still unsent, and a caller that gives it up meanwhile
	// just leaves. Calls waiting here are outside the worker's fair
	// queue, so both hand their slots out fairly across tenants, weighted
	// (slots.go): psem by the Prefill request's tenant, sem by the tenant
	// the call's context names (handoff.WithCaller; a Reserve's own).
	sem  *fairSlots
	psem *fairSlots
	// cancelTimeUp, set by tests before any call, runs when a given-up
	// call's CancelWait is over, before the wait looks once more for the
	// worker's answer or acknowledgement (roundTripCancel).
	cancelTimeUp func()
}

type call struct {
	reply  chan *frame // one reply (non-stream calls)
	stream *tokenStream
	// release gives back the call slot it holds (of sem or psem; nil for
	// a token stream) once it leaves pending: its reply arrived (even
	// after its caller left: the server ran it until then) or the
	// connection ended.
	release func()
	// acked is signalled when the server acknowledges the call's close
	// frame (tCloseAck; Prefill calls only).
	acked chan struct{}
}

// free gives the call's slot back; called once, by whoever removed the
// call from pending.
func (k *call) free() {
	if k.release != nil {
		k.release()
	}
}

// Dial connects and authenticates (I12). A server that cannot prove it
// knows the secret gets nothing but the Hello.
func Dial(ctx context.Context, addr string, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	dial := cfg.DialContext
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, transportErr(err)
	}
	return NewClient(nc, cfg)
}

// NewClient runs the handshake on an established connection.
func NewClient(nc net.Conn, cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		nc.Close()
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	tuneSocket(nc, cfg.AckTimeout)
	if !cfg.Encrypt && !Loopback(nc.RemoteAddr()) {
		cfg.Encrypt = true // off the host, every frame is encrypted (I15)
	}
	c := &conn{nc: nc, cfg: cfg, fr: framer{maxFrame: cfg.MaxFrame, isClient: true}}
	if err := c.clientHandshake(); err != nil {
		nc.Close()
		return nil, err
	}
	n := c.calls
	if cfg.overBound > 0 {
		n = cfg.overBound // tests: a peer that does not keep to the bound
	}
	cl := &Client{c: c, pending: map[uint32]*call{}, done: make(chan struct{}),
		sem: newFairSlots(n), psem: newFairSlots(n)}
	go cl.readLoop()
	go c.heartbeat(cl.done)
	return cl, nil
}

// Close closes the connection; pending calls fail with ErrTransport.
func (cl *Client) Close() error {
	err := cl.c.nc.Close()
	<-cl.done
	return err
}

func (cl *Client) readLoop() {
	defer close(cl.done)
	for {
		f, err := cl.c.read()
		if err != nil {
			cl.fail(err)
			return
		}
		if f.stream == 0 {
			// Connection-level: the server reports why it is closing.
			if f.typ == tError {
				cl.fail(decError(f.payload))
			} else {
				cl.fail(protoErr("unexpected connection-level frame type %d", f.typ))
			}
			return
		}
		if f.typ == tCloseAck {
			// Not the call's reply: it stays pending.
			cl.mu.Lock()
			k := cl.pending[f.stream]
			cl.mu.Unlock()
			if k != nil && k.acked != nil {
				select {
				case k.acked <- struct{}{}:
				default:
				}
			}
			continue
		}
		cl.mu.Lock()
		k := cl.pending[f.stream]
		if k != nil && k.stream == nil {
			delete(cl.pending, f.stream) // streams unregister on their terminal item or Close
		}
		cl.mu.Unlock()
		if k == nil {
			continue // a reply to a call whose ctx ended: dropped
		}
		if k.stream != nil {
			k.stream.deliver(f)
			continue
		}
		// The server gave the slot back before it sent this reply
		// (server.go), so the call this frees is never one too many there.
		k.free()
		k.reply <- f
	}
}

func (cl *Client) fail(err error) {
	if d := cl.c.deadErr(); d != nil {
		err = d // the heartbeat watchdog closed it: say why
	} else if isClosed(err) || err == io.EOF {
		err = handoff.ErrTransport.With("connection closed")
	} else if errors.Is(err, errCutShort) {
		err = handoff.ErrTransport.With("%v", err) // the link broke mid-frame (errCutShort)
	}
	err = transportErr(err)
	cl.c.nc.Close()
	cl.mu.Lock()
	if cl.err == nil {
		cl.err = err
	}
	ps := cl.pending
	cl.pending = map[uint32]*call{}
	cl.mu.Unlock()
	for _, k := range ps {
		if k.stream != nil {
			k.stream.deliverErr(err)
		} else {
			k.free()
			close(k.reply)
		}
	}
}

// Encrypt reports whether the connection's frames are encrypted (asked by
// either side, or forced off loopback).
func (cl *Client) Encrypt() bool { return cl.c.fr.encrypted() }

// Err reports why the connection died, nil while it is up.
func (cl *Client) Err() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.err
}

func (cl *Client) register(k *call) (uint32, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.err != nil {
		return 0, cl.err
	}
	// Call ids wrap after 2^32 calls on one connection: an id still
	// pending (a token stream open since) is skipped, never reused, or
	// its frames would answer the new call, another tenant's perhaps.
	// Pending calls are bounded (MaxInflight, MaxStreams), so a free id
	// is always near.
	for {
		cl.next++
		if _, busy := cl.pending[cl.next]; cl.next != 0 && !busy {
			break
		}
	}
	cl.pending[cl.next] = k
	return cl.next, nil
}

// unregister removes the call id from pending and gives its slot back,
// if it is still there (the reader or the connection's end may have
// removed it first).
func (cl *Client) unregister(id uint32) {
	cl.mu.Lock()
	k := cl.pending[id]
	delete(cl.pending, id)
	cl.mu.Unlock()
	if k != nil {
		k.free()
	}
}

// start registers a call holding a slot and sends its request: a slot of
// sem taken for the tenant ctx names (handoff.CallerOf), or, for a Prefill
// call (prefill), one of psem taken for tenant (at the weight ctx names
// for it, else 1). The call is not sent when ctx ends while it waits for
// a slot (slotError says so) or when its frame is refused before any
// byte is written.
func (cl *Client) start(ctx context.Context, prefill bool, tenant string, typ byte, parts [][]byte, isData []bool) (*call, uint32, error) {
	var err error
	k := &call{reply: make(chan *frame, 1)}
	sem := cl.sem
	t, weight := handoff.CallerOf(ctx)
	if prefill {
		sem = cl.psem
		if t != tenant {
			weight = 1
		}
		k.acked = make(chan struct{}, 1)
	} else {
		tenant = t
	}
	err = sem.acquire(ctx, cl.done, tenant, weight, cl.Err)
	k.release = func() { sem.release(tenant) }
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, &slotError{ctx.Err()}
		}
		return nil, 0, err
	}
	id, err := cl.register(k)
	if err != nil {
		k.free()
		return nil, 0, err
	}
	if err := cl.c.sendData(typ, id, parts, isData); err != nil {
		cl.unregister(id)
		// A frame too big is refused before any byte is sent; anything else
		// leaves the stream in an unknown state, so the connection goes.
		if cause, ok := notSent(err); ok {
			return nil, 0, cause
		}
		cl.fail(err)
		return nil, 0, transportErr(err)
	}
	return k, id, nil
}

// slotError: the caller gave a call up while it waited for a slot, before
// any byte of it was sent.
type slotError struct{ err error }

func (e *slotError) Error() string { return e.err.Error() }

// roundTrip sends one request and waits for its reply frame.
func (cl *Client) roundTrip(ctx context.Context, typ byte, want byte, parts ...[]byte) (*frame, error) {
	return cl.roundTripData(ctx, typ, want, parts, nil)
}

func (cl *Client) roundTripData(ctx context.Context, typ byte, want byte, parts [][]byte, isData []bool) (*frame, error) {
	k, _, err := cl.start(ctx, false, "", typ, parts, isData)
	if err != nil {
		if se, ok := err.(*slotError); ok {
			return nil, handoff.ErrTransport.With("no call slot free on the connection before the deadline: %v", se.err)
		}
		return nil, err
	}
	select {
	case f, ok := <-k.reply:
		return cl.answer(f, ok, want)
	case <-ctx.Done():
		// The call stays pending, holding its slot, until its reply
		// arrives (dropped then) or the connection ends: the server runs
		// it until then.
		return nil, handoff.ErrTransport.With("no reply before the deadline: %v", ctx.Err())
	}
}

// roundTripCancel is roundTrip for a call the server can stop (Prefill
// of tenant, whose slot it takes fairly among tenants: psem):
// when ctx ends first, the server is told to stop the call (a close
// frame on its id) and the reply is still waited for, so the caller
// learns how the call really ended and that the server is done with it
// (a prefill worker then no longer computes the prompt), but for a
// bounded time whatever the peer does. The worker acknowledges the close
// at once (tCloseAck, read by its reader whatever it computes) and
// answers at its next step boundary. With no acknowledgement within
// Config.CancelWait (of time this process ran: a stall of its own does
// not count, the acknowledgement may be waiting unread in the socket)
// the worker is not reading: gone (a half-open connection, with no
// heartbeat to notice it: --peer-timeout 0) or stuck, and so is every
// call on the connection. The connection is then closed
// (every call on it fails with ErrTransport, the Redialer dials afresh).
// Acknowledged, the worker is alive and the connection stays; its answer
// is waited for CancelWait more (a step that runs long), then the caller
// leaves with ErrTransport and the call keeps its slot until the answer
// arrives (the worker holds its own until then too). Either way the
// outcome is unknown to the caller, and what the prompt may still write
// is fenced on the decode side by the abort the caller sends and the
// reservation's lease (I6), as for any failed connection. A call given up
// while it waits for a slot was never sent: it ends at once with
// ErrAborted.
func (cl *Client) roundTripCancel(ctx context.Context, tenant string, typ byte, want byte, payload []byte) (*frame, error) {
	k, id, err := cl.start(ctx, true, tenant, typ, [][]byte{payload}, nil)
	if err != nil {
		if _, ok := err.(*slotError); ok {
			return nil, handoff.ErrAborted.With("given up before it was sent: the connection carried %d prompts already", cl.psem.limit())
		}
		return nil, err
	}
	var f *frame
	var ok bool
	select {
	case f, ok = <-k.reply:
	case <-ctx.Done():
		// CancelWait counts from here, the close's own send included: a
		// peer that stopped reading fills the socket, and the send (or
		// another frame's, ahead of it) then blocks for WriteTimeout.
		// Sent on its own goroutine, which closing the connection ends.
		//
		// It counts watched time only, as the heartbeat does (watch): a
		// stall of this process (a VM pause, a SIGSTOP, a starved CPU
		// share) may leave the worker's acknowledgement or answer unread
		// in the socket, and this wait may wake before the reader that
		// would read it. Only two ticks of each late wake's gap count, so
		// the router's own stall never closes a live worker's connection,
		// which other tenants' calls share; a worker that really answers
		// nothing is still given up after CancelWait of watched time
		// (TestCancelWaitSurvivesOwnStall).
		wait := cl.c.cfg.CancelWait
		start := time.Now()
		w := newWatch(wait, start)
		t := time.NewTicker(max(wait/8, time.Millisecond))
		defer t.Stop()
		sent := make(chan error, 1)
		go func() { sent <- cl.c.send(tStreamClose, id) }()
		acked, gotAck := k.acked, false
		ack := func() {
			// Alive and stopping the prompt: its step may run long.
			acked, gotAck = nil, true
			start = time.Now()
			w = newWatch(wait, start)
		}
		for waiting := true; waiting; {
			select {
			case f, ok = <-k.reply:
				waiting = false
			case <-acked:
				ack()
			case err := <-sent:
				sent = nil
				if _, unsent := notSent(err); err != nil && !unsent {
					// The connection failed (its frames may be cut):
					// every call on it ends, this one's reply included.
					cl.fail(err)
				}
			case <-t.C:
				// The wall time of this wake, not the tick's.
				if _, over := w.wake(time.Now(), start, false); !over {
					continue
				}
				if cl.cancelTimeUp != nil {
					cl.cancelTimeUp()
				}
				// The answer or the acknowledgement may have arrived
				// with this tick, and select picks at random among
				// ready cases: what the worker said wins over the
				// deadline, the answer first (an acknowledgement starts
				// the wait for the answer, and the connection stays).
				select {
				case f, ok = <-k.reply:
					waiting = false
					continue
				default:
				}
				select {
				case <-acked:
					ack()
					continue
				default:
				}
				if gotAck {
					return nil, handoff.ErrTransport.With("the worker at %s is stopping the given-up call but did not answer within %v of time the router ran", cl.c.nc.RemoteAddr(), cl.c.cfg.CancelWait)
				}
				err := handoff.ErrTransport.With("the worker at %s did not confirm giving the call up within %v of time the router ran: connection closed", cl.c.nc.RemoteAddr(), cl.c.cfg.CancelWait)
				cl.fail(err)
				return nil, err
			}
		}
	}
	return cl.answer(f, ok, want)
}

// answer reads a call's reply: the connection's end (!ok), the server's
// error, or the frame of the type the call wants (any other type is a
// protocol violation that fails the connection).
func (cl *Client) answer(f *frame, ok bool, want byte) (*frame, error) {
	if !ok {
		return nil, cl.Err()
	}
	if f.typ == tError {
		return nil, decError(f.payload)
	}
	if f.typ != want {
		err := protoErr("reply frame type %d, want %d", f.typ, want)
		cl.fail(err)
		return nil, err
	}
	return f, nil
}

// A message the wire cannot carry (a field out of range) fails its call
// before a byte is sent (bad_message), and a reply whose body does not
// decode inside intact framing fails only its call: the connection, shared
// by every other call, stays up.

func (cl *Client) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	b, err := encReserve(r)
	if err != nil {
		return nil, err
	}
	// Its call slot is its tenant's, at the weight it carries.
	ctx = handoff.WithCaller(ctx, r.Tenant, r.Weight)
	f, err := cl.roundTrip(ctx, tReserve, tReservation, b)
	if err != nil {
		return nil, err
	}
	res, err := decReservation(f.payload)
	if err != nil {
		// The pages were reserved but cannot be used: give them back now.
		_ = cl.Abort(ctx, &handoff.Abort{Handoff: r.Handoff, Reason: "the reservation reply does not decode"})
		return nil, err
	}
	return res, nil
}

func (cl *Client) Write(ctx context.Context, ws []handoff.PageWrite) error {
	parts, isData, err := encWrites(ws)
	if err != nil {
		return err
	}
	_, err = cl.roundTripData(ctx, tWrite, tOK, parts, isData)
	return err
}

func (cl *Client) Commit(ctx context.Context, c *handoff.Commit) error {
	b, err := encCommit(c)
	if err != nil {
		return err
	}
	_, err = cl.roundTrip(ctx, tCommit, tOK, b)
	return err
}

func (cl *Client) Abort(ctx context.Context, a *handoff.Abort) error {
	b, err := encAbort(a)
	if err != nil {
		return err
	}
	_, err = cl.roundTrip(ctx, tAbort, tOK, b)
	return err
}

func (cl *Client) Drained(ctx context.Context, id kv.ID) error {
	_, err := cl.roundTrip(ctx, tDrained, tOK, encID(id))
	return err
}

func (cl *Client) Cancel(ctx context.Context, id kv.ID) error {
	_, err := cl.roundTrip(ctx, tCancel, tOK, encID(id))
	return err
}

// Load asks the worker for its load report (handoff.Loader).
func (cl *Client) Load(ctx context.Context) (*handoff.Load, error) {
	f, err := cl.roundTrip(ctx, tLoad, tLoadRes)
	if err != nil {
		return nil, err
	}
	return decLoad(f.payload)
}

func (cl *Client) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	b, err := encPrefill(r)
	if err != nil {
		return nil, err
	}
	f, err := cl.roundTripCancel(ctx, r.Tenant, tPrefill, tPrefillRes, b)
	if err != nil {
		return nil, err
	}
	res, err := decPrefillRes(f.payload)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Stream opens a token stream. The server answers the open with OK (or an
// error), then sends Token frames on the same call id.
func (cl *Client) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	b, err := encStreamOpen(id, p)
	if err != nil {
		return nil, err
	}
	ts := newTokenStream(cl)
	k := &call{stream: ts}
	sid, err := cl.register(k)
	if err != nil {
		return nil, err
	}
	ts.id = sid
	if err := cl.c.send(tStreamOpen, sid, b); err != nil {
		cl.unregister(sid)
		if cause, ok := notSent(err); ok {
			return nil, cause
		}
		cl.fail(err)
		return nil, transportErr(err)
	}
	// The first frame is the open's answer: OK or an error.
	f, err := ts.next(ctx)
	if err != nil {
		cl.unregister(sid)
		return nil, err
	}
	if f.typ == tError {
		cl.unregister(sid)
		return nil, decError(f.payload)
	}
	if f.typ != tOK {
		err := protoErr("stream open answered with frame type %d", f.typ)
		cl.fail(err)
		return nil, err
	}
	ts.ctx = ctx
	return ts, nil
}

// tokenStream queues a stream's frames without bound so one slow reader
// never stalls the connection's other calls (tokens are a few bytes each).
type tokenStream struct {
	cl     *Client
	id     uint32
	ctx    context.Context
	mu     sync.Mutex
	q      []*frame
	err    error
	signal chan struct{}
	ended  bool
}

func newTokenStream(cl *Client) *tokenStream {
	return &tokenStream{cl: cl, signal: make(chan struct{}, 1)}
}

func (ts *tokenStream) deliver(f *frame) {
	ts.mu.Lock()
	ts.q = append(ts.q, f)
	ts.mu.Unlock()
	select {
	case ts.signal <- struct{}{}:
	default:
	}
}

func (ts *tokenStream) deliverErr(err error) {
	ts.mu.Lock()
	if ts.err == nil {
		ts.err = err
	}
	ts.mu.Unlock()
	select {
	case ts.signal <- struct{}{}:
	default:
	}
}

func (ts *tokenStream) next(ctx context.Context) (*frame, error) {
	for {
		ts.mu.Lock()
		if len(ts.q) > 0 {
			f := ts.q[0]
			ts.q = ts.q[1:]
			ts.mu.Unlock()
			return f, nil
		}
		err := ts.err
		ts.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-ts.signal:
		case <-ctx.Done():
			return nil, handoff.ErrTransport.With("stream: %v", ctx.Err())
		}
	}
}

// Recv returns the next token; io.EOF after the terminal one.
func (ts *tokenStream) Recv() (handoff.Token, error) {
	if ts.ended {
		return handoff.Token{}, io.EOF
	}
	f, err := ts.next(ts.ctx)
	if err != nil {
		ts.ended = true
		return handoff.Token{Err: err}, nil
	}
	switch f.typ {
	case tToken:
	case tError:
		// The server ended this stream with an error of its own (a token
		// it could not send): terminal for this stream only.
		ts.ended = true
		ts.cl.unregister(ts.id)
		return handoff.Token{Err: decError(f.payload)}, nil
	default:
		err := protoErr("stream frame type %d", f.typ)
		ts.cl.fail(err)
		ts.ended = true
		return handoff.Token{Err: err}, nil
	}
	t, err := decToken(f.payload)
	if err != nil {
		// Intact framing, a body that does not decode: this stream ends
		// with the error (and the server is told to stop sending it);
		// the connection and its other calls carry on.
		_ = ts.Close()
		return handoff.Token{Err: err}, nil
	}
	if t.Done || t.Err != nil {
		ts.ended = true
		ts.cl.unregister(ts.id)
	}
	return t, nil
}

// Close stops delivery; the server stops forwarding. It does not cancel decoding.
func (ts *tokenStream) Close() error {
	ts.cl.unregister(ts.id)
	if !ts.ended {
		ts.ended = true
		_ = ts.cl.c.send(tStreamClose, ts.id)
	}
	return nil
}

var (
	_ handoff.Decode  = (*Client)(nil)
	_ handoff.Prefill = (*Client)(nil)
)
