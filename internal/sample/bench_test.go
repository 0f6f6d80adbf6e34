package sample

import (
	"math"
	"testing"
)

// BenchmarkSample compares one draw over a 32k vocabulary plain, with every
// processor on, and with top-20 logprobs: the per-token cost the options
// add to decode.
func BenchmarkSample(b *testing.B) {
	logits := make([]float32, 32000)
	for i := range logits {
		logits[i] = float32(math.Sin(float64(i)*0.37)) * 6
	}
	base := Params{Temperature: 0.8, TopK: 40, TopP: 0.95, Seed: 1}
	all := base
	all.MinP, all.PresencePenalty, all.FrequencyPenalty, all.RepetitionPenalty = 0.05, 0.5, 0.5, 1.2
	all.LogitBias = []Bias{{ID: 5, Bias: -100}, {ID: 900, Bias: 3}}
	for _, c := range []struct {
		name string
		p    Params
		lp   bool
	}{{"plain", base, false}, {"all-options", all, false}, {"all-options+top20-logprobs", all, true}} {
		b.Run(c.name, func(b *testing.B) {
			p := c.p
			if c.lp {
				p.Logprobs, p.TopLogprobs = true, MaxTopLogprobs
			}
			s := New(p)
			prompt := make([]int32, 200)
			for i := range prompt {
				prompt[i] = int32(i * 37 % 32000)
			}
			s.SetPrompt(prompt)
			for b.Loop() {
				id, err := s.Sample(logits)
				if err != nil {
					b.Fatal(err)
				}
				_ = s.Logprobs(logits, id)
			}
		})
	}
}
