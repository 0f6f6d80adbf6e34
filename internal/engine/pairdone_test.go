package engine

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// cancelOnMove hands out pair a, then, to the request's next pairing (its
// migration), pair b after the client cancelled: the cancel lands between
// the engine's check that the client is still there and its use of the
// new pair. It counts the pairs handed out and the Done calls they got.
type cancelOnMove struct {
	a, b   Pair
	st     chan Stream
	mu     sync.Mutex
	out    int
	doneBy map[int]int
}

func (p *cancelOnMove) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	c := p.a
	if len(avoid) > 0 {
		(<-p.st).Cancel()
		c = p.b
	}
	p.mu.Lock()
	n := p.out
	p.out++
	p.mu.Unlock()
	c.Done = func(error, error) {
		p.mu.Lock()
		p.doneBy[n]++
		p.mu.Unlock()
	}
	return &c, nil
}

// Every pair a Pairer hands out is told its outcome (Done) exactly once,
// also the one paired for a migration the client's cancel made moot: a
// cluster counts a pair's workers busy until Done (its load scores, and a
// removed worker closes only when idle), so a pair never told leaks that
// count for good.
func TestMigrationCancelledTellsNewPair(t *testing.T) {
	m := newToy()
	mk := func() *Local { return toyLocal(t, m) }
	la, lb := mk(), mk()
	cp := &cancelOnMove{a: Pair{Prefill: la.Prefill, Decode: breakAfterFirst{la.Decode}}, b: Pair{Prefill: lb.Prefill, Decode: lb.Decode},
		st: make(chan Stream, 1), doneBy: map[int]int{}}
	d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160}, cp)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, d)
	st, err := d.Submit(context.Background(), &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12})
	if err != nil {
		t.Fatal(err)
	}
	cp.st <- st
	got := collect(t, st)
	if len(got.tokens) != 1 {
		t.Fatalf("got %d tokens (%v); want the first, then the cancel", len(got.tokens), got.final.Err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cp.mu.Lock()
		out, by := cp.out, map[int]int{}
		for k, v := range cp.doneBy {
			by[k] = v
		}
		cp.mu.Unlock()
		ok := out == 2
		for i := 0; i < out; i++ {
			if by[i] != 1 {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pairs handed out, Done calls per pair %v; want each told once", out, by)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitFreePool(t, la.Decode.Pool())
	waitFreePool(t, lb.Decode.Pool())
}

// failStream reserves for real, then cannot open the decode stream.
type failStream struct{ handoff.Decode }

func (f failStream) Stream(context.Context, kv.ID, handoff.StreamParams) (handoff.TokenStream, error) {
	return nil, handoff.ErrTransport.With("connection lost")
}

// countPairs hands out pairs in order (the last again when they run
// out) and counts the Done calls each got.
type countPairs struct {
	pairs  []Pair
	mu     sync.Mutex
	out    int
	doneBy map[int]int
	avoids [][]string // the decode names each pairing was asked to avoid
}

func (p *countPairs) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for _, a := range avoid {
		names = append(names, a.DecodeName)
	}
	p.avoids = append(p.avoids, names)
	c := p.pairs[min(p.out, len(p.pairs)-1)]
	n := p.out
	p.out++
	c.Done = func(error, error) {
		p.mu.Lock()
		p.doneBy[n]++
		p.mu.Unlock()
	}
	return &c, nil
}

// A decode stream that cannot be opened after a good reservation is
// retried on the next pair while the budget lasts: each failed attempt's
// reservation is aborted (its pool whole again), every pair handed out is
// told Done once, and the request ends with the reference output when a
// good pair comes within the budget, or with the error after the budget
// (1 + MaxRetries attempts, no more).
func TestStreamOpenRetriesAbortEachReservation(t *testing.T) {
	m := newToy()
	mk := func() *Local { return toyLocal(t, m) }
	la, lb, lc := mk(), mk(), mk()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	for _, c := range []struct {
		name    string
		retries int
		ok      bool
		out     int
	}{
		{"third pair good", 2, true, 3},
		{"budget spent first", 1, false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := &countPairs{pairs: []Pair{
				{Prefill: la.Prefill, Decode: failStream{la.Decode}},
				{Prefill: lb.Prefill, Decode: failStream{lb.Decode}},
				{Prefill: lc.Prefill, Decode: lc.Decode},
			}, doneBy: map[int]int{}}
			d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160, MaxRetries: c.retries}, cp)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			st, err := d.Submit(context.Background(), r)
			if c.ok {
				if err != nil {
					t.Fatal(err)
				}
				got := collect(t, st)
				if got.final.Err != nil || !slices.Equal(got.tokens, want) {
					t.Fatalf("got %v %v, want %v", got.tokens, got.final.Err, want)
				}
			} else if err == nil {
				got := collect(t, st)
				t.Fatalf("got %v %v, want an error after %d attempts", got.tokens, got.final.Err, c.out)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				cp.mu.Lock()
				out, by := cp.out, maps.Clone(cp.doneBy)
				cp.mu.Unlock()
				ok := out == c.out
				for i := 0; i < out; i++ {
					ok = ok && by[i] == 1
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d pairs handed out (want %d), Done calls %v; want each told once", out, c.out, by)
				}
				time.Sleep(5 * time.Millisecond)
			}
			for _, l := range []*Local{la, lb, lc} {
				waitFreePool(t, l.Decode.Pool())
			}
		})
	}
}

