package sample

import (
	"fmt"
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

// BenchmarkSampleChatDefault is one draw with the settings a chat request
// gets when it sets none (temperature 1, nothing else) over Qwen2's 151,936
// vocabulary: the sampling cost of an unconstrained decode step on a large
// vocabulary (make bench-grammar's qwen2vocab row).
func BenchmarkSampleChatDefault(b *testing.B) {
	for _, n := range []int{32000, 151936} {
		b.Run(fmt.Sprintf("vocab=%d", n), func(b *testing.B) {
			logits := make([]float32, n)
			for i := range logits {
				logits[i] = float32(math.Sin(float64(i)*0.37)) * 6
			}
			s := New(Params{Temperature: 1, Seed: 1})
			for b.Loop() {
				if _, err := s.Sample(logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
