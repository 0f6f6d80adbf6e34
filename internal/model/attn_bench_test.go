package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/quant"
)

// BenchmarkAttentionDepth: one decode step of a one-layer model with
// TinyLlama-1.1B's attention shape (32 query heads of 64, 4 KV heads) and a
// token-sized rest (FF 64, vocab 64), after a context of depth tokens, with
// F32, F16 and Q8_0 pages: the step is almost all attention at depth 4096,
// so the F16/F32 (Q8_0/F16) time ratio is attention's, and the step at depth 128 against
// depth 4096 is what a long context costs. Run with -benchtime 20x; read
// cpu-µs/step on a shared machine.
func BenchmarkAttentionDepth(b *testing.B) {
	sh := testShape{arch: "llama", vocab: 64, embd: 2048, layers: 1, heads: 32, kvHeads: 4, ff: 64, wtype: quant.F32}
	src := newMemModel(sh, 5)
	src.meta["llama.context_length"] = 8192
	m := mustBuild(src)
	for _, depth := range []int{128, 1024, 4096} {
		for _, typ := range []kv.Type{kv.F32, kv.F16, kv.Q8_0} {
			b.Run(fmt.Sprintf("depth=%d/%v", depth, typ), func(b *testing.B) {
				pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: 1, KVDim: m.cfg.KVDim(), PageSize: 16, Type: typ}, Pages: kv.PagesFor(depth+1, 16)})
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				o := kv.Owner{Tenant: "bench"}
				refs, _ := pool.Reserve(o, kv.PagesFor(depth+1, 16))
				v := pool.View(o, refs)
				toks := make([]int32, depth)
				for i := range toks {
					toks[i] = int32(1 + i%63)
				}
				r := m.NewRunner(kernels.NewParallel(1))
				for pos := 0; pos < depth; pos += 512 {
					if res := r.Forward([]Seq{{Tokens: toks[pos:min(depth, pos+512)], Pos: pos, KV: v}}); res[0].Err != nil {
						b.Fatal(res[0].Err)
					}
				}
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					if res := r.Forward([]Seq{{Tokens: toks[:1], Pos: depth, KV: v}}); res[0].Err != nil {
						b.Fatal(res[0].Err)
					}
				}
				// CPU time: the machine may be shared, wall time is not ours.
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/step")
			})
		}
	}
}

// BenchmarkAttentionPrefillDepth: a 512-token prefill step (pp512) and one
// decode step of a one-layer model with bench-110M's attention shape (12
// heads of 64, MHA) after a context of depth positions on F16 and Q8_0 pages (K/V
// rows written straight into the pool, seeded, instead of prefilled: the
// fill would cost more than the steps measured): at depth 8192 the step is
// almost all attention. Read cpu-ms/step.
func BenchmarkAttentionPrefillDepth(b *testing.B) {
	sh := testShape{arch: "llama", vocab: 64, embd: 768, layers: 1, heads: 12, kvHeads: 12, ff: 64, wtype: quant.F32}
	src := newMemModel(sh, 5)
	src.meta["llama.context_length"] = 16384
	m := mustBuild(src)
	for _, depth := range []int{0, 8192} {
		for _, n := range []int{512, 1} {
			for _, typ := range []kv.Type{kv.F16, kv.Q8_0} {
				b.Run(fmt.Sprintf("depth=%d/tokens=%d/%v", depth, n, typ), func(b *testing.B) {
					pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: 1, KVDim: m.cfg.KVDim(), PageSize: 16, Type: typ}, Pages: kv.PagesFor(depth+n, 16)})
					if err != nil {
						b.Fatal(err)
					}
					defer pool.Close()
					o := kv.Owner{Tenant: "bench"}
					refs, _ := pool.Reserve(o, kv.PagesFor(depth+n, 16))
					v := pool.View(o, refs)
					rng := rand.New(rand.NewPCG(1, 2))
					kr, vr := make([]float32, m.cfg.KVDim()), make([]float32, m.cfg.KVDim())
					for pos := 0; pos < depth; pos++ {
						for i := range kr {
							kr[i], vr[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
						}
						if err := v.Put(0, pos, kr, vr); err != nil {
							b.Fatal(err)
						}
					}
					toks := make([]int32, n)
					for i := range toks {
						toks[i] = int32(1 + i%63)
					}
					r := m.NewRunner(kernels.NewParallel(1))
					b.ResetTimer()
					cpu0 := cpuTime()
					for i := 0; i < b.N; i++ {
						if res := r.Forward([]Seq{{Tokens: toks, Pos: depth, KV: v}}); res[0].Err != nil {
							b.Fatal(res[0].Err)
						}
					}
					b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/step")
				})
			}
		}
	}
}

// BenchmarkAttentionDecodeDeep: one decode step of a 12-layer model with
// bench-110M's attention shape (12 heads of 64, MHA, F16 pages) and a
// token-sized rest after 16384 positions: 604 MB of K/V, far beyond the
// caches, so the step streams from DRAM as the real model's tg@d16384
// does (BenchmarkAttentionPrefillDepth's one layer stays in L3). The K/V
// rows are written straight into the pool. Read cpu-ms/step and MB/s
// (K/V bytes read per CPU-second).
func BenchmarkAttentionDecodeDeep(b *testing.B) {
	const layers, depth = 12, 16384
	sh := testShape{arch: "llama", vocab: 64, embd: 768, layers: layers, heads: 12, kvHeads: 12, ff: 64, wtype: quant.F32}
	src := newMemModel(sh, 5)
	src.meta["llama.context_length"] = depth + 16
	m := mustBuild(src)
	kvd := m.cfg.KVDim()
	pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: layers, KVDim: kvd, PageSize: 16, Type: kv.F16}, Pages: kv.PagesFor(depth+1, 16)})
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	o := kv.Owner{Tenant: "bench"}
	refs, _ := pool.Reserve(o, kv.PagesFor(depth+1, 16))
	v := pool.View(o, refs)
	rng := rand.New(rand.NewPCG(1, 2))
	kr, vr := make([]float32, kvd), make([]float32, kvd)
	for pos := 0; pos < depth; pos++ {
		for i := range kr {
			kr[i], vr[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		for l := 0; l < layers; l++ {
			if err := v.Put(l, pos, kr, vr); err != nil {
				b.Fatal(err)
			}
		}
	}
	r := m.NewRunner(kernels.NewParallel(1))
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		if res := r.Forward([]Seq{{Tokens: []int32{7}, Pos: depth, KV: v}}); res[0].Err != nil {
			b.Fatal(res[0].Err)
		}
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/step")
	b.ReportMetric(float64(layers*depth*kvd*2*2)*float64(b.N)/cpu.Seconds()/1e6, "kvMB/cpu-s")
}
