package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/kv"
)

// asideFor steps aside exactly when the work includes another tenant's
// prompt, whatever its order and repeats: never for a tenant alone.
func TestAsideForProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 11))
	names := []string{"a", "b", "c", ""}
	for range 5000 {
		tenant := names[rng.IntN(len(names))]
		work := make([]string, rng.IntN(6))
		for i := range work {
			work[i] = names[rng.IntN(len(names))]
		}
		want := false
		for _, w := range work {
			if w != tenant {
				want = true
			}
		}
		if got := asideFor(tenant, work); got != want {
			t.Fatalf("asideFor(%q, %q) = %v, want %v", tenant, work, got, want)
		}
		shuffled := slices.Clone(work)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if len(work) > 0 {
			shuffled = append(shuffled, work[rng.IntN(len(work))])
		}
		if asideFor(tenant, shuffled) != want {
			t.Fatalf("asideFor(%q, %q) differs from the same tenants %q", tenant, shuffled, work)
		}
		alone := slices.Repeat([]string{tenant}, len(work))
		if asideFor(tenant, alone) {
			t.Fatalf("a tenant alone (%q) stepped aside for its own handoff", alone)
		}
	}
}

// countedRT counts its forward passes as they begin (nested ones too) and
// makes each take at least delay, so a long prompt's steps last.
type countedRT struct {
	Runtime
	begun *atomic.Int64
	delay time.Duration
}

func (r countedRT) NewForwarder(n int) Forwarder {
	return countedFwd{r.Runtime.NewForwarder(n), r}
}

type countedFwd struct {
	Forwarder
	r countedRT
}

func (f countedFwd) Forward(steps []Step) []StepResult {
	f.r.begun.Add(1)
	time.Sleep(f.r.delay)
	return f.Forwarder.Forward(steps)
}

// asideRig is a local disaggregated engine whose prefill worker computes
// in passes of at least 1 ms (counted in begun) and steps aside for up to
// aside; hold, when set, runs in the decode worker's Commit (after it
// verified the commit, before the prefill worker's push returns) with the
// committing tenant.
func asideRig(t *testing.T, aside time.Duration, hold func(tenant string)) (*Local, *atomic.Int64) {
	t.Helper()
	m := newToy()
	begun := &atomic.Int64{}
	pcfg, dcfg := toyConfig(countedRT{m, begun, time.Millisecond}, 1200), toyConfig(m, 1200)
	pcfg.CommitAside = aside
	loc, err := NewLocal(pcfg, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, loc) })
	dw := loc.Decode
	dw.hooks = &decodeHooks{commitAccepted: func(id kv.ID) {
		dw.mu.Lock()
		tenant := ""
		if h := dw.handoffs[id]; h != nil {
			tenant = h.tenant
		}
		dw.mu.Unlock()
		hold(tenant)
	}}
	return loc, begun
}

// floodAndLight submits a's long prompt, waits for its first forward
// pass, then submits light's short prompt; it returns once both ended.
func floodAndLight(t *testing.T, loc *Local, begun *atomic.Int64, light string) {
	t.Helper()
	var wg sync.WaitGroup
	run := func(r *Request) {
		defer wg.Done()
		s, err := loc.Submit(context.Background(), r)
		if err != nil {
			t.Error(err)
			return
		}
		if got := collect(t, s); got.final.Err != nil {
			t.Error(got.final.Err)
		}
	}
	wg.Add(2)
	go run(&Request{ID: "flood", Tenant: "a", Prompt: prompt(1, 800), MaxTokens: 2, IgnoreEOS: true})
	for begun.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	go run(&Request{ID: "light", Tenant: light, Prompt: prompt(2, 9), MaxTokens: 2, IgnoreEOS: true})
	wg.Wait()
}

