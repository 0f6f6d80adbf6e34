package engine

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"
	"time"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

// yieldProbe wraps a runtime's forwarders: each step's pause points
// (two a layer: after its attention, after the layer) are numbered from
// 0, onPause runs at each (before the batch's hook), and the nested
// steps record the point they ran at.
type yieldProbe struct {
	Runtime
	step    int                   // steps begun (paused or not)
	onPause func(step, point int) // nil: nothing
	onEnd   func(step int)        // nil: nothing; after a step's last pause point
	// onNested, when set, runs as a nested step begins (before it
	// computes): what arrives then arrives during the nested step.
	onNested func(step, point int)
	nested   []string    // "step/point: tokens@pos ..." per nested step
	at       [2]int      // the paused step and point now
	tokens   map[int]int // per step begun: its tokens
}

func (p *yieldProbe) NewForwarder(n int) Forwarder {
	return &probeFwd{p: p, f: p.Runtime.NewForwarder(n).(YieldForwarder)}
}

type probeFwd struct {
	p *yieldProbe
	f YieldForwarder
}

func (f *probeFwd) Forward(s []Step) []StepResult { return f.ForwardBetween(s, nil) }

func (f *probeFwd) ForwardBetween(s []Step, between func(int)) []StepResult {
	f.p.step++
	step, point := f.p.step, 0
	if f.p.tokens == nil {
		f.p.tokens = map[int]int{}
	}
	for _, st := range s {
		f.p.tokens[step] += len(st.Tokens)
	}
	res := f.f.ForwardBetween(s, func(l int) {
		if f.p.onPause != nil {
			f.p.onPause(step, point)
		}
		f.p.at = [2]int{step, point}
		point++
		if between != nil {
			between(l)
		}
	})
	if f.p.onEnd != nil {
		f.p.onEnd(step)
	}
	return res
}

func (f *probeFwd) Nested() Forwarder { return nestedProbe{f.p, f.f.Nested()} }

type nestedProbe struct {
	p *yieldProbe
	f Forwarder
}

// ForwardBetween and Nested make a nested step able to pause: it must
// not (one level only).
func (n nestedProbe) ForwardBetween(s []Step, between func(int)) []StepResult {
	if between != nil {
		n.p.nested = append(n.p.nested, "a nested step paused")
	}
	return n.Forward(s)
}

func (n nestedProbe) Nested() Forwarder { return n }

func (n nestedProbe) Forward(s []Step) []StepResult {
	var b []string
	for _, st := range s {
		b = append(b, fmt.Sprintf("%d@%d", len(st.Tokens), st.Pos))
	}
	n.p.nested = append(n.p.nested, fmt.Sprintf("%d/%d: %v", n.p.at[0], n.p.at[1], b))
	if n.p.onNested != nil {
		n.p.onNested(n.p.at[0], n.p.at[1])
	}
	return n.f.Forward(s)
}

// yieldRig is a driven batch over stories260K whose steps yield to
// sequences added during them (as the server's scheduler does).
type yieldRig struct {
	t     *testing.T
	cfg   Config
	pool  pagePool
	s     *scheduler
	probe *yieldProbe
	out   map[string][]string // per name: tokens and logprob bits, then the end
	ended chan string         // when set, learns each sequence's name as it ends
	hows  map[string]string   // per name: how its first chunk started (StartNested...)
}

func newYieldRig(t *testing.T, pages int) *yieldRig {
	return newYieldRigWith(t, pages, nil)
}

// newYieldRigWith is newYieldRig with set changing the configuration.
func newYieldRigWith(t *testing.T, pages int, set func(*Config)) *yieldRig {
	probe := &yieldProbe{Runtime: storiesRuntime(t)}
	cfg := storiesConfig(probe, pages)
	cfg.ChunkTokens, cfg.StepTokens = 16, 64
	if set != nil {
		set(&cfg)
	}
	cfg = cfg.withDefaults()
	cfg.NoWatermark = true
	pool, err := cfg.newPool()
	if err != nil {
		t.Fatal(err)
	}
	r := &yieldRig{t: t, cfg: cfg, pool: pool, probe: probe, out: map[string][]string{}, hows: map[string]string{}}
	r.s = newDrivenScheduler(cfg, pool, func() {})
	r.s.arrivals, r.s.arrivalMark = r.s.takeJoining, r.s.lastArrival.Load
	t.Cleanup(r.s.stop)
	return r
}

