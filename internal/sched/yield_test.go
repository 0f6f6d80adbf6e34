package sched

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// A light tenant's prompt that arrives during a flood's step runs its
// first chunk at the next layer boundary; the flood's own next prompt,
// a tenant already in the step, and a tenant well over its share wait
// for the step boundary.
func TestYieldLightTenant(t *testing.T) {
	s := Shares{Slack: 64, Lag: 256, Short: 64}
	s.Sync([]Member{{"a", 1}, {"c", 1}})
	for range 10 {
		s.Charge("a", 1, 64)
	}
	s.Charge("c", 1, 640+65) // c: over a by more than Slack
	waiting := []Chunk{{"a", 1, 64}, {"b", 1, 200}, {"b", 1, 64}, {"c", 1, 64}}
	take := s.Yield([]string{"a"}, waiting, 64)
	if fmt.Sprint(take) != "[0 64 0 0]" {
		t.Fatalf("takes %v, want b's first chunk alone (one chunk)", take)
	}
	if got, want := s.Served("b"), s.Served("a")+65-256; got != want {
		t.Fatalf("b enters at %d, want %d (Lag behind the most served, as Sync starts it)", got, want)
	}
	if take := s.Yield(nil, waiting, 64); slices.Max(take) != 0 {
		t.Fatalf("a decode-only step yields: %v", take)
	}
	if !s.Shared(map[string]bool{"a": true}) {
		t.Fatal("the tenant that ran nested does not count as recently in the batch")
	}
}

// Yield's invariants over random service histories: a nested step never
// runs a chunk of a tenant in the paused step, at most chunk tokens of
// each tenant, each chunk within its tokens; it runs only
// tenants within Slack of the step's least served (Plan would have run
// them beside the step's), and EVERY such waiting tenant's first chunk
// (the wait is one layer); counters change only by entering tenants
// where Sync would start them.
func TestYieldProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := Shares{Slack: int64(rapid.IntRange(0, 64).Draw(t, "slack")), Lag: int64(rapid.IntRange(1, 512).Draw(t, "lag")),
			Short: rapid.IntRange(0, 96).Draw(t, "short"), Recent: rapid.IntRange(0, 8).Draw(t, "recent")}
		names := []string{"t0", "t1", "t2", "t3", "t4"}
		for range rapid.IntRange(0, 20).Draw(t, "history") {
			var ms []Member
			for _, n := range names[:rapid.IntRange(1, 4).Draw(t, "in")] {
				ms = append(ms, Member{n, rapid.IntRange(1, 3).Draw(t, "w")})
			}
			s.Sync(ms)
			for _, m := range ms {
				s.Charge(m.Tenant, m.Weight, rapid.IntRange(0, 300).Draw(t, "ran"))
			}
		}
		var step []string
		for _, n := range names {
			if rapid.Bool().Draw(t, "in step "+n) {
				step = append(step, n)
			}
		}
		var waiting []Chunk
		for range rapid.IntRange(0, 8).Draw(t, "waiting") {
			waiting = append(waiting, Chunk{rapid.SampledFrom(names).Draw(t, "of"), 1, rapid.IntRange(0, 300).Draw(t, "tokens")})
		}
		chunk := rapid.IntRange(0, 128).Draw(t, "chunk")
		before := map[string]int64{}
		known := map[string]bool{}
		for _, n := range names {
			_, known[n] = s.served[n]
			before[n] = s.counter(n)
		}
		least := int64(0)
		for i, n := range step {
			if v := s.served[n]; i == 0 || v < least {
				least = v
			}
		}
		take := s.Yield(step, waiting, chunk)
		ran := map[string]bool{}
		tokens := map[string]int{}
		first := map[string]int{}
		for i, c := range waiting {
			if _, ok := first[c.Tenant]; !ok && c.Tokens > 0 {
				first[c.Tenant] = i
			}
			if take[i] == 0 {
				continue
			}
			switch {
			case slices.Contains(step, c.Tenant):
				t.Fatalf("chunk %d of %s runs nested; %s has a chunk in the paused step", i, c.Tenant, c.Tenant)
			case take[i] < 0 || take[i] > min(c.Tokens, chunk):
				t.Fatalf("chunk %d runs %d tokens of %d (chunk %d)", i, take[i], c.Tokens, chunk)
			case before[c.Tenant] > least+s.Slack:
				t.Fatalf("%s runs nested at %d, over the step's least served %d + Slack %d", c.Tenant, before[c.Tenant], least, s.Slack)
			}
			ran[c.Tenant] = true
			tokens[c.Tenant] += take[i]
			if tokens[c.Tenant] > chunk {
				t.Fatalf("%s runs %d tokens nested, over the chunk %d", c.Tenant, tokens[c.Tenant], chunk)
			}
		}
		for tn, i := range first {
			if len(step) > 0 && chunk > 0 && !slices.Contains(step, tn) && before[tn] <= least+s.Slack && take[i] == 0 {
				t.Fatalf("%s is under its share (%d <= %d + %d) and its first chunk waits", tn, before[tn], least, s.Slack)
			}
		}
		for _, n := range names {
			_, has := s.served[n]
			switch {
			case ran[n] && s.served[n] != before[n]:
				t.Fatalf("%s entered at %d, want %d", n, s.served[n], before[n])
			case !ran[n] && (has != known[n] || has && s.served[n] != before[n]):
				t.Fatalf("%s's counter changed without running", n)
			}
		}
	})
}

