package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/testenv"
)

var (
	storiesOnce sync.Once
	storiesRT   *ModelRuntime
	storiesErr  error
)

func storiesRuntime(t testing.TB) *ModelRuntime {
	t.Helper()
	p := testenv.Shared(t, "models/stories260K.gguf")
	storiesOnce.Do(func() {
		f, err := gguf.Open(p)
		if err != nil {
			storiesErr = err
			return
		}
		storiesRT, _, storiesErr = LoadRuntime("stories260K", f)
	})
	if storiesErr != nil {
		t.Fatal(storiesErr)
	}
	return storiesRT
}

type refCase struct {
	Prompt []int32 `json:"prompt_token_ids"`
	Gen    []int32 `json:"generated_token_ids"`
}

// storiesCases are llama.cpp's greedy outputs for stories260K
// (shared/reference/reference.json): the independent reference.
func storiesCases(t testing.TB) []refCase {
	t.Helper()
	p := testenv.Shared(t, "reference/reference.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Models []struct {
			File  string    `json:"file"`
			Cases []refCase `json:"cases"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, m := range doc.Models {
		if m.File == "stories260K.gguf" {
			return m.Cases
		}
	}
	t.Fatal("reference.json has no stories260K cases")
	return nil
}

func storiesConfig(rt Runtime, pages int) Config {
	return Config{Model: rt, Context: 256, PoolPages: pages, PageSize: 16, Order: kv.LIFO,
		ChunkTokens: 7, StepTokens: 64, BatchBytes: 2 * 5 * 32 * 2 * 4 * 16}
}

// storiesRequests builds n requests from several tenants: each is a
// reference prompt followed by k of llama.cpp's own greedy tokens, so the
// expected continuation is the rest of llama.cpp's output (greedy decoding
// is its own teacher forcing).
func storiesRequests(t testing.TB, n int) ([]*Request, [][]int32) {
	cases := storiesCases(t)
	var reqs []*Request
	var want [][]int32
	for i := 0; i < n; i++ {
		c := cases[i%len(cases)]
		k := (i * 7) % 21
		max := 4 + (i*5)%9
		p := append(append([]int32(nil), c.Prompt...), c.Gen[:k]...)
		reqs = append(reqs, &Request{ID: fmt.Sprint(i), Tenant: fmt.Sprintf("tenant-%d", i%3), Prompt: p, MaxTokens: max, IgnoreEOS: true})
		want = append(want, c.Gen[k:k+max])
	}
	return reqs, want
}

// TestOracleStories is the determinism oracle: greedy on stories260K, 36
// concurrent requests from 3 tenants with prompt lengths 5 to 40, through
// small LIFO pools (every release is reused at once). Disaggregated output
// equals colocated output token for token, both equal llama.cpp's, and
// every pool is entirely free afterwards.
//
// Batching is made to happen, not hoped for: each engine's first forward
// step is held (stepGate) until every request has arrived, so the next
// step batches the ones that queued meanwhile whatever the machine's load
// (on a busy machine each request could otherwise finish before the next
// arrived).
func TestOracleStories(t *testing.T) {
	rt := storiesRuntime(t)
	reqs, want := storiesRequests(t, 36)

	cg, pg, dg := newStepGate(t, rt), newStepGate(t, rt), newStepGate(t, rt)
	col, err := NewColocated(storiesConfig(cg, 24))
	if err != nil {
		t.Fatal(err)
	}
	loc, err := NewLocal(storiesConfig(pg, 16), storiesConfig(dg, 24))
	if err != nil {
		t.Fatal(err)
	}
	allArrived := func(a *admission) func() bool {
		return func() bool { s := a.stats(); return s.Waiting+s.Running == len(reqs) }
	}
	go cg.openWhen(t, "every request queued or running on the colocated engine", allArrived(col.adm))
	a := runMany(t, col, reqs)
	go func() {
		pg.openWhen(t, "every request queued or running on the router", allArrived(loc.adm))
		// Decode's first step is held until two handoffs committed.
		dg.openWhen(t, "two handoffs committed", func() bool { return loc.Prefill.Stats().Committed >= 2 })
	}()
	b := runMany(t, loc, reqs)
	for i := range reqs {
		if a[i].final.Err != nil || b[i].final.Err != nil {
			t.Fatalf("request %d: colocated %v, disaggregated %v", i, a[i].final.Err, b[i].final.Err)
		}
		if !slices.Equal(a[i].tokens, b[i].tokens) {
			t.Errorf("request %d: disaggregated %v != colocated %v", i, b[i].tokens, a[i].tokens)
		}
		if !slices.Equal(a[i].tokens, want[i]) {
			t.Errorf("request %d: colocated %v != llama.cpp %v", i, a[i].tokens, want[i])
		}
		if u := b[i].final.Usage; u.PromptTokens != len(reqs[i].Prompt) || u.CompletionTokens != len(want[i]) {
			t.Errorf("request %d: usage %+v, want %d prompt %d completion (I9)", i, u, len(reqs[i].Prompt), len(want[i]))
		}
	}
	if col.sched.maxSeqs.Load() < 2 || loc.Decode.sched.maxSeqs.Load() < 2 || loc.Prefill.sched.maxSeqs.Load() < 2 {
		t.Errorf("no step ever batched two sequences (colocated %d, prefill %d, decode %d): batching did not happen",
			col.sched.maxSeqs.Load(), loc.Prefill.sched.maxSeqs.Load(), loc.Decode.sched.maxSeqs.Load())
	}
	// A prefill fails only when decode revoked its reservation (the
	// tenants' KV quota), and then its request went back to the queue.
	if ps := loc.Prefill.Stats(); ps.Committed != int64(len(reqs)) || ps.Failed != loc.Decode.SchedStats().Revoked || ps.Bytes == 0 {
		t.Errorf("prefill stats %+v after %d requests, %d reservations revoked", ps, len(reqs), loc.Decode.SchedStats().Revoked)
	}
	// Pages were reused, many times over: more releases than pages.
	if st := loc.Decode.Pool().Stats(); st.Scrubbed <= uint64(st.Pages) {
		t.Errorf("decode pool scrubbed %d pages of %d: the pool was not small enough to force reuse", st.Scrubbed, st.Pages)
	}
	closeWithin(t, col)
	closeWithin(t, loc)
	for name, p := range map[string]*kv.Pool{"colocated": col.Pool(), "prefill": loc.Prefill.Pool(), "decode": loc.Decode.Pool()} {
		if err := p.CheckDrained(); err != nil {
			t.Errorf("%s pool not drained: %v", name, err)
		}
	}
}

// stepGate is a model whose first forward step waits until open: requests
// arriving meanwhile queue up, so the step after it batches them.
type stepGate struct {
	Runtime
	steps  atomic.Int64
	opened chan struct{}
	once   sync.Once
}

// newStepGate wraps rt; the gate opens at the latest when the test ends,
// so a failure never leaves a step waiting.
func newStepGate(t *testing.T, rt Runtime) *stepGate {
	g := &stepGate{Runtime: rt, opened: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *stepGate) open() { g.once.Do(func() { close(g.opened) }) }

// openWhen opens the gate once cond holds, polling for at most a minute;
// past that it reports what it waited for and opens anyway.
func (g *stepGate) openWhen(t *testing.T, what string, cond func() bool) {
	defer g.open()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("step gate: waited a minute for %s", what)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// Fingerprint passes the model's through (I13: the roles must agree).
func (g *stepGate) Fingerprint() model.Fingerprint { return FingerprintOf(g.Runtime) }

func (g *stepGate) NewForwarder(n int) Forwarder { return gateFwd{g, g.Runtime.NewForwarder(n)} }

type gateFwd struct {
	g *stepGate
	f Forwarder
}

func (f gateFwd) Forward(s []Step) []StepResult {
	if f.g.steps.Add(1) == 1 {
		<-f.g.opened
	}
	return f.f.Forward(s)
}