// add reserves a sequence's prompt and output pages and hands it to the
// scheduler (from a pause point of a step: it arrives during the step).
func (r *yieldRig) add(name, tenant string, p []int32, maxTokens int) *seq {
	return r.addWith(name, tenant, p, maxTokens, kv.PagesFor(len(p)+maxTokens, r.cfg.PageSize))
}

// addWith is add with pages reserved up front (0: none, the batch grows
// them).
func (r *yieldRig) addWith(name, tenant string, p []int32, maxTokens, pages int) *seq {
	owner := kv.Owner{Tenant: tenant, ID: newID()}
	var table []kv.PageRef
	if pages > 0 {
		var err error
		if table, err = r.pool.Reserve(owner, pages); err != nil {
			r.t.Fatal(err)
		}
	}
	samp, err := r.cfg.formats.sampler(r.t.Context(), tenant, sample.Params{Logprobs: true, TopLogprobs: 3}, p)
	if err != nil {
		r.t.Fatal(err)
	}
	q := colocatedSeq(owner, table, p, 0, maxTokens, true, samp)
	q.weight = 1
	if r.hows != nil {
		q.started = func(how string) { r.hows[name] = how }
	}
	q.emit = func(o outcome) {
		switch {
		case o.err != nil:
			r.out[name] = append(r.out[name], "error "+o.err.Error())
		case o.done:
			r.out[name] = append(r.out[name], "end "+o.finish)
		default:
			s := fmt.Sprintf("%d:%x", o.token, math.Float32bits(o.logprobs.Logprob))
			for _, tp := range o.logprobs.Top {
				s += fmt.Sprintf(",%d:%x", tp.ID, math.Float32bits(tp.Logprob))
			}
			r.out[name] = append(r.out[name], s)
		}
		if r.ended != nil && (o.done || o.err != nil) {
			r.ended <- name
		}
	}
	r.s.add(q)
	return q
}

func (r *yieldRig) drain() {
	for i := 0; r.s.turn(); i++ {
		if i > 500 {
			r.t.Fatal("the batch never emptied")
		}
	}
	if err := r.pool.CheckDrained(); err != nil {
		r.t.Errorf("pool not drained: %v", err)
	}
}

// aloneOut is each prompt's output (tokens and logprob bits) run alone
// on a rig of its own (64 pages, tenant x), by name: what the yield
// tests hold every output to. Alone, nothing nests.
func aloneOut(t *testing.T, maxTokens int, prompts map[string][]int32) map[string][]string {
	t.Helper()
	alone := map[string][]string{}
	for name, p := range prompts {
		r := newYieldRig(t, 64)
		r.add(name, "x", p, maxTokens)
		r.drain()
		if len(r.probe.nested) != 0 {
			t.Fatalf("%s alone: nested steps %v", name, r.probe.nested)
		}
		alone[name] = r.out[name]
	}
	return alone
}

// asAlone fails t for each named sequence whose output is not its
// output alone.
func (r *yieldRig) asAlone(t *testing.T, alone map[string][]string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !slices.Equal(r.out[n], alone[n]) {
			t.Errorf("%s: %v, alone %v", n, r.out[n], alone[n])
		}
	}
}

