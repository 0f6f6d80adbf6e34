package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/model"
	"sluice/internal/sample"
	"sluice/internal/tokenizer"
)

// wide is the toy model with Qwen2's 151,646-token vocabulary (committed
// under testdata/vocab) and a forward step of about d: its logits are one
// of a few flat random vectors, chosen by the toy's own (KV-dependent)
// logits, so a constrained request at temperature 1 draws a token the
// grammar refuses at most structural positions and needs masks over the
// whole vocabulary, as a random large model does.
type wide struct {
	*toy
	d    time.Duration
	v    *grammar.Vocab
	flat [][]float32
}

var (
	qwen2Once  sync.Once
	qwen2Vocab *grammar.Vocab
	qwen2Tok   *tokenizer.Tokenizer
	qwen2Err   error
)

func newWide(t testing.TB, d time.Duration) *wide {
	t.Helper()
	qwen2Once.Do(func() {
		tok, err := tokenizer.Load("../../testdata/vocab/ggml-vocab-qwen2.gguf")
		if err != nil {
			qwen2Err = err
			return
		}
		qwen2Vocab, qwen2Tok = TokenizerVocab(tok), tok
	})
	if qwen2Err != nil {
		t.Fatal(qwen2Err)
	}
	m := &wide{toy: newToy(), d: d, v: qwen2Vocab}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		l := make([]float32, m.v.Size())
		for i := range l {
			l[i] = float32(rng.NormFloat64()) * 0.5
		}
		m.flat = append(m.flat, l)
	}
	return m
}

func (m *wide) Vocab() int                   { return m.v.Size() }
func (m *wide) GrammarVocab() *grammar.Vocab { return m.v }
func (m *wide) NewForwarder(n int) Forwarder { return &wideFwd{m, m.toy.NewForwarder(n)} }
func (m *wide) EOG(tok int32) bool           { return false }
func (m *wide) logits(small []float32) []float32 {
	var h uint64
	for _, x := range small[:8] {
		h = h*31 + uint64(math.Float32bits(x))
	}
	return m.flat[h%uint64(len(m.flat))]
}

type wideFwd struct {
	m *wide
	f Forwarder
}

func (f *wideFwd) Forward(s []Step) []StepResult {
	time.Sleep(f.m.d)
	res := f.f.Forward(s)
	for i := range res {
		if res[i].Err == nil {
			res[i].Logits = f.m.logits(res[i].Logits)
		}
	}
	return res
}

// adversarialSchema is a schema no cache has seen (a fresh property name
// each time: every mask position is cold) whose strings are wide byte
// classes: masks inside them are walks of most of the 151k-token trie.
func adversarialSchema(n int) string {
	var props, req []string
	for i := range 6 {
		props = append(props, fmt.Sprintf(`"k%d_%d":{"type":"string","maxLength":%d}`, n, i, 4+i))
		req = append(req, fmt.Sprintf(`"k%d_%d"`, n, i))
	}
	return `{"type":"object","properties":{` + strings.Join(props, ",") + `},"required":[` + strings.Join(req, ",") + `],"additionalProperties":false}`
}

// probedWide is the wide toy whose forward passes first call probe with
// the worker's scheduler (once set) and the step, on the scheduler's
// goroutine: probe reads the batch's state (its sequences, the step's
// grammar budget) there without a lock, and sees it as the step sees it,
// whatever the goroutines reading the streams are doing.
type probedWide struct {
	*wide
	sched *atomic.Pointer[scheduler]
	probe func(s *scheduler, steps []Step)
}

func (m probedWide) NewForwarder(n int) Forwarder {
	return probedFwd{m.wide.NewForwarder(n), m}
}

type probedFwd struct {
	f Forwarder
	m probedWide
}

func (f probedFwd) Forward(s []Step) []StepResult {
	if sc := f.m.sched.Load(); sc != nil {
		f.m.probe(sc, s)
	}
	return f.f.Forward(s)
}

// budgetProbe records, at each forward pass, what the step before it did:
// the grammar work units it took from its budget, whether tenant b
// decoded in it and whether one of tenant evil's draws was waiting for
// its mask.
type budgetProbe struct {
	units int // the step's budget (Config.GrammarUnits)

	mu        sync.Mutex
	bPrev     bool
	spent     []int // units spent in each step b decoded in, when b decoded in the next too
	bSteps    int   // forward passes b decoded in
	bOut      int   // forward passes while b was decoding that b sat out
	contended int   // forward passes b decoded in while an evil draw was pending
}

