package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"sluice/internal/engine"
	"sluice/internal/handoff"
)

// loadView is a fake load report per worker name that a test sets
// between picks: decode workers' free pages (of 100), every worker's
// requests from all routers.
type loadView struct {
	mu      sync.Mutex
	free    map[string]int
	running map[string]int
}

func (v *loadView) report(name string) func(context.Context) (*handoff.Load, error) {
	return func(context.Context) (*handoff.Load, error) {
		v.mu.Lock()
		defer v.mu.Unlock()
		free, ok := v.free[name]
		if !ok {
			free = 100
		}
		return &handoff.Load{TotalPages: 100, FreePages: free, Running: v.running[name]}, nil
	}
}

func (v *loadView) set(free, running map[string]int) {
	v.mu.Lock()
	v.free, v.running = free, running
	v.mu.Unlock()
}

// Prefix affinity in the router's pick, with a fake load view (no worker,
// no clock, no timing): after tenant alice's first request lands on a
// decode and a prefill worker, those two are made the less attractive by
// load (decode: 60 of 100 pages free against 100; prefill: 3 requests
// queued against 0). Alice's repeats of the prompt, and a prompt sharing
// its first two of three pages, still go to both (the believed prefix
// outweighs the load: decode 2x0.6+1+2 against 3, prefill 0+2 against 1
// at the default weights); bob's identical prompt and alice's unrelated
// one go by load, elsewhere. With affinity off in the pick every
// request goes by load (the mutations node-prefix-affinity-off,
// node-decode-affinity-off and node-prefill-affinity-off).
func TestPickFollowsPrefixOverLoad(t *testing.T) {
	v := &loadView{}
	var ps, ds []Worker
	for _, n := range []string{"p1", "p2", "p3"} {
		ps = append(ps, Worker{Name: n, Prefill: stubPrefill{n}, Load: v.report(n)})
	}
	for _, n := range []string{"d1", "d2", "d3"} {
		ds = append(ds, Worker{Name: n, Decode: stubDecode{}, Load: v.report(n)})
	}
	c, err := NewCluster(ps, ds, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	prefillName := map[handoff.Prefill]string{}
	for _, w := range ps {
		prefillName[w.Prefill] = w.Name
	}
	tokens := func(base int32, n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = base + int32(i)
		}
		return out
	}
	prompt := tokens(1, 3*16+1) // three full pages at the cluster's page size
	pair := func(tenant string, p []int32) (dec, pre string) {
		t.Helper()
		c.Probe(context.Background())
		got, err := c.Pair(&engine.Request{Tenant: tenant, Prompt: p, MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got.Done(nil, nil)
		return got.DecodeName, prefillName[got.Prefill]
	}
	d0, p0 := pair("alice", prompt)
	v.set(map[string]int{d0: 60}, map[string]int{p0: 3})
	for i := range 6 {
		if d, p := pair("alice", prompt); d != d0 || p != p0 {
			t.Fatalf("alice's repeat %d went to %s/%s, want %s/%s (the workers believed to hold her prompt)", i, d, p, d0, p0)
		}
	}
	shared := append(tokens(1, 2*16), tokens(1000, 17)...)
	if d, p := pair("alice", shared); d != d0 || p != p0 {
		t.Fatalf("alice's prompt sharing 2 of 3 pages went to %s/%s, want %s/%s", d, p, d0, p0)
	}
	for _, r := range []struct {
		tenant string
		p      []int32
	}{{"bob", prompt}, {"alice", tokens(5000, 3*16+1)}} {
		if d, p := pair(r.tenant, r.p); d == d0 || p == p0 {
			t.Fatalf("%s's request with no believed prefix went to %s/%s, the loaded workers", r.tenant, d, p)
		}
	}
}

// A pairing refused because every decode worker failed the request (a
// retry or a migration's first ask, which then falls back to avoiding
// only the pair it leaves) records nothing: neither the affinity memory
// (alice's prompt is not believed held by a worker she was not sent to)
// nor the affinity metrics count a pick that did not happen.
func TestRefusedPickRecordsNoAffinity(t *testing.T) {
	c, err := NewCluster([]Worker{{Name: "p", Prefill: stubPrefill{"p"}}},
		[]Worker{{Name: "d1", Decode: stubDecode{}}, {Name: "d2", Decode: stubDecode{}}}, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Probe(context.Background())
	r := &engine.Request{Tenant: "alice", Prompt: make([]int32, 3*16+1), MaxTokens: 4}
	var avoid []*engine.Pair
	for _, n := range []string{"d1", "d2"} {
		avoid = append(avoid, &engine.Pair{Prefill: stubPrefill{"p"}, Decode: stubDecode{}, DecodeName: n})
	}
	if p, err := c.Pair(r, avoid); err == nil {
		t.Fatalf("both decode workers failed the request, yet it was paired with %s", p.DecodeName)
	}
	noAffinity(t, c, "a refused pairing")
}

// noAffinity fails t when c's affinity memory holds a page or an
// affinity pick was counted: what a pairing that sent nothing (what)
// must leave.
func noAffinity(t *testing.T, c *Cluster, what string) {
	t.Helper()
	c.mu.Lock()
	remembered, picks := c.dAff.Len()+c.pAff.Len(), c.affPicks["decode"]+c.affPicks["prefill"]
	c.mu.Unlock()
	if remembered != 0 || picks != 0 {
		t.Fatalf("%s left %d pages in the affinity memory and %d affinity picks counted", what, remembered, picks)
	}
}

// upSwitch is a worker connection a test takes down and up.
type upSwitch struct{ down atomic.Bool }

func (u *upSwitch) Check(context.Context) error {
	if u.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

// A pairing whose decode pick succeeded but whose prefill pick failed
// (the only prefill worker down) sent alice's request nowhere: the decode
// worker it picked is not believed to hold her prompt, and no affinity
// pick is counted. With the fake load view of TestPickFollowsPrefixOverLoad:
// d1 is the pick by load while the prefill worker is down; then d1 is made
// the loaded one and the prefill worker comes back, and alice's same
// prompt goes by load (d2 or d3). Had the failed pairing recorded d1, the
// belief would outweigh the load and send her there (mutation
// node-affinity-after-pair).
func TestFailedPrefillPickRecordsNoDecodeAffinity(t *testing.T) {
	v := &loadView{}
	conn := &upSwitch{}
	ps := []Worker{{Name: "p1", Prefill: stubPrefill{"p1"}, Conn: conn, Load: v.report("p1")}}
	var ds []Worker
	for _, n := range []string{"d1", "d2", "d3"} {
		ds = append(ds, Worker{Name: n, Decode: stubDecode{}, Load: v.report(n)})
	}
	c, err := NewCluster(ps, ds, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := &engine.Request{Tenant: "alice", Prompt: make([]int32, 3*16+1), MaxTokens: 4}
	c.Probe(ctx) // up and vetted
	v.set(map[string]int{"d2": 60, "d3": 60}, nil)
	conn.down.Store(true)
	c.Probe(ctx)
	if p, err := c.Pair(r, nil); err == nil {
		t.Fatalf("paired with %s while the only prefill worker is down", p.DecodeName)
	}
	noAffinity(t, c, "a pairing that failed at prefill")
	v.set(map[string]int{"d1": 60}, nil)
	conn.down.Store(false)
	c.Probe(ctx)
	got, err := c.Pair(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got.Done(nil, nil)
	if got.DecodeName == "d1" {
		t.Fatalf("alice's request went to d1, the loaded worker, by a belief from a pairing that sent it nothing")
	}
}
