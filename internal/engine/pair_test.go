package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// twoPairs hands out pair a first and pair b to a retry, and records the
// outcome each pair was told.
type twoPairs struct {
	a, b  Pair
	mu    sync.Mutex
	calls int
	done  map[string][2]error
}

func (p *twoPairs) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	c := p.a
	name := "a"
	if avoid != nil {
		c, name = p.b, "b"
	}
	c.Done = func(perr, derr error) {
		p.mu.Lock()
		p.done[name] = [2]error{perr, derr}
		p.mu.Unlock()
	}
	return &c, nil
}

type failPrefill struct{ err error }

func (f failPrefill) Prefill(context.Context, *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	return nil, f.err
}

type failReserve struct {
	handoff.Decode
	err error
}

func (f failReserve) Reserve(context.Context, *handoff.Reserve) (*handoff.Reservation, error) {
	return nil, f.err
}

// breakAfterFirst passes a stream's first token, then fails it.
type breakAfterFirst struct{ handoff.Decode }

func (b breakAfterFirst) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	ts, err := b.Decode.Stream(ctx, id, p)
	return &brokenStream{TokenStream: ts}, err
}

type brokenStream struct {
	handoff.TokenStream
	n int
}

func (s *brokenStream) Recv() (handoff.Token, error) {
	if s.n++; s.n > 1 {
		return handoff.Token{}, handoff.ErrTransport.With("connection lost")
	}
	return s.TokenStream.Recv()
}

func waitFreePool(t *testing.T, p *kv.Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s := p.Stats(); s.Free != s.Pages; s = p.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("pool not whole: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A request whose first attempt fails before any token (prefill
// unreachable, or decode's reserve unreachable) is retried once on the
// other pair and completes with the reference output; the first pair's
// reservation is aborted (its pool whole again) and it was told why.
// After the first token a transport failure of decode's stream migrates
// the request to the other pair, which continues it bit for bit (the
// reference output, no error); with migration off (MaxMigrations < 0) it
// ends the stream with its error and no second pair is asked for.
func TestRetryBeforeFirstTokenOnly(t *testing.T) {
	m := newToy()
	mk := func() *Local { return toyLocal(t, m) }
	la, lb := mk(), mk()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	cfg := DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160}

	cases := []struct {
		name  string
		a     Pair
		retry bool
		noMig bool
	}{
		{"prefill unreachable", Pair{Prefill: failPrefill{handoff.ErrTransport.With("dial refused")}, Decode: la.Decode}, true, false},
		{"reserve unreachable", Pair{Prefill: la.Prefill, Decode: failReserve{la.Decode, handoff.ErrTransport.With("dial refused")}}, true, false},
		{"decode no room", Pair{Prefill: la.Prefill, Decode: failReserve{la.Decode, handoff.ErrNoRoom}}, true, false},
		{"stream lost after the first token: migrated", Pair{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}}, true, false},
		{"stream lost after the first token, migration off", Pair{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tp := &twoPairs{a: c.a, b: Pair{Prefill: lb.Prefill, Decode: lb.Decode}, done: map[string][2]error{}}
			cfg := cfg
			if c.noMig {
				cfg.MaxMigrations = -1
			}
			d, err := NewDisaggregatedPairs(cfg, tp)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			st, err := d.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, st)
			if c.retry {
				if got.final.Err != nil || !slices.Equal(got.tokens, want) || tp.calls != 2 {
					t.Fatalf("got %v %v after %d pairings, want %v after 2", got.tokens, got.final.Err, tp.calls, want)
				}
				tp.mu.Lock()
				da, db := tp.done["a"], tp.done["b"]
				tp.mu.Unlock()
				if da[0] == nil && da[1] == nil || db != [2]error{} {
					t.Fatalf("outcomes told: a %v, b %v", da, db)
				}
			} else {
				if got.final.Err == nil || len(got.tokens) != 1 || got.tokens[0] != want[0] || tp.calls != 1 {
					t.Fatalf("got %v %v after %d pairings: want the first token then an error, no switch", got.tokens, got.final.Err, tp.calls)
				}
				if e := got.final.Err.(*Error); e.Code != CodeHandoff {
					t.Fatalf("error %v, want %s", e, CodeHandoff)
				}
			}
			waitFreePool(t, la.Decode.Pool())
			waitFreePool(t, lb.Decode.Pool())
		})
	}
}

