package engine

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sched"
)

// floodPrefill keeps n of tenant's prompts of promptLen tokens in the
// rig's batch as the prefill worker builds them (prefillSeq, weighing
// the request's weight as Prefill does), a new one as one ends, and
// counts the prompt tokens they ran.
type floodPrefill struct {
	r      *quotaRig
	tenant string
	weight int // PrefillRequest.Weight as sent
	len    int
	live   []*seq
	ran    int // prompt tokens of ended prompts
}

func (f *floodPrefill) fill(n int) {
	f.r.t.Helper()
	kept := f.live[:0]
	for _, q := range f.live {
		if q.emit == nil {
			f.ran += q.fed
			continue
		}
		kept = append(kept, q)
	}
	f.live = kept
	for len(f.live) < n {
		f.r.seed++
		r := &handoff.PrefillRequest{Tenant: f.tenant, Tokens: prompt(f.r.seed, f.len), Weight: f.weight}
		owner := kv.Owner{Tenant: r.Tenant, ID: newID()}
		table, err := f.r.pool.Reserve(owner, kv.PagesFor(len(r.Tokens), f.r.cfg.PageSize))
		if err != nil {
			f.r.t.Fatal(err)
		}
		samp, err := prefillSampler(f.r.t.Context(), f.r.cfg.formats, r.Tenant, r.Sampling, r.Tokens, 0)
		if err != nil {
			f.r.t.Fatal(err)
		}
		q := prefillSeq(owner, table, r.Tokens, 0, prefillWeight(r.Weight), samp)
		q.emit = func(outcome) {}
		f.r.s.add(q)
		f.live = append(f.live, q)
	}
}

// tokens is the prompt tokens f's prompts ran so far.
func (f *floodPrefill) tokens() int {
	n := f.ran
	for _, q := range f.live {
		n += q.fed
	}
	return n
}

// The prefill worker's batch weighs each prompt by its request's weight
// (PrefillRequest.Weight, the router's --api-keys weight), as the
// colocated batch does: two tenants both flooding long prompts get prompt
// tokens in proportion to their weights over a window, within 1%. Before,
// every prefill sequence weighed 1, so weights 2:1 ran 1:1; and each
// chunk's charge per unit of weight was rounded up, so a weight acted
// smaller than it is wherever a chunk was not a multiple of it (3:1 ran
// 2.3:1 at 7-token chunks, 5:1 ran 3.5:1; 2:1 ran 1.67:1 at 5): the
// remainder is carried now (sched.Shares.Charge). Chunks of 5 and 7
// tokens, a multiple of none of the weights but 5. Driven step by step:
// no clock, no goroutine.
func TestPrefillStepsByWeight(t *testing.T) {
	for _, chunk := range []int{5, 7} {
		for _, c := range []struct{ a, b int }{{2, 1}, {1, 1}, {1, 3}, {3, 1}, {3, 2}, {5, 1}} {
			t.Run(fmt.Sprintf("chunk=%d/%d:%d", chunk, c.a, c.b), func(t *testing.T) {
				r := newQuotaRig(t, 512, func(cf *Config) { cf.ChunkTokens = chunk })
				a := &floodPrefill{r: r, tenant: "a", weight: c.a, len: 60}
				b := &floodPrefill{r: r, tenant: "b", weight: c.b, len: 60}
				// A window well past the lag bound (a few shared steps),
				// which a tenant new to the batch may be ahead by.
				for range 40 {
					a.fill(3)
					b.fill(3)
					r.s.turn()
				}
				a0, b0 := a.tokens(), b.tokens()
				for range 600 {
					a.fill(3)
					b.fill(3)
					r.s.turn()
				}
				ra, rb := a.tokens()-a0, b.tokens()-b0
				if rb == 0 {
					t.Fatalf("b ran nothing (a %d tokens)", ra)
				}
				want := float64(c.a) / float64(c.b)
				if got := float64(ra) / float64(rb); math.Abs(got/want-1) > 0.01 {
					t.Fatalf("a ran %d prompt tokens and b %d (%.3f:1), want %.3f:1 within 1%%", ra, rb, got, want)
				}
			})
		}
	}
}

// A PrefillRequest's weight is taken within 1 to handoff.MaxWeight: 0 or
// less counts as 1 (not as no credit), and a huge one from an in-process
// caller (the TCP codec refuses it) as MaxWeight, so the other tenant
// still runs.
func TestPrefillWeightClamped(t *testing.T) {
	for in, want := range map[int]int{-7: 1, 0: 1, 1: 1, 5: 5, handoff.MaxWeight: handoff.MaxWeight, handoff.MaxWeight + 1: handoff.MaxWeight, math.MaxInt: handoff.MaxWeight} {
		if got := prefillWeight(in); got != want {
			t.Errorf("prefillWeight(%d) = %d, want %d", in, got, want)
		}
	}
	r := newQuotaRig(t, 512)
	a := &floodPrefill{r: r, tenant: "a", weight: math.MaxInt, len: 60}
	b := &floodPrefill{r: r, tenant: "b", weight: 1, len: 60}
	for range 200 {
		a.fill(3)
		b.fill(3)
		r.s.turn()
	}
	if b.tokens() == 0 {
		t.Fatalf("a's weight %d starved b: b ran nothing in 200 steps (a %d tokens)", math.MaxInt, a.tokens())
	}
}

