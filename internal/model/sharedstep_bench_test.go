package model

import (
	"fmt"
	"testing"

	"sluice/internal/kernels"
)

// BenchmarkPrefillStepSize: a 1,024-token prompt prefilled in steps of
// step tokens: 256 (the default step budget, a tenant alone) against 64
// (one chunk, the prefill worker's shared step, Config.SharedStepTokens)
// and 32 (half a chunk, the colocated engine's shared step). The
// ratio of their cpu-tok/s is what short steps cost a long prompt while
// another tenant is around.
func BenchmarkPrefillStepSize(b *testing.B) {
	const prompt = 1024
	for name, m := range benchModels(b) {
		for _, step := range []int{256, 64, 32} {
			b.Run(fmt.Sprintf("%s/step=%d", name, step), func(b *testing.B) {
				par := kernels.NewParallel(1)
				defer par.Close()
				r := m.NewRunner(par)
				toks := make([]int32, prompt)
				for i := range toks {
					toks[i] = int32(1 + i*7%(m.cfg.Vocab-1))
				}
				pool, o, refs := benchView(b, m, prompt)
				defer pool.Close()
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					v := pool.View(o, refs)
					for pos := 0; pos < prompt; pos += step {
						res := r.Forward([]Seq{{Tokens: toks[pos : pos+step], Pos: pos, KV: v}})
						if res[0].Err != nil {
							b.Fatal(res[0].Err)
						}
					}
				}
				reportRates(b, prompt*b.N, cpu0)
			})
		}
	}
}
