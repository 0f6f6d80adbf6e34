package model_test

// Owned by the KV pool (engineer D): what the pool's owner/generation checks
// (I3) cost a real decode step. Uses only the model's exported API.

import (
	"math"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/testenv"
)

// BenchmarkDecodeKVChecks decodes 128 single-token steps of one sequence
// through a kv.Pool view, alternating rounds with the pool's checks on and
// off. The difference is far below a loaded machine's noise, so it reports
// two figures, each from the fastest round (interference only ever adds
// time): "checks_%" compares whole decode rounds on and off; and
// "checks_%_traffic" times the rounds' KV traffic alone (the same Put and
// Block calls, no arithmetic) on and off and divides the difference by the
// decode round. Target: at most 1.
func BenchmarkDecodeKVChecks(b *testing.B) {
	for _, name := range []string{"stories260K", "bench-15M-q8_0"} {
		b.Run(name, func(b *testing.B) {
			f, err := gguf.Open(testenv.Shared(b, "models/"+name+".gguf"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			m, err := model.Load(f)
			if err != nil {
				b.Fatal(err)
			}
			cfg := m.Config()
			const steps = 128
			g := kv.Geometry{Layers: cfg.Layers, KVDim: cfg.KVDim(), PageSize: 16}
			pool, err := kv.New(kv.Config{Geometry: g, Pages: kv.PagesFor(steps, 16)})
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			o := kv.Owner{Tenant: "bench", ID: kv.ID{1}}
			refs, err := pool.Reserve(o, kv.PagesFor(steps, 16))
			if err != nil {
				b.Fatal(err)
			}
			r := m.NewRunner(nil)
			decode := func() {
				v := pool.View(o, refs)
				tok := int32(1)
				for pos := range steps {
					res := r.Forward([]model.Seq{{Tokens: []int32{tok}, Pos: pos, KV: v}})
					if res[0].Err != nil {
						b.Fatal(res[0].Err)
					}
					tok = int32(pos*31%(cfg.Vocab-1) + 1)
				}
			}
			row := make([]float32, cfg.KVDim())
			traffic := func() {
				v := pool.View(o, refs)
				for pos := range steps {
					for l := range cfg.Layers {
						if err := v.Put(l, pos, row, row); err != nil {
							b.Fatal(err)
						}
						for blk := range pos/16 + 1 {
							if _, _, _, err := v.Block(l, blk); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
			}
			fastest := func(checks bool, fn func(), best *time.Duration) {
				pool.SetChecks(checks)
				t0 := time.Now()
				fn()
				*best = min(*best, time.Since(t0))
			}
			decode() // warm up
			inf := time.Duration(math.MaxInt64)
			dOn, dOff, tOn, tOff := inf, inf, inf, inf
			b.ResetTimer()
			for i := range b.N {
				first := i%2 == 0
				fastest(first, decode, pick(first, &dOn, &dOff))
				fastest(!first, decode, pick(!first, &dOn, &dOff))
				for range 10 {
					fastest(first, traffic, pick(first, &tOn, &tOff))
					fastest(!first, traffic, pick(!first, &tOn, &tOff))
				}
			}
			pool.SetChecks(true)
			b.ReportMetric(float64(dOn)/steps, "ns/step-on")
			b.ReportMetric(float64(dOff)/steps, "ns/step-off")
			b.ReportMetric(100*(float64(dOn)-float64(dOff))/float64(dOff), "checks_%")
			b.ReportMetric(100*(float64(tOn)-float64(tOff))/float64(dOff), "checks_%_traffic")
		})
	}
}

func pick(on bool, a, b *time.Duration) *time.Duration {
	if on {
		return a
	}
	return b
}
