package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Random arrivals during steps that pause (red team of the nested budget,
// which lets several nested passes run in one paused step): prompts of
// four tenants, 1 to 40 tokens, arrive at random pause points while
// floods of a run, on pools from tight (sequences grow page by page,
// some wait for pages or are preempted and recomputed) to roomy; some are
// cancelled as they arrive. Every sequence that is not cancelled emits
// bitwise what it emits alone; a cancelled one emits a prefix of that,
// then its end; every page comes back (drain checks the pool). Seeded,
// so a failure names its seed.
func TestYieldRandomArrivalsBitwise(t *testing.T) {
	alone := map[string][]string{}
	aloneOf := func(key string, p []int32) []string {
		if out, ok := alone[key]; ok {
			return out
		}
		r := newYieldRig(t, 64)
		r.add("x", "x", p, 4)
		r.drain()
		alone[key] = r.out["x"]
		return alone[key]
	}
	tenants := []string{"a", "b", "c", "d"}
	for seed := range uint64(16) {
		rng := rand.New(rand.NewPCG(seed, 28))
		pages := []int{6, 9, 16, 64}[rng.IntN(4)]
		// The forward pass's fixed cost as a server measures it (any F
		// from 1 to the step budget; forwardcost.go), drawn apart so the
		// seeds' arrivals stay as they were.
		forward := randomForward(rand.New(rand.NewPCG(seed, 29)), 64)
		r := newYieldRigWith(t, pages, func(c *Config) { c.NestForward = forward })
		prompts := map[string][]int32{}
		refs := map[string][]string{}
		cancelled := map[string]bool{}
		n := 0
		add := func(tenant string, cancel bool) {
			ps, ln := rng.IntN(50), 1+rng.IntN(40)
			if tenant == "a" {
				ln = 30 + rng.IntN(30) // the flood's longer prompts
			}
			name := fmt.Sprintf("%s%d", tenant, n)
			n++
			p := prompt(ps, ln)
			prompts[name] = p
			refs[name] = aloneOf(fmt.Sprint(ps, "/", ln), p)
			q := r.addWith(name, tenant, p, 4, 0) // pages grow through the batch
			if cancel {
				cancelled[name] = true
				q.cancel.Store(true)
			}
		}
		add("a", false)
		add("a", false)
		r.probe.onPause = func(step, point int) {
			if rng.IntN(6) != 0 {
				return
			}
			for range 1 + rng.IntN(2) {
				add(tenants[rng.IntN(len(tenants))], rng.IntN(10) == 0)
			}
		}
		for i := 0; r.s.turn(); i++ {
			if i > 2000 {
				t.Fatalf("seed %d: the batch never emptied", seed)
			}
			if n > 30 {
				r.probe.onPause = nil
			}
		}
		if err := r.pool.CheckDrained(); err != nil {
			t.Fatalf("seed %d: pool not drained: %v", seed, err)
		}
		nested := len(r.probe.nested)
		st := r.s.stats()
		t.Logf("seed %d: pool %d, forward %d, %d prompts (%d cancelled), %d nested passes, %d preemptions, hows %v", seed, pages, forward, n, len(cancelled), nested, st.Preemptions, hist(r.hows))
		for name, p := range prompts {
			got, ref := r.out[name], refs[name]
			if cancelled[name] {
				if len(got) == 0 || got[len(got)-1] != "end cancelled" || !slices.Equal(got[:len(got)-1], ref[:min(len(got)-1, len(ref))]) {
					t.Errorf("seed %d (pool %d): cancelled %s emitted %v, alone %v", seed, pages, name, got, ref)
				}
				continue
			}
			if !slices.Equal(got, ref) {
				t.Errorf("seed %d (pool %d, %d nested passes): %s (%d tokens): %v, alone %v", seed, pages, nested, name, len(p), got, ref)
			}
		}
		if r.cfg.nestForward() != forward {
			t.Fatalf("seed %d: the batch counts a pass as %d tokens, configured %d", seed, r.cfg.nestForward(), forward)
		}
		checkNestBudget(t, r.probe, forward, fmt.Sprintf("seed %d (forward %d)", seed, forward))
	}
}

// randomForward is a forward pass's fixed cost from 1 to hi tokens, half
// the time a small one (1-4: a q8_0 model's or a tiny one's), where the
// budget lets the most nested passes in.
func randomForward(rng *rand.Rand, hi int) int {
	if rng.IntN(2) == 0 {
		return 1 + rng.IntN(min(4, hi))
	}
	return 1 + rng.IntN(hi)
}

func hist(m map[string]string) map[string]int {
	h := map[string]int{}
	for _, v := range m {
		h[v]++
	}
	return h
}

// checkNestBudget checks the probe's record against the nested budget
// (sched.Nest): no nested step paused, and the nested passes of one
// paused step cost, a forward pass's fixed cost each plus their tokens,
// at most the paused step's own (its fixed cost plus its tokens).
func checkNestBudget(t *testing.T, probe *yieldProbe, forward int, what string) {
	t.Helper()
	cost, passes := map[int]int{}, map[int]int{}
	for _, s := range probe.nested {
		if s == "a nested step paused" {
			t.Fatalf("%s: a nested step paused", what)
		}
		var step, point int
		var rest string
		if _, err := fmt.Sscanf(s, "%d/%d: %s", &step, &point, &rest); err != nil {
			t.Fatalf("nested %q: %v", s, err)
		}
		cost[step] += forward
		passes[step]++
		for _, f := range strings.Fields(strings.Trim(s[strings.Index(s, "["):], "[]")) {
			var k, pos int
			if _, err := fmt.Sscanf(f, "%d@%d", &k, &pos); err != nil {
				t.Fatalf("nested %q: %v", s, err)
			}
			cost[step] += k
		}
	}
	for step, c := range cost {
		if c > forward+probe.tokens[step] {
			t.Errorf("%s: step %d of %d tokens ran nested passes costing %d (forward %d)", what, step, probe.tokens[step], c, forward)
		}
		if n := passes[step]; n*(forward+1) > forward+probe.tokens[step] {
			t.Errorf("%s: step %d of %d tokens ran %d nested passes, at most (%d + %d) / (%d + 1) fit", what, step, probe.tokens[step], n, forward, probe.tokens[step], forward)
		}
	}
}
