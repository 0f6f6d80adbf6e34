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

// Short steps while shared: a tenant alone has the whole budget; while
// another tenant is in the batch, and for Recent steps after it left, a
// step's prompt chunks take at most Short tokens together; then the
// whole budget again. A tenant that never shared keeps it throughout.
func TestSharesShortWhileShared(t *testing.T) {
	s := Shares{Slack: 64, Lag: 1024, Short: 64, Recent: 3}
	a := []Member{{"a", 1}}
	ab := []Member{{"a", 1}, {"b", 1}}
	flood := []Chunk{{"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}, {"a", 1, 64}}
	plan := func(members []Member, chunks []Chunk) string {
		s.Sync(members)
		_, take := s.Plan(256, 64, members, chunks)
		for i, c := range chunks {
			s.Charge(c.Tenant, c.Weight, take[i])
		}
		return fmt.Sprint(take)
	}
	if got := plan(a, flood); got != "[64 64 64 64]" {
		t.Fatalf("a alone takes %v, want the whole budget", got)
	}
	// b decoding (a member, no chunk): one chunk of a's.
	if got := plan(ab, flood); got != "[64 0 0 0]" {
		t.Fatalf("a takes %v while b is in the batch, want Short", got)
	}
	// b's prompt: b is the least served, its chunk runs alone.
	if got := plan(ab, append([]Chunk{{"b", 1, 16}}, flood...)); got != "[16 0 0 0 0]" {
		t.Fatalf("takes %v, want b's chunk alone", got)
	}
	for i := range 3 {
		if got := plan(a, flood); got != "[64 0 0 0]" {
			t.Fatalf("%d steps after b left a takes %v, want Short for Recent (3) steps", i+1, got)
		}
	}
	if got := plan(a, flood); got != "[64 64 64 64]" {
		t.Fatalf("a alone Recent steps after b left takes %v, want the whole budget", got)
	}
	// Short above the budget, or 0, changes nothing.
	for _, short := range []int{0, 300} {
		o := Shares{Slack: 64, Lag: 1024, Short: short, Recent: 3}
		o.Sync(ab)
		if _, take := o.Plan(256, 64, ab, flood); fmt.Sprint(take) != "[64 64 0 0]" {
			t.Fatalf("Short %d: a takes %v while b is in, want its part (half)", short, take)
		}
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
		// Short 0: off; Recent 0: only the tenants in the batch now.
		short, recent := rapid.IntRange(0, 96).Draw(t, "short"), rapid.IntRange(0, 8).Draw(t, "recent")
		s := Shares{Slack: slack, Lag: lag, Short: short, Recent: recent}
		budget := rapid.IntRange(1, 256).Draw(t, "budget")
		minChunk := rapid.IntRange(1, 64).Draw(t, "chunk")
		passed := map[string]int{}
		last := map[string]int{} // step each tenant was last in the batch
		for step := range 60 {
			members := ms[:rapid.IntRange(1, nt).Draw(t, "in")]
			s.Sync(members)
			for _, m := range members {
				last[m.Tenant] = step
			}
			// Shared: another tenant in the batch now or within the last
			// recent steps; then the step's prompt tokens are at most
			// Short, else (one tenant) the whole budget as before.
			stepBudget, around := budget, 0
			for _, at := range last {
				if step-at <= recent {
					around++
				}
			}
			if short > 0 && around > 1 {
				stepBudget = min(budget, short)
			}
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
			if sum > stepBudget {
				t.Fatalf("step takes %d tokens, budget %d (Short %d, %d tenants within %d steps)", sum, stepBudget, short, around, recent)
			}
			if len(order) > len(chunks) {
				t.Fatalf("order %v longer than the chunks", order)
			}
			if len(members) == 1 {
				want, left := 0, stepBudget
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

// A tenant's counter grows by exactly the whole units of weight of the
// tokens charged, however they were split: the remainder of a charge is
// carried to the next. Rounding each charge up made weight 3 act as
// 64/22 = 2.9 at 64-token chunks, and as 1 for decode's one token a
// sequence a step; a tenant that leaves the batch leaves its remainder.
func TestSharesChargeCarriesRemainder(t *testing.T) {
	var s Shares
	for range 30 {
		s.Charge("a", 3, 64) // 1,920 tokens
	}
	for range 300 {
		s.Charge("b", 3, 1) // decode: one token a step
	}
	s.Charge("c", 1000, 999)
	if a, b, c := s.Served("a"), s.Served("b"), s.Served("c"); a != 640 || b != 100 || c != 0 {
		t.Fatalf("served a %d, b %d, c %d; want 640 (1,920 / 3), 100 (300 / 3), 0 (999 / 1,000 so far)", a, b, c)
	}
	s.Charge("c", 1000, 1)
	if c := s.Served("c"); c != 1 {
		t.Fatalf("c's 1,000th token: served %d, want 1", c)
	}
	rapid.Check(t, func(t *rapid.T) {
		var s Shares
		w := rapid.IntRange(1, 1000).Draw(t, "weight")
		sum := 0
		for _, n := range rapid.SliceOf(rapid.IntRange(0, 300)).Draw(t, "charges") {
			s.Charge("a", w, n)
			sum += n
		}
		if got := s.Served("a"); got != int64(sum/w) {
			t.Fatalf("%d tokens at weight %d: served %d, want %d", sum, w, got, sum/w)
		}
	})
	// Leaving: the counter and its remainder are forgotten together.
	s.Charge("e", 3, 2)
	if s.rem["e"] != 2 {
		t.Fatalf("e's remainder %d, want 2", s.rem["e"])
	}
	s.Sync([]Member{{"d", 1}})
	if _, ok := s.rem["e"]; ok {
		t.Fatalf("e left the batch: remainder %d kept", s.rem["e"])
	}
}
