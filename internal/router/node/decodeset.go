package node

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// DecodeSet is a prefill worker's connections to several decode workers,
// seen as one handoff.Decode: each handoff's writes, commit, abort and
// drain go to the decode worker that holds its reservation, which the
// router names in PrefillRequest.Decode (Routed binds it). A name the
// prefill worker was not configured with is refused: it never dials an
// address it is sent.
type DecodeSet struct {
	byName map[string]handoff.Decode
	only   handoff.Decode // with exactly one worker, the default for ""
	mu     sync.Mutex
	bound  map[kv.ID]handoff.Decode
}

// NewDecodeSet names each decode connection.
func NewDecodeSet(byName map[string]handoff.Decode) *DecodeSet {
	s := &DecodeSet{byName: byName, bound: map[kv.ID]handoff.Decode{}}
	if len(byName) == 1 {
		for _, d := range byName {
			s.only = d
		}
	}
	return s
}

// Add names one more decode connection (discovery: a new worker).
func (s *DecodeSet) Add(name string, d handoff.Decode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byName[name]; !ok {
		s.byName[name] = d
	}
	s.only = nil
	if len(s.byName) == 1 {
		s.only = d
	}
}

// Remove forgets a decode connection; handoffs bound to it keep it until
// they end. It returns the connection for the caller to close.
func (s *DecodeSet) Remove(name string) handoff.Decode {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.byName[name]
	delete(s.byName, name)
	s.only = nil
	if len(s.byName) == 1 {
		for _, x := range s.byName {
			s.only = x
		}
	}
	return d
}

// Check is a prefill worker's readiness: nil while at least one decode
// worker the set holds NOW is reachable. The set follows discovery, so a
// prefill worker whose decode workers at start all left (a pod deleted
// and replaced at a new address) is ready again once a new one answers;
// the connections made at start alone would keep it unready for good.
func (s *DecodeSet) Check(ctx context.Context) error {
	s.mu.Lock()
	names := make([]string, 0, len(s.byName))
	for n := range s.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var peers []Peer
	for _, n := range names {
		if c, ok := s.byName[n].(Checker); ok {
			peers = append(peers, Peer{Role: "decode", Conn: c})
		}
	}
	s.mu.Unlock()
	if len(peers) == 0 {
		return errors.New("the decode worker is not ready (none known)")
	}
	return CheckAnyPeer(ctx, peers)
}

func (s *DecodeSet) bind(id kv.ID, name string) error {
	s.mu.Lock()
	d, ok := s.byName[name]
	if !ok && s.only != nil {
		// One decode worker: it is the only place the pages can go (the
		// router may spell its address differently). A reservation of
		// another worker fails closed there (unknown handoff).
		d, ok = s.only, true
	}
	defer s.mu.Unlock()
	if !ok {
		return handoff.ErrRefused.With("this prefill worker has no decode worker named %q", truncate(name, 64))
	}
	if _, dup := s.bound[id]; dup {
		return handoff.ErrState.With("handoff already in progress on this prefill worker")
	}
	s.bound[id] = d
	return nil
}

func (s *DecodeSet) unbind(id kv.ID) {
	s.mu.Lock()
	delete(s.bound, id)
	s.mu.Unlock()
}

func (s *DecodeSet) to(id kv.ID) (handoff.Decode, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.bound[id]; ok {
		return d, nil
	}
	return nil, handoff.ErrState.With("no decode worker bound to this handoff")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Reserve and Stream are the router's calls, never a prefill worker's.
func (s *DecodeSet) Reserve(context.Context, *handoff.Reserve) (*handoff.Reservation, error) {
	return nil, handoff.ErrState.With("a prefill worker does not reserve")
}

func (s *DecodeSet) Stream(context.Context, kv.ID, handoff.StreamParams) (handoff.TokenStream, error) {
	return nil, handoff.ErrState.With("a prefill worker does not stream")
}

func (s *DecodeSet) Cancel(context.Context, kv.ID) error {
	return handoff.ErrState.With("a prefill worker does not cancel")
}

func (s *DecodeSet) Write(ctx context.Context, w []handoff.PageWrite) error {
	if len(w) == 0 {
		return nil
	}
	d, err := s.to(w[0].Handoff)
	if err != nil {
		return err
	}
	return d.Write(ctx, w)
}

func (s *DecodeSet) Commit(ctx context.Context, c *handoff.Commit) error {
	d, err := s.to(c.Handoff)
	if err != nil {
		return err
	}
	return d.Commit(ctx, c)
}

func (s *DecodeSet) Abort(ctx context.Context, a *handoff.Abort) error {
	d, err := s.to(a.Handoff)
	if err != nil {
		return nil // nothing of this handoff went to any decode worker through us
	}
	return d.Abort(ctx, a)
}

func (s *DecodeSet) Drained(ctx context.Context, id kv.ID) error {
	d, err := s.to(id)
	if err != nil {
		return nil
	}
	return d.Drained(ctx, id)
}

// Routed is a prefill service whose pushes go through set: it binds each
// request's handoff to the decode worker it names for the request's
// duration (the prefill worker's abort and drain happen inside Prefill).
type Routed struct {
	Inner handoff.Prefill
	Set   *DecodeSet
	// Draining, when set and true (SIGTERM), refuses every new prefill and
	// the load report with handoff.ErrDraining, as DrainingDecode does for
	// decode: the router moves the request to another pair at once and
	// stops picking this worker; prefills under way finish.
	Draining *atomic.Bool
}

// Prefill implements handoff.Prefill.
func (r Routed) Prefill(ctx context.Context, req *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	if r.Draining != nil && r.Draining.Load() {
		return nil, handoff.ErrDraining
	}
	if err := r.Set.bind(req.Handoff, req.Decode); err != nil {
		return nil, err
	}
	defer r.Set.unbind(req.Handoff)
	return r.Inner.Prefill(ctx, req)
}

// Load passes the prefill worker's load report on (handoff.Loader).
func (r Routed) Load(ctx context.Context) (*handoff.Load, error) {
	if r.Draining != nil && r.Draining.Load() {
		return nil, handoff.ErrDraining
	}
	l, ok := r.Inner.(handoff.Loader)
	if !ok {
		return nil, handoff.ErrState.With("this worker does not report its load")
	}
	return l.Load(ctx)
}

var (
	_ handoff.Decode = (*DecodeSet)(nil)
	_ handoff.Loader = Routed{}
)
