package sched

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// A light tenant's chunk runs alone in its step while a flooding tenant
// is far more served; the flood's chunks run in every other step; two
// tenants equally served share the step, each within its part.
func TestSharesLightTenantRunsAlone(t *testing.T) {
	s := Shares{Slack: 64, Lag: 1024}
	ms := []Member{{"a", 1}, {"b", 1}}
	s.Sync(ms[:1])
	for range 20 {
		s.Charge("a", 1, 256)
	}
	s.Sync(ms)
	if got, want := s.Served("b"), s.Served("a")-1024; got != want {
		t.Fatalf("b joins at %d, want %d (Lag behind the most served)", got, want)
	}
	chunks := []Chunk{{"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}, {"b", 1, 16}, {"a", 1, 64}}
	_, take := s.Plan(254, 64, ms, chunks)
	if fmt.Sprint(take) != "[0 0 0 16 0]" {
		t.Fatalf("takes %v: b's chunk is not alone in its step", take)
	}
	// Without b's chunk (b decoding), a's chunks take a's part: half.
	_, take = s.Plan(254, 64, ms, []Chunk{{"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}})
	if fmt.Sprint(take) != "[64 63 0]" {
		t.Fatalf("takes %v, want a's part of 127 tokens", take)
	}
	// Alone in the batch, a takes the whole budget (work-conserving).
	_, take = s.Plan(254, 64, ms[:1], []Chunk{{"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}})
	if fmt.Sprint(take) != "[64 64 64 62 0]" {
		t.Fatalf("takes %v, want the whole budget", take)
	}
	// Equally served: turns, each within its part.
	e := Shares{Slack: 64, Lag: 1024}
	e.Sync(ms)
	order, take := e.Plan(256, 64, ms, []Chunk{{"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}, {"b", 1, 64}, {"b", 1, 64}, {"b", 1, 64}})
	if fmt.Sprint(order) != "[0 3 1 4 2 5]" || fmt.Sprint(take) != "[64 64 0 64 64 0]" {
		t.Fatalf("order %v takes %v: not in turns within the parts", order, take)
	}
}

// A tenant away or light for long has at most Lag of priority: its
// counter is lifted to Lag behind the most served, and one forgotten
// comes back there.
func TestSharesLagBoundsCredit(t *testing.T) {
	s := Shares{Slack: 8, Lag: 100}
	s.Sync([]Member{{"a", 1}, {"b", 1}})
	for range 50 {
		s.Charge("a", 1, 64)
		s.Sync([]Member{{"a", 1}, {"b", 1}})
	}
	if d := s.Served("a") - s.Served("b"); d != 100 {
		t.Fatalf("b lags a by %d, want Lag 100", d)
	}
	s.Sync([]Member{{"a", 1}})
	s.Sync([]Member{{"a", 1}, {"b", 1}})
	if d := s.Served("a") - s.Served("b"); d != 100 {
		t.Fatalf("b back lags a by %d, want Lag 100", d)
	}
}

// The plan's invariants, over random batches and service histories:
// within the budget and each chunk; one tenant: every chunk in order as
// much as fits (work-conserving, as without tenants); several: the least
// served tenant's first chunk runs, only tenants within Slack of it run,
// each within its part; and a long run of steps never passes a tenant
// with chunks over for longer than the others take to catch up.
func TestSharesProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nt := rapid.IntRange(1, 4).Draw(t, "tenants")
		var ms []Member
		for i := range nt {
			ms = append(ms, Member{fmt.Sprintf("t%d", i), rapid.IntRange(1, 3).Draw(t, "weight")})
		}
		weight := map[string]int{}
		for _, m := range ms {
			weight[m.Tenant] = m.Weight
		}
		// Lag >= 1, as the engine sets it (4 x the step budget): with Lag 0
		// every Sync levels the counters, ties go to the chunks' order, and
		// a tenant whose chunks always come later can be passed over for
		// good when the budget holds one chunk (the bound below fails).
		slack, lag := int64(rapid.IntRange(0, 64).Draw(t, "slack")), int64(rapid.IntRange(1, 512).Draw(t, "lag"))
		s := Shares{Slack: slack, Lag: lag}
		budget := rapid.IntRange(1, 256).Draw(t, "budget")
		minChunk := rapid.IntRange(1, 64).Draw(t, "chunk")
		passed := map[string]int{}
		for step := range 60 {
			members := ms[:rapid.IntRange(1, nt).Draw(t, "in")]
			s.Sync(members)
			most := int64(0)
			for i, m := range members {
				if v := s.Served(m.Tenant); i == 0 || v > most {
					most = v
				}
			}
			for _, m := range members {
				if most-s.Served(m.Tenant) > lag {
					t.Fatalf("step %d: %s lags the most served by %d > Lag %d", step, m.Tenant, most-s.Served(m.Tenant), lag)
				}
			}
			var chunks []Chunk
			for range rapid.IntRange(0, 8).Draw(t, "chunks") {
				m := members[rapid.IntRange(0, len(members)-1).Draw(t, "of")]
				chunks = append(chunks, Chunk{m.Tenant, m.Weight, rapid.IntRange(1, minChunk).Draw(t, "tokens")})
			}
			order, take := s.Plan(budget, minChunk, members, chunks)
			sum, per := 0, map[string]int{}
			for i, c := range chunks {
				if take[i] < 0 || take[i] > c.Tokens {
					t.Fatalf("chunk %d takes %d of %d tokens", i, take[i], c.Tokens)
				}
				sum += take[i]
				per[c.Tenant] += take[i]
			}
			if sum > budget {
				t.Fatalf("step takes %d tokens, budget %d", sum, budget)
			}
			if len(order) > len(chunks) {
				t.Fatalf("order %v longer than the chunks", order)
			}
			if len(members) == 1 {
				want, left := 0, budget
				for _, c := range chunks {
					want += min(c.Tokens, left)
					left -= min(c.Tokens, left)
				}
				if sum != want {
					t.Fatalf("one tenant: %d tokens run, %d fit", sum, want)
				}
			} else if len(chunks) > 0 {
				least := chunks[0]
				for _, c := range chunks {
					if s.Served(c.Tenant) < s.Served(least.Tenant) {
						least = c
					}
				}
				first := -1
				for i, c := range chunks {
					if c.Tenant == least.Tenant {
						first = i
						break
					}
				}
				if take[first] == 0 {
					t.Fatalf("the least served tenant %s's first chunk does not run (takes %v)", least.Tenant, take)
				}
				total := 0
				for _, m := range members {
					total += m.Weight
				}
				for tn, n := range per {
					if n > 0 && s.Served(tn)-s.Served(least.Tenant) > slack {
						t.Fatalf("%s runs %d tokens %d over the least served", tn, n, s.Served(tn)-s.Served(least.Tenant))
					}
					if part := max(budget*weight[tn]/total, min(minChunk, budget)); n > part {
						t.Fatalf("%s runs %d tokens, its part is %d", tn, n, part)
					}
				}
			}
			// Starvation: a tenant with chunks waits while others, less
			// served, catch up: at most (Lag + Slack + 1) x weight steps
			// of each other tenant (each step charges them a token at least).
			for _, m := range members {
				has := false
				for _, c := range chunks {
					has = has || c.Tenant == m.Tenant
				}
				if has && per[m.Tenant] == 0 {
					passed[m.Tenant]++
				} else if has {
					passed[m.Tenant] = 0
				}
				if bound := (nt - 1) * int(lag+slack+1) * 3; passed[m.Tenant] > bound {
					t.Fatalf("%s passed over %d steps running, bound %d", m.Tenant, passed[m.Tenant], bound)
				}
			}
			for i, c := range chunks {
				if take[i] > 0 {
					s.Charge(c.Tenant, c.Weight, take[i])
				}
			}
		}
	})
}
