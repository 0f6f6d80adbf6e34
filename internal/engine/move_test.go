package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// flakyDecode is a decode worker (or the router's link to one) with
// scripted faults:
//   - failOpens: its first failOpens stream opens fail with openErr, right
//     after the reservation they follow (the few milliseconds between a
//     move's Reserve and its Stream: the link dies there);
//   - breakFirst: its first stream breaks by transport after its first
//     token (the worker died, or a false heartbeat alarm cut the link);
//   - dies: once that stream broke, every later Reserve fails by
//     transport (the worker is gone).
type flakyDecode struct {
	handoff.Decode
	failOpens  int
	openErr    error
	breakFirst bool
	dies       bool

	mu              sync.Mutex
	opens, reserves int
	broke           bool
}

func (f *flakyDecode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	f.mu.Lock()
	f.reserves++
	dead := f.dies && f.broke
	f.mu.Unlock()
	if dead {
		return nil, handoff.ErrTransport.With("dial tcp 10.244.0.12:9003: connection refused (test)")
	}
	return f.Decode.Reserve(ctx, r)
}

func (f *flakyDecode) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	f.mu.Lock()
	f.opens++
	n := f.opens
	f.mu.Unlock()
	if n <= f.failOpens {
		return nil, f.openErr
	}
	ts, err := f.Decode.Stream(ctx, id, p)
	if err != nil || !f.breakFirst || n != f.failOpens+1 {
		return ts, err
	}
	return &breakOnce{TokenStream: ts, f: f}, nil
}

// breakOnce passes its first token, then fails by transport and marks
// its worker broken.
type breakOnce struct {
	handoff.TokenStream
	f *flakyDecode
	n int
}

func (s *breakOnce) Recv() (handoff.Token, error) {
	if s.n++; s.n > 1 {
		s.f.mu.Lock()
		s.f.broke = true
		s.f.mu.Unlock()
		return handoff.Token{}, handoff.ErrTransport.With("connection lost (test)")
	}
	return s.TokenStream.Recv()
}

// avoidNames is what a pairer was asked to avoid, by decode worker.
func avoidNames(avoids [][]*Pair) [][]string {
	out := make([][]string, len(avoids))
	for i, a := range avoids {
		for _, p := range a {
			out[i] = append(out[i], p.DecodeName)
		}
	}
	return out
}

// toyPairs is n in-process prefill/decode pairs on the toy model, named
// a, b, c, ... (DecodeName), each pair's decode wrapped by wrap(i, ...),
// and every pool, for the drain checks.
func toyPairs(t *testing.T, m *toy, n int, wrap func(int, handoff.Decode) handoff.Decode) ([]Pair, []*kv.Pool) {
	t.Helper()
	var ps []Pair
	var pools []*kv.Pool
	for i := range n {
		l := toyLocal(t, m)
		ps = append(ps, Pair{Prefill: l.Prefill, Decode: wrap(i, l.Decode), DecodeName: string(rune('a' + i))})
		pools = append(pools, l.Prefill.Pool(), l.Decode.Pool())
	}
	return ps, pools
}

