package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Server serves handoff.Decode and/or handoff.Prefill to authenticated
// peers. A call is answered only once the service method returned, so the
// client's nil error carries the method's full meaning (applied, verified).
type Server struct {
	cfg     Config
	decode  handoff.Decode
	prefill handoff.Prefill

	mu     sync.Mutex
	ls     map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// owners is, for each handoff a connection would abort when it ends
	// (sconn.reserved), that connection: the one that reserved it or,
	// later, the one that streams it (takeOver).
	omu    sync.Mutex
	owners map[kv.ID]*sconn

	// OnError, when set, is told about every connection that ended in an
	// error (failed handshake, bad frame), for logs and metrics.
	OnError func(remote net.Addr, err error)

	// slotWaits counts the times a connection's reader stopped for a call
	// slot (a client past the bound); afterReply, set by tests before
	// Serve, runs right after a call's reply is sent.
	slotWaits  atomic.Int64
	afterReply func()
}

// NewServer serves d and p (either may be nil: its calls are refused).
func NewServer(cfg Config, d handoff.Decode, p handoff.Prefill) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, decode: d, prefill: p, ls: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}, nil
}

// Serve accepts connections on l until Close. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return net.ErrClosed
	}
	s.ls[l] = struct{}{}
	s.mu.Unlock()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			nc.Close()
			return nil
		}
		s.conns[nc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(nc, s.cfg.Encrypt || !Loopback(l.Addr()))
	}
}

// Close stops listening, closes every connection and waits for the
// in-flight calls to return.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for l := range s.ls {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

type sconn struct {
	*conn
	s   *Server
	ctx context.Context
	sem chan struct{} // calls in flight (MaxInflight)
	// psem bounds Prefill calls apart (MaxInflight): a prompt's call
	// lasts its queue, compute and push, so short calls (Load, and the
	// decode side's) never wait behind prompts, and with no more
	// prompts in flight than the bound (a router's default
	// --max-concurrency) the reader never stops: the router's close
	// frame giving a prompt up is read at once.
	psem    chan struct{}
	ssem    chan struct{} // open token streams (MaxStreams)
	mu      sync.Mutex
	streams map[uint32]context.CancelFunc
	// prefills: the live Prefill calls whose close frame is not yet
	// acknowledged (tCloseAck, once per call).
	prefills map[uint32]struct{}
	// reserved: handoffs this connection reserved (or streams) whose
	// stream has not ended; aborted when the connection ends (see
	// serveConn). Guarded by s.omu: another connection takes a handoff
	// over when it streams it (takeOver).
	reserved map[kv.ID]struct{}
	calls    sync.WaitGroup
	page     []byte // streamWrites' page buffer; the reading goroutine's alone
}

