package engine

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
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
			map[string][]string{"router": {PhaseDecodeWait, PhaseHandoff, PhasePush, PhaseQueue}, "prefill": {PhasePrefillCompute, PhasePrefillCompute + "/" + StartNextStep, PhasePrefillPush, PhasePrefillQueue, PhasePrefillWait, PhasePrefillWait + "/" + StartNextStep}}},
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
			// Event.Phases: the engine's phases of this request (the same
			// as it recorded), in order, within its wait: disaggregated,
			// the router's queue, then the handoff's parts the workers
			// sent with the first token (handoff.Timing).
			var names []string
			var sum time.Duration
			for _, p := range ev.Phases {
				names = append(names, p.Phase)
				sum += p.D
			}
			if want := map[string]string{"colocated": "queue prefill_wait prefill_compute",
				"disaggregated": "queue prefill_queue prefill_wait prefill_compute push decode_wait"}[e.name]; strings.Join(names, " ") != want || sum > ev.Sent.Sub(start) || (want != "" && sum <= 0) {
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
					if p.Phase == PhasePush || p.Phase == PhaseDecodeWait {
						// Parts of the router's handoff (checked below).
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
				// The first token's split of the handoff is within it.
				var parts float64
				for _, p := range ev.Phases[1:] {
					parts += p.D.Seconds()
				}
				if parts > handoff {
					t.Fatalf("the handoff's parts %+v add up to %.6fs, more than the handoff %.6fs", ev.Phases[1:], parts, handoff)
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

// slowCommit is a prefill worker's way to decode whose commits take d to
// arrive (the link's time, which neither worker measures).
type slowCommit struct {
	handoff.Decode
	d time.Duration
}

func (s slowCommit) Commit(ctx context.Context, c *handoff.Commit) error {
	time.Sleep(s.d)
	return s.Decode.Commit(ctx, c)
}

// The workers' parts of a disaggregated first token (handoff.Timing)
// mean what their names say and follow each other without overlapping:
// the commit's way to decode is made slow by one known amount (no
// worker's part: it is left to the router's rest) and decode's wait
// after the commit by another, so a part timed from the wrong point
// (push to the accepted commit, decode's wait from after its own work)
// lands outside its bounds or makes the parts overrun the handoff (then
// the router drops them, and the first token carries no split). Gaps of
// >= 250 ms, which a loaded machine has to add to one part to fail it.
func TestHandoffPartsAreTheWorkers(t *testing.T) {
	const (
		commitWay  = 500 * time.Millisecond // prefill's commit to decode
		decodeWait = 250 * time.Millisecond // decode, after verifying, before the first token
	)
	m := newToy()
	l := toyLocal(t, m)
	l.Prefill.decode = slowCommit{Decode: l.Prefill.decode, d: commitWay}
	l.Decode.hooks = &decodeHooks{commitAccepted: func(kv.ID) { time.Sleep(decodeWait) }}
	start := time.Now()
	st, err := l.Submit(context.Background(), &Request{Tenant: "t1", Prompt: prompt(2, 30), MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-st.Events()
	if ev.Err != nil || ev.Done {
		t.Fatalf("first event %+v, want a token", ev)
	}
	if r := collect(t, st); r.final.Err != nil {
		t.Fatal(r.final.Err)
	}
	got := map[string]time.Duration{}
	var names []string
	var sum time.Duration
	for _, p := range ev.Phases {
		got[p.Phase] = p.D
		names = append(names, p.Phase)
		sum += p.D
	}
	if strings.Join(names, " ") != "queue prefill_queue prefill_wait prefill_compute push decode_wait" || sum > ev.Sent.Sub(start) {
		t.Fatalf("first token's phases %+v (sum %v), want the queue and the workers' five parts within the %v to its sending", ev.Phases, sum, ev.Sent.Sub(start))
	}
	if d := got[PhaseDecodeWait]; d < decodeWait || d >= commitWay {
		t.Errorf("decode_wait %v, want in [%v, %v)", d, decodeWait, commitWay)
	}
	if d := got[PhasePush]; d >= decodeWait {
		t.Errorf("push %v, want under %v (the commit's way is not the prefill worker's)", d, decodeWait)
	}
	var handoffD time.Duration
	for _, p := range l.Disaggregated.FirstTokenPhases() {
		if p.Phase == PhaseHandoff {
			handoffD = time.Duration(p.Sum * float64(time.Second))
		}
		if d, ok := got[p.Phase]; ok && math.Abs(d.Seconds()-p.Sum) > 1e-9 {
			t.Errorf("router recorded %s %.9fs, the first token carried %v", p.Phase, p.Sum, d)
		}
	}
	if rest := handoffD - (sum - got[PhaseQueue]); rest < commitWay {
		t.Errorf("the handoff %v less the workers' parts leaves %v, want at least the commit's way %v", handoffD, rest, commitWay)
	}
}

// Workers' figures that do not fit in the router's own measure of the
// handoff cannot all be true: they are dropped whole (the request's
// phases still add up), as is a figure outside the wire's bounds.
func TestHandoffPartsDropWhatDoesNotFit(t *testing.T) {
	tm := &handoff.Timing{PrefillQueue: 1, PrefillWait: 2, PrefillCompute: 3, Push: 4, DecodeWait: 5}
	if ps := handoffParts(tm, 15); len(ps) != 5 || ps[4].Phase != PhaseDecodeWait || ps[4].D != 5 {
		t.Fatalf("parts of 15 in a handoff of 15: %+v", ps)
	}
	if ps := handoffParts(tm, 14); ps != nil {
		t.Fatalf("parts of 15 in a handoff of 14 kept: %+v", ps)
	}
	if ps := handoffParts(nil, time.Second); ps != nil {
		t.Fatalf("no timing gave parts %+v", ps)
	}
	neg := *tm
	neg.PrefillWait = -3
	if ps := handoffParts(&neg, time.Second); ps != nil {
		t.Fatalf("a negative part kept: %+v", ps)
	}
}