// A prompt that arrives during another tenant's prompt step runs its
// first chunk at the step's next pause point, as a step of its own,
// and then takes its turns; every sequence's tokens and logprobs are
// bitwise those of running alone. A prompt of a tenant already in the
// step (a's), one cancelled, one over its share, or one arriving after
// the step's nested step waits for the step boundary; a decode-only step
// does not pause.
func TestStepYieldsToArrivingPrompt(t *testing.T) {
	flood, light, light2 := prompt(3, 60), prompt(4, 12), prompt(5, 40)
	alone := aloneOut(t, 6, map[string][]int32{"a": flood, "b": light, "b2": light2, "a2": prompt(6, 20)})

	t.Run("light tenant at the next pause point", func(t *testing.T) {
		r := newYieldRig(t, 64)
		r.add("a", "a", flood, 6)
		r.s.turn() // a's first step: its chunks alone
		var cancelled *seq
		r.probe.onPause = func(step, p int) {
			if step == 2 && p == 0 {
				r.add("b", "b", light, 6)                    // one chunk: its first token is drawn nested
				r.add("a2", "a", prompt(6, 20), 6)           // a is in the step: waits
				cancelled = r.add("c", "c", prompt(7, 2), 6) // fits in the nested budget beside b
				cancelled.cancel.Store(true)                 // seen at the step boundary
			}
			if step == 2 && p == 1 {
				r.add("b2", "b", light2, 6) // the step ran its nested one: waits for the boundary
			}
		}
		r.s.turn()
		if want := []string{"2/0: [12@0]"}; !slices.Equal(r.probe.nested, want) {
			t.Fatalf("nested steps %v, want %v", r.probe.nested, want)
		}
		if got := len(r.out["b"]); got != 1 {
			t.Fatalf("b emitted %d items during a's step, want its first token", got)
		}
		r.probe.onPause = nil
		r.drain()
		r.asAlone(t, alone, "a", "b", "b2", "a2")
		if got := r.out["c"]; !slices.Equal(got, []string{"end cancelled"}) {
			t.Errorf("cancelled arrival: %v", got)
		}
		if n := r.s.stats().NestedSteps; n != 1 {
			t.Errorf("%d nested steps counted, want 1", n)
		}
	})

	t.Run("decode-only step does not pause", func(t *testing.T) {
		r := newYieldRig(t, 64)
		r.add("a", "a", prompt(3, 10), 6)
		r.s.turn() // a's prompt whole; then a decodes
		r.probe.onPause = func(step, p int) {
			if step == 2 && p == 0 {
				r.add("b", "b", light, 6)
			}
		}
		r.s.turn()
		if len(r.probe.nested) != 0 || r.probe.step != 2 {
			t.Fatalf("nested %v in a decode step", r.probe.nested)
		}
	})

	t.Run("no pages: waits for the boundary", func(t *testing.T) {
		r := newYieldRig(t, 5) // a's reservation takes them all
		r.add("a", "a", flood, 6)
		r.s.turn()
		var b *seq
		r.probe.onPause = func(step, p int) {
			if step == 2 && p == 0 {
				b = r.addWith("b", "b", light, 6, 0) // grows at its first step
			}
		}
		r.s.turn()
		if len(r.probe.nested) != 0 {
			t.Fatalf("nested %v without pages", r.probe.nested)
		}
		if b.emit == nil || len(r.out["b"]) != 0 {
			t.Fatalf("b ended at the pause (%v); it waits for the step boundary", r.out["b"])
		}
	})
}

// The server's scheduler (its own goroutine) takes a prompt that arrives
// during a step at its next pause point: the arrival here is
// handed to it from inside the step's first pause, and its first chunk
// runs nested there, with the same tokens as alone.
func TestSchedulerYieldsToArrival(t *testing.T) {
	probe := &yieldProbe{Runtime: storiesRuntime(t)}
	cfg := storiesConfig(probe, 64)
	cfg.ChunkTokens, cfg.StepTokens = 16, 64
	cfg = cfg.withDefaults()
	cfg.NoWatermark = true
	pool, err := cfg.newPool()
	if err != nil {
		t.Fatal(err)
	}
	r := &yieldRig{t: t, cfg: cfg, pool: pool, probe: probe, out: map[string][]string{}, ended: make(chan string, 2)}
	// The probe's fields and r.out are the scheduler goroutine's from
	// here on; the test reads them after both sequences ended.
	probe.onPause = func(step, p int) {
		if step == 1 && p == 0 {
			r.add("b", "b", prompt(4, 12), 4)
		}
	}
	r.s = newScheduler(cfg, pool)
	defer r.s.stop()
	r.add("a", "a", prompt(3, 60), 4)
	for range 2 {
		select {
		case <-r.ended:
		case <-time.After(time.Minute):
			t.Fatal("the sequences did not end")
		}
	}
	if want := []string{"1/0: [12@0]"}; !slices.Equal(probe.nested, want) {
		t.Fatalf("nested steps %v, want %v", probe.nested, want)
	}
	for _, n := range []string{"a", "b"} {
		if len(r.out[n]) != 5 || r.out[n][4] != "end length" {
			t.Errorf("%s: %v", n, r.out[n])
		}
	}
}