// seqPairs hands out its pairs in order, one per Pair call.
type seqPairs struct {
	mu    sync.Mutex
	pairs []Pair
	calls int
}

func (p *seqPairs) Pair(*Request, []*Pair) (*Pair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls >= len(p.pairs) {
		return nil, handoff.ErrTransport.With("no pair left")
	}
	c := p.pairs[p.calls]
	p.calls++
	return &c, nil
}

// loseAnswer runs the prefill, then loses its answer (the link to the
// prefill worker died after the commit).
type loseAnswer struct{ p handoff.Prefill }

func (l loseAnswer) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	if _, err := l.p.Prefill(ctx, r); err != nil {
		return nil, err
	}
	return nil, handoff.ErrTransport.With("the prefill worker's answer was lost")
}

// Transport failures around a migration: a resumed handoff whose new
// decode worker dies before its commit (its prefill's push fails by
// transport, decode's stream ends with the abort) migrates again, to a
// third pair, and the stream is still bit for bit the reference; a
// prefill worker whose answer is lost after the commit costs nothing
// (decode verified the commit) or at most a migration, never the stream.
// Pools whole after.
func TestMigrationTransportFailures(t *testing.T) {
	m := newToy()
	mk := func() *Local { return toyLocal(t, m) }
	la, lb, lc := mk(), mk(), mk()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	cfg := DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160}
	cases := []struct {
		name      string
		pairs     []Pair
		minPaired int
		migrated  int64
	}{
		{"resumed handoff's decode dies before its commit", []Pair{
			{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}},
			{Prefill: failPrefill{handoff.ErrTransport.With("pushing to the decode worker: connection lost")}, Decode: lb.Decode},
			{Prefill: lc.Prefill, Decode: lc.Decode},
		}, 3, 2},
		{"resumed handoff's decode worker is draining (refuses the reserve)", []Pair{
			{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}},
			{Prefill: lb.Prefill, Decode: failReserve{lb.Decode, handoff.ErrDraining}},
			{Prefill: lc.Prefill, Decode: lc.Decode},
		}, 3, 2},
		{"resumed handoff's prefill worker is draining (refuses the prompt)", []Pair{
			{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}},
			{Prefill: failPrefill{handoff.ErrDraining}, Decode: lb.Decode},
			{Prefill: lc.Prefill, Decode: lc.Decode},
		}, 3, 2},
		{"prefill's answer lost after the commit", []Pair{
			{Prefill: loseAnswer{la.Prefill}, Decode: la.Decode},
			{Prefill: lb.Prefill, Decode: lb.Decode},
		}, 1, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := &seqPairs{pairs: c.pairs}
			d, err := NewDisaggregatedPairs(cfg, sp)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			st, err := d.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, st)
			if got.final.Err != nil || !slices.Equal(got.tokens, want) || sp.calls < c.minPaired {
				t.Fatalf("got %v %v after %d pairings, want %v after at least %d", got.tokens, got.final.Err, sp.calls, want, c.minPaired)
			}
			if c.migrated >= 0 && d.Migrated() != c.migrated {
				t.Fatalf("%d migrations, want %d", d.Migrated(), c.migrated)
			}
			for _, l := range []*Local{la, lb, lc} {
				waitFreePool(t, l.Decode.Pool())
			}
		})
	}
}

// namedPairs hands out its pairs in order, one per Pair call, and records
// the decode workers each call was asked to avoid.
type namedPairs struct {
	mu     sync.Mutex
	pairs  []Pair
	avoids [][]string
}

func (p *namedPairs) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for _, a := range avoid {
		names = append(names, a.DecodeName)
	}
	p.avoids = append(p.avoids, names)
	if len(p.avoids) > len(p.pairs) {
		return nil, errors.New("no pair left")
	}
	c := p.pairs[len(p.avoids)-1]
	return &c, nil
}

