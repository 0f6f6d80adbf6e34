package model

import (
	"math/rand/v2"
	"testing"
)

// TestForwardNoLogits: a sequence that asks for no logits (a prompt chunk
// before its last) gets none, writes bitwise the K/V it writes with them,
// and leaves its batch mates' logits and K/V bitwise unchanged, alone in
// its step or beside others, on every architecture (dense, MoE, gemma3's
// post-norms): its rows stop after the last layer's attention.
func TestForwardNoLogits(t *testing.T) {
	ms := stepModels(t)
	for name, spec := range moeSpecs {
		ms = append(ms, namedModel{name, synthModel(t, spec)})
	}
	for _, mm := range ms {
		t.Run(mm.name, func(t *testing.T) {
			m, c := mm.m, mm.m.Config()
			rng := rand.New(rand.NewPCG(9, 9))
			a, b := randTokens(rng, 13, c.Vocab), randTokens(rng, 5, c.Vocab)
			// step runs a (no logits when none) and, with mate, b beside it.
			step := func(none, mate bool) ([]Result, *memKV, *memKV) {
				kva, kvb := newMemKV(4, c.Layers, c.KVDim()), newMemKV(4, c.Layers, c.KVDim())
				seqs := []Seq{{Tokens: a, KV: kva, NoLogits: none}}
				if mate {
					seqs = append(seqs, Seq{Tokens: b, KV: kvb})
				}
				res := m.NewRunner(nil).Forward(seqs)
				for i, r := range res {
					if r.Err != nil {
						t.Fatalf("sequence %d: %v", i, r.Err)
					}
				}
				return res, kva, kvb
			}
			for _, mate := range []bool{false, true} {
				got, gotA, gotB := step(true, mate)
				want, wantA, wantB := step(false, mate)
				if got[0].Logits != nil {
					t.Errorf("mate %v: a sequence with NoLogits got %d logits", mate, len(got[0].Logits))
				}
				if !sameKV(gotA, wantA) {
					t.Errorf("mate %v: its K/V differ from the step with its logits", mate)
				}
				if mate && !bitsEqual(got[1].Logits, want[1].Logits) {
					t.Errorf("its batch mate's logits differ (first at %d)", firstDiff(got[1].Logits, want[1].Logits))
				}
				if mate && !sameKV(gotB, wantB) {
					t.Error("its batch mate's K/V differ")
				}
			}
		})
	}
}