// A nested step is a whole forward pass: its cost does not shrink with
// its tokens as the tenants' shares count them (every layer's weights
// are read for one token as for a chunk). A tenant sending a burst of
// tiny prompts, one at each pause point of another tenant's prompt step,
// would otherwise run one nested step at every pause point of it (two a
// layer), each charged a token or two: the other tenant's step paid a
// whole forward per half layer (red team F2). The step's nested budget
// bounds it: each nested pass costs nestForward (4 at chunks of 16) plus
// its tokens, all of them together at most the paused step's own 4 + 16,
// so three of the four 2-token prompts run nested (at the first three
// pause points) and the fourth waits for the boundary; the tenant is charged each
// pass's fixed cost beside its tokens; every output is bitwise as alone.
func TestYieldBurstBoundedByNestBudget(t *testing.T) {
	flood := prompt(3, 60)
	tiny := [][]int32{prompt(11, 2), prompt(12, 2), prompt(13, 2), prompt(14, 2)}
	names := []string{"b0", "b1", "b2", "b3"}
	alone := aloneOut(t, 4, map[string][]int32{"a": flood, "b0": tiny[0], "b1": tiny[1], "b2": tiny[2], "b3": tiny[3]})
	r := newYieldRig(t, 64)
	if f := r.cfg.nestForward(); f != 4 {
		t.Fatalf("nestForward %d at chunks of %d, the test counts 4", f, r.cfg.ChunkTokens)
	}
	r.add("a", "a", flood, 4)
	r.s.turn() // a's first step
	entry := r.s.shares.Served("a") - r.s.shares.Lag
	r.probe.onPause = func(step, point int) {
		if step == 2 && point < len(tiny) {
			r.add(names[point], "b", tiny[point], 4) // one a pause point: a pass each
		}
	}
	r.s.turn()
	if want := []string{"2/0: [2@0]", "2/1: [2@0]", "2/2: [2@0]"}; !slices.Equal(r.probe.nested, want) {
		t.Fatalf("nested steps %v during a's step, want %v (three of 4 + 2 in a budget of 4 + 16)", r.probe.nested, want)
	}
	if got, want := r.s.shares.Served("b"), entry+3*(4+2); got != want {
		t.Fatalf("b served %d after three nested passes, want %d (entry %d + 3 x (4 + 2))", got, want, entry)
	}
	if r.hows["b3"] != "" || r.out["b3"] != nil {
		t.Fatalf("b3 started (%q) in a's step", r.hows["b3"])
	}
	r.probe.onPause = nil
	r.drain()
	if r.hows["b3"] != StartBudget {
		t.Errorf("b3 started %q, want %q", r.hows["b3"], StartBudget)
	}
	r.asAlone(t, alone, append(names, "a")...)
}

