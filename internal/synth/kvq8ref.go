package synth

import "sluice/internal/quant"

// KVQ8References are the files testdata/reference/kvq8.json was made
// from (scripts/kvq8ref): llama-shaped models whose KV rows are whole
// Q8_0 blocks, for Q8_0 KV pages against llama.cpp's -ctk q8_0 -ctv q8_0.
// One has head dim 64 in GQA groups of 2 (bench-110M's and TinyLlama's
// head dim) with Q8_0 weights; one head dim 128 (four blocks a head) with
// F16 weights. Output spread x8, so most greedy choices are decided.
func KVQ8References() []MoEReference {
	return []MoEReference{
		{"kvq8-llama-hd64-q8_0", Spec{Name: "kvq8-llama-hd64-q8_0", Arch: "llama", Layers: 4, Embd: 256, Heads: 4, KVHeads: 2, FF: 384,
			Context: 1024, Type: quant.Q8_0, Seed: 3101, OutputScale: 8}},
		{"kvq8-llama-hd128-f16", Spec{Name: "kvq8-llama-hd128-f16", Arch: "llama", Layers: 3, Embd: 256, Heads: 2, KVHeads: 1, FF: 384,
			Context: 1024, Type: quant.F16, Seed: 3102, OutputScale: 8}},
	}
}