// Decode's stream failing to open right after a move's new reservation
// (after a migration, a retry before the first token, or a preemption's
// resume) was the one move that failed the stream (502 after the tokens
// already sent). It now moves on like any other failure of that kind:
// the reservation is aborted (every pool whole after), the next pair
// avoids every pair that failed the request, and the client's stream is
// the reference bit for bit (no token lost or repeated). The budgets
// still bound it (MaxMigrations: the failure stands), and an open
// refused by a live worker after tokens were sent (not a transport
// failure) is not moved.
func TestStreamOpenFailureAfterAMoveMovesOn(t *testing.T) {
	m := newToy()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	lost := handoff.ErrTransport.With("connection reset by peer (test)")
	cases := []struct {
		name string
		// first is pair a's fault; b's first open fails with openErr.
		first         func(handoff.Decode) handoff.Decode
		prefillFails  bool
		openErr       error
		maxMigrations int
		wantErr       bool
		wantAvoids    [][]string
		migrated      int64
	}{
		{"after a migration", func(d handoff.Decode) handoff.Decode { return breakAfterFirst{d} }, false, lost, 0, false,
			[][]string{nil, {"a"}, {"a", "b"}}, 2},
		{"after a retry before the first token", nil, true, lost, 0, false,
			[][]string{nil, {"a"}, {"a", "b"}}, 0},
		{"after a preemption's resume", func(d handoff.Decode) handoff.Decode {
			return &repairDecode{Decode: d, name: "a", log: &repairLog{}, preemptAfter: 3, full: true}
		}, false, lost, 0, false, [][]string{nil, nil, {"b"}}, 1},
		{"the new worker is draining", func(d handoff.Decode) handoff.Decode { return breakAfterFirst{d} }, false, handoff.ErrDraining, 0, false,
			[][]string{nil, {"a"}, {"a", "b"}}, 2},
		{"migration budget of one", func(d handoff.Decode) handoff.Decode { return breakAfterFirst{d} }, false, lost, 1, true,
			[][]string{nil, {"a"}}, 1},
		{"an open refused by a live worker", func(d handoff.Decode) handoff.Decode { return breakAfterFirst{d} }, false,
			handoff.ErrUnknownHandoff.With("no such handoff (test)"), 0, true, [][]string{nil, {"a"}}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pairs, pools := toyPairs(t, m, 3, func(i int, d handoff.Decode) handoff.Decode {
				switch {
				case i == 0 && c.first != nil:
					return c.first(d)
				case i == 1:
					return &flakyDecode{Decode: d, failOpens: 1, openErr: c.openErr}
				}
				return d
			})
			if c.prefillFails {
				pairs[0].Prefill = failPrefill{handoff.ErrTransport.With("dial refused (test)")}
			}
			rp := &repairPairs{pairs: pairs, names: []string{"a", "b", "c"}, told: map[string][][2]error{}}
			d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160,
				MaxMigrations: c.maxMigrations}, rp)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := d.Submit(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, st)
			if !c.wantErr && (got.final.Err != nil || !slices.Equal(got.tokens, want)) {
				t.Fatalf("got %v (%v), want %v", got.tokens, got.final.Err, want)
			}
			if c.wantErr {
				e, ok := got.final.Err.(*Error)
				if !ok || e.Code != CodeHandoff || !slices.Equal(got.tokens, want[:len(got.tokens)]) || len(got.tokens) == 0 {
					t.Fatalf("got %v (%v), want a prefix of %v then %s", got.tokens, got.final.Err, want, CodeHandoff)
				}
			}
			rp.mu.Lock()
			avoids := avoidNames(rp.avoids)
			rp.mu.Unlock()
			if !slices.EqualFunc(avoids, c.wantAvoids, slices.Equal) {
				t.Fatalf("the pairer was asked to avoid %q, want %q", avoids, c.wantAvoids)
			}
			if d.Migrated() != c.migrated {
				t.Fatalf("%d migrations, want %d", d.Migrated(), c.migrated)
			}
			waitDrained(t, pools...)
		})
	}
}

// firstFree is a fake cluster: each Pair call gets the first of its pairs
// whose decode worker is not to be avoided (none: refused), and every
// call's avoid list is recorded.
type firstFree struct {
	mu     sync.Mutex
	pairs  []Pair
	avoids [][]*Pair
}

func (f *firstFree) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.avoids = append(f.avoids, slices.Clone(avoid))
	for _, p := range f.pairs {
		if !slices.ContainsFunc(avoid, func(a *Pair) bool { return a.DecodeName == p.DecodeName }) {
			return &p, nil
		}
	}
	return nil, fmt.Errorf("no decode worker left but %v (test)", avoidNames([][]*Pair{avoid})[0])
}

