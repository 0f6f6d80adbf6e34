package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"sluice/internal/gguf"
	"sluice/internal/grammar"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
	"sluice/internal/testenv"
)

// schemaCase is one schema of the corpus. Unbounded marks a schema with
// unbounded repetition (free strings, open arrays, any value) that a
// random tiny model at temperature 1 need not end within max_tokens: its
// outputs must be bitwise identical everywhere, and valid when they end.
type schemaCase struct {
	Name      string          `json:"name"`
	Unbounded bool            `json:"unbounded"`
	Schema    json.RawMessage `json:"schema"`
}

func schemaCorpus(t testing.TB) []schemaCase {
	t.Helper()
	b, err := os.ReadFile("../../testdata/schemas/corpus.json")
	if err != nil {
		t.Fatal(err)
	}
	var c []schemaCase
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// independentValidator compiles a schema with santhosh-tekuri/jsonschema
// (draft 2020-12, formats asserted): not the grammar under test.
func independentValidator(t testing.TB, schema json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// constrainedRequests is one request per corpus schema and seed, with
// temperature 1 (the model's own distribution, the hardest for the
// grammar to keep in line), from three tenants.
func constrainedRequests(t testing.TB, seeds int, maxTokens int, prompts [][]int32, every int) ([]*Request, []schemaCase) {
	var reqs []*Request
	var schemas []schemaCase
	for i, c := range schemaCorpus(t) {
		if i%every != 0 {
			continue
		}
		for s := range seeds {
			var compact bytes.Buffer
			if err := json.Compact(&compact, c.Schema); err != nil {
				t.Fatal(err)
			}
			f := sample.Format{Kind: sample.FormatJSONSchema, Schema: compact.String()}
			reqs = append(reqs, &Request{ID: fmt.Sprintf("%s/%d", c.Name, s), Tenant: fmt.Sprintf("tenant-%d", (i+s)%3),
				Prompt: prompts[(i+s)%len(prompts)], MaxTokens: maxTokens,
				Sampling: sample.Params{Temperature: 1, Seed: uint64(1000*i + s), Format: f}})
			schemas = append(schemas, c)
		}
	}
	return reqs, schemas
}

// requireValid checks every output ended by the grammar ("stop") and
// validates against its schema with the independent validator.
func requireValid(t *testing.T, label string, v *grammar.Vocab, reqs []*Request, schemas []schemaCase, got []result) {
	t.Helper()
	vals := map[string]*jsonschema.Schema{}
	ended := 0
	for i, r := range reqs {
		if got[i].final.Err != nil {
			t.Fatalf("%s: %s: %v", label, r.ID, got[i].final.Err)
		}
		var b strings.Builder
		for _, id := range got[i].tokens {
			b.WriteString(v.Piece(id))
		}
		out := b.String()
		if got[i].final.Finish == "length" && schemas[i].Unbounded {
			continue
		}
		ended++
		if got[i].final.Finish != "stop" {
			t.Fatalf("%s: %s ended %q after %d tokens: %q", label, r.ID, got[i].final.Finish, len(got[i].tokens), out)
		}
		key := string(schemas[i].Schema)
		if vals[key] == nil {
			vals[key] = independentValidator(t, schemas[i].Schema)
		}
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
		if err != nil {
			t.Fatalf("%s: %s: output %q is not JSON: %v", label, r.ID, out, err)
		}
		if err := vals[key].Validate(inst); err != nil {
			t.Fatalf("%s: %s: output %q does not validate: %v", label, r.ID, out, err)
		}
	}
	t.Logf("%s: %d of %d outputs ended and validate", label, ended, len(reqs))
}

// grammarSeeds is the seeds per schema: SLUICE_GRAMMAR_SEEDS (make
// test-grammar) or 2 (1 with -short).
func grammarSeeds(t *testing.T) int {
	if v := os.Getenv("SLUICE_GRAMMAR_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SLUICE_GRAMMAR_SEEDS=%q", v)
		}
		return n
	}
	if testing.Short() {
		return 1
	}
	return 2
}