func (p *budgetProbe) observe(s *scheduler, steps []Step) {
	bIn, bActive, evilHeld := false, false, false
	for _, q := range s.active {
		if q.emit == nil {
			continue
		}
		switch q.owner.Tenant {
		case "b":
			bActive = q.decoded
			for _, st := range steps {
				bIn = bIn || (q.decoded && st.KV == model.KV(q.view))
			}
		case "evil":
			evilHeld = evilHeld || q.held != nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if bIn && p.bPrev {
		// s.gb is still the previous step's budget: start (after this
		// forward pass) opens the next one. b's presence in both steps
		// means no idle cycle (start(!shared)) came between them.
		p.spent = append(p.spent, p.units-s.gb.units)
	}
	if bIn {
		p.bSteps++
		if evilHeld {
			p.contended++
		}
	} else if bActive {
		p.bOut++
	}
	p.bPrev = bIn
}

// Tenant isolation of cost: one tenant's constrained requests must not
// slow another tenant's decode. Tenant "evil" keeps 3 requests running,
// each with a schema never seen before and wide string classes, greedy
// over a flat 151k-token distribution, so nearly every structural token
// needs a cold mask over the whole vocabulary (a trie walk of tens of
// thousands of grammar units, milliseconds of CPU, where a step takes 1).
// Tenant "b" streams an unconstrained request meanwhile.
//
// What the scheduler guarantees, and what this checks by counting (the
// budget is in grammar work units, Config.GrammarUnits, so no clock is
// involved and a loaded machine cannot fail it): the grammar work done on
// every step b decodes in is at most the step's budget plus two slices
// (the slice that crosses the budget and the one the first deferred
// sequence is always given); b decodes in every forward pass while it
// runs, one token each, never sitting out for evil's masks; and evil's
// draws did wait for their masks (deferred) in steps b decoded in, so the
// test reached the contention. Without the budget a step does each cold
// mask whole (tens of thousands of units; see the mutation in
// scripts/mutate, engine-grammar-budget). That the time budget's limit is
// GrammarShare of the forward pass is TestStepBudgetTimeLimit's. (This
// replaced a wall-clock ratio of b's inter-token gaps with and without
// evil's schemas, which failed at load average 13-15.)
func TestConstrainedTenantDoesNotSlowCoTenant(t *testing.T) {
	constrainedBeside(t, adversarialSchema)
}

// nestedPatternSchema is a schema no cache has seen whose strings are
// patterns of six groups of nine nested {0,2} repetitions (red team 10):
// every group may match nothing, so one byte's step inside a string
// follows every way through them, about 22,000 grammar units for a byte
// that none of them takes (5x a step's budget here). A byte's step could
// not be cut into slices: a co-tenant's step did 44,526 units of evil's
// grammar work against its budget of 4,096.
func nestedPatternSchema(n int) string {
	group := strings.Repeat("(", 9) + "a" + strings.Repeat("){0,2}", 9)
	var props, req []string
	for i := range 2 {
		props = append(props, fmt.Sprintf(`"k%d_%d":{"type":"string","pattern":%q}`, n, i, "^"+strings.Repeat(group, 6)+"$"))
		req = append(req, fmt.Sprintf(`"k%d_%d"`, n, i))
	}
	return `{"type":"object","properties":{` + strings.Join(props, ",") + `},"required":[` + strings.Join(req, ",") + `],"additionalProperties":false}`
}

// TestConstrainedTenantDoesNotSlowCoTenantNested is the test above with
// evil's strings nested pattern groups: the step of one byte costs
// several budgets, so the step is cut mid-byte and resumed at the next
// step (the grammar's byte step is resumable), and b's steps stay within
// the same bound.
func TestConstrainedTenantDoesNotSlowCoTenantNested(t *testing.T) {
	constrainedBeside(t, nestedPatternSchema)
}

// constrainedBeside runs tenant b's unconstrained request beside three of
// evil's constrained ones, each with schema(n) for a fresh n, and checks
// the bound TestConstrainedTenantDoesNotSlowCoTenant describes.
func constrainedBeside(t *testing.T, schema func(n int) string) {
	const units, bTokens = 4096, 80
	probe := &budgetProbe{units: units}
	var sched atomic.Pointer[scheduler]
	m := probedWide{newWide(t, time.Millisecond), &sched, probe.observe}
	cfg := toyConfig(m, 512)
	cfg.Context = 256
	cfg.GrammarUnits = units
	col, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	sched.Store(col.sched)
	var schemaN int
	var mu sync.Mutex
	var evilTokens atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	started := make(chan struct{}, 3)
	d0 := col.sched.deferrals.Load()
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				mu.Lock()
				schemaN++
				// greedy: the argmax is refused at most positions, so most draws need a mask
				p := sample.Params{Format: sample.Format{Kind: sample.FormatJSONSchema, Schema: schema(schemaN)}}
				mu.Unlock()
				s, err := col.Submit(ctx, &Request{Tenant: "evil", Prompt: prompt(i*100+n, 3), MaxTokens: 60, Sampling: p})
				if err != nil {
					return
				}
				first := true
				for ev := range s.Events() {
					if ev.Err == nil && !ev.Done {
						evilTokens.Add(1)
						if first {
							first = false
							select {
							case started <- struct{}{}:
							default:
							}
						}
					}
				}
			}
		}()
	}
	for range 3 {
		<-started
	}
	s, err := col.Submit(context.Background(), &Request{Tenant: "b", Prompt: prompt(7, 3), MaxTokens: bTokens, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, s)
	cancel()
	wg.Wait()
	deferred := col.sched.deferrals.Load() - d0
	if got.final.Err != nil || len(got.tokens) != bTokens {
		t.Fatalf("b: %d tokens, %v", len(got.tokens), got.final.Err)
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	// One slice is sample.sliceUnits (256) of work, which a mask job or a
	// token's check may pass by one expansion (a rule reference's
	// alternatives: a handful in these schemas, 256 allows for them) and
	// a mask job by one position's accepted set (MaskJob counts a unit
	// per 64 of its words, a word per 64 tokens).
	slice := 256 + (m.Vocab()+63)/64/64 + 256
	bound := units + 2*slice
	worst := slices.Max(probe.spent)
	t.Logf("b: %d tokens in %d forward passes (%d with an evil draw pending, %d sat out); grammar units per step b decoded in: max %d (budget %d, bound %d); evil: %d tokens, %d draws deferred",
		len(got.tokens), probe.bSteps, probe.contended, probe.bOut, worst, units, bound, evilTokens.Load(), deferred)
	if worst > bound {
		t.Errorf("a step b decoded in did %d units of grammar work: over its budget of %d by more than two slices (bound %d)", worst, units, bound)
	}
	// b's first token comes from its prompt's step; each later one from a
	// forward pass it decoded in: it never sat one out for evil's masks.
	if probe.bSteps != bTokens-1 || probe.bOut != 0 {
		t.Errorf("b decoded in %d forward passes and sat out %d: want %d and 0 (one token every step)", probe.bSteps, probe.bOut, bTokens-1)
	}
	if probe.contended == 0 || deferred == 0 {
		t.Fatalf("no evil draw waited for its mask while b decoded (%d deferred in all): evil's masks ran unbudgeted on the shared steps, or the test did not reach them", deferred)
	}
}

// The time budget (the default: GrammarUnits unset) lets a step do
// GrammarShare, a tenth, of its forward pass's time in grammar work, at
// least GrammarFloor; a cycle with no forward pass GrammarIdle; and
// least() one slice more. A fake clock makes each slice take 100 us, so
// the test counts slices.
func TestStepBudgetTimeLimit(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	count := func(took time.Duration, shared, grace bool) int {
		var b stepBudget
		b.start(clock, took, shared, 0)
		if grace {
			b.least()
		}
		n := 0
		for ; n < 1000 && b.Left(); n++ {
			now = now.Add(100 * time.Microsecond)
			b.Spend(256)
		}
		return n
	}
	for _, c := range []struct {
		took          time.Duration
		shared, grace bool
		want          int
	}{
		{20 * time.Millisecond, true, false, 20}, // a tenth of 20 ms
		{20 * time.Millisecond, true, true, 21},  // and the grace slice
		{time.Millisecond, true, false, 3},       // 100 us < the 250 us floor
		{0, false, false, 50},                    // no forward pass: 5 ms
	} {
		if got := count(c.took, c.shared, c.grace); got != c.want {
			t.Errorf("forward pass %v, shared %v, grace %v: %d slices of 100 us, want %d", c.took, c.shared, c.grace, got, c.want)
		}
	}
}