// A light tenant's second prompt arriving later in the same step of a
// flood still runs at its next pause point when the budget pays for both
// (4 + 4 twice in 4 + 16), where one nested step per paused step made it
// wait for the boundary (the crowding bench: 22-31% of b's prompts);
// both prompts' outputs are bitwise as alone.
func TestYieldSecondLightPromptNested(t *testing.T) {
	_, alone := floodWithTwoLight(t, false, []string{"2/0: [4@0]", "2/3: [4@0]"}, StartNested)
	flood, b0, b1 := prompt(3, 60), prompt(4, 4), prompt(5, 4)

	// Two prompts of b at the same pause point: one pass for both (b's
	// 8 tokens within its chunk of 16), 4 + 8 of the budget.
	r := newYieldRig(t, 64)
	r.add("a", "a", flood, 4)
	r.s.turn()
	r.probe.onPause = func(step, point int) {
		if step == 2 && point == 0 {
			r.add("b0", "b", b0, 4)
			r.add("b1", "b", b1, 4)
		}
	}
	r.s.turn()
	if want := []string{"2/0: [4@0 4@0]"}; !slices.Equal(r.probe.nested, want) {
		t.Fatalf("nested steps %v, want %v (one pass)", r.probe.nested, want)
	}
	r.probe.onPause = nil
	r.drain()
	if want := map[string]string{"a": StartNextStep, "b0": StartNested, "b1": StartNested}; !maps.Equal(r.hows, want) {
		t.Errorf("first chunks started %v, want %v", r.hows, want)
	}
	r.asAlone(t, alone, "a", "b0", "b1")

	// Only a prompt's first chunk runs nested, budget left or not: with
	// nested chunks of 4, b's 8-token prompt runs 4 at the pause point
	// and the rest in the batch's steps.
	r = newYieldRig(t, 64)
	r.s.cfg.SharedStepTokens = 4
	r.add("a", "a", flood, 4)
	r.s.turn()
	r.probe.onPause = func(step, point int) {
		if step == 2 && point == 0 {
			r.add("b", "b", prompt(4, 8), 4)
		}
	}
	r.s.turn()
	if want := []string{"2/0: [4@0]"}; !slices.Equal(r.probe.nested, want) {
		t.Fatalf("nested steps %v, want %v (the first chunk only)", r.probe.nested, want)
	}
	r.probe.onPause = nil
	r.drain()
}

// A prompt that arrives while another prompt runs nested (b's second
// while its first runs) runs its first chunk at the same pause point as
// soon as that nested step returns, not at the paused step's next pause
// point; outputs bitwise as alone. Without budget left for it (the
// colocated engine nests once per step) it waits for the step boundary
// as before.
func TestYieldArrivalDuringNestedStep(t *testing.T) {
	flood, b0, b1 := prompt(3, 60), prompt(4, 4), prompt(5, 4)
	alone := aloneOut(t, 4, map[string][]int32{"a": flood, "b0": b0, "b1": b1})
	for _, once := range []bool{false, true} {
		r := newYieldRig(t, 64)
		r.s.cfg.nestOnce = once
		r.add("a", "a", flood, 4)
		r.s.turn()
		r.probe.onPause = func(step, point int) {
			if step == 2 && point == 0 {
				r.add("b0", "b", b0, 4)
			}
		}
		r.probe.onNested = func(step, point int) {
			if step == 2 && point == 0 && r.hows["b1"] == "" && len(r.probe.nested) == 1 {
				r.add("b1", "b", b1, 4)
			}
		}
		r.s.turn()
		want, second := []string{"2/0: [4@0]", "2/0: [4@0]"}, StartAfterNested
		if once {
			want, second = []string{"2/0: [4@0]"}, StartBudget
		}
		if !slices.Equal(r.probe.nested, want) {
			t.Fatalf("nestOnce %v: nested steps %v, want %v (b1 right after b0's nested step)", once, r.probe.nested, want)
		}
		r.probe.onPause, r.probe.onNested = nil, nil
		r.drain()
		if w := map[string]string{"a": StartNextStep, "b0": StartNested, "b1": second}; !maps.Equal(r.hows, w) {
			t.Errorf("nestOnce %v: first chunks started %v, want %v", once, r.hows, w)
		}
		for _, n := range []string{"a", "b0", "b1"} {
			if !slices.Equal(r.out[n], alone[n]) {
				t.Errorf("nestOnce %v: %s: %v, alone %v", once, n, r.out[n], alone[n])
			}
		}
	}
}