// TestConstrainedStories serves the schema corpus on stories260K at
// temperature 1: every output is valid JSON that validates against its
// schema (independent validator), and is bitwise the same colocated and
// alone, batched, disaggregated in process, over TCP and over shared
// memory, with small pools that force preemptions.
func TestConstrainedStories(t *testing.T) {
	rt := storiesRuntime(t)
	constrainedOracle(t, rt, func(pages int) Config { return storiesConfig(rt, pages) },
		[][]int32{{1, 365, 117, 263}, {1, 90, 250}, {1, 450}}, 200, 1)
}

// TestConstrainedQwen2 is the same on the synthetic qwen2 model with
// GPT-2's 50,257-token byte-level BPE vocabulary (random weights: a worst
// case for the grammar, which alone keeps the output in line).
func TestConstrainedQwen2(t *testing.T) {
	f, err := gguf.Open(testenv.Shared(t, "models/tiny-qwen2-random-gpt2vocab.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rt, _, err := LoadRuntime("tiny-qwen2", f)
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(pages int) Config {
		return Config{Model: rt, Context: 256, PoolPages: pages, PageSize: 16, Order: kv.LIFO, ChunkTokens: 7, StepTokens: 64}
	}
	// The default suite serves every eighth schema, once, over TCP: masks over a
	// 50k vocabulary for a random model cost most steps a redraw (make
	// test-grammar serves them all).
	every := 8
	if os.Getenv("SLUICE_GRAMMAR_SEEDS") != "" {
		every = 1
	}
	constrainedOracle(t, rt, cfg, [][]int32{{464, 3290, 318}, {40, 588}, {15496, 11, 995, 0}}, 250, every)
}

func constrainedOracle(t *testing.T, rt *ModelRuntime, base func(pages int) Config, prompts [][]int32, maxTokens, every int) {
	seeds := grammarSeeds(t)
	if every > 1 && os.Getenv("SLUICE_GRAMMAR_SEEDS") == "" {
		seeds = 1
	}
	reqs, schemas := constrainedRequests(t, seeds, maxTokens, prompts, every)
	// Every request is submitted at once: the queue holds them all and
	// waits as long as they take (make test-grammar's 448 requests on a
	// loaded machine overflowed the default 256 and could outwait 30s).
	cfg := func(pages int) Config {
		c := base(pages)
		c.MaxQueue, c.QueueTimeout = max(256, len(reqs)), 30*time.Minute
		return c
	}
	v := rt.GrammarVocab()
	want := make([][]int32, len(reqs))
	{
		solo, err := NewColocated(cfg(64))
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			s, err := solo.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			want[i] = collect(t, s).tokens
		}
		solo.Close(context.Background())
	}
	alone := make([]result, len(reqs))
	for i := range want {
		fin := "length"
		if n := len(want[i]); n > 0 && rt.EOG(want[i][n-1]) {
			fin = "stop"
		}
		alone[i] = result{tokens: want[i], final: Event{Done: true, Finish: fin}}
	}
	requireValid(t, "alone", v, reqs, schemas, alone)
	col, err := NewColocated(cfg(24))
	if err != nil {
		t.Fatal(err)
	}
	got := runMany(t, col, reqs)
	closeWithin(t, col)
	requireValid(t, "colocated", v, reqs, schemas, got)
	for i := range reqs {
		if !slices.Equal(got[i].tokens, want[i]) {
			t.Fatalf("colocated batched %s: %v, alone %v", reqs[i].ID, got[i].tokens, want[i])
		}
	}
	transports := []string{"inproc", "tcp", "shm"}
	if every > 1 && os.Getenv("SLUICE_GRAMMAR_SEEDS") == "" {
		transports = []string{"tcp"}
	}
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			pcfg, dcfg := cfg(24), cfg(16)
			dcfg.NoWatermark = true
			var eng Engine
			var dw *DecodeWorker
			if transport == "inproc" {
				loc, err := NewLocal(pcfg, dcfg)
				if err != nil {
					t.Fatal(err)
				}
				defer closeWithin(t, loc)
				eng, dw = loc, loc.Decode
			} else {
				r := newRemoteRig(t, transport, pcfg, dcfg)
				defer r.close()
				eng, dw = r.eng, r.dw
			}
			got := submitAll(t, eng, reqs)
			requireValid(t, transport, v, reqs, schemas, got)
			for i := range reqs {
				if !slices.Equal(got[i].tokens, want[i]) {
					t.Fatalf("%s %s: %v, alone %v", transport, reqs[i].ID, got[i].tokens, want[i])
				}
			}
			t.Logf("%s: %d requests, %d decode preemptions", transport, len(reqs), dw.SchedStats().Preemptions)
		})
	}
}

