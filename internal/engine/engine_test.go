package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

type result struct {
	tokens []int32
	lps    []*sample.Logprobs // each token's, when asked
	final  Event
}

// collect reads a stream to its end; it fails the test on a hang.
func collect(t testing.TB, s Stream) result {
	t.Helper()
	var r result
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-s.Events():
			if !ok {
				return r
			}
			if ev.Done || ev.Err != nil {
				r.final = ev
				continue
			}
			r.tokens = append(r.tokens, ev.Token)
			r.lps = append(r.lps, ev.Logprobs)
		case <-timeout:
			t.Fatalf("stream did not end within 60s (hang)")
		}
	}
}

func toyConfig(m Runtime, pages int) Config {
	return Config{Model: m, Context: pages * 4, PoolPages: pages, PageSize: 4, Order: kv.LIFO, ChunkTokens: 5, StepTokens: 24, BatchBytes: 3 * 4 * 2 * 4 * 4 * 2}
}

// colocatedAndLocal builds the two engines an oracle test compares: a
// colocated one and an in-process disaggregated one (prefill, decode),
// closed when the test ends.
func colocatedAndLocal(t *testing.T, col, prefill, decode Config) (*Colocated, *Local) {
	t.Helper()
	c, err := NewColocated(col)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, c) })
	l, err := NewLocal(prefill, decode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, l) })
	return c, l
}

// toyDecodeWorker builds a decode worker over a pool of pages pages
// (toyConfig), closed when the test ends.
func toyDecodeWorker(t *testing.T, m Runtime, pages int) *DecodeWorker {
	t.Helper()
	dw, err := NewDecodeWorker(toyConfig(m, pages))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dw.Close() })
	return dw
}

// toyWorkers builds a decode worker and a prefill worker handing off to
// it directly, both over pools of pages pages, closed when the test ends.
func toyWorkers(t *testing.T, m Runtime, pages int) (*DecodeWorker, *PrefillWorker) {
	t.Helper()
	dw := toyDecodeWorker(t, m, pages)
	pw, err := NewPrefillWorker(toyConfig(m, pages), dw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pw.Close() })
	return dw, pw
}

func prompt(seed, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((seed*31 + i*17 + 3) % 61)
	}
	return p
}

func TestColocatedMatchesReference(t *testing.T) {
	m := newToy()
	e, err := NewColocated(toyConfig(m, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e)
	for _, n := range []int{1, 3, 4, 5, 9, 17} {
		p := prompt(n, n)
		s, err := e.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: 7})
		if err != nil {
			t.Fatal(err)
		}
		r := collect(t, s)
		want := toyReference(m, p, 7, false)
		if !slices.Equal(r.tokens, want) || !r.final.Done || r.final.Finish != "length" {
			t.Fatalf("prompt %d: got %v %+v, want %v length", n, r.tokens, r.final, want)
		}
		if r.final.Usage != (Usage{PromptTokens: n, CompletionTokens: 7}) {
			t.Fatalf("usage %+v", r.final.Usage)
		}
	}
	if err := e.Pool().CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// runMany submits reqs concurrently and returns each one's outcome.
func runMany(t *testing.T, e Engine, reqs []*Request) []result {
	t.Helper()
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A client retries "overloaded" (429) and "kv_capacity_exhausted"
			// (503) as a real one would;
			// every request then runs, through a pool far smaller than the
			// sum of their reservations, so pages are reused constantly.
			for {
				s, err := e.Submit(context.Background(), r)
				if ee, ok := err.(*Error); ok && (ee.Code == CodeOverloaded || ee.Code == CodeKVCapacity) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					out[i].final = Event{Err: err}
					return
				}
				out[i] = collect(t, s)
				if ee, ok := out[i].final.Err.(*Error); ok && (ee.Code == CodeOverloaded || ee.Code == CodeKVCapacity) {
					continue
				}
				return
			}
		}()
	}
	wg.Wait()
	return out
}

func manyRequests(n int) []*Request {
	var reqs []*Request
	for i := 0; i < n; i++ {
		reqs = append(reqs, &Request{
			ID:        fmt.Sprint(i),
			Tenant:    fmt.Sprintf("tenant-%d", i%4),
			Prompt:    prompt(i, 1+(i*7)%23),
			MaxTokens: 1 + (i*5)%11,
		})
	}
	return reqs
}

// TestDisaggregatedEqualsColocatedToy is the determinism oracle on the toy
// model: small LIFO pools force immediate page reuse across tenants.
func TestDisaggregatedEqualsColocatedToy(t *testing.T) {
	m := newToy()
	reqs := manyRequests(40)
	col, loc := colocatedAndLocal(t, toyConfig(m, 40), toyConfig(m, 40), toyConfig(m, 40))

	a := runMany(t, col, reqs)
	b := runMany(t, loc, reqs)
	for i, r := range reqs {
		want := toyReference(m, r.Prompt, r.MaxTokens, false)
		if a[i].final.Err != nil || !slices.Equal(a[i].tokens, want) {
			t.Fatalf("colocated %d: %v %v want %v", i, a[i].tokens, a[i].final.Err, want)
		}
		if b[i].final.Err != nil {
			t.Fatalf("disaggregated %d: %v", i, b[i].final.Err)
		}
		if !slices.Equal(b[i].tokens, want) {
			t.Fatalf("disaggregated %d: %v want %v", i, b[i].tokens, want)
		}
		if b[i].final.Usage.PromptTokens != len(r.Prompt) || b[i].final.Usage.CompletionTokens != len(want) {
			t.Fatalf("disaggregated %d usage %+v", i, b[i].final.Usage)
		}
	}
	for _, p := range []*kv.Pool{col.Pool(), loc.Prefill.Pool(), loc.Decode.Pool()} {
		if err := p.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSeededSamplingReplaysDisaggregated: a seeded non-greedy request gives
// the same tokens disaggregated as colocated: the decode worker continues
// the random stream the prefill worker started with the first token.
func TestSeededSamplingReplaysDisaggregated(t *testing.T) {
	m := newToy()
	col, loc := colocatedAndLocal(t, toyConfig(m, 64), toyConfig(m, 64), toyConfig(m, 64))
	var reqs []*Request
	for i := 0; i < 8; i++ {
		reqs = append(reqs, &Request{Tenant: "a", Prompt: prompt(i, 3+i), MaxTokens: 12, IgnoreEOS: true,
			Sampling: sample.Params{Temperature: 8, Seed: uint64(100 + i)}})
	}
	a := runMany(t, col, reqs)
	b := runMany(t, loc, reqs)
	distinct := 0
	for i := range reqs {
		if a[i].final.Err != nil || b[i].final.Err != nil {
			t.Fatalf("%d: %v %v", i, a[i].final.Err, b[i].final.Err)
		}
		if !slices.Equal(a[i].tokens, b[i].tokens) {
			t.Errorf("request %d: disaggregated %v, colocated %v", i, b[i].tokens, a[i].tokens)
		}
		if !slices.Equal(a[i].tokens, toyReference(m, reqs[i].Prompt, 12, true)) {
			distinct++
		}
	}
	if distinct == 0 {
		t.Fatal("sampling at temperature 8 never left the greedy path: the test shows nothing")
	}
}

// closeWithin closes an engine, failing the test instead of hanging it
// when requests still in flight keep the drain from ending within 30s.
func closeWithin(t testing.TB, e interface{ Close(context.Context) error }) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil && ctx.Err() != nil {
		t.Errorf("closing the engine: requests still in flight after 30s (%v)", err)
	}
}
