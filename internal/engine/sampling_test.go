package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
	"sluice/internal/sample/sampletest"
)

// allOptions sets every sampler option; seed and greedy vary per request.
func allOptions(vocab int, seed uint64, greedy bool) sample.Params {
	p := sample.Params{Temperature: 0.9, TopK: 40, TopP: 0.95, MinP: 0.02, Seed: seed,
		PresencePenalty: 0.6, FrequencyPenalty: 0.4, RepetitionPenalty: 1.3,
		LogitBias: []sample.Bias{{ID: 1, Bias: -100}, {ID: int32(vocab / 3), Bias: 2}, {ID: int32(vocab - 1), Bias: 5}},
		Logprobs:  true, TopLogprobs: 5}
	if greedy {
		p.Temperature = 0
	}
	return p
}

// TestSamplerOptionsBatchInvariant: with every sampler option on, a
// request's tokens and logprobs are bitwise the same alone and batched
// with others, colocated, disaggregated in process, and over TCP and shm
// (options and prompt ids travel in the codec, logprobs come back with
// each token, the first one through the commit). Dropping any option on
// one path, or sharing sampler state between sequences, breaks equality.
func TestSamplerOptionsBatchInvariant(t *testing.T) {
	rt := defaultRuntime(t)
	vocab := rt.Vocab()
	cfg := func(pages int) Config {
		return Config{Model: rt, Context: 128, PoolPages: pages, PageSize: 16, Order: kv.LIFO, ChunkTokens: 7, StepTokens: 64}
	}
	var reqs []*Request
	for i := range 6 {
		p := make([]int32, 5+3*i)
		for j := range p {
			p[j] = int32((i*131 + j*17 + 7) % vocab)
		}
		reqs = append(reqs, &Request{Tenant: "a", Prompt: p, MaxTokens: 12, IgnoreEOS: true, Sampling: allOptions(vocab, uint64(900+i), i%3 == 0)})
	}
	alone := func(e Engine) []result {
		var out []result
		for _, r := range reqs {
			out = append(out, runMany(t, e, []*Request{r})[0])
		}
		return out
	}
	col, err := NewColocated(cfg(64))
	if err != nil {
		t.Fatal(err)
	}
	ref := alone(col)
	runs := map[string][]result{"colocated batched": runMany(t, col, reqs)}
	closeWithin(t, col)
	loc, err := NewLocal(cfg(64), cfg(64))
	if err != nil {
		t.Fatal(err)
	}
	runs["disaggregated alone"] = alone(loc)
	runs["disaggregated batched"] = runMany(t, loc, reqs)
	closeWithin(t, loc)
	for _, tr := range []string{"tcp", "shm"} {
		r := newRemoteRig(t, tr, cfg(64), cfg(64))
		runs[tr+" batched"] = runMany(t, r.eng, reqs)
		r.close()
	}
	for i := range reqs {
		if ref[i].final.Err != nil || len(ref[i].tokens) != 12 || len(ref[i].lps) != 12 {
			t.Fatalf("request %d alone: %d tokens, %v", i, len(ref[i].tokens), ref[i].final.Err)
		}
		for _, lp := range ref[i].lps {
			if lp == nil || len(lp.Top) != 5 {
				t.Fatalf("request %d: logprobs %+v, want 5 alternatives each", i, lp)
			}
		}
	}
	for name, got := range runs {
		for i := range reqs {
			if got[i].final.Err != nil {
				t.Fatalf("%s request %d: %v", name, i, got[i].final.Err)
			}
			if !slices.Equal(got[i].tokens, ref[i].tokens) {
				t.Errorf("%s request %d: tokens %v, colocated alone %v", name, i, got[i].tokens, ref[i].tokens)
			}
			if !reflect.DeepEqual(got[i].lps, ref[i].lps) {
				t.Errorf("%s request %d: logprobs differ from colocated alone", name, i)
			}
		}
	}
	// The options are not vacuous: without them the same seeds give other
	// tokens.
	plain := make([]*Request, len(reqs))
	for i, r := range reqs {
		q := *r
		q.Sampling = sample.Params{Temperature: r.Sampling.Temperature, TopK: 40, TopP: 0.95, Seed: r.Sampling.Seed}
		plain[i] = &q
	}
	col2, err := NewColocated(cfg(64))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col2)
	differ := 0
	for i, r := range runMany(t, col2, plain) {
		if !slices.Equal(r.tokens, ref[i].tokens) {
			differ++
		}
	}
	if differ < len(reqs)/2 {
		t.Fatalf("only %d of %d requests changed with the options off: the test shows nothing", differ, len(reqs))
	}
}

// TestLogprobsMatchModel: the logprobs a disaggregated request reports are
// log_softmax of the logits the model itself gives for the same positions
// (run here with the model package directly, one private pool, no engine),
// for the sampled token and the top alternatives, greedy and penalised;
// the first token's (the prefill worker's, carried by the commit) with
// the pages streamed and with them sent after the prompt
// (HandoffAfterPrefill), whose commit is built apart.
func TestLogprobsMatchModel(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("handoff after prefill %v", after), func(t *testing.T) { testLogprobsMatchModel(t, after) })
	}
}

