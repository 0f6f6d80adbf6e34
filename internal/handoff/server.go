package handoff

import (
	"context"
	"sync"
	"time"

	"sluice/internal/kv"
)

// Decoder is what a decode worker plugs into a Server: it receives
// accepted handoffs and serves their token streams.
type Decoder interface {
	// Accept hands over a verified handoff: its pages are now the decoder's
	// to decode from and, when the request ends, to release. Called once per
	// handoff, without the Server's lock held, before Commit returns.
	Accept(a *Accepted)
	// Ended reports a handoff that failed or was aborted, so a stream opened
	// for it ends with err. Before Accept nothing else is to be done (the
	// Receiver has released or quarantined the pages); after Accept it means
	// an Abort arrived: stop decoding and release the pages the normal way.
	Ended(id kv.ID, err error)
	// Stream and Cancel implement Decode.Stream and Decode.Cancel.
	Stream(ctx context.Context, id kv.ID, p StreamParams) (TokenStream, error)
	Cancel(ctx context.Context, id kv.ID) error
}

// Server makes a Receiver a concurrent Decode service: one lock around the
// pure core, the wall clock (or a fake one) at the edge.
type Server struct {
	mu  sync.Mutex
	r   *Receiver
	now func() time.Time
	dec Decoder
}

// NewServer wraps r. now defaults to time.Now; dec may be nil when only the
// transfer is exercised (Stream and Cancel then refuse).
func NewServer(r *Receiver, now func() time.Time, dec Decoder) *Server {
	if now == nil {
		now = time.Now
	}
	return &Server{r: r, now: now, dec: dec}
}

// Stats returns the core's counters.
func (s *Server) Stats() ReceiverStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Stats()
}

// Tick advances the core's time (quarantine leases, tombstones). A decode
// worker calls it periodically.
func (s *Server) Tick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r.Tick(s.now())
}

func (s *Server) Reserve(ctx context.Context, m *Reserve) (*Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Reserve(s.now(), m)
}

func (s *Server) Write(ctx context.Context, ws []PageWrite) error {
	if len(ws) == 0 {
		return nil
	}
	id := ws[0].Handoff
	for i := range ws {
		if ws[i].Handoff != id {
			return ErrProtocol.With("one Write call carries writes of two handoffs")
		}
	}
	s.mu.Lock()
	wasLive := s.r.isLive(id)
	cw, err := s.r.BeginWrite(s.now(), ws)
	if err == nil && cw.Pages() > 0 {
		// Sealed pages are opened into their claimed pages without the
		// lock, on the process's openers (all cores but one): other
		// handoffs' calls go on meanwhile.
		s.mu.Unlock()
		cw.Open()
		s.mu.Lock()
		wasLive = s.r.isLive(id) // an Abort meanwhile reported the end itself
	}
	if err == nil {
		err = s.r.EndWrite(s.now(), cw)
	}
	ended := s.r.Err(id)
	s.mu.Unlock()
	// Ended is reported once, by the call that ended the handoff; late
	// writes to an ended handoff do not report it again.
	if err != nil && wasLive && ended != nil && s.dec != nil {
		s.dec.Ended(id, ended)
	}
	return err
}

func (s *Server) Commit(ctx context.Context, c *Commit) error {
	s.mu.Lock()
	wasLive := s.r.isLive(c.Handoff)
	a, err := s.r.Commit(s.now(), c)
	ended := s.r.Err(c.Handoff)
	s.mu.Unlock()
	if s.dec != nil {
		if err == nil {
			s.dec.Accept(a)
		} else if wasLive && ended != nil {
			s.dec.Ended(c.Handoff, ended)
		}
	}
	return err
}

func (s *Server) Abort(ctx context.Context, a *Abort) error {
	s.mu.Lock()
	accepted := s.r.accepted(a.Handoff)
	live := s.r.Abort(s.now(), a.Handoff, a.Reason)
	ended := s.r.Err(a.Handoff)
	s.mu.Unlock()
	if s.dec != nil {
		if live {
			s.dec.Ended(a.Handoff, ended)
		} else if accepted {
			s.dec.Ended(a.Handoff, ErrAborted.With("%s", a.Reason))
		}
	}
	return nil
}

func (s *Server) Drained(ctx context.Context, id kv.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Drained(s.now(), id)
}

func (s *Server) Stream(ctx context.Context, id kv.ID, p StreamParams) (TokenStream, error) {
	if s.dec == nil {
		return nil, ErrState.With("this decode service has no decoder")
	}
	return s.dec.Stream(ctx, id, p)
}

func (s *Server) Cancel(ctx context.Context, id kv.ID) error {
	if s.dec == nil {
		return ErrState.With("this decode service has no decoder")
	}
	return s.dec.Cancel(ctx, id)
}

var _ Decode = (*Server)(nil)