// Issue 29 (decode scaled 3 -> 1 under load): a request may meet two
// decode workers that are leaving, one after the other, before a third
// takes it. Each failure before the first token (the reserve of a worker
// gone between the pick and the reserve; a prefill worker that no longer
// pushes to a leaving worker: unknown_handoff) is retried on another pair
// that avoids EVERY pair that failed so far, while the budget
// (MaxRetries, default DefaultMaxRetries) lasts; the request then ends
// with the reference output. A smaller budget lets the last failure
// stand (502, no token), and a failure the request caused (400) is never
// retried. Pools whole after each.
func TestRetriesBeforeFirstTokenBounded(t *testing.T) {
	m := newToy()
	mk := func() *Local { return toyLocal(t, m) }
	la, lb, lc := mk(), mk(), mk()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	gone := handoff.ErrTransport.With("dial tcp 10.244.0.12:9002: connection refused")
	leaving := handoff.ErrUnknownHandoff.With("pushed to another decode worker")
	reserveGone := []Pair{
		{Prefill: la.Prefill, Decode: failReserve{la.Decode, gone}, DecodeName: "a"},
		{Prefill: lb.Prefill, Decode: failReserve{lb.Decode, gone}, DecodeName: "b"},
		{Prefill: lc.Prefill, Decode: lc.Decode, DecodeName: "c"},
	}
	prefillLeaving := []Pair{
		{Prefill: failPrefill{leaving}, Decode: la.Decode, DecodeName: "a"},
		{Prefill: failPrefill{leaving}, Decode: lb.Decode, DecodeName: "b"},
		{Prefill: lc.Prefill, Decode: lc.Decode, DecodeName: "c"},
	}
	fault := handoff.FromWire(CodeUnsupported, "this worker cannot serve that output format")
	cases := []struct {
		name       string
		pairs      []Pair
		maxRetries int
		wantCode   string // "" : the reference output
		wantAvoids [][]string
	}{
		{"two leaving decode workers at reserve", reserveGone, 0, "", [][]string{nil, {"a"}, {"a", "b"}}},
		{"two prefill pushes to leaving decode workers", prefillLeaving, 0, "", [][]string{nil, {"a"}, {"a", "b"}}},
		{"budget of one", reserveGone, 1, CodeHandoff, [][]string{nil, {"a"}}},
		{"budget of one, prefill", prefillLeaving, 1, CodeHandoff, [][]string{nil, {"a"}}},
		{"retries off", reserveGone, -1, CodeHandoff, [][]string{nil}},
		{"a draining decode worker refuses", []Pair{
			{Prefill: la.Prefill, Decode: failReserve{la.Decode, handoff.ErrDraining}, DecodeName: "a"},
			{Prefill: lc.Prefill, Decode: lc.Decode, DecodeName: "c"},
		}, 0, "", [][]string{nil, {"a"}}},
		{"a fault of the request is never retried", []Pair{
			{Prefill: failPrefill{fault}, Decode: la.Decode, DecodeName: "a"},
			{Prefill: lc.Prefill, Decode: lc.Decode, DecodeName: "c"},
		}, 0, CodeUnsupported, [][]string{nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			np := &namedPairs{pairs: c.pairs}
			cfg := DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160, MaxRetries: c.maxRetries}
			d, err := NewDisaggregatedPairs(cfg, np)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			var got result
			st, err := d.Submit(context.Background(), r)
			if err != nil {
				got.final.Err = err
			} else {
				got = collect(t, st)
			}
			np.mu.Lock()
			avoids := np.avoids
			np.mu.Unlock()
			if c.wantCode == "" {
				if got.final.Err != nil || !slices.Equal(got.tokens, want) {
					t.Fatalf("got %v %v, want %v", got.tokens, got.final.Err, want)
				}
			} else {
				e, ok := got.final.Err.(*Error)
				if !ok || e.Code != c.wantCode || len(got.tokens) != 0 {
					t.Fatalf("got %v %v, want no token and %s", got.tokens, got.final.Err, c.wantCode)
				}
			}
			if !slices.EqualFunc(avoids, c.wantAvoids, slices.Equal) {
				t.Fatalf("pairings avoided %q, want %q", avoids, c.wantAvoids)
			}
			for _, l := range []*Local{la, lb, lc} {
				waitFreePool(t, l.Decode.Pool())
			}
		})
	}
}

// toyLocal is a prefill and decode worker pair on the toy model (pools of
// 40 pages each), closed when the test ends.
func toyLocal(t *testing.T, m *toy) *Local {
	t.Helper()
	l, err := NewLocal(toyConfig(m, 40), toyConfig(m, 40))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, l) })
	return l
}