// b's prompt ends while a's 800-token prompt is still being computed:
// the prefill worker's scheduler starts no forward pass until b's commit
// has landed (decode holds it here for 200 ms), then goes on with a's.
// With the aside bound far away, this is what the code guarantees: the
// scheduler's goroutine waits for the push's return.
func TestPrefillStepsAsideForAnotherTenantsCommit(t *testing.T) {
	var held, moved, atHold atomic.Int64
	var loc *Local
	var begun *atomic.Int64
	loc, begun = asideRig(t, time.Minute, func(tenant string) {
		if tenant != "b" {
			return
		}
		held.Add(1)
		before := begun.Load()
		atHold.Store(before)
		for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if begun.Load() != before {
				moved.Add(1)
				return
			}
		}
	})
	floodAndLight(t, loc, begun, "b")
	if held.Load() != 1 {
		t.Fatalf("b's commit reached decode %d times, want 1", held.Load())
	}
	if moved.Load() != 0 {
		t.Errorf("a forward pass began while b's commit was in flight: the scheduler computed a's prompt instead of stepping aside")
	}
	if after := begun.Load(); after <= atHold.Load() {
		t.Fatalf("no forward pass after b's commit (%d, %d at the hold): a's prompt had ended, so the test proved nothing", after, atHold.Load())
	}
	st := loc.Prefill.Stats()
	if st.Asides < 1 || st.AsideTimeouts != 0 {
		t.Errorf("asides %d, timeouts %d; want at least 1 and 0", st.Asides, st.AsideTimeouts)
	}
}

// A tenant's own prompts do not wait for its handoffs: with a's short
// prompt's commit held at decode, a's long prompt keeps computing.
func TestPrefillAloneDoesNotStepAside(t *testing.T) {
	var held, moved atomic.Int64
	var loc *Local
	var begun *atomic.Int64
	loc, begun = asideRig(t, time.Minute, func(tenant string) {
		if tenant != "a" || held.Add(1) != 1 {
			return // the first of a's commits is the short prompt's
		}
		if passBegins(begun, 10*time.Second) {
			moved.Add(1)
		}
	})
	floodAndLight(t, loc, begun, "a")
	if moved.Load() != 1 {
		t.Errorf("no forward pass of a's long prompt while its short prompt's commit was in flight (10 s): a tenant alone stepped aside for itself")
	}
	if st := loc.Prefill.Stats(); st.Asides != 0 {
		t.Errorf("asides %d with one tenant, want 0", st.Asides)
	}
}

// A commit that does not land within Config.CommitAside stops holding
// the other tenants' prompts: the scheduler goes on after the bound.
func TestPrefillAsideIsBounded(t *testing.T) {
	var moved atomic.Int64
	var loc *Local
	var begun *atomic.Int64
	loc, begun = asideRig(t, time.Millisecond, func(tenant string) {
		if tenant != "b" {
			return
		}
		if passBegins(begun, 10*time.Second) {
			moved.Add(1)
		}
	})
	floodAndLight(t, loc, begun, "b")
	if moved.Load() != 1 {
		t.Errorf("no forward pass within 10 s of b's commit held at decode: the aside is not bounded by CommitAside")
	}
	if st := loc.Prefill.Stats(); st.AsideTimeouts < 1 {
		t.Errorf("aside timeouts %d (asides %d), want at least 1: the aside is bounded", st.AsideTimeouts, st.Asides)
	}
}

// The prompts ending in one step of the batch share one bound, counted
// from the first of them; each new step starts a full one. So however
// many prompts a step ends (in itself or in the nested passes it yields
// to), the other tenants' work waits at most the bound for them all.
func TestAsideBoundPerPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 12))
	var a aside
	bound := time.Millisecond
	now := time.Unix(1000, 0)
	var pass int64
	var first time.Time // the current step's first prompt
	for i := range 5000 {
		fresh := i == 0
		if rng.IntN(3) == 0 {
			pass++ // the next step (a nested pass is still this one)
			fresh = true
		}
		now = now.Add(time.Duration(rng.IntN(700)) * time.Microsecond)
		if fresh {
			first = now
		}
		got := a.left(pass, now, bound)
		if want := first.Add(bound).Sub(now); got != want {
			t.Fatalf("call %d (pass %v, %v after its first prompt): left %v, want %v", i, pass, now.Sub(first), got, want)
		}
	}
}