// A scale-down by two hands a request a prefill push refused by the
// first leaving decode worker, then the second leaving one at the retry's
// reserve. No token has reached the client, so that reserve's failure is
// a retry like the first attempt's (Submit), not a migration: within
// --max-retries (budget 2: the third pair serves the reference output;
// budget 1: the second failure stands, whatever --max-migrations says),
// each pairing avoiding every pair that failed the request; every pair
// is told Done once, pools whole.
func TestRetryReserveAfterPushFailureRetried(t *testing.T) {
	m := newToy()
	mk := func() *Local { return toyLocal(t, m) }
	la, lb, lc := mk(), mk(), mk()
	r := &Request{Tenant: "t", Prompt: prompt(3, 9), MaxTokens: 12}
	want := toyReference(m, r.Prompt, r.MaxTokens, false)
	leaving := handoff.ErrUnknownHandoff.With("pushed to another decode worker")
	gone := handoff.ErrTransport.With("connection refused")
	for _, c := range []struct {
		name    string
		retries int
		ok      bool
		out     int
		avoids  [][]string
	}{
		{"budget 2", 2, true, 3, [][]string{nil, {"a"}, {"a", "b"}}},
		{"budget 1", 1, false, 2, [][]string{nil, {"a"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cp := &countPairs{pairs: []Pair{
				{Prefill: failPrefill{leaving}, Decode: la.Decode, DecodeName: "a"},
				{Prefill: lb.Prefill, Decode: failReserve{lb.Decode, gone}, DecodeName: "b"},
				{Prefill: lc.Prefill, Decode: lc.Decode, DecodeName: "c"},
			}, doneBy: map[int]int{}}
			d, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160, MaxRetries: c.retries}, cp)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, d)
			st, err := d.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			got := collect(t, st)
			if c.ok && (got.final.Err != nil || !slices.Equal(got.tokens, want)) {
				t.Fatalf("got %v %v, want %v", got.tokens, got.final.Err, want)
			}
			if !c.ok && (got.final.Err == nil || len(got.tokens) != 0) {
				t.Fatalf("got %v %v, want no token and an error", got.tokens, got.final.Err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				cp.mu.Lock()
				out, by := cp.out, maps.Clone(cp.doneBy)
				cp.mu.Unlock()
				ok := out == c.out
				for i := 0; i < out; i++ {
					ok = ok && by[i] == 1
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d pairs handed out (want %d), Done calls %v; want each told once", out, c.out, by)
				}
				time.Sleep(5 * time.Millisecond)
			}
			cp.mu.Lock()
			avoids := cp.avoids
			cp.mu.Unlock()
			if !slices.EqualFunc(avoids, c.avoids, slices.Equal) {
				t.Fatalf("pairings avoided %q, want %q", avoids, c.avoids)
			}
			for _, l := range []*Local{la, lb, lc} {
				waitFreePool(t, l.Decode.Pool())
			}
		})
	}
}