// The nested budget over a paused step's pause points (counts of
// forward passes and tokens, never time): whatever arrives, the nested
// passes of one paused step of T tokens cost at most Forward + T
// together (each Forward plus its tokens), so there are at most
// (Forward + T) / (Forward + 1) of them; a pass never runs empty; a
// waiting tenant under its share is left out only when its chunk does
// not fit beside what ran; Yield is YieldWithin with no bound.
func TestYieldWithinNestBudget(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := Shares{Slack: int64(rapid.IntRange(0, 64).Draw(t, "slack")), Lag: int64(rapid.IntRange(1, 512).Draw(t, "lag"))}
		names := []string{"a", "b", "c", "d"}
		s.Sync([]Member{{"a", 1}})
		s.Charge("a", 1, rapid.IntRange(0, 500).Draw(t, "a ran"))
		step := []string{"a"}
		tokens, forward := rapid.IntRange(0, 256).Draw(t, "step tokens"), rapid.IntRange(0, 32).Draw(t, "forward")
		chunk := rapid.IntRange(1, 64).Draw(t, "chunk")
		n := NestFor(tokens, forward)
		passes, spent := 0, 0
		for range rapid.IntRange(1, 24).Draw(t, "pause points") {
			var waiting []Chunk
			for range rapid.IntRange(0, 4).Draw(t, "arrivals") {
				waiting = append(waiting, Chunk{rapid.SampledFrom(names).Draw(t, "of"), rapid.IntRange(1, 3).Draw(t, "w"), rapid.IntRange(1, 80).Draw(t, "tokens")})
			}
			before := map[string]int64{}
			for _, c := range waiting {
				before[c.Tenant] = s.counter(c.Tenant)
			}
			take, cost := s.YieldWithin(step, waiting, chunk, n)
			sum := 0
			for _, k := range take {
				sum += k
			}
			switch {
			case sum == 0 && cost != 0:
				t.Fatalf("no chunk runs and the pass costs %d", cost)
			case sum > 0 && cost != forward+sum:
				t.Fatalf("a pass of %d tokens costs %d, want %d + %d", sum, cost, forward, sum)
			case cost > n.Left:
				t.Fatalf("a pass costs %d with %d left", cost, n.Left)
			}
			seen := map[string]bool{}
			for i, c := range waiting {
				if seen[c.Tenant] {
					continue
				}
				seen[c.Tenant] = true
				base := cost // what ran, or the pass's fixed cost alone
				if sum == 0 {
					base = forward
				}
				if c.Tenant != "a" && before[c.Tenant] <= s.served["a"]+s.Slack && take[i] == 0 && base+min(c.Tokens, chunk) <= n.Left {
					t.Fatalf("%s's chunk of %d waits though it fits (cost %d of %d)", c.Tenant, c.Tokens, cost, n.Left)
				}
			}
			if sum > 0 {
				passes++
				spent += cost
				n.Left -= cost
				for i, c := range waiting {
					s.Charge(c.Tenant, c.Weight, take[i])
				}
			}
		}
		if spent > forward+tokens || passes*(forward+1) > forward+tokens {
			t.Fatalf("%d nested passes cost %d in a step of %d tokens (forward %d)", passes, spent, tokens, forward)
		}
	})
}

// A nested pass's fixed cost is charged in full over its chunks, each
// within one token of the others.
func TestForwardPart(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f, n := rapid.IntRange(0, 100).Draw(t, "forward"), rapid.IntRange(1, 9).Draw(t, "chunks")
		sum, lo, hi := 0, f, 0
		for i := range n {
			p := ForwardPart(f, n, i)
			sum += p
			lo, hi = min(lo, p), max(hi, p)
		}
		if sum != f || hi-lo > 1 {
			t.Fatalf("parts of %d over %d chunks sum to %d, spread %d..%d", f, n, sum, lo, hi)
		}
	})
	if ForwardPart(5, 0, 0) != 0 {
		t.Fatal("a pass with no chunks charges")
	}
}

// When the paused step's nested budget cannot pay for every waiting
// tenant's chunk, the least served goes first, as in Plan, whatever the
// order the prompts arrived in: a third tenant's 1-token prompt that
// arrived a moment earlier does not take the budget from a light
// tenant's chunk (the budget left after it would never again fit the
// chunk, so the light tenant waited for the flood's step boundary).
func TestYieldWithinLeastServedFirst(t *testing.T) {
	s := Shares{Slack: 64, Lag: 256}
	s.Sync([]Member{{"a", 1}, {"c", 1}})
	for range 10 {
		s.Charge("a", 1, 64)
	}
	s.Charge("c", 1, 640) // c: served as much as the flood a, within Slack
	// b is new to the batch: Lag behind, the least served.
	waiting := []Chunk{{"c", 1, 1}, {"b", 1, 64}}
	take, cost := s.YieldWithin([]string{"a"}, waiting, 64, NestFor(64, 16))
	if fmt.Sprint(take) != "[0 64]" || cost != 16+64 {
		t.Fatalf("takes %v (cost %d), want b's chunk, the least served (cost 80)", take, cost)
	}
	// Arrival order decides between tenants equally served (the first
	// that fits); a tenant's own chunks stay in their order.
	s2 := Shares{Slack: 64, Lag: 256}
	s2.Sync([]Member{{"a", 1}})
	waiting = []Chunk{{"c", 1, 64}, {"b", 1, 8}, {"b", 1, 1}, {"c", 1, 1}}
	if take, _ := s2.YieldWithin([]string{"a"}, waiting, 64, NestFor(64, 16)); fmt.Sprint(take) != "[64 0 0 0]" {
		t.Fatalf("equally served: takes %v, want the first that arrived (c's 64)", take)
	}
}