// Red team (redteam8): the nested passes of one paused step share that
// step's aside bound. A step of a's prompt that yields runs b's prompts
// as nested passes (yield.go), each a forward pass of its own; when each
// ends one of b's prompts and decode does not answer its commit, a bound
// per pass held a's step CommitAside once per nested pass (4 here, the
// nested budget's passes: the budget counts tokens, not the waits), so
// b's burst of tiny prompts stretched a's step by several bounds. Now
// the prompts ending in one step, its nested passes included, share one
// bound: a's step waits at most CommitAside for them all.
func TestAsideBoundSharedByNestedPasses(t *testing.T) {
	const bound = 40 * time.Millisecond
	rt := storiesRuntime(t)
	probe := &yieldProbe{Runtime: rt}
	pcfg, dcfg := storiesConfig(probeFP{probe}, 24), storiesConfig(rt, 32)
	pcfg.NestForward = 1 // a's 7-token step pays for 4 nested 1-token prompts
	pcfg.CommitAside = bound
	loc, err := NewLocal(pcfg, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, loc) })
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	dw := loc.Decode
	dw.hooks = &decodeHooks{commitAccepted: func(id kv.ID) {
		dw.mu.Lock()
		tenant := ""
		if h := dw.handoffs[id]; h != nil {
			tenant = h.tenant
		}
		dw.mu.Unlock()
		if tenant == "b" {
			select { // decode does not answer b's commits for a while
			case <-release:
			case <-time.After(5 * time.Second):
			}
		}
	}}
	var wg sync.WaitGroup
	run := func(r *Request) {
		defer wg.Done()
		s, err := loc.Submit(context.Background(), r)
		if err != nil {
			t.Error(err)
			return
		}
		if got := collect(t, s); got.final.Err != nil {
			t.Error(got.final.Err)
		}
	}
	sched := loc.Prefill.sched
	var mu sync.Mutex
	sent := 0
	var stepOf []int // the probe's step at which each of b's prompts arrived
	probe.onPause = func(step, point int) {
		mu.Lock()
		defer mu.Unlock()
		if step != 1 || sent >= 4 {
			return
		}
		// One of b's one-token prompts per pause point of a's first
		// step, waited for until it reached the worker: this pause
		// point nests it.
		before := sched.lastArrival.Load()
		sent++
		stepOf = append(stepOf, step)
		wg.Add(1)
		go run(&Request{ID: fmt.Sprint("b", sent), Tenant: "b", Prompt: prompt(sent, 1), MaxTokens: 2, IgnoreEOS: true})
		for deadline := time.Now().Add(5 * time.Second); sched.lastArrival.Load() == before; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Error("b's prompt did not reach the prefill worker within 5 s")
				return
			}
		}
	}
	wg.Add(1)
	go run(&Request{ID: "flood", Tenant: "a", Prompt: prompt(9, 60), MaxTokens: 2, IgnoreEOS: true})
	// Every aside has ended by the time a's prompt ends; then decode
	// may answer b's commits.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		done := sent >= 4
		mu.Unlock()
		if done && loc.Prefill.Stats().Committed >= 1 || time.Now().After(deadline) {
			break
		}
	}
	free()
	wg.Wait()
	nested := 0
	for _, n := range probe.nested {
		if strings.HasPrefix(n, "1/") {
			nested++
		}
	}
	if nested < 2 {
		t.Fatalf("%d nested passes in a's first step (%q), want >= 2: the test proved nothing", nested, probe.nested)
	}
	st := loc.Prefill.Stats()
	if st.AsideTimeouts != 1 {
		t.Errorf("a's first step waited out the aside bound %d times over %d nested passes ending b's prompts (asides %d), want once: the nested passes share the step's bound", st.AsideTimeouts, nested, st.Asides)
	}
}

// Stepping aside is off by default (DefaultCommitAside): a quiet-machine
// A/B resolved no gain for the light tenant and cost the flooding one
// about a tenth of its tokens per second (aside.go).
func TestPrefillAsideOffByDefault(t *testing.T) {
	loc, begun := asideRig(t, 0, func(string) {})
	floodAndLight(t, loc, begun, "b")
	if st := loc.Prefill.Stats(); st.Asides != 0 || st.AsideTimeouts != 0 {
		t.Errorf("asides %d (timeouts %d) with the default Config, want 0: stepping aside is off by default", st.Asides, st.AsideTimeouts)
	}
}

// passBegins reports whether a forward pass begins (begun moves) within
// d, polled: called from a commit hook, while the commit is held.
func passBegins(begun *atomic.Int64, d time.Duration) bool {
	before := begun.Load()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if begun.Load() != before {
			return true
		}
	}
	return false
}