// TestDecodeReplaysGrammar: the decode worker derives a constrained
// request's grammar state from the tokens it is told were generated (I14),
// never from a peer's claim: a first token (or an earlier generated one)
// the schema cannot produce fails the stream before any token is emitted,
// and a valid one decodes on. The commit's own checks are switched off
// here so that only the grammar stands between the forged token and the
// client.
func TestDecodeReplaysGrammar(t *testing.T) {
	rt := storiesRuntime(t)
	v := rt.GrammarVocab()
	find := func(s string) int32 {
		for id := range int32(v.Size()) {
			if v.Piece(id) == s {
				return id
			}
		}
		t.Fatalf("no token %q", s)
		return -1
	}
	brace, letter := find("{"), find("x")
	cfg := storiesConfig(rt, 16)
	cfg.Unsafe = Unsafe{NoCountCheck: true, NoDigest: true}
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	f := sample.Format{Kind: sample.FormatJSONSchema, Schema: `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`}
	for _, c := range []struct {
		name      string
		generated []int32
		first     int32
		ok        bool
	}{
		{"valid first", nil, brace, true},
		{"forged first", nil, letter, false},
		{"forged generated", []int32{letter}, brace, false},
		{"valid generated", []int32{brace}, find(`"`), true},
	} {
		replayFirst(t, dw, rt, f, c.name, 3, nil, c.generated, c.first, c.ok)
	}
	dw.Tick(time.Now().Add(time.Hour))
	waitDrained(t, dw.Pool())
}

// replayFirst hands dw a committed handoff of a prompt of n tokens (ids
// prompt, when the format reads them) whose stream resumes after
// generated with a peer's first token first, and checks that dw emits
// that token when ok, and refuses it (an error, never the token) when
// not: the decode side re-derives the grammar's state from the tokens
// (I14). It drains the stream either way.
func replayFirst(t *testing.T, dw *DecodeWorker, rt *ModelRuntime, f sample.Format, name string, n int, prompt, generated []int32, first int32, ok bool) {
	t.Helper()
	ctx := context.Background()
	id := newID()
	if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: n, MaxTokens: 20, Model: FingerprintOf(rt)}); err != nil {
		t.Fatal(err)
	}
	ts, err := dw.Stream(ctx, id, handoff.StreamParams{Sampling: sample.Params{Temperature: 1, Seed: 1, Format: f}, Prompt: prompt, Generated: generated})
	if err != nil {
		t.Fatal(err)
	}
	if err := dw.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: n, Digest: []byte{1}, FirstToken: first}); err != nil {
		t.Fatalf("%s: commit: %v", name, err)
	}
	tok, err := ts.Recv()
	switch {
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	case ok && (tok.Err != nil || tok.ID != first):
		t.Fatalf("%s: first item %+v", name, tok)
	case !ok && tok.Err == nil:
		t.Fatalf("%s: the forged token was emitted: %+v", name, tok)
	}
	for !tok.Done && tok.Err == nil {
		if tok, err = ts.Recv(); err != nil {
			t.Fatal(err)
		}
	}
}

