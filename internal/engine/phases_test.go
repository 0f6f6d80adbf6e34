package engine

import (
	"context"
	"math"
	"strings"
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
			map[string][]string{"router": {PhaseHandoff, PhaseQueue}, "prefill": {PhasePrefillCompute, PhasePrefillCompute + "/" + StartNextStep, PhasePrefillPush, PhasePrefillQueue, PhasePrefillWait, PhasePrefillWait + "/" + StartNextStep}}},
		{"colocated", c, map[string]FirstTokenPhases{"colocated": c},
			map[string][]string{"colocated": {PhasePrefillCompute, PhasePrefillCompute + "/" + StartNextStep, PhasePrefillWait, PhasePrefillWait + "/" + StartNextStep, PhaseQueue}}},
	} {
		t.Run(e.name, func(t *testing.T) {
			start := time.Now()
			st, err := e.eng.Submit(context.Background(), &Request{Tenant: "t1", Prompt: prompt(4, 21), MaxTokens: 3})
			if err != nil {
				t.Fatal(err)
			}
			ev := <-st.Events()
			if ev.Err != nil || ev.Done {
				t.Fatalf("first event %+v, want a token", ev)
			}
			ttft := time.Since(start)
			// Event.Sent: when the first token went on the stream (the
			// router's first_token_deliver starts there), on it alone.
			if ev.Sent.Before(start) || ev.Sent.After(start.Add(ttft)) {
				t.Fatalf("first token sent at %v, want within the request's %v to its first token", ev.Sent.Sub(start), ttft)
			}
			// Event.Phases: the colocated engine's phases of this request
			// (the same as it recorded), in order, within its wait.
			var names []string
			var sum time.Duration
			for _, p := range ev.Phases {
				names = append(names, p.Phase)
				sum += p.D
			}
			if want := map[string]string{"colocated": "queue prefill_wait prefill_compute"}[e.name]; strings.Join(names, " ") != want || sum > ev.Sent.Sub(start) || (want != "" && sum <= 0) {
				t.Fatalf("first token's phases %+v (sum %v), want %q within the %v to its sending", ev.Phases, sum, want, ev.Sent.Sub(start))
			}
			firstPhases := map[string]time.Duration{}
			for _, p := range ev.Phases {
				firstPhases[p.Phase] = p.D
			}
			for ev := range st.Events() {
				if !ev.Sent.IsZero() || ev.Phases != nil {
					t.Fatalf("event %+v after the first token has Sent set", ev)
				}
				if ev.Err != nil {
					t.Fatal(ev.Err)
				}
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
					if d, ok := firstPhases[p.Phase]; ok && math.Abs(d.Seconds()-p.Sum) > 1e-9 {
						t.Fatalf("%s: the first token carried %v, the engine recorded %.9fs", p.Phase, d, p.Sum)
					}
					if p.Phase == PhasePrefillWait+"/"+StartNextStep || p.Phase == PhasePrefillCompute+"/"+StartNextStep {
						// prefill_wait and prefill_compute again, by how
						// the prompt's first chunk started: a lone prompt
						// in an idle batch ran in the next step.
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

// prefill_compute/<how> is prefill_compute again, split as prefill_wait
// is, by how the prompt's first chunk started: b's prompt, submitted at
// a pause point of a's first step, runs nested and is recorded under
// nested; a's, in an idle batch, under next_step. Each split sums to
// its tenant's prefill_compute. On the colocated engine and the prefill
// worker alike.
func TestPrefillComputeByHow(t *testing.T) {
	rt := storiesRuntime(t)
	for _, layout := range []string{"colocated", "prefill"} {
		t.Run(layout, func(t *testing.T) {
			probe := &yieldProbe{Runtime: rt}
			cfg := storiesConfig(probeFP{probe}, 32)
			var eng Engine
			var roles FirstTokenPhases
			var sched *scheduler
			if layout == "colocated" {
				c, err := NewColocated(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer closeWithin(t, c)
				eng, roles, sched = c, c, c.sched
			} else {
				l, err := NewLocal(cfg, storiesConfig(rt, 32))
				if err != nil {
					t.Fatal(err)
				}
				defer closeWithin(t, l)
				eng, roles, sched = l, l.Prefill, l.Prefill.sched
			}
			run := func(r *Request) <-chan error {
				done := make(chan error, 1)
				go func() {
					s, err := eng.Submit(context.Background(), r)
					if err == nil {
						err = collect(t, s).final.Err
					}
					done <- err
				}()
				return done
			}
			// b's stream's outcome, once submitted (from the scheduler's
			// goroutine).
			bSent := make(chan (<-chan error), 1)
			probe.onPause = func(step, point int) {
				if len(bSent) > 0 || step > 1 {
					return
				}
				before := sched.lastArrival.Load()
				bSent <- run(&Request{Tenant: "b", Prompt: prompt(5, 6), MaxTokens: 2})
				for deadline := time.Now().Add(10 * time.Second); sched.lastArrival.Load() == before; {
					if time.Now().After(deadline) {
						t.Error("b's prompt never reached the scheduler")
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			aDone := run(&Request{Tenant: "a", Prompt: prompt(3, 40), MaxTokens: 2})
			if err := <-aDone; err != nil {
				t.Fatal(err)
			}
			select {
			case bDone := <-bSent:
				if err := <-bDone; err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatal("a's first step never paused")
			}
			got := map[string]PhaseStat{}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				for _, p := range roles.FirstTokenPhases() {
					got[p.Tenant+" "+p.Phase] = p
				}
				if got["b "+PhasePrefillCompute].Count == 1 || time.Now().After(deadline) {
					break
				}
			}
			for tenant, how := range map[string]string{"a": StartNextStep, "b": StartNested} {
				all, split := got[tenant+" "+PhasePrefillCompute], got[tenant+" "+PhasePrefillCompute+"/"+how]
				if all.Count != 1 || split.Count != 1 || split.Sum != all.Sum {
					t.Errorf("%s: prefill_compute %+v, prefill_compute/%s %+v; want one observation each, the same", tenant, all, how, split)
				}
				n := 0
				for k := range got {
					if strings.HasPrefix(k, tenant+" "+PhasePrefillCompute+"/") {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%s: %d splits of prefill_compute, want 1 (%v)", tenant, n, got)
				}
			}
		})
	}
}