// serveConn serves one connection; mac turns frame encryption on for it
// whatever the client asks (a listener off the loopback interface).
func (s *Server) serveConn(nc net.Conn, mac bool) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, nc)
		s.mu.Unlock()
		nc.Close()
	}()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	tuneSocket(nc, s.cfg.AckTimeout)
	cfg := s.cfg
	cfg.Encrypt = mac
	c := &conn{nc: nc, cfg: cfg, fr: framer{maxFrame: s.cfg.MaxFrame, deferOpen: true}}
	if err := c.serverHandshake(); err != nil {
		var he *handoff.Error
		if errors.As(err, &he) && (he.Code == handoff.ErrProtocol.Code || he.Code == handoff.ErrVersion.Code) {
			_ = c.send(tError, 0, encError(err))
		}
		s.report(nc, err)
		return
	}
	stopBeat := make(chan struct{})
	defer close(stopBeat)
	go c.heartbeat(stopBeat)
	ctx, cancel := context.WithCancel(context.Background())
	sc := &sconn{conn: c, s: s, ctx: ctx, sem: make(chan struct{}, s.cfg.MaxInflight), psem: make(chan struct{}, s.cfg.MaxInflight),
		ssem: make(chan struct{}, s.cfg.MaxStreams), streams: map[uint32]context.CancelFunc{}, prefills: map[uint32]struct{}{},
		reserved: map[kv.ID]struct{}{}}
	defer func() {
		cancel()
		sc.calls.Wait()
		// The router that reserved these handoffs is gone from this
		// connection (it closed, died, or was declared dead): its abort,
		// if it sends one, may never arrive, and a handoff it cannot
		// stream on this connection is one it has given up (it retries or
		// migrates the request elsewhere). Abort them here, so their pages
		// are not reserved forever. Abort keeps the page rules: pages a
		// one-sided writer may still be writing stay quarantined until its
		// drain or the lease (I6); nothing is released early.
		// A handoff another connection streams now is that one's
		// (takeOver), not this one's.
		if d := s.decode; d != nil {
			s.omu.Lock()
			ids := make([]kv.ID, 0, len(sc.reserved))
			for id := range sc.reserved {
				ids = append(ids, id)
				delete(s.owners, id)
			}
			clear(sc.reserved)
			s.omu.Unlock()
			for _, id := range ids {
				_ = d.Abort(context.Background(), &handoff.Abort{Handoff: id, Reason: "the connection that reserved it ended"})
			}
		}
	}()
	for {
		f, err := sc.next()
		if err != nil {
			if d := c.deadErr(); d != nil {
				s.report(nc, d)
				return
			}
			if err != io.EOF && !isClosed(err) {
				// Tell the peer why, then close: after a bad frame nothing
				// on this connection can be trusted to be aligned.
				var he *handoff.Error
				if errors.As(err, &he) {
					_ = c.send(tError, 0, encError(err))
				}
				s.report(nc, err)
			}
			return
		}
		if f == nil {
			continue // a Write frame streamWrites read and answered
		}
		if f.stream == 0 {
			err := protoErr("request frame type %d without a call id", f.typ)
			_ = c.send(tError, 0, encError(err))
			s.report(nc, err)
			return
		}
		if f.typ == tStreamClose {
			// The client stops a token stream, or gives up a Prefill
			// call (the worker stops the prompt).
			sc.mu.Lock()
			if cancel := sc.streams[f.stream]; cancel != nil {
				cancel()
			}
			_, ack := sc.prefills[f.stream]
			delete(sc.prefills, f.stream)
			sc.mu.Unlock()
			if ack {
				// Read at once, whatever the worker computes: the router
				// learns this worker reads and stops the prompt at its
				// next step boundary (its answer follows then). Once
				// per call, so closes cannot make the reader write
				// more than the calls did.
				_ = c.send(tCloseAck, f.stream)
			}
			continue
		}
		// Token streams live as long as a generation: they get their own
		// bound, refused rather than waited for, so open streams can never
		// stall the short calls (a Cancel that would end one of them).
		sem := sc.sem
		if f.typ == tStreamOpen {
			sem = sc.ssem
			select {
			case sem <- struct{}{}:
			default:
				_ = c.send(tError, f.stream, encError(handoff.ErrRefused.With("more than %d open streams on one connection", cap(sem))))
				continue
			}
		} else {
			if f.typ == tPrefill {
				sem = sc.psem
			}
			select {
			case sem <- struct{}{}:
			default:
				// MaxInflight calls run: this one waits for a slot, and
				// nothing more is read meanwhile (the bound on a
				// connection's memory). The peer's bytes wait in the
				// socket, so its silence is not measured while the
				// reader holds off (heartbeat.go): a full connection,
				// which every tenant's calls share, is never declared
				// dead for the reader's own wait.
				s.slotWaits.Add(1)
				c.beat.holdOff()
				select {
				case sem <- struct{}{}:
					c.beat.resume()
				case <-ctx.Done():
					c.beat.resume()
					return
				}
			}
		}
		// A Prefill call can be stopped by the router (Client.Prefill
		// sends a close frame on its id when it gives the prompt up):
		// its context is registered here, before the next frame is
		// read, so a close right behind the call always finds it.
		cctx, stop := ctx, func() {}
		if f.typ == tPrefill {
			var cancel context.CancelFunc
			cctx, cancel = context.WithCancel(ctx)
			id := f.stream
			sc.mu.Lock()
			sc.streams[id] = cancel
			sc.prefills[id] = struct{}{}
			sc.mu.Unlock()
			stop = func() {
				sc.mu.Lock()
				delete(sc.streams, id)
				delete(sc.prefills, id)
				sc.mu.Unlock()
				cancel()
			}
		}
		// A call's slot is given back before its reply is sent (handle):
		// the client takes the slot again for its next call only once the
		// reply arrived (Client.sem), so that call always finds one here.
		// A token stream keeps its slot (ssem) to its end.
		var once sync.Once
		release := func() { once.Do(func() { <-sem }) }
		free := release
		if f.typ == tStreamOpen {
			free = func() {}
		}
		sc.calls.Add(1)
		go func() {
			defer sc.calls.Done()
			defer release()
			defer stop()
			if err := sc.handle(cctx, f, free); err != nil {
				_ = c.send(tError, 0, encError(err))
				s.report(nc, err)
				nc.Close()
			}
		}()
	}
}

