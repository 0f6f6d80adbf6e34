package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/model"
)

// Prompts that arrive while the prefill worker's steps run (red team of
// the nested budget on the disaggregated path, where several nested
// passes of one paused step stream their pages to decode, publish them
// to the prefix cache and commit from the scheduler's goroutine, 8deda72,
// while the paused step is still between two layers): at random pause
// points of the prefill worker's steps, prompts of four tenants (1 to 40
// tokens, same-seed prompts sharing cached prefixes) are submitted and
// the pause point waits until they reach the worker, so the next pause
// points can nest them. Every request's tokens equal the same request's
// alone on the colocated engine, its usage is honest (I9), every handoff
// commits or was revoked and requeued, and every pool drains.
func TestDisaggNestedArrivalsBitwise(t *testing.T) {
	rt := storiesRuntime(t)
	type req struct {
		r   *Request
		ref []int32
	}
	tenants := []string{"a", "b", "c", "d"}
	rng := rand.New(rand.NewPCG(28, 5))
	var reqs []req
	col, err := NewColocated(storiesConfig(rt, 64))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 28 {
		tn := tenants[rng.IntN(len(tenants))]
		ln := 1 + rng.IntN(40)
		if i < 2 {
			tn, ln = "a", 40 // the flood that starts first
		}
		r := &Request{ID: fmt.Sprint(i), Tenant: tn, Prompt: prompt(rng.IntN(4), ln), MaxTokens: 4, IgnoreEOS: true}
		s, err := col.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, s)
		if got.final.Err != nil {
			t.Fatal(got.final.Err)
		}
		reqs = append(reqs, req{r, got.tokens})
	}
	closeWithin(t, col)

	probe := &yieldProbe{Runtime: rt}
	pcfg, dcfg := storiesConfig(probeFP{probe}, 24), storiesConfig(rt, 32)
	// Any fixed cost a server may measure (forwardcost.go), drawn apart
	// from the arrivals.
	pcfg.NestForward = randomForward(rand.New(rand.NewPCG(28, 6)), pcfg.StepTokens)
	pcfg.PrefixCache, dcfg.PrefixCache = true, true
	loc, err := NewLocal(pcfg, dcfg)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]result, len(reqs))
	var wg sync.WaitGroup
	var ended, started atomic.Int64
	submitted := func() int { return int(started.Load()) }
	submit := func(i int) {
		wg.Add(1)
		started.Add(1)
		go func() {
			defer wg.Done()
			defer ended.Add(1)
			for {
				s, err := loc.Submit(context.Background(), reqs[i].r)
				if ee, ok := err.(*Error); ok && (ee.Code == CodeOverloaded || ee.Code == CodeKVCapacity) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					out[i].final = Event{Err: err}
					return
				}
				out[i] = collect(t, s)
				if ee, ok := out[i].final.Err.(*Error); ok && (ee.Code == CodeOverloaded || ee.Code == CodeKVCapacity) {
					continue
				}
				return
			}
		}()
	}
	// The probe's hook runs on the prefill worker's scheduler goroutine,
	// the rng is its own from here; mu guards what the test reads.
	var mu sync.Mutex
	next, missed, stop := 2, 0, false
	sched := loc.Prefill.sched
	probe.onPause = func(step, point int) {
		mu.Lock()
		defer mu.Unlock()
		if stop || next >= len(reqs) || rng.IntN(4) != 0 {
			return
		}
		before := sched.lastArrival.Load()
		k := min(1+rng.IntN(2), len(reqs)-next)
		for range k {
			submit(next)
			next++
		}
		// Until they reached the worker (or a moment passed: one may
		// wait for pages at decode or prefill, behind this very step),
		// so the next pause points see them. The first surely arrives:
		// the test needs a nested pass.
		want, deadline := before+uint64(k), time.Now().Add(100*time.Millisecond)
		if next-k == 2 {
			want, deadline = before+1, time.Now().Add(10*time.Second)
		}
		for sched.lastArrival.Load() < want {
			if time.Now().After(deadline) {
				missed++
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	submit(0)
	submit(1)
	// Requests the pauses did not get to go at the end: once every
	// request submitted so far has ended (no step left to pause), or
	// after a while.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if int(ended.Load()) >= submitted() {
			break
		}
	}
	mu.Lock()
	stop = true
	for ; next < len(reqs); next++ {
		submit(next)
	}
	mu.Unlock()
	wg.Wait()
	nested := len(probe.nested)
	for i, q := range reqs {
		got := out[i]
		if got.final.Err != nil {
			t.Errorf("request %d (%s, %d tokens): %v", i, q.r.Tenant, len(q.r.Prompt), got.final.Err)
			continue
		}
		if !slices.Equal(got.tokens, q.ref) {
			t.Errorf("request %d (%s, %d tokens; %d nested passes in all): %v, alone on the colocated engine %v", i, q.r.Tenant, len(q.r.Prompt), nested, got.tokens, q.ref)
		}
		if u := got.final.Usage; u.PromptTokens != len(q.r.Prompt) || u.CompletionTokens != len(q.ref) {
			t.Errorf("request %d: usage %+v, want %d prompt and %d completion tokens (I9)", i, u, len(q.r.Prompt), len(q.ref))
		}
	}
	ps := loc.Prefill.Stats()
	if ps.Failed != loc.Decode.SchedStats().Revoked {
		t.Errorf("prefill stats %+v, %d reservations revoked", ps, loc.Decode.SchedStats().Revoked)
	}
	mu.Lock()
	t.Logf("%d nested passes (%v), %d arrivals not seen within a pause, prefill %+v", nested, probe.nested, missed, ps)
	mu.Unlock()
	checkNestBudget(t, probe, pcfg.NestForward, fmt.Sprintf("prefill worker (forward %d)", pcfg.NestForward))
	if nested == 0 {
		t.Errorf("no prompt ran nested: the test did not exercise what it is for")
	}
	closeWithin(t, loc)
	for name, p := range map[string]interface{ CheckDrained() error }{"prefill": loc.Prefill.Pool(), "decode": loc.Decode.Pool()} {
		if err := p.CheckDrained(); err != nil {
			t.Errorf("%s pool not drained: %v", name, err)
		}
	}
}

// probeFP passes a probed model's fingerprint through (I13: the
// roles must agree).
type probeFP struct{ *yieldProbe }

func (f probeFP) Fingerprint() model.Fingerprint { return FingerprintOf(f.Runtime) }
