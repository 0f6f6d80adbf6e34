package sim

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// defaultSeeds fits the CI budget (about a minute on 2 shared cores);
// SLUICE_SIM_SEEDS=N (make sim SEEDS=N) runs more.
const defaultSeeds = 1000

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if envVal != nil {
			envVal.Close()
		}
		os.Exit(code)
	}))
}

var (
	envOnce sync.Once
	envVal  *Env
	envErr  error
)

func testEnv(t testing.TB) *Env {
	envOnce.Do(func() {
		dir := os.TempDir()
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			dir = "/dev/shm"
		}
		envVal, envErr = NewEnv(dir)
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return envVal
}

func envInt(t testing.TB, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

func replayCmd(seed uint64) string {
	return fmt.Sprintf("SLUICE_SIM_SEED=%d go test -count=1 -run 'TestSim/seed' -v ./internal/sim/", seed)
}

// runSeeds runs seeds [from, from+n) on every core; each run is
// single-threaded and independent, so parallelism does not touch
// determinism. It stops early once stopAfter bad runs were seen.
func runSeeds(env *Env, from, n uint64, bugs Bugs, stopAfter int) []*Result {
	out := make([]*Result, n)
	var next, bad struct {
		sync.Mutex
		v uint64
	}
	next.v = from
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				s := next.v
				next.v++
				next.Unlock()
				bad.Lock()
				stop := stopAfter > 0 && bad.v >= uint64(stopAfter)
				bad.Unlock()
				if s >= from+n || stop {
					return
				}
				r := Run(env, Config{Seed: s, Bugs: bugs})
				out[s-from] = r
				if r.Bad() {
					bad.Lock()
					bad.v++
					bad.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// TestSim runs the default seed set (or SLUICE_SIM_SEEDS) over the real
// system with every safeguard on: no seed may break an invariant. With
// SLUICE_SIM_SEED=S, TestSim/seed replays seed S alone and prints its trace.
func TestSim(t *testing.T) {
	env := testEnv(t)
	if os.Getenv("SLUICE_SIM_SEED") != "" {
		t.Run("seed", func(t *testing.T) {
			seed := envInt(t, "SLUICE_SIM_SEED", 0)
			r := Run(env, Config{Seed: seed, Trace: true})
			t.Logf("trace of seed %d:\n%s", seed, r.TraceText())
			t.Logf("outcomes: %d ok, %d failed, %d cancelled, %d rejected; %d events", r.OK, r.Failed, r.Cancelled, r.Rejected, r.Events)
			for _, v := range r.Violations {
				t.Errorf("violation: %s", v)
			}
		})
		return
	}
	t.Run("seeds", func(t *testing.T) {
		n := envInt(t, "SLUICE_SIM_SEEDS", defaultSeeds)
		from := envInt(t, "SLUICE_SIM_FROM", 1)
		start := time.Now()
		rs := runSeeds(env, from, n, Bugs{}, 5)
		el := time.Since(start)
		var faults [numFaults]int
		ends, phases := map[string]int{}, map[string]int{}
		late, oldInc, fenced := 0, 0, 0
		var pre, preMax, grow, noRoom, endedQ, resumedOK, resumedBad, hits, evicted, pwaits, dhits, consOK, consMoved int
		var dead, migr, migrOK, migrBad, stale, migrPre, nested, nestedRuns, streamed int
		rejects, coloPre, honest := map[string]int{}, map[string]int{}, map[string]int{}
		var waits []time.Duration
		var ok, failed, cancelled, rejected, events, ran int
		for _, r := range rs {
			if r == nil {
				continue
			}
			ran++
			for f, c := range r.Faults {
				faults[f] += c
			}
			for k, v := range r.Ends {
				ends[k] += v
			}
			for k, v := range r.Phases {
				phases[k] += v
			}
			pre += r.Preemptions
			hits += r.CacheHits
			dhits += r.DecodeCacheHits
			pwaits += r.PrefillWaits
			evicted += r.CacheEvictions
			preMax = max(preMax, r.Preemptions)
			grow += r.Growths
			noRoom += r.NoRoom
			endedQ += r.EndedQueued
			resumedOK += r.ResumedOK
			consOK, consMoved = consOK+r.ConstrainedOK, consMoved+r.ConstrainedMovedOK
			resumedBad += r.ResumedFailed
			dead, migr, migrOK, migrBad, stale = dead+r.DeclaredDead, migr+r.Migrations, migrOK+r.MigratedOK, migrBad+r.MigratedFailed, stale+r.StaleItems
			migrPre += r.MigratedBeforeCommit
			nested += r.NestedSteps
			for k, v := range r.HonestFails {
				honest[k] += v
			}
			streamed += r.StreamedPages
			if r.NestedSteps > 0 {
				nestedRuns++
			}
			waits = append(waits, r.QueueWaits...)
			for k, v := range r.QueueRejects {
				rejects[k] += v
			}
			for k, v := range r.ColoPreempted {
				coloPre[k] += v
			}
			late += r.LateLandings
			oldInc += r.OldIncarnationLandings
			fenced += r.Fenced
			ok, failed, cancelled, rejected, events = ok+r.OK, failed+r.Failed, cancelled+r.Cancelled, rejected+r.Rejected, events+r.Events
			if r.Bad() {
				t.Errorf("seed %d broke an invariant; replay: %s\n  %s\n  setup: %s\ntrace tail:\n%s",
					r.Seed, replayCmd(r.Seed), strings.Join(r.Violations, "\n  "), r.Setup, tail(r.Trace, 60))
			}
		}
		var fs []string
		for f := Fault(0); f < numFaults; f++ {
			fs = append(fs, fmt.Sprintf("%s %.2f", f, float64(faults[f])/float64(ran)))
		}
		t.Logf("%d seeds in %v (%.1f seeds/s, %d cores); requests: %d ok, %d failed, %d cancelled, %d rejected; %.0f events/seed",
			ran, el.Round(time.Millisecond), float64(ran)/el.Seconds(), runtime.GOMAXPROCS(0), ok, failed, cancelled, rejected, float64(events)/float64(ran))
		t.Logf("faults injected per run (mean): %s", strings.Join(fs, ", "))
		t.Logf("one-sided writes landing after their handoff ended: %.2f per run", float64(late)/float64(ran))
		t.Logf("one-sided writes landing after their decode incarnation crashed (same path, restart-same-file): %d; write batches fenced at the writer (foreign pages): %d",
			oldInc, fenced)
		slices.Sort(waits)
		pct := func(p float64) time.Duration {
			if len(waits) == 0 {
				return 0
			}
			return waits[min(len(waits)-1, int(p*float64(len(waits))))]
		}
		t.Logf("preemptions per run: mean %.2f, max %d (%d in all); resumed requests %d exact, %d failed; page-by-page growths %.1f per run; decode no-room answers %d",
			float64(pre)/float64(ran), preMax, pre, resumedOK, resumedBad, float64(grow)/float64(ran), noRoom)
		t.Logf("colocated batch preemptions by the phase they struck: %s", countsText(coloPre))
		t.Logf("constrained (response_format) requests exact: %d, of them preempted or migrated: %d", consOK, consMoved)
		if ran >= 50 && consOK == 0 {
			t.Errorf("no constrained request succeeded in %d seeds: the simulator's mix lost them", ran)
		}
		t.Logf("decode workers declared dead (reset or heartbeat): %d; streams migrated: %d (%d of them resumed handoffs not yet committed); migrated requests %d exact, %d failed; stale items of migrated handoffs dropped: %d",
			dead, migr, migrPre, migrOK, migrBad, stale)
		t.Logf("queue: %d admissions, wait p50 %v, p99 %v, max %v; refused %s; %d requests ended while queued",
			len(waits), pct(0.5), pct(0.99), pct(1), countsText(rejects), endedQ)
		t.Logf("prefix cache: prefill %d prompt pages hit, %d idle entries evicted; decode %d prompt pages hit (not transferred); %d prefill calls waited for pages", hits, evicted, dhits, pwaits)
		t.Logf("prefill batch: %d nested steps (prompts run at a pause point of another tenant's step) in %d of %d runs; %d pages of committed handoffs streamed while their prompt computed", nested, nestedRuns, ran, streamed)
		if nested == 0 && ran >= 100 {
			t.Errorf("no prefill step yielded to a prompt arriving during it in %d seeds: the simulator no longer reaches the pause points", ran)
		}
		if streamed == 0 && ran >= 100 {
			t.Errorf("no committed handoff streamed a page while its prompt computed in %d seeds", ran)
		}
		t.Logf("honest prefill handoffs failed by: %s", countsText(honest))
		t.Logf("request ends: %s", countsText(ends))
		t.Logf("disconnects and aborts by the phase they struck: %s", countsText(phases))
		// The run must exercise what it claims to: every outcome, every
		// fault kind, and disconnects and aborts in every phase.
		if ran >= 500 {
			if ok == 0 || failed == 0 || cancelled == 0 || rejected == 0 {
				t.Errorf("outcomes %d ok, %d failed, %d cancelled, %d rejected: one kind never happens", ok, failed, cancelled, rejected)
			}
			for f := Fault(0); f < numFaults; f++ {
				if faults[f] == 0 {
					t.Errorf("fault %s never fired in %d seeds", f, ran)
				}
			}
			for _, k := range []string{"admitted", "prefilling(compute)", "prefilling(transfer or commit)", "committed", "decoding"} {
				if phases["disconnect/"+k] == 0 || phases["abort/"+k] == 0 {
					t.Errorf("no disconnect or no abort struck in phase %s", k)
				}
			}
			// The new page-lifetime paths must all be exercised.
			if pre == 0 || resumedOK == 0 || resumedBad == 0 {
				t.Errorf("%d preemptions, %d resumed requests exact, %d failed: a resume path never ran", pre, resumedOK, resumedBad)
			}
			if dead == 0 || migr == 0 || migrOK == 0 || stale == 0 || migrPre == 0 {
				t.Errorf("%d workers declared dead, %d migrations (%d before a resumed commit), %d migrated requests exact, %d stale items: a migration path never ran",
					dead, migr, migrPre, migrOK, stale)
			}
			struck := 0
			for k, v := range phases {
				if strings.Contains(k, "-resumed/resumed-colo-") {
					struck += v
				}
			}
			if struck == 0 {
				t.Errorf("no disconnect or abort struck a preempted colocated request")
			}
			// The batch core preempts in every phase of its victim.
			for _, k := range []string{"prompt", "decode", "rebuild"} {
				if coloPre[k] == 0 {
					t.Errorf("no colocated preemption struck a sequence during its %s", k)
				}
			}
			if hits == 0 || evicted == 0 || dhits == 0 {
				t.Errorf("prefix cache: %d prefill hits, %d evictions, %d decode hits: a cache path never ran", hits, evicted, dhits)
			}
			if grow == 0 || noRoom == 0 || endedQ == 0 || rejects["queue_timeout"] == 0 {
				t.Errorf("growths %d, no-room answers %d, ends while queued %d, queue timeouts %d: a queue or growth path never ran", grow, noRoom, endedQ, rejects["queue_timeout"])
			}
			for _, k := range []string{"queued", "resumed-queued", "resumed-admitted", "resumed-prefilling(compute)", "resumed-committed",
				"colo-queued", "colo-prefilling", "colo-decoding"} {
				if phases["disconnect-resumed/"+k]+phases["abort-resumed/"+k]+phases["disconnect/"+k]+phases["abort/"+k] == 0 {
					t.Errorf("no disconnect or abort struck in phase %s", k)
				}
			}
			if late == 0 {
				t.Errorf("no one-sided write landed after its handoff ended")
			}
			// The two one-sided hazards the writer and the pool fence by
			// construction must actually strike: a restarted decode on the
			// same path with writes of its crashed incarnation in flight
			// (I6), and a peer's write naming another handoff's page (I3).
			if oldInc == 0 {
				t.Errorf("no one-sided write landed after its decode incarnation crashed")
			}
			if fenced == 0 {
				t.Errorf("no one-sided write outside its reservation reached the writer")
			}
		}
	})
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d earlier lines; replay for all)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// TestDeterministic: the same seed gives the same trace, event for event,
// clean or with an injected bug (a counterexample replays exactly).
func TestDeterministic(t *testing.T) {
	env := testEnv(t)
	cases := []struct {
		seed uint64
		bugs Bugs
	}{{3, Bugs{}}, {17, Bugs{}}, {99, Bugs{}}}
	// And the first seed that finds an injected bug, and one with many
	// preemptions: both replay exactly.
	nd := bugByName(t, "no-digest")
	if r, _ := firstBad(env, nd, 100); r != nil {
		cases = append(cases, struct {
			seed uint64
			bugs Bugs
		}{r.Seed, nd})
	} else {
		t.Fatal("no seed in 100 finds no-digest")
	}
	for s := uint64(100); s < 300; s++ {
		if r := Run(env, Config{Seed: s}); r.Preemptions >= 3 {
			cases = append(cases, struct {
				seed uint64
				bugs Bugs
			}{s, Bugs{}})
			break
		}
	}
	// And one whose prefill steps paused for nested steps (prompts
	// joining at pause points by their virtual arrival times).
	for s := uint64(300); s < 400; s++ {
		if r := Run(env, Config{Seed: s}); r.NestedSteps >= 2 {
			cases = append(cases, struct {
				seed uint64
				bugs Bugs
			}{s, Bugs{}})
			break
		}
	}
	for _, c := range cases {
		seed := c.seed
		a := Run(env, Config{Seed: seed, Trace: true, Bugs: c.bugs})
		b := Run(env, Config{Seed: seed, Trace: true, Bugs: c.bugs})
		if a.Bad() != (c.bugs != Bugs{}) {
			t.Errorf("seed %d: bad %v with bugs %+v", seed, a.Bad(), c.bugs)
		}
		if a.TraceText() != b.TraceText() {
			t.Fatalf("seed %d: two runs differ:\n%s\n----\n%s", seed, tail(a.Trace, 20), tail(b.Trace, 20))
		}
		if len(a.Trace) < 20 {
			t.Fatalf("seed %d: trace of %d lines is too short to mean anything", seed, len(a.Trace))
		}
		t.Logf("seed %d (%d preemptions, %d nested prefill steps, bad %v): %d trace lines, identical twice", seed, a.Preemptions, a.NestedSteps, a.Bad(), len(a.Trace))
	}
	if len(cases) < 6 {
		t.Errorf("no seed in [100, 300) preempts 3 times, or none in [300, 400) runs 2 nested prefill steps")
	}
}

func countsText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}
