package engine

import (
	"slices"
	"testing"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

// A driven batch (no goroutine; the test is its driver and steps it) over
// a pool of 40 tokens, with three sequences that together need 77: growth
// runs the pool dry, the latest arrival is preempted while it computes its
// prompt or decodes, and resumes by rebuilding its KV. Every output equals
// the toy reference computed without a KV cache, the preemption phases are
// reported, and the pool is whole afterwards.
func TestDrivenBatchPreemptsAndMatches(t *testing.T) {
	m := newToy()
	cfg := toyConfig(m, 10) // 40 tokens; chunks of 5
	raw, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: m.layers, KVDim: m.kvdim, PageSize: cfg.PageSize}, Pages: cfg.PoolPages, Order: kv.LIFO})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	woken := 0
	b, err := NewDrivenBatch(cfg, KVPool(raw), func() { woken++ })
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	type result struct {
		toks []int32
		end  *DrivenItem
	}
	// The pool is full once all three have their prompt pages; the first
	// needs a page at its second decode step, while the last still computes
	// its 20-token prompt in chunks: it is preempted there, and again later.
	prompts := [][]int32{prompt(1, 7), prompt(2, 5), prompt(3, 20)}
	maxes := []int{20, 15, 10}
	res := make([]*result, len(prompts))
	phases := map[string]int{}
	for i, p := range prompts {
		o := kv.Owner{Tenant: "t", ID: kv.ID{byte(i + 1)}}
		table, err := raw.Reserve(o, kv.PagesFor(len(p)+1, cfg.PageSize))
		if err != nil {
			t.Fatal(err)
		}
		r := &result{}
		res[i] = r
		b.Add(o, table, p, 0, maxes[i], true, sample.Params{}, func(it DrivenItem) {
			if it.Done || it.Err != nil {
				r.end = &it
				return
			}
			r.toks = append(r.toks, it.Token)
		}, func(phase string) { phases[phase]++ })
	}
	if woken == 0 {
		t.Fatal("adding sequences never woke the driver")
	}
	for steps := 0; b.Step(); steps++ {
		if steps > 1000 {
			t.Fatal("the batch never drained")
		}
	}
	for i, r := range res {
		want := toyReference(m, prompts[i], maxes[i], true)
		if r.end == nil || r.end.Err != nil || !slices.Equal(r.toks, want) {
			t.Fatalf("sequence %d: %v (end %+v), want %v", i, r.toks, r.end, want)
		}
		if r.end.Prompt != len(prompts[i]) || r.end.Completion != maxes[i] {
			t.Fatalf("sequence %d: usage %d+%d, want %d+%d", i, r.end.Prompt, r.end.Completion, len(prompts[i]), maxes[i])
		}
	}
	st := b.Stats()
	if st.Preemptions < 1 || phases["prompt"] == 0 || phases["prompt"]+phases["decode"]+phases["rebuild"] != int(st.Preemptions) {
		t.Fatalf("%d preemptions, phases %v: the pool did not force them or a phase went unreported", st.Preemptions, phases)
	}
	t.Logf("%d preemptions by phase %v, %d positions recomputed", st.Preemptions, phases, st.RecomputedTokens)
	if err := raw.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}
