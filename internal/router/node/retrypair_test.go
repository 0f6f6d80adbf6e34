package node

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Issue 30 item 8: a retry must move to another decode worker. With the
// only other decode worker refused (its vetting failed), the retry of a
// request whose handoff failed on d1 gets no pair, so the first failure
// stands; it is never paired with d1 again. With d2 usable it goes there.
func TestRetryNeverPairsTheFailedDecodeWorker(t *testing.T) {
	for _, d2ok := range []bool{false, true} {
		vet := func(context.Context) error { return errors.New("refused by the test") }
		if d2ok {
			vet = nil
		}
		c, err := NewCluster([]Worker{{Name: "p", Prefill: stubPrefill{"p"}}},
			[]Worker{{Name: "d1", Decode: stubDecode{}}, {Name: "d2", Decode: stubDecode{}, Vet: vet}}, DefaultWeights, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Probe(context.Background())
		first := &engine.Pair{Prefill: stubPrefill{"p"}, Decode: stubDecode{}, DecodeName: "d1"}
		p, err := c.Pair(&engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 1}, []*engine.Pair{first})
		switch {
		case !d2ok && err == nil:
			t.Fatalf("the retry was paired with %s although d1 failed and d2 is refused", p.DecodeName)
		case d2ok && (err != nil || p.DecodeName != "d2"):
			t.Fatalf("the retry with d2 usable: %v %v, want d2", p, err)
		}
	}
}

// Issue 29 (decode scaled 3 -> 1): a request whose attempts failed on two
// decode workers (both leaving, neither yet marked down) is paired with
// the third on its next retry, never with either failed one, however the
// scores fall; with the third one also failed it gets no pair.
func TestRetryAvoidsEveryFailedDecodeWorker(t *testing.T) {
	c, err := NewCluster([]Worker{{Name: "p", Prefill: stubPrefill{"p"}}},
		[]Worker{{Name: "d1", Decode: stubDecode{}}, {Name: "d2", Decode: stubDecode{}}, {Name: "d3", Decode: stubDecode{}}}, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Probe(context.Background())
	failed := func(names ...string) []*engine.Pair {
		var ps []*engine.Pair
		for _, n := range names {
			ps = append(ps, &engine.Pair{Prefill: stubPrefill{"p"}, Decode: stubDecode{}, DecodeName: n})
		}
		return ps
	}
	for i := range 12 {
		// Alternate the order, and vary the rotation between picks.
		avoid := failed("d1", "d3")
		if i%2 == 1 {
			avoid = failed("d3", "d1")
		}
		p, err := c.Pair(&engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 1}, avoid)
		if err != nil || p.DecodeName != "d2" {
			t.Fatalf("retry %d after d1 and d3 failed: %v %v, want d2", i, p, err)
		}
		p.Done(nil, nil)
	}
	if p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, failed("d1", "d2", "d3")); err == nil {
		t.Fatalf("every decode worker failed the request, yet it was paired with %s", p.DecodeName)
	}
	// A failed worker that already left the pool does not stand in the
	// way of the one that remains.
	c.Remove("decode", "d1")
	c.Remove("decode", "d3")
	if p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, failed("d1", "d3")); err != nil || p.DecodeName != "d2" {
		t.Fatalf("d1 and d3 failed and left: %v %v, want d2", p, err)
	}
}

