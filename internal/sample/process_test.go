package sample

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/internal/sample/sampletest"
)

// refProcess is an independent, naive statement of the logit processors:
// bias, then for every token of the vocabulary in turn the repetition
// penalty (prompt or output), then frequency and presence (output only).
func refProcess(logits []float32, p Params, prompt, out []int32) []float32 {
	w := slices.Clone(logits)
	for _, b := range p.LogitBias {
		w[b.ID] += b.Bias
	}
	for id := range w {
		inPrompt := slices.Contains(prompt, int32(id))
		n := 0
		for _, o := range out {
			if o == int32(id) {
				n++
			}
		}
		if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 && (inPrompt || n > 0) {
			if w[id] > 0 {
				w[id] /= p.RepetitionPenalty
			} else {
				w[id] *= p.RepetitionPenalty
			}
		}
		if n > 0 {
			w[id] -= p.FrequencyPenalty*float32(n) + p.PresencePenalty
		}
	}
	return w
}

// TestProcessorsMatchReference: greedy picks and the candidate sets of a
// penalised, biased, min-p sampler equal those of the plain sampler run on
// the reference's processed logits, step after step as tokens accumulate.
func TestProcessorsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		n := 2 + rng.IntN(60)
		p := Params{
			PresencePenalty:   float32(rng.IntN(9)-4) / 2,
			FrequencyPenalty:  float32(rng.IntN(9)-4) / 2,
			RepetitionPenalty: []float32{0, 1, 0.5, 1.3, 2}[rng.IntN(5)],
			Seed:              uint64(trial),
		}
		if rng.IntN(2) == 0 {
			p.Temperature = 0.3 + rng.Float32()
			p.MinP = []float32{0, 0.05, 0.3}[rng.IntN(3)]
		}
		for id := 0; id < n; id += 1 + rng.IntN(5) {
			p.LogitBias = append(p.LogitBias, Bias{ID: int32(id), Bias: float32(rng.IntN(41)-20) / 4})
		}
		if err := p.Validate(n); err != nil {
			t.Fatal(err)
		}
		prompt := []int32{int32(rng.IntN(n)), int32(rng.IntN(n))}
		s := New(p)
		s.SetPrompt(prompt)
		var out []int32
		for step := 0; step < 6; step++ {
			logits := make([]float32, n)
			for i := range logits {
				logits[i] = float32(rng.IntN(40)-20) / 4
			}
			want := refProcess(logits, p, prompt, out)
			plain := p
			plain.LogitBias, plain.PresencePenalty, plain.FrequencyPenalty, plain.RepetitionPenalty = nil, 0, 0, 0
			wantIDs, _ := New(plain).Candidates(want)
			gotIDs, _ := s.Candidates(logits)
			if !slices.Equal(gotIDs, wantIDs) {
				t.Fatalf("trial %d step %d %+v: candidates %v, want %v", trial, step, p, gotIDs, wantIDs)
			}
			if p.Greedy() {
				id, err := s.Sample(logits)
				if err != nil || id != Greedy(want) {
					t.Fatalf("trial %d step %d: greedy %d, want %d", trial, step, id, Greedy(want))
				}
				out = append(out, id)
			} else {
				id, err := s.Sample(logits)
				if err != nil || !slices.Contains(wantIDs, id) {
					t.Fatalf("trial %d: drew %d outside %v", trial, id, wantIDs)
				}
				out = append(out, id)
			}
		}
	}
}

func TestPenaltiesChangeGreedy(t *testing.T) {
	logits := []float32{1, 3, 2.5, -1}
	// Token 1 wins until the frequency penalty makes repeating it cost more
	// than the gap to token 2.
	s := New(Params{FrequencyPenalty: 0.4})
	var got []int32
	for i := 0; i < 4; i++ {
		id, _ := s.Sample(logits)
		got = append(got, id)
	}
	// 3-0.4=2.6 > 2.5 after one; after two 2.2 < 2.5; then 2.1 vs 2.2.
	if !slices.Equal(got, []int32{1, 1, 2, 1}) {
		t.Fatalf("frequency penalty picks %v, want [1 1 2 1]", got)
	}
	// Repetition over the prompt: 3/2 = 1.5 < 2.5.
	r := New(Params{RepetitionPenalty: 2})
	r.SetPrompt([]int32{1})
	if id, _ := r.Sample(logits); id != 2 {
		t.Fatalf("repetition penalty over the prompt picked %d, want 2", id)
	}
	// Observe counts the prefill's token like one of ours.
	o := New(Params{PresencePenalty: 1})
	o.Observe(1)
	if id, _ := o.Sample(logits); id != 2 {
		t.Fatalf("presence after Observe picked %d, want 2", id)
	}
	// logit_bias -100 bans, +100 forces.
	if id, _ := New(Params{LogitBias: []Bias{{ID: 3, Bias: 100}}}).Sample(logits); id != 3 {
		t.Fatalf("bias +100 picked %d", id)
	}
	// min_p: at T=1, p2/p1 = e^-0.5 = .61, p0/p1 = e^-2 = .14.
	ids, _ := New(Params{Temperature: 1, MinP: 0.2}).Candidates(logits)
	if !slices.Equal(ids, []int32{1, 2}) {
		t.Fatalf("min_p 0.2 kept %v, want [1 2]", ids)
	}
}

func TestLogprobsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 100; trial++ {
		n := 1 + rng.IntN(200)
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(rng.IntN(30)-15) / 3 // ties are common
		}
		ref := sampletest.LogSoftmax(logits)
		top := rng.IntN(MaxTopLogprobs + 1)
		id := int32(rng.IntN(n))
		got := ComputeLogprobs(logits, id, top)
		if math.Abs(float64(got.Logprob)-ref[id]) > 1e-6 {
			t.Fatalf("logprob of %d = %v, want %v", id, got.Logprob, ref[id])
		}
		want := sampletest.Ranked(ref)[:min(top, n)]
		if len(got.Top) != len(want) {
			t.Fatalf("top %d of %d: got %d entries", top, n, len(got.Top))
		}
		for i, e := range got.Top {
			if e.ID != want[i] || math.Abs(float64(e.Logprob)-ref[e.ID]) > 1e-6 {
				t.Fatalf("trial %d top[%d] = %+v, want id %d lp %v", trial, i, e, want[i], ref[want[i]])
			}
		}
	}
	// -Inf logits floor at LogprobFloor (JSON has no -Inf); NaN never ranks.
	lp := ComputeLogprobs([]float32{float32(math.Inf(-1)), float32(math.NaN()), 0}, 0, 3)
	if lp.Logprob != LogprobFloor || len(lp.Top) != 2 || lp.Top[0].ID != 2 || lp.Top[0].Logprob != 0 || lp.Top[1].Logprob != LogprobFloor {
		t.Fatalf("edge logprobs %+v", lp)
	}
	// +Inf (a broken model) still reports a number JSON can carry.
	if lp := ComputeLogprobs([]float32{float32(math.Inf(1)), 0}, 0, 2); lp.Logprob != 0 || lp.Top[0].ID != 0 || lp.Top[0].Logprob != 0 || lp.Top[1].Logprob > 0 {
		t.Fatalf("+Inf logprobs %+v", lp)
	}
	if New(Params{}).Logprobs([]float32{1}, 0) != nil {
		t.Fatal("logprobs reported though not asked")
	}
}

func TestValidateNewBounds(t *testing.T) {
	ok := []Params{
		{MinP: 1}, {PresencePenalty: -2, FrequencyPenalty: 2}, {RepetitionPenalty: 10}, {RepetitionPenalty: MinPositive},
		{LogitBias: []Bias{{0, -100}, {9, 100}}}, {Logprobs: true, TopLogprobs: 20}, {TopK: 10},
	}
	for _, p := range ok {
		if err := p.Validate(10); err != nil {
			t.Errorf("%+v refused: %v", p, err)
		}
	}
	bad := []struct {
		p    Params
		code string
	}{
		{Params{MinP: 1.01}, "invalid_min_p"},
		{Params{PresencePenalty: 2.01}, "invalid_penalty"},
		{Params{FrequencyPenalty: float32(math.NaN())}, "invalid_penalty"},
		{Params{RepetitionPenalty: -1}, "invalid_penalty"},
		{Params{RepetitionPenalty: 10.5}, "invalid_penalty"},
		{Params{RepetitionPenalty: 1e-40}, "invalid_penalty"}, // subnormal: a peer's divisor that makes logits infinite
		{Params{LogitBias: []Bias{{10, 1}}}, "invalid_logit_bias"},
		{Params{LogitBias: []Bias{{2, 1}, {2, 1}}}, "invalid_logit_bias"},
		{Params{LogitBias: []Bias{{2, 100.5}}}, "invalid_logit_bias"},
		{Params{LogitBias: make([]Bias, MaxLogitBias+1)}, "invalid_logit_bias"},
		{Params{Logprobs: true, TopLogprobs: 21}, "invalid_logprobs"},
		{Params{TopLogprobs: 1}, "invalid_logprobs"},
		{Params{TopK: 11}, "invalid_top_k"},
	}
	for _, b := range bad {
		if err := b.p.Validate(10); err == nil || err.(*Error).Code != b.code {
			t.Errorf("Validate(%+v) = %v, want %s", b.p, err, b.code)
		}
	}
}