// The prefill worker's queue weighs a prompt's tenant by its request's
// weight, as the router's does. A prompt holds the whole prefill pool;
// b (weight 1) fills the queue (12), then a floods it. Each tenant's
// first prompt was refused for room and waits outside the tenants'
// sub-queues; of the 10 places left, a tenant of weight w among weights
// totalling W keeps floor(10 x w / W), so a's arrivals displace b's
// newest prompts until a holds 1 + floor(10 x w / (w + 1)) of the 12
// (weight 1: 6, 2: 7, 3: 8), and its next ones are refused. Before,
// every prompt entered the prefill queue at weight 1 (6 whatever the
// weight). Each step waits for the queue's own counts, on a clock that
// stands still.
func TestPrefillQueueByWeight(t *testing.T) {
	for _, c := range []struct{ weight, queued int }{{1, 6}, {2, 7}, {3, 8}} {
		t.Run(fmt.Sprintf("weight=%d", c.weight), func(t *testing.T) { testPrefillQueueByWeight(t, c.weight, c.queued) })
	}
}

func testPrefillQueueByWeight(t *testing.T, weight, queued int) {
	m := &gated{toy: newToy(), after: 0, entered: make(chan struct{}), release: make(chan struct{})}
	dw := toyDecodeWorker(t, m, 256)
	pcfg := toyConfig(m, 4) // one 16-token prompt fills the pool
	pcfg.MaxQueue = 12
	pcfg.QueueTimeout = time.Minute
	pw, err := NewPrefillWorker(pcfg, dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	// The queue's clock stands still: no retry of a refused prompt
	// (RetryInterval) and no timeout comes between the steps below, only
	// the events the test causes. noRoom counts the pool's refusals.
	var noRoom atomic.Int64
	pw.adm.mu.Lock()
	t0 := pw.adm.now()
	pw.adm.now = func() time.Time { return t0 }
	pw.adm.onEvent = func(ev sched.Event) {
		if ev.Kind == sched.EvNoRoom {
			noRoom.Add(1)
		}
	}
	pw.adm.mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			// The clock runs again: a prompt refused for room while the
			// pages were on their way back is retried (RetryInterval).
			pw.adm.mu.Lock()
			pw.adm.now = time.Now
			pw.adm.mu.Unlock()
			close(m.release)
		}
	}
	var calls sync.WaitGroup
	defer calls.Wait()
	defer release() // first: Close and the calls wait for the held step
	ctx := context.Background()
	seed := 0
	call := func(tenant string, weight int) {
		t.Helper()
		seed++
		id, p := newID(), prompt(seed, 16)
		res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: len(p), MaxTokens: 1, Model: FingerprintOf(m)})
		if err != nil {
			t.Fatal(err)
		}
		calls.Add(1)
		go func() {
			defer calls.Done()
			// Refused or displaced prompts fail; the others commit.
			_, _ = pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: tenant, Tokens: p, Reservation: res, Model: FingerprintOf(m), Weight: weight})
		}()
	}
	until := func(what string, ok func(sched.Stats) bool) sched.Stats {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			s := pw.adm.stats().Stats
			if ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: never (queue %+v)", what, s)
			}
			time.Sleep(time.Millisecond)
		}
	}
	call("c", 1)
	m.wait(t) // c's prompt holds the pool in its first step
	call("b", 1)
	until("b's first prompt refused for room", func(sched.Stats) bool { return noRoom.Load() == 1 })
	for i := 1; i < 12; i++ {
		call("b", 1) // not tried: b waits behind its first
		until(fmt.Sprintf("b's prompt %d queued", i+1), func(s sched.Stats) bool { return s.WaitingByTenant["b"] == i+1 })
	}
	call("a", weight) // displaces b's newest, tried, refused for room
	until("a's first prompt refused for room", func(s sched.Stats) bool {
		return noRoom.Load() == 2 && s.WaitingByTenant["a"] == 1
	})
	for i := 1; i < 12; i++ {
		call("a", weight)
		until(fmt.Sprintf("a's prompt %d queued or refused", i+1), func(s sched.Stats) bool {
			return int(s.Rejected[sched.ReasonDisplaced]+s.Rejected[sched.ReasonQueueFull]) == i+1
		})
	}
	s := pw.adm.stats().Stats
	if s.WaitingByTenant["a"] != queued || s.WaitingByTenant["b"] != 12-queued {
		t.Fatalf("a (weight %d) has %d prompts in the prefill queue and b (weight 1) %d, want %d and %d", weight, s.WaitingByTenant["a"], s.WaitingByTenant["b"], queued, 12-queued)
	}
}
