package sched

import (
	"math/rand/v2"
	"testing"
)

// TestAsideProperties drives Aside over random plans, step after step, as
// the colocated batch does (extra: the last step was aside or ran a
// nested pass), and checks by counting: a step goes aside exactly when
// the previous took no extra pass and a whole prompt shares the plan
// with another tenant's partial chunk; so the extra passes (asides and
// nested steps) never outnumber the steps that carry the partial chunks
// (plus one: the first step may go aside),
// however many whole prompts arrive, and one tenant alone never steps
// aside.
func TestAsideProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 5))
	tenants := []string{"a", "b", "c"}
	for run := range 2000 {
		nTenants := 1 + rng.IntN(len(tenants))
		extra := false
		full, extras := 0, 0
		for range 1 + rng.IntN(40) {
			var plan []Planned
			for range rng.IntN(6) {
				plan = append(plan, Planned{Tenant: tenants[rng.IntN(nTenants)], Whole: rng.IntN(3) == 0})
			}
			want := false
			for _, w := range plan {
				for _, p := range plan {
					if w.Whole && !p.Whole && w.Tenant != p.Tenant {
						want = true
					}
				}
			}
			got := Aside(plan, extra)
			if got != (want && !extra) {
				t.Fatalf("run %d: Aside(%v, extra %v) = %v, want %v", run, plan, extra, got, want && !extra)
			}
			if got && nTenants == 1 {
				t.Fatalf("run %d: one tenant stepped aside for itself: %v", run, plan)
			}
			nested := !got && rng.IntN(4) == 0 // a pause point ran a nested pass
			if got || nested {
				extras++
			}
			if !got {
				full++
			}
			if extras > full+1 { // the first step may go aside
				t.Fatalf("run %d: %d extra passes for %d full steps", run, extras, full)
			}
			extra = got || nested
		}
	}
}
