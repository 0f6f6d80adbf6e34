package model_test

// Owned by the KV pool (engineer D): what the pool's owner/generation checks
// (I3) cost a real decode step. Uses only the model's exported API.

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/testenv"
)

// BenchmarkDecodeKVChecks decodes 128 single-token steps of one sequence
// through a kv.Pool view, alternating rounds with the pool's checks on and
// off, and reports (in CPU time of the decoding thread) the checks' share of a decode step ("checks_%"; target
// <= 1; "checks_%_traffic" is the steadier estimate, see below). Rounds alternate so both sides see the same machine load.
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
			round := func(checks bool) time.Duration {
				pool.SetChecks(checks)
				v := pool.View(o, refs)
				t0 := threadCPU()
				tok := int32(1)
				for pos := range steps {
					res := r.Forward([]model.Seq{{Tokens: []int32{tok}, Pos: pos, KV: v}})
					if res[0].Err != nil {
						b.Fatal(res[0].Err)
					}
					tok = int32(pos*31%(cfg.Vocab-1) + 1)
				}
				return threadCPU() - t0
			}
			// Thread CPU time, not wall time: on a shared machine the
			// neighbours would swamp a difference of well under 1%.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			round(true) // warm up
			var on, off time.Duration
			b.ResetTimer()
			for i := range b.N {
				if i%2 == 0 {
					on += round(true)
					off += round(false)
				} else {
					off += round(false)
					on += round(true)
				}
			}
			// The A/B difference is far below the machine's noise, so also
			// time the step's KV traffic alone (the same Put and Block calls,
			// no arithmetic) with checks on and off, many times over, and
			// express the difference as a share of the decode step.
			row := make([]float32, cfg.KVDim())
			traffic := func(checks bool) time.Duration {
				pool.SetChecks(checks)
				v := pool.View(o, refs)
				t0 := threadCPU()
				for range 20 {
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
				return (threadCPU() - t0) / 20
			}
			var tOn, tOff time.Duration
			for range 5 {
				tOn += traffic(true)
				tOff += traffic(false)
			}
			b.ReportMetric(100*float64(tOn-tOff)/(float64(off)/float64(b.N)*5), "checks_%_traffic")
			b.ReportMetric(float64(on)/float64(b.N*steps), "ns/step-on")
			b.ReportMetric(float64(off)/float64(b.N*steps), "ns/step-off")
			b.ReportMetric(100*(float64(on)-float64(off))/float64(off), "checks_%")
		})
	}
}

func threadCPU() time.Duration {
	var ru syscall.Rusage
	const rusageThread = 1 // RUSAGE_THREAD (Linux)
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