func (s *Server) report(nc net.Conn, err error) {
	if s.OnError != nil {
		s.OnError(nc.RemoteAddr(), err)
	}
}

// handle runs one call; cctx is a Prefill call's context (the
// connection's, ended early by the router's close frame); free gives the
// call's slot back, right before its reply is sent. A returned error closes the connection (a frame
// that is not a request, or a reply the connection failed to carry).
// Everything that concerns this call alone is replied on the call, and the
// connection, which other tenants' calls share, stays up: service errors, a
// body that does not decode inside intact framing, and a reply that cannot
// be encoded or is refused before sending (all bad_message).
func (sc *sconn) handle(cctx context.Context, f *frame, free func()) error {
	after := func() {
		if sc.s.afterReply != nil {
			sc.s.afterReply()
		}
	}
	replyErr := func(err error) error {
		free()
		defer after()
		return sc.send(tError, f.stream, encError(err))
	}
	reply := func(typ byte, payload []byte) error {
		free()
		defer after()
		err := sc.send(typ, f.stream, payload)
		if cause, ok := notSent(err); ok {
			return replyErr(handoff.ErrBadMessage.With("the reply cannot be sent: %v", cause))
		}
		return err
	}
	ok := func(err error) error {
		if err != nil {
			return replyErr(err)
		}
		return reply(tOK, nil)
	}
	d, p := sc.s.decode, sc.s.prefill
	noDecode := handoff.ErrState.With("this worker does not serve the decode side")
	switch f.typ {
	case tReserve, tWrite, tCommit, tAbort, tDrained, tCancel, tStreamOpen:
		if d == nil {
			return replyErr(noDecode)
		}
	case tPrefill:
		if p == nil {
			return replyErr(handoff.ErrState.With("this worker does not serve the prefill side"))
		}
	case tLoad:
		if len(f.payload) != 0 {
			return protoErr("load request with a payload")
		}
		var l handoff.Loader
		if dl, ok := d.(handoff.Loader); ok {
			l = dl
		} else if pl, ok := p.(handoff.Loader); ok {
			l = pl
		}
		if l == nil {
			return replyErr(handoff.ErrState.With("this worker does not report its load"))
		}
		m, err := l.Load(sc.ctx)
		if err != nil {
			return replyErr(err)
		}
		b, err := encLoad(m)
		if err != nil {
			return replyErr(err)
		}
		return reply(tLoadRes, b)
	default:
		return protoErr("frame type %d is not a request", f.typ)
	}
	ctx := sc.ctx
	switch f.typ {
	case tReserve:
		m, err := decReserve(f.payload)
		if err != nil {
			return replyErr(err)
		}
		res, err := d.Reserve(ctx, m)
		if err != nil {
			return replyErr(err)
		}
		sc.claim(m.Handoff)
		var e enc
		encReservation(&e, res)
		if e.err != nil {
			// The pages are reserved but the client will never learn
			// them: release them now rather than leave them to the lease.
			_ = d.Abort(ctx, &handoff.Abort{Handoff: m.Handoff, Reason: "the reservation cannot be encoded"})
			return replyErr(e.err)
		}
		return reply(tReservation, e.b)
	case tWrite:
		if f.sw != nil {
			return sc.sealedWrites(ctx, f, d, ok)
		}
		if f.open != nil {
			// Deferred from the reader (framer.deferOpen): nothing of the
			// frame is used before its tag verifies (I15); a frame that
			// does not open closes the connection.
			if err := f.open(); err != nil {
				return err
			}
		}
		ws, err := decWritesChecked(f)
		if errors.Is(err, handoff.ErrProtocol) {
			return err // the framing itself is damaged
		}
		werr := err
		if werr == nil {
			werr = d.Write(ctx, ws)
		}
		if f.pooled {
			// The decode side copied the pages into its pool before Write
			// returned; nothing aliases the payload any more.
			putBuf(f.payload)
		}
		return ok(werr)
	case tCommit:
		m, err := decCommit(f.payload)
		if err != nil {
			return replyErr(err)
		}
		return ok(d.Commit(ctx, m))
	case tAbort:
		m, err := decAbort(f.payload)
		if err != nil {
			return replyErr(err)
		}
		sc.s.forget(m.Handoff)
		return ok(d.Abort(ctx, m))
	case tDrained:
		id, err := decID(f.payload)
		if err != nil {
			return replyErr(err)
		}
		return ok(d.Drained(ctx, id))
	case tCancel:
		id, err := decID(f.payload)
		if err != nil {
			return replyErr(err)
		}
		return ok(d.Cancel(ctx, id))
	case tPrefill:
		m, err := decPrefill(f.payload)
		if err != nil {
			return replyErr(err)
		}
		res, err := p.Prefill(cctx, m)
		if err != nil {
			return replyErr(err)
		}
		b, err := encPrefillRes(res)
		if err != nil {
			return replyErr(err)
		}
		return reply(tPrefillRes, b)
	case tStreamOpen:
		id, params, err := decStreamOpen(f.payload)
		if err != nil {
			return replyErr(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		sc.mu.Lock()
		sc.streams[f.stream] = cancel
		sc.mu.Unlock()
		defer func() {
			sc.mu.Lock()
			delete(sc.streams, f.stream)
			sc.mu.Unlock()
		}()
		ts, err := d.Stream(sctx, id, params)
		if err != nil {
			return replyErr(err)
		}
		defer ts.Close()
		sc.takeOver(id)
		if err := reply(tOK, nil); err != nil {
			return nil // connection gone
		}
		for {
			t, err := ts.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				t = handoff.Token{Err: err}
			}
			if sctx.Err() != nil {
				return nil // the client closed the stream
			}
			b, err := encToken(t)
			if err != nil {
				// A token the wire cannot carry ends this stream, and
				// only it, with the reason.
				t = handoff.Token{Err: err}
				b, _ = encToken(t)
			}
			if err := reply(tToken, b); err != nil {
				return nil
			}
			if t.Done || t.Err != nil {
				// Ended and told: the handoff is no longer this
				// connection's to abort.
				sc.s.forget(id)
				return nil
			}
		}
	}
	return nil
}

// claim makes id, which this connection just reserved, one it aborts
// when it ends.
func (sc *sconn) claim(id kv.ID) {
	s := sc.s
	s.omu.Lock()
	if prev := s.owners[id]; prev != nil && prev != sc {
		delete(prev.reserved, id)
	}
	if s.owners == nil {
		s.owners = map[kv.ID]*sconn{}
	}
	s.owners[id] = sc
	sc.reserved[id] = struct{}{}
	s.omu.Unlock()
}

// takeOver moves id, when another connection would abort it on its end,
// to this one, which streams it: the router dialled again between its
// Reserve and its Stream, and the old connection's end, which the server
// may notice only a heartbeat's dead-after later, is not the router
// giving the handoff up.
func (sc *sconn) takeOver(id kv.ID) {
	s := sc.s
	s.omu.Lock()
	if prev := s.owners[id]; prev != nil && prev != sc {
		delete(prev.reserved, id)
		s.owners[id] = sc
		sc.reserved[id] = struct{}{}
	}
	s.omu.Unlock()
}

// forget drops id from the handoffs any connection would abort on its end
// (it was aborted, or its stream ended and was told).
func (s *Server) forget(id kv.ID) {
	s.omu.Lock()
	if c := s.owners[id]; c != nil {
		delete(c.reserved, id)
		delete(s.owners, id)
	}
	s.omu.Unlock()
}
