package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/handoff"
	"sluice/internal/sample"
)

// A hostile schema must not hold up a co-tenant through the check of its
// drawn token. Tenant "evil" asks for an anyOf of 500 string patterns
// (500 parses alive inside the string) and biases Qwen2's 128-space token
// so that it is the draw at every step: checking it steps every parse by
// every byte, ~384,000 grammar units a token (100-250 ms of CPU), which
// ran on the shared step outside the grammar budget. With a budget of
// 4,096 units a step (driven, so the test counts steps, not time), each
// of evil's tokens now takes about a hundred steps, deferred like a mask,
// while tenant "b" decodes a token every step: b's 40 tokens are all out
// before evil's third (before the fix evil's four tokens took four steps,
// each holding b up), every one of evil's checked draws was deferred, and
// evil's output is what it is alone with the default budget.
func TestWideCheckDoesNotHoldUpCoTenant(t *testing.T) {
	m := newWide(t, time.Millisecond)
	long := int32(-1)
	for i := range int32(m.v.Size()) {
		if m.v.Piece(i) == strings.Repeat(" ", 128) {
			long = i
		}
	}
	if long < 0 {
		t.Fatal("no 128-space token in the Qwen2 vocabulary")
	}
	var br []string
	for i := range 500 {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	evil := func(n int) *Request {
		return &Request{Tenant: "evil", Prompt: prompt(1, 3), MaxTokens: n, Sampling: sample.Params{
			LogitBias: []sample.Bias{{ID: long, Bias: 100}},
			Format:    sample.Format{Kind: sample.FormatJSONSchema, Schema: `{"anyOf":[` + strings.Join(br, ",") + `]}`}}}
	}
	const evilTokens, bTokens = 4, 40
	t0 := time.Now()
	// Alone, with a budget no check passes: the draws are the unbounded ones.
	acfg := toyConfig(m, 512)
	acfg.GrammarUnits = 1 << 30
	alone, err := NewColocated(acfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := alone.Submit(context.Background(), evil(evilTokens))
	if err != nil {
		t.Fatal(err)
	}
	want := collect(t, s)
	closeWithin(t, alone)
	if want.final.Err != nil || len(want.tokens) != evilTokens {
		t.Fatalf("evil alone: %d tokens, %v", len(want.tokens), want.final.Err)
	}
	if i := slices.Index(want.tokens, long); i < 0 || i > 1 {
		t.Fatalf("evil alone drew %v: the 128-space token is not the draw", want.tokens)
	}

	t.Logf("alone %v", time.Since(t0))
	// evil's tokens out before b's last step, counted where the tokens
	// are made (the scheduler's goroutine), not where the two streams
	// are read: a reader goroutine that lags on a loaded machine must
	// not reorder them.
	var sched atomic.Pointer[scheduler]
	var pmu sync.Mutex
	evilMax, evilBefore := 0, -1
	probed := probedWide{wide: m, sched: &sched, probe: func(s *scheduler, _ []Step) {
		pmu.Lock()
		defer pmu.Unlock()
		for _, q := range s.active {
			if q.emit != nil && q.owner.Tenant == "evil" {
				evilMax = max(evilMax, q.generated)
			}
		}
		for _, q := range s.active {
			if q.emit != nil && q.owner.Tenant == "b" && q.generated == bTokens-1 {
				evilBefore = evilMax // b's last token comes out of this step
			}
		}
	}}
	cfg := toyConfig(probed, 512)
	cfg.GrammarUnits = 4096
	col, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	// Warm the first position's mask (cached for the tenant's schema),
	// so that only the checks inside the string are costly.
	if s, err = col.Submit(context.Background(), evil(1)); err != nil {
		t.Fatal(err)
	}
	collect(t, s)
	t.Logf("warm %v", time.Since(t0))
	d0 := col.sched.deferrals.Load()
	sched.Store(col.sched) // after the warm-up: its evil request is not counted
	var wg sync.WaitGroup
	var got [2]result
	for i, r := range []*Request{evil(evilTokens), {Tenant: "b", Prompt: prompt(7, 3), MaxTokens: bTokens, IgnoreEOS: true}} {
		s, err := col.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			timeout := time.After(120 * time.Second)
			for {
				select {
				case ev, ok := <-s.Events():
					if !ok {
						return
					}
					if ev.Done || ev.Err != nil {
						got[i].final = ev
						continue
					}
					got[i].tokens = append(got[i].tokens, ev.Token)
				case <-timeout:
					t.Errorf("%s: stream did not end", r.Tenant)
					return
				}
			}
		}()
	}
	wg.Wait()
	deferred := col.sched.deferrals.Load() - d0
	if got[0].final.Err != nil || got[1].final.Err != nil {
		t.Fatalf("evil %v, b %v", got[0].final.Err, got[1].final.Err)
	}
	if !slices.Equal(got[0].tokens, want.tokens) {
		t.Fatalf("evil with its checks deferred drew %v, alone %v", got[0].tokens, want.tokens)
	}
	if len(got[1].tokens) != bTokens {
		t.Fatalf("b got %d tokens, want %d", len(got[1].tokens), bTokens)
	}
	pmu.Lock()
	defer pmu.Unlock()
	checked := 0
	for _, id := range want.tokens {
		if id == long {
			checked++
		}
	}
	t.Logf("evil: %d tokens (%d of 128 spaces), %d draws deferred; %d of them out before b's last step (b: %d tokens)", evilTokens, checked, deferred, evilBefore, bTokens)
	if evilBefore < 0 || evilBefore > 2 {
		t.Fatalf("evil emitted %d tokens before b's %d were out: its checks ran on the shared step", evilBefore, bTokens)
	}
	if deferred < int64(checked) {
		t.Fatalf("%d of evil's draws deferred, want every checked 128-space draw (%d)", deferred, checked)
	}
}

// probeWide is the wide toy whose GrammarVocab, asked for when a worker
// makes its first constrained sampler, calls probe first.
type probeWide struct {
	*wide
	probe func()
}

func (p probeWide) GrammarVocab() *grammar.Vocab {
	p.probe()
	return p.wide.GrammarVocab()
}

// A decode worker makes a resumed request's sampler, which replays the
// tokens generated before through the request's grammar (I14), without
// its handoff lock held: for the 500-way anyOf each 128-space token
// replayed is an unbudgeted check of ~384,000 units, and a long output
// replayed under the lock held up every other tenant's Reserve, Commit
// and Stream and the scheduler (a sequence's end takes the lock). The
// model's GrammarVocab, asked for inside the sampler's making, tries the
// lock; the replayed request's first token comes out as usual.
func TestDecodeReplaysOutsideTheLock(t *testing.T) {
	m := newWide(t, 0)
	long := int32(-1)
	quote := int32(-1)
	for i := range int32(m.v.Size()) {
		switch m.v.Piece(i) {
		case strings.Repeat(" ", 128):
			long = i
		case `"`:
			quote = i
		}
	}
	var dw *DecodeWorker
	probed, held := 0, 0
	pm := probeWide{m, func() {
		if dw == nil {
			return
		}
		probed++
		if dw.mu.TryLock() {
			dw.mu.Unlock()
		} else {
			held++
		}
	}}
	cfg := toyConfig(pm, 64)
	cfg.Unsafe = Unsafe{NoCountCheck: true, NoDigest: true}
	var err error
	if dw, err = NewDecodeWorker(cfg); err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	var br []string
	for i := range 500 {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	ctx := context.Background()
	id := newID()
	if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "evil", PromptTokens: 12, MaxTokens: 3, Model: FingerprintOf(pm)}); err != nil {
		t.Fatal(err)
	}
	p := sample.Params{LogitBias: []sample.Bias{{ID: long, Bias: 100}},
		Format: sample.Format{Kind: sample.FormatJSONSchema, Schema: `{"anyOf":[` + strings.Join(br, ",") + `]}`}}
	ts, err := dw.Stream(ctx, id, handoff.StreamParams{Sampling: p, Generated: []int32{quote, long, long, long}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dw.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: 12, Digest: []byte{1}, FirstToken: long}); err != nil {
		t.Fatal(err)
	}
	// The first token is emitted as the sequence joins; no page was
	// written here (the checks that would refuse that are off), so the
	// steps after it may fail: only the first is the replay's.
	tok, err := ts.Recv()
	if err != nil || tok.Err != nil || tok.ID != long {
		t.Fatalf("the resumed request's first item %+v, %v; want the 128-space token", tok, err)
	}
	for !tok.Done && tok.Err == nil {
		if tok, err = ts.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if probed != 1 || held != 0 {
		t.Fatalf("the sampler was made %d times, %d of them with the handoff lock held", probed, held)
	}
	dw.Tick(time.Now().Add(time.Hour))
	waitDrained(t, dw.Pool())
}
