package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refDraw is the draw as it was before drawAll: truncate to candidate
// structs, sum their probabilities in order, walk to the uniform. It is a
// copy, not a call of truncate, so a change to either side shows here.
func refDraw(p Params, rng *rand.Rand, logits []float32) int32 {
	var c []cand
	maxv := float32(math.Inf(-1))
	for i, v := range logits {
		if v != v || math.IsInf(float64(v), 0) {
			continue
		}
		c = append(c, cand{id: int32(i), logit: v})
		if v > maxv {
			maxv = v
		}
	}
	if len(c) == 0 {
		return -1
	}
	invT := 1 / float64(p.Temperature)
	for i := range c {
		c[i].prob = math.Exp(float64(c[i].logit-maxv) * invT)
	}
	if mp := float64(p.MinP); mp > 0 {
		kept := c[:0]
		for _, x := range c {
			if x.prob >= mp {
				kept = append(kept, x)
			}
		}
		c = kept
	}
	if k := p.TopK; k > 0 && k < len(c) {
		c = topK(c, k)
	}
	if tp := float64(p.TopP); tp > 0 && tp < 1 {
		c = topP(c, tp)
	}
	var total float64
	for _, x := range c {
		total += x.prob
	}
	r := rng.Float64() * total
	for _, x := range c {
		r -= x.prob
		if r < 0 {
			return x.id
		}
	}
	return c[len(c)-1].id
}

// TestDrawAllMatchesTruncate runs the sampler and the pre-drawAll
// algorithm (exp of every candidate, then min-p, top-k, top-p) side by side, draw for draw, over random logits (NaN, ±Inf,
// logits far enough below the maximum to underflow, ties) and random
// settings, untruncated ones most often since drawAll serves those: every
// token and the random stream after it must be the same.
func TestDrawAllMatchesTruncate(t *testing.T) {
	g := rand.New(rand.NewPCG(7, 7))
	draws := 0
	for trial := 0; trial < 200; trial++ {
		n := 1 + g.IntN(3000)
		if trial%100 == 0 {
			n = 151936
		}
		p := Params{Temperature: []float32{1, 1, 0.7, 1.3, 0.05, 2, 100}[g.IntN(7)], Seed: g.Uint64()}
		if g.IntN(3) == 0 {
			switch g.IntN(5) {
			case 0:
				p.MinP = g.Float32() * 0.3
			case 1:
				p.TopK = 1 + g.IntN(n+5)
			case 2:
				p.TopP = g.Float32()
			case 3:
				p.MinP, p.TopK, p.TopP = 0.01, 50, 0.9
			case 4:
				p.TopK, p.TopP = 1+g.IntN(100), g.Float32()
			}
		}
		if g.IntN(3) == 0 {
			p.PresencePenalty, p.FrequencyPenalty, p.RepetitionPenalty = 0.5, 0.3, 1.2
			p.LogitBias = []Bias{{ID: 0, Bias: 5}, {ID: int32(n / 2), Bias: -100}}
		}
		s := New(p)
		ref := New(p) // its process and Observe give the penalties; refDraw the draw
		prompt := []int32{0, 1, int32(n - 1)}
		s.SetPrompt(prompt)
		ref.SetPrompt(prompt)
		logits := make([]float32, n)
		scale := []float32{0.01, 1, 6, 30, 400}[g.IntN(5)]
		for step := 0; step < 12; step++ {
			for i := range logits {
				logits[i] = float32(g.NormFloat64()) * scale
				switch g.IntN(200) {
				case 0:
					logits[i] = float32(math.NaN())
				case 1:
					logits[i] = float32(math.Inf(-1))
				case 2:
					logits[i] = float32(math.Inf(1))
				case 3:
					logits[i] = logits[max(i-1, 0)] // a tie
				}
			}
			if trial%17 == 0 { // mostly non-finite
				for i := range logits {
					if g.IntN(10) > 0 {
						logits[i] = float32(math.NaN())
					}
				}
			}
			got, err := s.Sample(logits)
			want := refDraw(p, ref.rng, ref.process(logits))
			if want < 0 {
				if err == nil {
					t.Fatalf("trial %d step %d: drew %d where the reference finds no candidate", trial, step, got)
				}
				continue
			}
			ref.Observe(want)
			if err != nil || got != want {
				t.Fatalf("trial %d step %d (%+v, vocab %d): drew %d (%v), reference %d", trial, step, p, n, got, err, want)
			}
			if *s.src != *ref.src {
				t.Fatalf("trial %d step %d: random streams diverged", trial, step)
			}
			draws++
		}
	}
	t.Logf("%d draws identical", draws)
}

// TestWeighAllMatchesTruncate checks drawAll's parts against truncate bit
// for bit, where a draw rarely shows a difference: each probability, the
// total, and the walk at the ends of [0,1) and at each candidate's edge,
// with non-finite logits first and last.
func TestWeighAllMatchesTruncate(t *testing.T) {
	g := rand.New(rand.NewPCG(8, 8))
	for trial := 0; trial < 300; trial++ {
		n := 1 + g.IntN(300)
		s := New(Params{Temperature: []float32{1, 0.7, 1.3, 0.05, 2}[g.IntN(5)]})
		logits := make([]float32, n)
		for i := range logits {
			logits[i] = float32(g.NormFloat64()) * []float32{0.01, 1, 6, 400}[trial%4]
			if g.IntN(8) == 0 {
				logits[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[g.IntN(3)]
			}
		}
		logits[0] = float32(math.NaN())
		logits[n-1] = float32(math.Inf(-1))
		total, last := s.weighAll(logits)
		c := s.truncate(logits)
		if len(c) == 0 {
			if last != -1 {
				t.Fatalf("trial %d: last %d, truncate keeps none", trial, last)
			}
			continue
		}
		var want float64
		for _, x := range c {
			want += x.prob
		}
		if math.Float64bits(total) != math.Float64bits(want) || last != int(c[len(c)-1].id) {
			t.Fatalf("trial %d: total %v last %d, truncate %v last %d", trial, total, last, want, c[len(c)-1].id)
		}
		j := 0
		for i, p := range s.probs {
			w := 0.0
			if j < len(c) && c[j].id == int32(i) {
				w = c[j].prob
				j++
			}
			if math.Float64bits(p) != math.Float64bits(w) {
				t.Fatalf("trial %d: prob of %d is %v, truncate %v", trial, i, p, w)
			}
		}
		us := []float64{0, math.Nextafter(1, 0), g.Float64()}
		cum := 0.0
		for _, x := range c {
			cum += x.prob
			us = append(us, cum/want, math.Nextafter(cum/want, 0), math.Nextafter(cum/want, 1))
		}
		for _, u := range us {
			if u < 0 || u >= 1 {
				continue
			}
			if got, want := walkAll(s.probs, total, u, last), pick(c, want, u); got != want {
				t.Fatalf("trial %d u %v: walk picks %d, pick %d", trial, u, got, want)
			}
		}
	}
}
