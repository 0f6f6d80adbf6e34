package engine

import (
	"context"
	"testing"
	"time"
)

// The first-token phases (phases.go): one request's first token is
// recorded once per phase of each role, under its tenant; the router's
// queue and handoff add up to (at most) its time to first token, and the
// prefill worker's parts before the push to (at most) the handoff.
func TestFirstTokenPhasesRecorded(t *testing.T) {
	m := newToy()
	l := toyLocal(t, m)
	c, err := NewColocated(toyConfig(m, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, c)
	for _, e := range []struct {
		name  string
		eng   Engine
		roles map[string]FirstTokenPhases
		want  map[string][]string
	}{
		{"disaggregated", l, map[string]FirstTokenPhases{"router": l.Disaggregated, "prefill": l.Prefill},
			map[string][]string{"router": {PhaseHandoff, PhaseQueue}, "prefill": {PhasePrefillCompute, PhasePrefillPush, PhasePrefillQueue, PhasePrefillWait, PhasePrefillWait + "/" + StartNextStep}}},
		{"colocated", c, map[string]FirstTokenPhases{"colocated": c},
			map[string][]string{"colocated": {PhasePrefillCompute, PhasePrefillWait, PhasePrefillWait + "/" + StartNextStep, PhaseQueue}}},
	} {
		t.Run(e.name, func(t *testing.T) {
			start := time.Now()
			st, err := e.eng.Submit(context.Background(), &Request{Tenant: "t1", Prompt: prompt(4, 21), MaxTokens: 3})
			if err != nil {
				t.Fatal(err)
			}
			if ev := <-st.Events(); ev.Err != nil || ev.Done {
				t.Fatalf("first event %+v, want a token", ev)
			}
			ttft := time.Since(start)
			if got := collect(t, st); got.final.Err != nil {
				t.Fatal(got.final.Err)
			}
			// sums leave out the prefill worker's push: it ends with
			// decode's answer to the commit, which may come after decode
			// emitted the first token (and so after the router's handoff
			// and the time to first token ended); it is bounded by the
			// time the whole request took instead.
			sums := map[string]float64{}
			for role, r := range e.roles {
				ps := r.FirstTokenPhases()
				// The prefill worker's push ends with decode's answer to
				// the commit, which may reach it after the stream ended.
				for deadline := time.Now().Add(5 * time.Second); len(ps) < len(e.want[role]) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
					ps = r.FirstTokenPhases()
				}
				if len(ps) != len(e.want[role]) {
					t.Fatalf("%s recorded %+v, want the phases %v", role, ps, e.want[role])
				}
				for i, p := range ps {
					if p.Tenant != "t1" || p.Phase != e.want[role][i] || p.Count != 1 || p.Sum < 0 || p.Buckets[len(p.Buckets)-1] != 1 {
						t.Fatalf("%s phase %d: %+v, want %s of t1 once", role, i, p, e.want[role][i])
					}
					if p.Phase == PhasePrefillWait+"/"+StartNextStep {
						// prefill_wait again, by how the prompt's first
						// chunk started: a lone prompt in an idle batch
						// ran in the next step.
						continue
					}
					if p.Phase == PhasePrefillPush {
						if p.Sum > time.Since(start).Seconds() {
							t.Fatalf("the push took %.6fs, more than the whole request", p.Sum)
						}
						continue
					}
					sums[role] += p.Sum
				}
			}
			for role, s := range sums {
				if s > ttft.Seconds() {
					t.Fatalf("%s's phases add up to %.6fs, more than the time to first token %.6fs", role, s, ttft.Seconds())
				}
			}
			if e.name == "disaggregated" {
				handoff := 0.0
				for _, p := range l.Disaggregated.FirstTokenPhases() {
					if p.Phase == PhaseHandoff {
						handoff = p.Sum
					}
				}
				if sums["prefill"] > handoff {
					t.Fatalf("the prefill worker's phases before the push add up to %.6fs, more than the handoff %.6fs", sums["prefill"], handoff)
				}
			}
		})
	}
}