// A request's second move avoids every worker that failed it, not only
// the one it leaves: decode a dies under the stream (it migrates to b),
// then b's link breaks too (a false heartbeat alarm) while a is still
// gone. The move off b goes to c, not back to a (which would cost a
// failed reserve and one more migration: with a budget of two, the
// stream). When every other worker failed the request too, the move
// falls back to the ones that failed earlier (avoiding only the one it
// leaves): a that came back takes the stream on. Fake clusters of three
// and two decode workers; outputs bit for bit, pools whole.
func TestSecondMoveAvoidsEveryFailedWorker(t *testing.T) {
	m := newToy()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	for _, n := range []int{3, 2} {
		t.Run(fmt.Sprintf("%d decode workers", n), func(t *testing.T) {
			pairs, pools := toyPairs(t, m, n, func(i int, d handoff.Decode) handoff.Decode {
				// a dies for good with three workers; with two it comes
				// back (its second reservation passes).
				return &flakyDecode{Decode: d, breakFirst: i < 2, dies: i == 0 && n == 3}
			})
			ff := &firstFree{pairs: pairs}
			d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160,
				MaxMigrations: 2}, ff)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := d.Submit(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, st)
			if got.final.Err != nil || !slices.Equal(got.tokens, want) {
				t.Fatalf("got %v (%v), want %v", got.tokens, got.final.Err, want)
			}
			ff.mu.Lock()
			avoids := avoidNames(ff.avoids)
			ff.mu.Unlock()
			wantAvoids := [][]string{nil, {"a"}, {"a", "b"}}
			if n == 2 {
				wantAvoids = append(wantAvoids, []string{"b"})
			}
			if !slices.EqualFunc(avoids, wantAvoids, slices.Equal) {
				t.Fatalf("the pairer was asked to avoid %q, want %q", avoids, wantAvoids)
			}
			if d.Migrated() != 2 {
				t.Fatalf("%d migrations, want 2", d.Migrated())
			}
			waitDrained(t, pools...)
		})
	}
}

// The first attempt's decode stream failing to open: a failure of the
// link is retried on another pair (the reference output); a verification
// failure is never retried, it fails closed (I8: 500
// kv_integrity_violation, no second pairing). The reservation is
// aborted either way (pools whole).
func TestFirstStreamOpenFailure(t *testing.T) {
	m := newToy()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	cases := []struct {
		name       string
		openErr    error
		wantCode   string // "": the reference output
		wantAvoids [][]string
	}{
		{"the link fails", handoff.ErrTransport.With("connection reset by peer (test)"), "", [][]string{nil, {"a"}}},
		{"a verification failure", handoff.ErrDigestMismatch, CodeIntegrity, [][]string{nil}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pairs, pools := toyPairs(t, m, 2, func(i int, d handoff.Decode) handoff.Decode {
				if i == 0 {
					return &flakyDecode{Decode: d, failOpens: 1, openErr: c.openErr}
				}
				return d
			})
			rp := &repairPairs{pairs: pairs, names: []string{"a", "b"}, told: map[string][][2]error{}}
			d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160}, rp)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := d.Submit(ctx, r)
			if c.wantCode == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := collect(t, st); got.final.Err != nil || !slices.Equal(got.tokens, want) {
					t.Fatalf("got %v (%v), want %v", got.tokens, got.final.Err, want)
				}
			} else if e, ok := err.(*Error); !ok || e.Code != c.wantCode {
				t.Fatalf("Submit: %v, want %s", err, c.wantCode)
			}
			rp.mu.Lock()
			avoids := avoidNames(rp.avoids)
			rp.mu.Unlock()
			if !slices.EqualFunc(avoids, c.wantAvoids, slices.Equal) {
				t.Fatalf("the pairer was asked to avoid %q, want %q", avoids, c.wantAvoids)
			}
			waitDrained(t, pools...)
		})
	}
}
