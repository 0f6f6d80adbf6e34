package model

import (
	"testing"
	"time"

	"sluice/internal/kernels"
)

// BenchmarkForwardFixedCost: what a forward pass costs beyond its tokens,
// in tokens. A 1-token pass and a 64-token chunk at the same context
// (512 positions written) alternate, each timed alone, on one thread;
// fixed-tokens is the 1-token pass's time over a token's share of the
// chunk's (minus the token itself). The engine counts a nested step
// (engine/yield.go, sched.Nest) as a fixed cost plus its own tokens,
// timed at start by engine.MeasureForwardCost: there a linear fit
// (c (F + n)) at position 0, a nested step's first chunk's, so its F is
// a little above this ratio's at equal context. A ratio of two
// interleaved timings: load hits both alike.
func BenchmarkForwardFixedCost(b *testing.B) {
	const ctx, chunk = 512, 64
	for name, m := range benchModels(b) {
		b.Run(name, func(b *testing.B) {
			par := kernels.NewParallel(1)
			defer par.Close()
			r := m.NewRunner(par)
			toks := make([]int32, ctx+chunk)
			for i := range toks {
				toks[i] = int32(1 + i*7%(m.cfg.Vocab-1))
			}
			pool, o, refs := benchView(b, m, ctx+chunk)
			defer pool.Close()
			v := pool.View(o, refs)
			for pos := 0; pos < ctx; pos += chunk {
				if res := r.Forward([]Seq{{Tokens: toks[pos : pos+chunk], Pos: pos, KV: v}}); res[0].Err != nil {
					b.Fatal(res[0].Err)
				}
			}
			var one, many time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				r.Forward([]Seq{{Tokens: toks[ctx : ctx+chunk], Pos: ctx, KV: v}})
				t1 := time.Now()
				r.Forward([]Seq{{Tokens: toks[ctx : ctx+1], Pos: ctx, KV: v}})
				many += t1.Sub(t0)
				one += time.Since(t1)
			}
			perToken := float64(many) / chunk
			b.ReportMetric(float64(one)/perToken-1, "fixed-tokens")
			b.ReportMetric(float64(one)/float64(b.N)/1e3, "us/1-token-pass")
		})
	}
}