// How each prompt's first chunk started (prefill_wait/<how>) is what it
// met: a prompt in an idle batch runs in the next step; at a pause point
// of another tenant's step it runs nested, unless its tenant is in the
// step, the step's nested budget cannot pay for it (b2: a's step of 16
// tokens pays 4 + 16, b took 4 + 12), or it arrived after the
// step's last pause point; one the step after its arrival passed over
// waited for the plan.
func TestFirstChunkStartReasons(t *testing.T) {
	r := newYieldRig(t, 64)
	r.add("a", "a", prompt(3, 60), 4)
	r.s.turn() // a's first step
	var a2, c *seq
	r.probe.onPause = func(step, point int) {
		if step == 2 && point == 0 {
			r.add("b", "b", prompt(4, 12), 4)
			a2 = r.add("a2", "a", prompt(6, 20), 4)
		}
		if step == 2 && point == 1 {
			r.add("b2", "b", prompt(5, 40), 4)
		}
	}
	r.probe.onEnd = func(step int) {
		if step == 2 {
			c = r.add("c", "c", prompt(7, 12), 4)
		}
	}
	r.s.turn()
	r.probe.onPause, r.probe.onEnd = nil, nil
	r.s.take() // c joins at the boundary
	if a2.waited != StartInStep || c.waited != StartAfterLastPause {
		t.Fatalf("at the boundary a2 waited for %q, c for %q; want %q, %q", a2.waited, c.waited, StartInStep, StartAfterLastPause)
	}
	r.drain()
	for name, want := range map[string]string{"a": StartNextStep, "b": StartNested, "b2": StartBudget} {
		if r.hows[name] != want {
			t.Errorf("%s's first chunk started %q, want %q (all: %v)", name, r.hows[name], want, r.hows)
		}
	}
	// Steps of 16 tokens, one tenant: a's second prompt, there at the
	// first boundary, waits for a's first prompt's chunks (the oldest
	// first).
	r = newYieldRig(t, 64)
	r.s.cfg.StepTokens = 16
	r.add("a", "a", prompt(3, 40), 4)
	r.add("a2", "a", prompt(6, 20), 4)
	r.drain()
	if want := map[string]string{"a": StartNextStep, "a2": StartPlan}; !maps.Equal(r.hows, want) {
		t.Fatalf("first chunks started %v, want %v", r.hows, want)
	}
}

// A paused step's nested budget goes to the least served waiting tenant
// first: b, new to the batch, gets its chunk at the pause point where a
// third tenant c, served as much as the flood a, has a tiny prompt that
// arrived a moment earlier. In arrival order, c's 2 tokens took the
// budget (4 + 2 of 4 + 17) and what they left never fit b's chunk of 16,
// so b waited for a's step boundary (sched.TestYieldWithinLeastServedFirst
// for the rule). Every output is bitwise as alone.
func TestYieldBudgetGoesToLeastServed(t *testing.T) {
	flood, c0, c1, b := prompt(3, 60), prompt(6, 16), prompt(7, 2), prompt(8, 16)
	alone := aloneOut(t, 4, map[string][]int32{"a": flood, "c0": c0, "c1": c1, "b": b})
	r := newYieldRig(t, 64)
	r.add("a", "a", flood, 4)
	r.add("c0", "c", c0, 4)
	// Until c0's prompt is done and it decodes (c is in the batch, not
	// in a's prompt steps), a still prefilling.
	for len(r.out["c0"]) == 0 {
		if r.probe.step > 8 {
			t.Fatal("c0 never started decoding")
		}
		r.s.turn()
	}
	next := r.probe.step + 1
	bEntry := r.s.shares.Served("a") - r.s.shares.Lag // where b enters
	if c := r.s.shares.Served("c"); c <= bEntry || c > r.s.shares.Served("a")+r.s.shares.Slack {
		t.Fatalf("c is served %d, b enters at %d, a at %d: the test wants b the least served and c within Slack of a", c, bEntry, r.s.shares.Served("a"))
	}
	r.probe.onPause = func(step, point int) {
		if step == next && point == 0 {
			r.add("c1", "c", c1, 4)
			r.add("b", "b", b, 4)
		}
	}
	r.s.turn()
	if want := []string{fmt.Sprintf("%d/0: [16@0]", next)}; !slices.Equal(r.probe.nested, want) {
		t.Fatalf("nested steps %v during a's step, want %v (b's chunk, the least served, in a budget of 4 + 17)", r.probe.nested, want)
	}
	r.probe.onPause = nil
	r.drain()
	if r.hows["b"] != StartNested || r.hows["c1"] != StartBudget {
		t.Errorf("b started %q, c1 %q; want %q and %q", r.hows["b"], r.hows["c1"], StartNested, StartBudget)
	}
	r.asAlone(t, alone, "a", "c0", "c1", "b")
}

