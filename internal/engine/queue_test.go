package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/kv"
)

// submitAll submits every request at once, with no retry (a 429 or 503 is
// an outcome), and collects each.
func submitAll(t *testing.T, e Engine, reqs []*Request) []result {
	t.Helper()
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		goSubmit(t, e, r, &out[i], &wg)
	}
	wg.Wait()
	return out
}

// goSubmit submits r in its own goroutine, counted in wg, and collects its
// stream into out (a refusal is an outcome: it becomes the final event).
func goSubmit(t *testing.T, e Engine, r *Request, out *result, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			out.final = Event{Err: err}
			return
		}
		*out = collect(t, s)
	}()
}

// A burst far larger than the pool (40 requests reserving up to 39 tokens
// each, 560 in all, a pool of 48 tokens) waits in the queue instead of being refused:
// no error at all, and every output equals the reference computed without
// any KV cache; every pool is whole afterwards. Colocated and
// disaggregated (the decode pool is the bottleneck: the router's queue is
// woken by completions).
func TestBurstLargerThanPoolQueuesWithoutErrors(t *testing.T) {
	m := newToy()
	reqs := manyRequests(40)
	for _, r := range reqs {
		r.MaxTokens += 5
	}
	col, loc := colocatedAndLocal(t, toyConfig(m, 12), toyConfig(m, 16), toyConfig(m, 12))
	for name, e := range map[string]Engine{"colocated": col, "disaggregated": loc} {
		got := submitAll(t, e, reqs)
		for i, r := range reqs {
			want := toyReference(m, r.Prompt, r.MaxTokens, false)
			if got[i].final.Err != nil {
				t.Fatalf("%s: request %d failed under a burst: %v", name, i, got[i].final.Err)
			}
			if !slices.Equal(got[i].tokens, want) {
				t.Fatalf("%s: request %d: %v, want %v", name, i, got[i].tokens, want)
			}
		}
	}
	for _, p := range []*kv.Pool{col.Pool(), loc.Prefill.Pool(), loc.Decode.Pool()} {
		if err := p.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	}
}

// waitQueued waits until the engine's queue holds n requests.
func waitQueued(t *testing.T, a *admission, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d, want %d", a.stats().Waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// countingPool counts reservations: a request that left the queue must
// never have made one.
type countingPool struct {
	pagePool
	reserves atomic.Int64
}

func (p *countingPool) Reserve(o kv.Owner, n int) ([]kv.PageRef, error) {
	p.reserves.Add(1)
	return p.pagePool.Reserve(o, n)
}

// Past the running bound a request waits; past the queue bound it is
// refused at once with 429 (the router adds Retry-After). A queued request
// whose client leaves is out at once and never reserves a page; one that
// waits longer than the queue timeout gets 503 queue_timeout.
func TestQueueFullCancelAndTimeout(t *testing.T) {
	g := &gated{toy: newToy(), after: 0, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := toyConfig(g, 32)
	cfg.MaxConcurrency = 1
	cfg.MaxQueue = 2
	cfg.QueueTimeout = time.Hour
	e, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e)
	raw := e.Pool()
	cp := &countingPool{pagePool: e.pool}
	e.pool = cp
	s1, err := e.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 5), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	g.wait(t) // s1 runs and holds the only slot

	type sub struct {
		s   Stream
		err error
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch2, ch3 := make(chan sub, 1), make(chan sub, 1)
	go func() {
		s, err := e.Submit(ctx2, &Request{Tenant: "b", Prompt: prompt(2, 5), MaxTokens: 3})
		ch2 <- sub{s, err}
	}()
	waitQueued(t, e.adm, 1)
	go func() {
		s, err := e.Submit(context.Background(), &Request{Tenant: "c", Prompt: prompt(3, 5), MaxTokens: 3})
		ch3 <- sub{s, err}
	}()
	waitQueued(t, e.adm, 2)
	_, err = e.Submit(context.Background(), &Request{Tenant: "d", Prompt: prompt(4, 5), MaxTokens: 3})
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != CodeOverloaded || ee.Status != http.StatusTooManyRequests {
		t.Fatalf("queue full: want overloaded 429, got %v", err)
	}

	cancel2()
	r2 := <-ch2
	if !errors.As(r2.err, &ee) || ee.Code != CodeCancelled || r2.s != nil {
		t.Fatalf("cancelled while queued: want %s, got %v", CodeCancelled, r2.err)
	}
	waitQueued(t, e.adm, 1)
	if n := cp.reserves.Load(); n != 1 {
		t.Fatalf("%d reservations with one request running, want 1", n)
	}

	close(g.release)
	if r := collect(t, s1); r.final.Err != nil {
		t.Fatal(r.final.Err)
	}
	r3 := <-ch3
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	r := collect(t, r3.s)
	if want := toyReference(g.toy, prompt(3, 5), 3, false); r.final.Err != nil || !slices.Equal(r.tokens, want) {
		t.Fatalf("queued request: %v %v, want %v", r.tokens, r.final.Err, want)
	}
	// The cancelled request never reserved: two reservations in all.
	if n := cp.reserves.Load(); n != 2 {
		t.Fatalf("%d reservations, want 2 (the cancelled request reserved)", n)
	}
	if err := raw.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

func TestQueueTimeoutIs503(t *testing.T) {
	g := &gated{toy: newToy(), after: 0, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := toyConfig(g, 32)
	cfg.MaxConcurrency = 1
	cfg.QueueTimeout = 20 * time.Millisecond
	e, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e)
	s1, err := e.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 5), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	g.wait(t)
	_, err = e.Submit(context.Background(), &Request{Tenant: "b", Prompt: prompt(2, 5), MaxTokens: 3})
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != CodeQueueTimeout || ee.Status != http.StatusServiceUnavailable {
		t.Fatalf("want queue_timeout 503, got %v", err)
	}
	close(g.release)
	if r := collect(t, s1); r.final.Err != nil {
		t.Fatal(r.final.Err)
	}
}

// The disaggregated engine: a request cancelled while it waits for room in
// the decode pool never sends a Reserve.
func TestDisaggCancelWhileQueuedNeverReserves(t *testing.T) {
	g := &gated{toy: newToy(), after: 0, entered: make(chan struct{}), release: make(chan struct{})}
	dw := toyDecodeWorker(t, g, 32)
	cd := &countingDecode{Decode: dw}
	pw, err := NewPrefillWorker(toyConfig(newToy(), 32), dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: 61, Context: 128, MaxConcurrency: 1}, pw, cd)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	s1, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 5), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	g.wait(t) // decoding, holding the only slot
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := eng.Submit(ctx, &Request{Tenant: "b", Prompt: prompt(2, 5), MaxTokens: 3})
		done <- err
	}()
	waitQueued(t, eng.adm, 1)
	cancel()
	var ee *Error
	if err := <-done; !errors.As(err, &ee) || ee.Code != CodeCancelled {
		t.Fatalf("want cancelled, got %v", err)
	}
	close(g.release)
	if r := collect(t, s1); r.final.Err != nil {
		t.Fatal(r.final.Err)
	}
	if n := cd.reserves.Load(); n != 1 {
		t.Fatalf("%d Reserve calls, want 1 (the cancelled request reserved)", n)
	}
	for _, p := range []*kv.Pool{pw.Pool(), dw.Pool()} {
		if err := p.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	}
}

