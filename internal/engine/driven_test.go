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

// A driven prefill batch (the prefill worker's scheduler for the
// simulator): a prompt the driver adds at a pause point of another
// tenant's prompt step (pause) runs its first chunk there, as a nested
// step; every first token is the one drawn alone; the pages stay the
// driver's however a prompt ends (a cancelled one's too), and the pool
// is whole once the driver releases them.
func TestDrivenPrefillYieldsAtPausePoints(t *testing.T) {
	flood, light, third := prompt(3, 60), prompt(4, 12), prompt(5, 9)
	type run struct {
		b     *DrivenPrefill
		pool  pagePool
		probe *yieldProbe
		out   map[string][]DrivenItem
		hows  map[string]string
		held  map[string][]kv.PageRef
		owner map[string]kv.Owner
		fed   map[string][]int // chunked's reports
	}
	newRun := func(pause func(r *run)) *run {
		r := &run{probe: &yieldProbe{Runtime: storiesRuntime(t)}, out: map[string][]DrivenItem{}, hows: map[string]string{},
			held: map[string][]kv.PageRef{}, owner: map[string]kv.Owner{}, fed: map[string][]int{}}
		cfg := storiesConfig(r.probe, 32)
		cfg.ChunkTokens, cfg.StepTokens = 16, 64
		pool, err := cfg.withDefaults().newPool()
		if err != nil {
			t.Fatal(err)
		}
		r.pool = pool
		b, err := NewDrivenPrefill(cfg, pool, func() {}, func() { pause(r) })
		if err != nil {
			t.Fatal(err)
		}
		r.b = b
		t.Cleanup(b.Close)
		return r
	}
	add := func(r *run, name, tenant string, p []int32) (cancel func()) {
		o := kv.Owner{Tenant: tenant, ID: newID()}
		table, err := r.pool.Reserve(o, kv.PagesFor(len(p), 16))
		if err != nil {
			t.Fatal(err)
		}
		r.held[name], r.owner[name] = table, o
		return r.b.Add(o, table, p, 0, sample.Params{}, 0, func(it DrivenItem) { r.out[name] = append(r.out[name], it) },
			func(how string) { r.hows[name] = how }, func(fed int) { r.fed[name] = append(r.fed[name], fed) })
	}
	drain := func(r *run) {
		for i := 0; r.b.Step(); i++ {
			if i > 100 {
				t.Fatal("the batch never emptied")
			}
		}
		for name, table := range r.held {
			if err := r.pool.Release(r.owner[name], table); err != nil {
				t.Errorf("%s: the driver's pages: %v", name, err)
			}
		}
		if err := rawPool(r.pool).CheckDrained(); err != nil {
			t.Errorf("pool not drained: %v", err)
		}
	}
	alone := map[string]int32{}
	for name, p := range map[string][]int32{"a": flood, "b": light} {
		r := newRun(func(*run) {})
		add(r, name, "x", p)
		drain(r)
		if len(r.out[name]) != 2 || r.out[name][1].Finish != "length" {
			t.Fatalf("%s alone: %+v", name, r.out[name])
		}
		alone[name] = r.out[name][0].Token
	}

	var cancelC func()
	pauses := 0
	r := newRun(func(r *run) {
		pauses++
		if pauses == 1 {
			add(r, "b", "b", light) // arrives during a's first step
			cancelC = add(r, "c", "c", third)
			cancelC() // seen at the step boundary: it never runs
		}
	})
	add(r, "a", "a", flood)
	drain(r)
	if r.hows["b"] != StartNested || len(r.probe.nested) != 1 || r.b.Stats().NestedSteps != 1 {
		t.Fatalf("b started %q; nested steps %v (%d counted), want one at a's first pause point", r.hows["b"], r.probe.nested, r.b.Stats().NestedSteps)
	}
	for _, name := range []string{"a", "b"} {
		it := r.out[name]
		if len(it) != 2 || it[0].Done || it[0].Token != alone[name] || !it[1].Done || it[1].Finish != "length" || it[1].Prompt != len(map[string][]int32{"a": flood, "b": light}[name]) {
			t.Errorf("%s: %+v, want first token %d then the end", name, it, alone[name])
		}
	}
	// a's chunks but the last are reported, in order, within its prompt
	// (16-token chunks: 60 tokens take four).
	if f := r.fed["a"]; len(f) != 3 || !slices.IsSorted(f) || f[0] <= 0 || f[2] >= len(flood) {
		t.Errorf("a's chunks reported computed: %v", f)
	}
	if it := r.out["c"]; len(it) != 1 || it[0].Finish != "cancelled" || r.hows["c"] != "" {
		t.Errorf("cancelled arrival: %+v, started %q", it, r.hows["c"])
	}
}
