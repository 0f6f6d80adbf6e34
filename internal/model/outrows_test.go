package model

import (
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
	"sluice/internal/quant"
	"sluice/internal/synth"
)

// TestLastLayerRunsOnlyOutputRows: the last layer runs its FFN only on
// the rows whose logits the step returns (keepOutputRows), and every
// sequence's logits are bitwise what it gets alone with every row kept
// (AllLogits, which never compacts): a prefill beside an AllLogits
// prefill, a decode token and a sequence whose view fails in the last
// layer (dead before the compaction), on both block kinds and a MoE FFN.
func TestLastLayerRunsOnlyOutputRows(t *testing.T) {
	models := map[string]*Model{
		"llama-gqa": mustBuild(newMemModel(shapes["llama-gqa"], 21)),
		"gemma3": synthModel(t, synth.Spec{Arch: "gemma3", Layers: 2, Embd: 64, Heads: 4, KVHeads: 1, HeadDim: 32, FF: 96,
			Context: 512, Type: quant.Q8_0, Seed: 22, SlidingWindow: 4}),
		"qwen3moe": synthModel(t, moeSpecs["qwen3moe"]),
	}
	for name, m := range models {
		t.Run(name, func(t *testing.T) {
			c := m.Config()
			rng := rand.New(rand.NewPCG(23, 23))
			toks := [][]int32{randTokens(rng, 9, c.Vocab), randTokens(rng, 6, c.Vocab), randTokens(rng, 5, c.Vocab), randTokens(rng, 1, c.Vocab)}
			all := []bool{false, true, false, false}
			var solo [][]float32
			for i, tk := range toks {
				res := m.NewRunner(nil).Forward([]Seq{{Tokens: tk, KV: newMemKV(4, c.Layers, c.KVDim()), AllLogits: true}})
				lg := res[0].Logits
				if !all[i] {
					lg = lg[(len(tk)-1)*c.Vocab:]
				}
				solo = append(solo, lg)
			}
			bad := newMemKV(4, c.Layers, c.KVDim())
			bad.failPut = func(l, p int) bool { return l == c.Layers-1 && p == 2 }
			var seqs []Seq
			for i, tk := range toks {
				kv := newMemKV(4, c.Layers, c.KVDim())
				if i == 2 {
					kv = bad
				}
				seqs = append(seqs, Seq{Tokens: tk, KV: kv, AllLogits: all[i]})
			}
			r := m.NewRunner(kernels.NewParallel(2))
			res := r.Forward(seqs)
			if res[2].Err == nil || res[2].Logits != nil {
				t.Fatalf("the sequence whose view failed in the last layer: err %v, %d logits", res[2].Err, len(res[2].Logits))
			}
			for i := range toks {
				if i == 2 {
					continue
				}
				if res[i].Err != nil || !bitsEqual(res[i].Logits, solo[i]) {
					t.Errorf("sequence %d (%d tokens, all logits %v): err %v, logits differ from its own step's", i, len(toks[i]), all[i], res[i].Err)
				}
			}
			if want := 1 + 6 + 1; r.n != want || !r.compacted {
				t.Errorf("the last layer ran %d rows (compacted %v), want the %d output rows", r.n, r.compacted, want)
			}
		})
	}
}