// Fairness: one tenant sends 10x the requests of two others, all waiting
// at once behind a running request. The queue's discipline bounds how many
// of the heavy tenant's tokens are admitted ahead of a light tenant's
// request (docs/operations.md, "Queueing"): sum over the other tenants j of
// (Quantum*w_j + C - 1), Quantum = C = the context, here 32 tokens. Every
// light request must be admitted within that bound of the heavy tenant's
// (and the other light tenant's) tokens, counted from when it was the
// oldest of its tenant. Measured in admissions, not in wall time.
func TestFairnessHeavyTenantCannotStarveLightOnes(t *testing.T) {
	g := &gated{toy: newToy(), after: 0, entered: make(chan struct{}), release: make(chan struct{})}
	cfg := toyConfig(g, 8) // context 32
	cfg.MaxConcurrency = 1
	e, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e)
	var order []string
	e.adm.onAdmit = func(tenant string) { order = append(order, tenant) }
	s0, err := e.Submit(context.Background(), &Request{Tenant: "warm", Prompt: prompt(0, 5), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	g.wait(t)

	var reqs []*Request
	for i := range 30 {
		reqs = append(reqs, &Request{Tenant: "heavy", Prompt: prompt(i, 5), MaxTokens: 3})
	}
	for i := range 3 {
		reqs = append(reqs, &Request{Tenant: "b", Prompt: prompt(100+i, 5), MaxTokens: 3})
		reqs = append(reqs, &Request{Tenant: "c", Prompt: prompt(200+i, 5), MaxTokens: 3})
	}
	results := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		goSubmit(t, e, r, &results[i], &wg)
		// Arrival order fixed: the heavy flood first, then the light ones.
		waitQueued(t, e.adm, i+1)
	}
	close(g.release)
	collect(t, s0)
	wg.Wait()
	for i, r := range results {
		if r.final.Err != nil {
			t.Fatalf("request %d: %v", i, r.final.Err)
		}
	}
	const cost, quantum, maxCost = 8, 32, 32
	bound := 2 * (quantum + maxCost - 1) // two other tenants, weight 1
	// Tokens of other tenants admitted since the tenant's previous
	// admission (each light tenant stays backlogged until its last).
	othersBefore := map[string]int{"heavy": 0, "b": 0, "c": 0}
	for _, tenant := range order[1:] {
		if tenant != "heavy" {
			if got := othersBefore[tenant]; got > bound {
				t.Fatalf("tenant %s waited for %d tokens of others (order %v), bound %d", tenant, got, order, bound)
			}
		}
		for k := range othersBefore {
			if k != tenant {
				othersBefore[k] += cost
			}
		}
		othersBefore[tenant] = 0
	}
	// And concretely: the light tenants are done before the heavy
	// tenant's first 16 requests are.
	last := 0
	for i, tenant := range order {
		if tenant == "b" || tenant == "c" {
			last = i
		}
	}
	heavyBefore := 0
	for _, tenant := range order[:last] {
		if tenant == "heavy" {
			heavyBefore++
		}
	}
	if heavyBefore > 16 {
		t.Fatalf("%d heavy requests admitted before the last light one: %v", heavyBefore, order)
	}
	t.Logf("admission order: %v", fmt.Sprint(order))
}