// A constrained draw whose mask does not fit in its step's grammar budget
// is deferred to later steps (batch.draw): the output must not change.
// With a budget of a few dozen work units per step nearly every mask on
// stories260K is cut across steps; the corpus is served colocated
// (batched, with preemptions) and disaggregated in process (the prefill
// worker's first token deferred too), and each output is bitwise the
// one an unbounded worker serves alone. Each sequence holds its deferred
// logits in a buffer of its own, reused across its deferred tokens.
func TestConstrainedDeferredIsExact(t *testing.T) {
	rt := storiesRuntime(t)
	reqs, schemas := constrainedRequests(t, 1, 200, [][]int32{{1, 365, 117, 263}, {1, 90, 250}}, 3)
	// Half truncate and penalise: their deferred draws read the held
	// logits again (an untruncated draw reuses the weights it computed),
	// so a held buffer shared between requests would change them.
	for i, r := range reqs {
		if i%2 == 1 {
			r.Sampling.TopK, r.Sampling.TopP, r.Sampling.PresencePenalty = 20, 0.9, 0.5
		}
	}
	want := make([][]int32, len(reqs))
	solo, err := NewColocated(storiesConfig(rt, 64))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		s, err := solo.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = collect(t, s).tokens
	}
	closeWithin(t, solo)
	tight := func(pages int) Config {
		c := storiesConfig(rt, pages)
		c.GrammarUnits = 40
		return c
	}
	col, err := NewColocated(tight(16))
	if err != nil {
		t.Fatal(err)
	}
	got := runMany(t, col, reqs)
	deferrals, preemptions := col.sched.deferrals.Load(), col.sched.preemptions.Load()
	closeWithin(t, col)
	requireValid(t, "colocated", rt.GrammarVocab(), reqs, schemas, got)
	for i := range reqs {
		if !slices.Equal(got[i].tokens, want[i]) {
			t.Fatalf("colocated with deferred masks %s: %v, unbounded alone %v", reqs[i].ID, got[i].tokens, want[i])
		}
	}
	if deferrals == 0 {
		t.Fatal("no draw was deferred: the test does not exercise the budget")
	}
	dcfg := tight(16)
	dcfg.NoWatermark = true
	loc, err := NewLocal(tight(24), dcfg)
	if err != nil {
		t.Fatal(err)
	}
	got = submitAll(t, loc, reqs)
	pd, dd := loc.Prefill.sched.deferrals.Load(), loc.Decode.sched.deferrals.Load()
	dp := loc.Decode.SchedStats().Preemptions
	closeWithin(t, loc)
	for i := range reqs {
		if !slices.Equal(got[i].tokens, want[i]) {
			t.Fatalf("disaggregated with deferred masks %s: %v, unbounded alone %v", reqs[i].ID, got[i].tokens, want[i])
		}
	}
	if pd == 0 || dd == 0 {
		t.Fatalf("deferrals: prefill %d, decode %d; both should defer", pd, dd)
	}
	t.Logf("%d requests; colocated %d deferrals, %d preemptions; prefill %d and decode %d deferrals, %d decode preemptions", len(reqs), deferrals, preemptions, pd, dd, dp)
}

// ambiguousSchema compiles (every bound is met) but its two anyOf of 600
// const arrays keep more than grammar.MaxStacks parses alive at the first
// "[": no token can start it. (A 300-way anyOf is served: the grammar
// follows up to MaxStacks parses.)
func ambiguousSchema() string {
	var br [2][]string
	for i := range 1200 {
		br[i/600] = append(br[i/600], fmt.Sprintf(`{"const":[%d]}`, i))
	}
	return `{"anyOf":[{"anyOf":[` + strings.Join(br[0], ",") + `]},{"anyOf":[` + strings.Join(br[1], ",") + `]}]}`
}

