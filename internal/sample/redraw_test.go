package sample

import (
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/grammar"
)

// redrawAll, the refused untruncated draw without a candidate list, draws
// what redraw over truncate's whole-vocabulary list draws: the same token
// for every redraw uniform (many draw indices), with NaN and ±Inf logits,
// temperatures small enough that most weights underflow to 0, and a
// grammar whose allowed set changes position by position.
func TestRedrawAllMatchesRedraw(t *testing.T) {
	v := gpt2Vocab(t)
	g, err := grammar.CompileSchema([]byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":12},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","bb","ccc"]},"maxItems":3}},"required":["name","n","tags"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, temp := range []float32{1, 0.7, 0.05, 0.002, 30} {
		s := New(Params{Temperature: temp, Seed: uint64(temp * 1000)})
		s.Constrain(grammar.Bind(g, v).NewMatcher())
		rng := rand.New(rand.NewPCG(uint64(temp*100), 3))
		logits := make([]float32, v.Size())
		for range 40 {
			for i := range logits {
				logits[i] = float32(rng.NormFloat64() * 4)
				switch rng.IntN(500) {
				case 0:
					logits[i] = float32(math.NaN())
				case 1:
					logits[i] = float32(math.Inf(-1))
				case 2:
					logits[i] = float32(math.Inf(1))
				}
			}
			// Unusable logits among the allowed ids too, where they decide
			// which id is last (the walk's fallback).
			mask, err := s.allowedMask(len(logits))
			if err != nil {
				t.Fatal(err)
			}
			for i := range logits {
				if has(mask, int32(i)) && i%3 == 1 {
					logits[i] = [3]float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(3)]
				}
			}
			pl := s.process(logits)
			if _, last := s.weighAll(pl); last < 0 {
				t.Fatal("no finite logit")
			}
			n := s.n
			for k := range uint64(16) {
				s.n = n + k*7919
				got, err1 := s.redrawAll(pl)
				want, err2 := s.redraw(pl, s.truncate(pl))
				if (err1 == nil) != (err2 == nil) || got != want {
					t.Fatalf("T=%v draw %d: redrawAll %d (%v), redraw %d (%v)", temp, s.n, got, err1, want, err2)
				}
				compared++
			}
			s.n = n
			id, err := s.Sample(logits)
			if err != nil {
				break // every allowed logit unusable: nothing to draw
			}
			if id == 50256 {
				break
			}
		}
	}
	t.Logf("%d redraws compared", compared)
}