func testLogprobsMatchModel(t *testing.T, after bool) {
	rt := defaultRuntime(t).(*ModelRuntime)
	vocab := rt.Vocab()
	prompt := []int32{3, 17, 99 % int32(vocab), 5, 42 % int32(vocab), 8}
	loc, err := NewLocal(Config{Model: rt, Context: 64, PoolPages: 8, PageSize: 16, Order: kv.LIFO, HandoffAfterPrefill: after},
		Config{Model: rt, Context: 64, PoolPages: 8, PageSize: 16, Order: kv.LIFO})
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, loc)
	sp := allOptions(vocab, 7, false)
	sp.TopLogprobs = sample.MaxTopLogprobs
	got := runMany(t, loc, []*Request{{Tenant: "a", Prompt: prompt, MaxTokens: 10, IgnoreEOS: true, Sampling: sp}})[0]
	if got.final.Err != nil || len(got.tokens) != 10 {
		t.Fatalf("%d tokens, %v", len(got.tokens), got.final.Err)
	}
	// The model's own logits at every generated position.
	c := rt.Model().Config()
	pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: c.Layers, KVDim: c.KVDim(), PageSize: 16}, Pages: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	o := kv.Owner{Tenant: "ref"}
	table, err := pool.Reserve(o, 4)
	if err != nil {
		t.Fatal(err)
	}
	view := pool.View(o, table)
	run := rt.Model().NewRunner(nil)
	feed, pos := prompt, 0
	for k, tok := range got.tokens {
		res := run.Forward([]model.Seq{{Tokens: feed, Pos: pos, KV: view}})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		ref := sampletest.LogSoftmax(res[0].Logits)
		lp := got.lps[k]
		if lp == nil {
			t.Fatalf("token %d (%d) came without its logprobs", k, tok)
		}
		if math.Abs(float64(lp.Logprob)-ref[tok]) > 1e-5 {
			t.Fatalf("token %d (%d): logprob %v, model says %v", k, tok, lp.Logprob, ref[tok])
		}
		order := sampletest.Ranked(ref)
		for j, e := range lp.Top {
			if e.ID != order[j] || math.Abs(float64(e.Logprob)-ref[e.ID]) > 1e-5 {
				t.Fatalf("token %d top %d: %+v, model's %d-th is %d (%v)", k, j, e, j, order[j], ref[order[j]])
			}
		}
		pos += len(feed)
		feed = []int32{tok}
	}
	_ = pool.Release(o, table)
}

// TestWorkersRefuseForeignSamplingInput: a peer's stream parameters and
// commit logprobs are checked like the router's (a worker trusts no peer):
// settings outside their domain, prompt ids outside the vocabulary or
// longer than the prompt, and top logprobs naming foreign ids are refused
// and nothing is left reserved.
func TestWorkersRefuseForeignSamplingInput(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	ctx := context.Background()
	bad := []handoff.StreamParams{
		{Sampling: sample.Params{Temperature: float32(math.NaN())}},
		{Sampling: sample.Params{TopK: m.vocab + 1}},
		{Sampling: sample.Params{LogitBias: []sample.Bias{{ID: int32(m.vocab), Bias: 1}}}},
		{Sampling: sample.Params{RepetitionPenalty: 2}, Prompt: []int32{1, 2, 3, 4, 5}},
		{Sampling: sample.Params{RepetitionPenalty: 2}, Prompt: []int32{int32(m.vocab)}},
	}
	for i, p := range bad {
		id := newID()
		if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 4, MaxTokens: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := dw.Stream(ctx, id, p); !errors.Is(err, handoff.ErrRefused) {
			t.Errorf("case %d %+v: stream opened: %v", i, p, err)
		}
		_ = dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"})
	}
	id := newID()
	if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 4, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	lp := &sample.Logprobs{Top: []sample.TokenLogprob{{ID: int32(m.vocab), Logprob: -1}}}
	if err := dw.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: 4, Digest: []byte{1}, FirstToken: 1, FirstLogprobs: lp}); !errors.Is(err, handoff.ErrProtocol) {
		t.Fatalf("commit with a foreign top-logprob id: %v", err)
	}
	dw.Tick(time.Now().Add(time.Hour)) // expire quarantine leases
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatal(err)
	}
	// The prefill worker refuses invalid settings too, aborting the handoff.
	pw, err := NewPrefillWorker(toyConfig(m, 32), dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	id = newID()
	res, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 4, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pw.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: prompt(1, 4), Reservation: res, Sampling: sample.Params{MinP: 2}})
	if !errors.Is(err, handoff.ErrPrefillRefused) {
		t.Fatalf("prefill with min_p 2: %v", err)
	}
	dw.Tick(time.Now().Add(time.Hour))
	for _, p := range []*kv.Pool{dw.Pool(), pw.Pool()} {
		if err := p.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	}
}