// Issue 30 item 3: a prefill worker that joins (or was unreachable at
// start) is vetted before its first request: one whose load report gives
// a context below the router's is refused for good, naming both numbers;
// one at the router's context is used.
func TestJoiningPrefillWorkerContextVetted(t *testing.T) {
	report := func(ctxLen int) func(context.Context) (*handoff.Load, error) {
		return func(context.Context) (*handoff.Load, error) {
			return &handoff.Load{TotalPages: 16, FreePages: 16, Context: ctxLen}, nil
		}
	}
	err := ProbePrefillContext(context.Background(), report(64), 256)
	if !errors.Is(err, handoff.ErrPrefillRefused) || !strings.Contains(err.Error(), "64") || !strings.Contains(err.Error(), "256") {
		t.Fatalf("a 64-token prefill worker for a 256-token router: %v", err)
	}
	if err := ProbePrefillContext(context.Background(), report(256), 256); err != nil {
		t.Fatalf("a prefill worker at the router's context refused: %v", err)
	}
	vet := func(l func(context.Context) (*handoff.Load, error)) func(context.Context) error {
		return func(ctx context.Context) error { return ProbePrefillContext(ctx, l, 256) }
	}
	c, err := NewCluster([]Worker{{Name: "small", Prefill: stubPrefill{"small"}, Load: report(64), Vet: vet(report(64))},
		{Name: "whole", Prefill: stubPrefill{"whole"}, Load: report(256), Vet: vet(report(256))}},
		[]Worker{{Name: "d", Decode: stubDecode{}}}, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Probe(context.Background())
	for range 6 {
		p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if name := p.Prefill.(stubPrefill).name; name != "whole" {
			t.Fatalf("a request was paired with the prefill worker %q whose context is below the router's", name)
		}
	}
}

// Issue 28: with one pair, a request whose connection to a worker was lost
// before its first token is given the same pair again (Again), although
// that failure marked the decode worker down: its connection is dialled
// afresh. Never a worker that left the pool or drains. The attempt counts
// in flight until its Done.
func TestAgainGivesTheFailedPairBack(t *testing.T) {
	c, err := NewCluster([]Worker{{Name: "p", Prefill: stubPrefill{"p"}}}, []Worker{{Name: "d", Decode: stubDecode{}}}, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Probe(context.Background())
	r := &engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 1}
	first, err := c.Pair(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	first.Done(nil, handoff.ErrTransport.With("connection closed"))
	if p, err := c.Pair(r, []*engine.Pair{first}); err == nil {
		t.Fatalf("no other pair, yet the retry was paired with %s", p.DecodeName)
	}
	again, err := c.Again(r, first)
	if err != nil || again.DecodeName != "d" || again.Prefill != first.Prefill {
		t.Fatalf("the same pair again after its decode link failed: %v %v", again, err)
	}
	ws, _, _ := c.Stats()
	for _, w := range ws {
		if w.InFlight != 1 {
			t.Fatalf("%s %s: %d in flight during the attempt, want 1", w.Role, w.Name, w.InFlight)
		}
	}
	// The attempt ends with the decode worker draining (SIGTERM): it is
	// not given again.
	again.Done(nil, handoff.ErrDraining.With("shutting down"))
	ws, _, _ = c.Stats()
	for _, w := range ws {
		if w.InFlight != 0 {
			t.Fatalf("%s %s: %d in flight after the attempt, want 0", w.Role, w.Name, w.InFlight)
		}
	}
	if p, err := c.Again(r, first); err == nil {
		t.Fatalf("a draining decode worker was given again: %s", p.DecodeName)
	}
	c.Remove("decode", "d")
	if p, err := c.Again(r, first); err == nil {
		t.Fatalf("a decode worker that left the pool was given again: %s", p.DecodeName)
	}
}

// cutFirstStream is a decode worker behind its server whose first stream
// open cuts the connection it came on (the router's), before decode
// answers: the router's link lost before the request's first token.
type cutFirstStream struct {
	handoff.Decode
	n   atomic.Int32
	cut func()
}

func (c *cutFirstStream) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	if c.n.Add(1) == 1 {
		c.cut()
	}
	return c.Decode.Stream(ctx, id, p)
}

// Issue 28, as `sluice router` runs it: one prefill and one decode
// worker, and the router's connection to decode lost before the first
// token. The failure marks the decode worker down, yet the request is
// retried on it once (Cluster.Again) over a fresh connection and ends
// with the reference output; before, it ended 502 handoff_failed.
func TestLonePairClusterRetriesLostConnection(t *testing.T) {
	m := loadBuiltIn(t)
	rs := clusterJobs(m, 1)
	want := clusterReferences(t, m, rs)
	ct := &connTracker{}
	wrap := func(_ int, d handoff.Decode) handoff.Decode {
		// The connections are accepted in the order BuildCluster dials
		// them, each after the last one's handshake: prefill->decode,
		// router->prefill, router->decode.
		return &cutFirstStream{Decode: d, cut: func() {
			ct.mu.Lock()
			defer ct.mu.Unlock()
			ct.conns[2].Close()
		}}
	}
	cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 512}, Listen: ct.listen},
		PrefillWorkers: 1, DecodeWorkers: 1, Routers: 1, Probe: time.Hour, WrapDecode: wrap})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	ct.mu.Lock()
	n := len(ct.conns)
	ct.mu.Unlock()
	if n != 3 {
		t.Fatalf("%d connections accepted, want 3 (prefill->decode, router->prefill, router->decode)", n)
	}
	got := runReq(cs.Routers[0], rs[0])
	if got.err != nil || !same(got.toks, want[0].toks) {
		t.Fatalf("the request whose decode link was lost: %v %v, want %v", got.toks, got.err, want[0].toks)
	}
	if n := cs.Routers[0].SameRetried(); n != 1 {
		t.Fatalf("retried on the same pair %d times, want 1", n)
	}
	ws, _, _ := cs.Clusters[0].Stats()
	for _, w := range ws {
		if w.Role == "decode" && w.Downs != 1 {
			t.Fatalf("the decode worker went down %d times, want 1 (the lost link marked it down; the retry took it all the same)", w.Downs)
		}
	}
	waitFree(t, cs.Pools(), "")
}