// Colocated (nestOnce), a paused step runs one nested step: b's second
// prompt, arriving at a later pause point of the same step, waits for the
// boundary (the budget would have nested it too), and both still answer
// bitwise as alone. NewColocated sets it; the prefill worker does not.
func TestColocatedNestsOncePerStep(t *testing.T) {
	r, _ := floodWithTwoLight(t, true, []string{"2/0: [4@0]"}, StartBudget)
	c, err := NewColocated(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if !c.sched.cfg.nestOnce {
		t.Error("the colocated engine's scheduler nests more than once per step")
	}
}

// Colocated, a shared step carries half a chunk of prompt tokens by
// default (colocatedSharedStep): a co-tenant's prompt that arrives after
// the paused step's one nested step waits for half as much of the flood.
// An explicit SharedStepTokens stands; withDefaults (the prefill
// worker's) keeps one chunk.
func TestColocatedSharedStepHalfChunk(t *testing.T) {
	for _, c := range []struct{ chunk, set, want int }{{8, 0, 4}, {5, 0, 2}, {1, 0, 1}, {8, 8, 8}, {8, 3, 3}} {
		cfg := toyConfig(newToy(), 64)
		cfg.ChunkTokens, cfg.SharedStepTokens = c.chunk, c.set
		col, err := NewColocated(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := col.sched.shares.Short; got != c.want {
			t.Errorf("chunk %d, SharedStepTokens %d: colocated shared steps carry %d prompt tokens, want %d", c.chunk, c.set, got, c.want)
		}
		closeWithin(t, col)
	}
	cfg := toyConfig(newToy(), 64)
	cfg.ChunkTokens = 8
	if got := cfg.withDefaults().SharedStepTokens; got != 8 {
		t.Errorf("prefill worker's shared steps carry %d prompt tokens by default, want a chunk (8)", got)
	}
}

// floodWithTwoLight floods as tenant a (a 60-token prompt in 16-token
// chunks) and sends b's two 4-token prompts at pause points 0 and 3 of
// a's second step, with the paused step nesting once (nestOnce) or within
// its budget; it wants the nested steps nested, b's second prompt started
// as second, and every output bitwise as alone. It returns the rig and
// each prompt's output alone.
func floodWithTwoLight(t *testing.T, nestOnce bool, nested []string, second string) (*yieldRig, map[string][]string) {
	t.Helper()
	flood, b0, b1 := prompt(3, 60), prompt(4, 4), prompt(5, 4)
	alone := aloneOut(t, 4, map[string][]int32{"a": flood, "b0": b0, "b1": b1})
	r := newYieldRig(t, 64)
	r.s.cfg.nestOnce = nestOnce
	r.add("a", "a", flood, 4)
	r.s.turn()
	r.probe.onPause = func(step, point int) {
		if step == 2 && point == 0 {
			r.add("b0", "b", b0, 4)
		}
		if step == 2 && point == 3 {
			r.add("b1", "b", b1, 4)
		}
	}
	r.s.turn()
	if !slices.Equal(r.probe.nested, nested) {
		t.Fatalf("nested steps %v, want %v", r.probe.nested, nested)
	}
	r.probe.onPause = nil
	r.drain()
	if want := map[string]string{"a": StartNextStep, "b0": StartNested, "b1": second}; !maps.Equal(r.hows, want) {
		t.Errorf("first chunks started %v, want %v", r.hows, want)
	}
	r.asAlone(t, alone, "a", "b0", "b1")
	return r, alone
}
