package node

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// recDecode records which calls reached the decode worker.
type recDecode struct {
	handoff.Decode
	calls []string
}

func (r *recDecode) Reserve(context.Context, *handoff.Reserve) (*handoff.Reservation, error) {
	r.calls = append(r.calls, "reserve")
	return &handoff.Reservation{}, nil
}

func (r *recDecode) Commit(context.Context, *handoff.Commit) error {
	r.calls = append(r.calls, "commit")
	return nil
}

func (r *recDecode) Abort(context.Context, *handoff.Abort) error {
	r.calls = append(r.calls, "abort")
	return nil
}

func (r *recDecode) Load(context.Context) (*handoff.Load, error) {
	r.calls = append(r.calls, "load")
	return &handoff.Load{FreePages: 4, TotalPages: 4}, nil
}

// Issue 29: a decode worker that got SIGTERM refuses every new Reserve
// with handoff.ErrDraining (a refusal: errors.Is ErrRefused, which the
// engine retries on another pair at once) and answers its load report the
// same, without the call reaching the worker; the reservations it already
// holds go on (commit, abort reach it).
func TestDrainingDecodeRefusesOnlyNewReservations(t *testing.T) {
	var draining atomic.Bool
	inner := &recDecode{}
	d := DrainingDecode{Decode: inner, Draining: &draining}
	ctx := context.Background()
	if _, err := d.Reserve(ctx, &handoff.Reserve{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(ctx); err != nil {
		t.Fatal(err)
	}
	draining.Store(true)
	_, err := d.Reserve(ctx, &handoff.Reserve{})
	if !errors.Is(err, handoff.ErrDraining) || !errors.Is(err, handoff.ErrRefused) || errors.Is(err, handoff.ErrNoRoom) {
		t.Fatalf("Reserve while draining: %v, want %s (a refusal, not no_room)", err, handoff.ErrDraining.Code)
	}
	if _, err := d.Load(ctx); !errors.Is(err, handoff.ErrDraining) {
		t.Fatalf("load report while draining: %v, want %s", err, handoff.ErrDraining.Code)
	}
	if err := d.Commit(ctx, &handoff.Commit{Handoff: kv.ID{1}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Abort(ctx, &handoff.Abort{Handoff: kv.ID{2}}); err != nil {
		t.Fatal(err)
	}
	if got := inner.calls; len(got) != 4 || got[0] != "reserve" || got[1] != "load" || got[2] != "commit" || got[3] != "abort" {
		t.Fatalf("calls that reached the worker: %v, want reserve, load, commit, abort", got)
	}
	// Across the wire the code is all that travels.
	if e := handoff.FromWire(handoff.ToWire(err)); !errors.Is(e, handoff.ErrDraining) || !errors.Is(e, handoff.ErrRefused) {
		t.Fatalf("from the wire: %v", e)
	}
}

// Issue 29: the router stops picking a draining decode worker as soon as
// one request's reserve was refused with ErrDraining (the pair's Done) or
// a probe's load report was, before discovery drops it; /ready and
// sluice_cluster_worker_up count it out. A report without it (a worker
// restarted at the same address) brings it back.
func TestClusterStopsPickingDrainingDecode(t *testing.T) {
	var d1Draining atomic.Bool
	load := func(context.Context) (*handoff.Load, error) {
		if d1Draining.Load() {
			return nil, handoff.ErrDraining
		}
		return &handoff.Load{FreePages: 64, TotalPages: 64}, nil
	}
	steady := func(context.Context) (*handoff.Load, error) { return &handoff.Load{FreePages: 8, TotalPages: 64}, nil }
	c, err := NewCluster([]Worker{{Name: "p", Prefill: stubPrefill{"p"}}},
		[]Worker{{Name: "d1", Decode: stubDecode{}, Load: load}, {Name: "d2", Decode: stubDecode{}, Load: steady}}, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c.Probe(ctx)
	picks := func() map[string]int {
		n := map[string]int{}
		for range 8 {
			p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			n[p.DecodeName]++
			p.Done(nil, nil)
		}
		return n
	}
	if n := picks(); n["d1"] == 0 {
		t.Fatalf("d1 (more free pages) never picked before its drain: %v", n)
	}
	// A refused reserve, told through Done, before any probe.
	p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, nil)
	if err != nil || p.DecodeName != "d1" {
		t.Fatalf("pick %v %v, want d1", p, err)
	}
	p.Done(nil, handoff.ErrDraining)
	if n := picks(); n["d1"] != 0 {
		t.Fatalf("d1 refused as draining, yet picked: %v", n)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	ws, _, _ := c.Stats()
	for _, w := range ws {
		if w.Name == "d1" && !w.Draining {
			t.Fatalf("d1 not reported draining: %+v", w)
		}
	}
	// The probe keeps it out while its report says draining...
	d1Draining.Store(true)
	c.Probe(ctx)
	if n := picks(); n["d1"] != 0 {
		t.Fatalf("d1 reports draining, yet picked: %v", n)
	}
	// ... and brings it back once the report does not.
	d1Draining.Store(false)
	c.Probe(ctx)
	if n := picks(); n["d1"] == 0 {
		t.Fatalf("d1 answers again, never picked: %v", n)
	}
	// The probe alone (no request refused) is enough.
	d1Draining.Store(true)
	c.Probe(ctx)
	if n := picks(); n["d1"] != 0 {
		t.Fatalf("d1's probe said draining, yet picked: %v", n)
	}
}

// countPrefill counts the prefills that reached the worker.
type countPrefill struct{ n int }

func (c *countPrefill) Prefill(context.Context, *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	c.n++
	return &handoff.PrefillResult{}, nil
}

func (c *countPrefill) Load(context.Context) (*handoff.Load, error) {
	return &handoff.Load{TotalPages: 4, FreePages: 4}, nil
}

// The same for a prefill worker: draining, it refuses every new prompt and
// its load report with ErrDraining (the prompt never reaches the worker),
// and the router, told through the pair's Done, stops picking it.
func TestDrainingPrefillRefusesNewPrompts(t *testing.T) {
	var draining atomic.Bool
	inner := &countPrefill{}
	r := Routed{Inner: inner, Set: NewDecodeSet(map[string]handoff.Decode{"d": stubDecode{}}), Draining: &draining}
	ctx := context.Background()
	if _, err := r.Prefill(ctx, &handoff.PrefillRequest{Handoff: kv.ID{1}, Decode: "d"}); err != nil || inner.n != 1 {
		t.Fatalf("before the drain: %v, %d prefills", err, inner.n)
	}
	draining.Store(true)
	if _, err := r.Prefill(ctx, &handoff.PrefillRequest{Handoff: kv.ID{2}, Decode: "d"}); !errors.Is(err, handoff.ErrDraining) || inner.n != 1 {
		t.Fatalf("while draining: %v, %d prefills; want %s and none more", err, inner.n, handoff.ErrDraining.Code)
	}
	if _, err := r.Load(ctx); !errors.Is(err, handoff.ErrDraining) {
		t.Fatalf("load report while draining: %v", err)
	}

	c, err := NewCluster([]Worker{{Name: "p1", Prefill: stubPrefill{"p1"}}, {Name: "p2", Prefill: stubPrefill{"p2"}}},
		[]Worker{{Name: "d", Decode: stubDecode{}}}, DefaultWeights, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Probe(ctx)
	p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	leaving := p.Prefill.(stubPrefill).name
	p.Done(handoff.ErrDraining, nil)
	for range 6 {
		p, err := c.Pair(&engine.Request{Prompt: []int32{1}, MaxTokens: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if name := p.Prefill.(stubPrefill).name; name == leaving {
			t.Fatalf("prefill worker %s refused as draining, yet picked", name)
		}
		p.Done(nil, nil)
	}
}

// checkDecode is a decode connection whose peer is up or not.
type checkDecode struct {
	handoff.Decode
	up *atomic.Bool
}

func (c checkDecode) Check(context.Context) error {
	if c.up.Load() {
		return nil
	}
	return handoff.ErrTransport.With("dial refused")
}

// Issue 29 (a decode pod deleted under load): a prefill worker's
// readiness follows its decode set, not the connections it made at start.
// Its only decode worker at start leaves (the pod is gone for good) and a
// replacement joins at a new address: ready again; with none reachable,
// not ready, naming only the role and the code.
func TestPrefillReadinessFollowsDecodeSet(t *testing.T) {
	var first, second atomic.Bool
	first.Store(true)
	ds := NewDecodeSet(map[string]handoff.Decode{"10.0.0.1:9002": checkDecode{up: &first}})
	ctx := context.Background()
	if err := ds.Check(ctx); err != nil {
		t.Fatal(err)
	}
	first.Store(false) // the pod was deleted
	if err := ds.Check(ctx); err == nil || strings.Contains(err.Error(), "10.0.0") {
		t.Fatalf("no decode worker reachable: %v, want an error without the address", err)
	}
	ds.Remove("10.0.0.1:9002")
	second.Store(true)
	ds.Add("10.0.0.2:9002", checkDecode{up: &second}) // the replacement
	if err := ds.Check(ctx); err != nil {
		t.Fatalf("the replacement answers, yet not ready: %v", err)
	}
}