// A schema the grammar gives up on while generating (grammar_ambiguous)
// is the request's fault: a 400 with that code and a sentence naming the
// schema, never a 500 or a handoff failure, colocated, in process and
// over TCP (where it crosses the wire with its code), and it is not
// retried on another pair. A following request is served.
func TestGrammarFaultIs400(t *testing.T) {
	rt := storiesRuntime(t)
	if _, err := grammar.CompileSchema([]byte(ambiguousSchema())); err != nil {
		t.Fatalf("the ambiguous schema must compile: %v", err)
	}
	bad := &Request{ID: "amb", Tenant: "a", Prompt: []int32{1, 365}, MaxTokens: 20,
		Sampling: sample.Params{Temperature: 1, Seed: 3, Format: sample.Format{Kind: sample.FormatJSONSchema, Schema: ambiguousSchema()}}}
	good := &Request{ID: "ok", Tenant: "b", Prompt: []int32{1, 365}, MaxTokens: 5}
	check := func(label string, e Engine, pw *PrefillWorker) {
		t.Helper()
		arrivals := func() uint64 {
			if pw == nil {
				return 0
			}
			pw.sched.mu.Lock()
			defer pw.sched.mu.Unlock()
			return pw.sched.nextArrival
		}
		a0 := arrivals()
		s, err := e.Submit(context.Background(), bad)
		if err == nil {
			err = collect(t, s).final.Err
		}
		if pw != nil && arrivals()-a0 != 1 {
			t.Fatalf("%s: the request's own fault was prefilled %d times: retried on another pair", label, arrivals()-a0)
		}
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != CodeGrammarAmbiguous || ee.Status != http.StatusBadRequest {
			t.Fatalf("%s: got %v, want a 400 %s", label, err, CodeGrammarAmbiguous)
		}
		if !strings.Contains(ee.Message, "anyOf") {
			t.Fatalf("%s: message %q does not say what to change", label, ee.Message)
		}
		s, err = e.Submit(context.Background(), good)
		if err != nil {
			t.Fatal(err)
		}
		if r := collect(t, s); r.final.Err != nil || len(r.tokens) != 5 {
			t.Fatalf("%s: the next request got %d tokens, %v", label, len(r.tokens), r.final.Err)
		}
	}
	col, err := NewColocated(storiesConfig(rt, 32))
	if err != nil {
		t.Fatal(err)
	}
	check("colocated", col, nil)
	closeWithin(t, col)
	loc, err := NewLocal(storiesConfig(rt, 32), storiesConfig(rt, 32))
	if err != nil {
		t.Fatal(err)
	}
	check("in process", loc, loc.Prefill)
	// A pairer that would retry (on the same pair again): the fault is
	// still not retried.
	again, err := NewDisaggregatedPairs(DisaggConfig{Model: rt.Name(), Vocab: rt.Vocab(), Fingerprint: FingerprintOf(rt),
		Context: EffectiveContext(loc.Prefill.Context(), loc.Decode.Context())}, retryPair{Pair{Prefill: loc.Prefill, Decode: loc.Decode}})
	if err != nil {
		t.Fatal(err)
	}
	check("with a retrying pairer", again, loc.Prefill)
	closeWithin(t, again)
	closeWithin(t, loc)
	r := newRemoteRig(t, "tcp", storiesConfig(rt, 32), storiesConfig(rt, 32))
	defer r.close()
	check("tcp", r.eng, r.pw)
}

// retryPair offers its one pair again when asked to avoid it.
type retryPair struct{ p Pair }

func (r retryPair) Pair(*Request, []*Pair) (*Pair, error) {
	p := r.p
	return &p, nil
}

// A worker that cannot serve an output format (a model with no
// vocabulary for it) answers 400 unsupported_parameter, also when the
// refusal comes from the prefill worker across the handoff.
func TestFormatWithoutVocabIs400(t *testing.T) {
	m := newToy()
	r := &Request{Tenant: "a", Prompt: prompt(1, 3), MaxTokens: 3, Sampling: sample.Params{Format: sample.Format{Kind: sample.FormatJSONObject}}}
	col, err := NewColocated(toyConfig(m, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	loc, err := NewLocal(toyConfig(m, 64), toyConfig(m, 64))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, loc)
	for _, e := range []Engine{col, loc} {
		s, err := e.Submit(context.Background(), r)
		if err == nil {
			err = collect(t, s).final.Err
		}
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != CodeUnsupported || ee.Status != http.StatusBadRequest {
			t.Fatalf("%T: %v, want a 400 %s", e, err, CodeUnsupported)
		}
	}
}

// The worker's grammar mask cache is bounded by Config.GrammarMaskBytes
// (--grammar-mask-cache) and reported in SchedStats (the metrics): with a
// budget of a few masks, constrained requests of several schemas keep the
// cached bytes within it, masks get dropped, and outputs stay those of a
// worker with the default budget.
func TestGrammarMaskBudgetInStats(t *testing.T) {
	rt := storiesRuntime(t)
	reqs, _ := constrainedRequests(t, 1, 40, [][]int32{{1, 365, 117, 263}}, 7)
	run := func(budget int64) ([][]int32, SchedStats) {
		cfg := storiesConfig(rt, 64)
		cfg.GrammarMaskBytes = budget
		col, err := NewColocated(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer closeWithin(t, col)
		var out [][]int32
		for _, r := range reqs {
			s, err := col.Submit(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			res := collect(t, s)
			if res.final.Err != nil {
				t.Fatalf("%s: %v", r.ID, res.final.Err)
			}
			out = append(out, res.tokens)
		}
		return out, col.SchedStats()
	}
	want, wide := run(0)
	if wide.GrammarMaskBytes == 0 || wide.GrammarMaskDrops != 0 {
		t.Fatalf("default budget: %d mask bytes cached, %d drops", wide.GrammarMaskBytes, wide.GrammarMaskDrops)
	}
	budget := wide.GrammarMaskBytes / 4
	got, small := run(budget)
	if small.GrammarMaskBytes > budget || small.GrammarMaskBytes == 0 || small.GrammarMaskDrops == 0 {
		t.Fatalf("budget %d: %d mask bytes cached, %d drops", budget, small.GrammarMaskBytes, small.GrammarMaskDrops)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s: %v with a small mask budget, %v with the default", reqs[i].ID, got[i], want[i])
		}
	}
	t.Logf("%d requests: %d mask bytes cached by default; %d (%d drops) within %d", len(reqs), wide.GrammarMaskBytes, small.GrammarMaskBytes, small.GrammarMaskDrops, budget)
}

// A thinking model's format (sample.Format.Think) is free inside the
// reasoning and constrains the answer after its close marker; the decode
// worker derives where the reasoning stands from the prompt and the
// tokens it replays (I14), so a forged answer token after the close is
// refused as any forged token, and reasoning tokens the grammar would
// refuse are taken.
func TestDecodeReplaysGrammarAfterThinking(t *testing.T) {
	rt := storiesRuntime(t)
	v := rt.GrammarVocab()
	find := func(s string) int32 {
		for id := range int32(v.Size()) {
			if v.Piece(id) == s {
				return id
			}
		}
		t.Fatalf("no token %q", s)
		return -1
	}
	brace, letter, open, close := find("{"), find("x"), find("y"), find("z")
	cfg := storiesConfig(rt, 16)
	cfg.Unsafe = Unsafe{NoCountCheck: true, NoDigest: true}
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	f := sample.Format{Kind: sample.FormatJSONObject, Think: true, ThinkOpen: open, ThinkClose: close}
	for _, c := range []struct {
		name      string
		prompt    []int32
		generated []int32
		first     int32
		ok        bool
	}{
		{"reasoning", []int32{letter}, []int32{open, letter}, letter, true},
		{"answer after the close", []int32{letter}, []int32{open, letter, close}, brace, true},
		{"forged answer after the close", []int32{letter}, []int32{open, letter, close}, letter, false},
		{"no reasoning: the answer at once", []int32{letter}, nil, letter, false},
		{"the prompt opened the reasoning", []int32{letter, open}, []int32{letter}, letter, true},
		{"the prompt closed it", []int32{open, close}, nil, letter, false},
	} {
		replayFirst(t, dw, rt, f, c.name, 8, c.prompt, c.generated, c.first, c.ok)
	}
	dw.Tick(time.Now().Add(time.Hour))
	waitDrained(t, dw.Pool())
}
