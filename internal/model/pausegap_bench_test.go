package model

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/testenv"
)

// BenchmarkPauseGaps: how long a shared step (one 64-token chunk, the
// engine's SharedStepTokens) runs between two pause points, on
// bench-15M-q8_0 over F16 pages (the servers' defaults), a 1,024-token
// prompt's steps at depths 0..960, at 1 thread (a disaggregated prefill
// worker's in the crowding bench) and 2 (colocated). A co-tenant's prompt
// that arrives during the step waits for the next pause point: with
// arrivals uniform in time its mean wait is sum(gap^2)/(2*sum(gap)). Two
// runners alternate prompt by prompt: "layers" pauses only after each
// layer's attention and between layers (pauseMACs unbounded, the pause
// points before the attention pieces), "pieces" also inside a long
// attention (attnPauseMACs). Metrics: the
// mean wait of each (wait-ms) and its longest gap (max-gap-ms) from the
// medians of each segment over the passes, the step time pieces/layers
// (what the pieces cost) from those medians (step-ratio) and from each
// depth's fastest pass (best-step-ratio, the least disturbed by other
// load), and the process's CPU time pieces/layers (cpu-ratio). -v logs
// each depth's segments.
func BenchmarkPauseGaps(b *testing.B) {
	f, err := gguf.Open(testenv.Shared(b, "models/bench-15M-q8_0.gguf"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	m, err := Load(f)
	if err != nil {
		b.Fatal(err)
	}
	const prompt, step = 1024, 64
	toks := make([]int32, prompt)
	for i := range toks {
		toks[i] = int32(1 + i*7%(m.cfg.Vocab-1))
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("threads=%d", threads), func(b *testing.B) {
			par := kernels.NewParallel(threads)
			defer par.Close()
			pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: m.cfg.Layers, KVDim: m.cfg.KVDim(), PageSize: 16, Type: kv.F16}, Pages: kv.PagesFor(prompt, 16)})
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			o := kv.Owner{Tenant: "bench", ID: kv.ID{1}}
			refs, err := pool.Reserve(o, kv.PagesFor(prompt, 16))
			if err != nil {
				b.Fatal(err)
			}
			type variant struct {
				name string
				r    *Runner
				segs [][][]time.Duration // per depth, per segment (the pause points', then the last), per pass
				best []time.Duration     // per depth, the fastest pass's step
				cpu  time.Duration       // the process's CPU time over its passes
			}
			vs := []*variant{{name: "layers", r: m.NewRunner(par)}, {name: "pieces", r: m.NewRunner(par)}}
			vs[0].r.pauseMACs = math.MaxInt
			for _, v := range vs {
				v.segs = make([][][]time.Duration, prompt/step)
				v.best = make([]time.Duration, prompt/step)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for k := range vs {
					v := vs[(i+k)%len(vs)] // the order alternates
					kvv := pool.View(o, refs)
					cpu0 := cpuTime()
					for pos := 0; pos < prompt; pos += step {
						var marks []time.Time
						t0 := time.Now()
						res := v.r.ForwardBetween([]Seq{{Tokens: toks[pos : pos+step], Pos: pos, KV: kvv}}, func(int) { marks = append(marks, time.Now()) })
						marks = append(marks, time.Now())
						if res[0].Err != nil {
							b.Fatal(res[0].Err)
						}
						if d := marks[len(marks)-1].Sub(t0); v.best[pos/step] == 0 || d < v.best[pos/step] {
							v.best[pos/step] = d
						}
						row := v.segs[pos/step]
						for len(row) < len(marks) {
							row = append(row, nil)
						}
						v.segs[pos/step] = row
						prev := t0
						for s, t := range marks {
							row[s] = append(row[s], t.Sub(prev))
							prev = t
						}
					}
					v.cpu += cpuTime() - cpu0
				}
			}
			b.StopTimer()
			// Medians per segment over the passes: a pass that lost its
			// core to another process (tens of ms on a loaded machine)
			// would otherwise decide the mean wait.
			var steps, best [2]float64
			for k, v := range vs {
				for _, d := range v.best {
					best[k] += float64(d)
				}
				var sq, tot, longest float64
				for d, row := range v.segs {
					var sb strings.Builder
					var stepTot float64
					for _, ds := range row {
						slices.Sort(ds)
						g := float64(ds[len(ds)/2]) / 1e6
						sq, tot, longest = sq+g*g, tot+g, max(longest, g)
						stepTot += g
						fmt.Fprintf(&sb, " %4.2f", g)
					}
					b.Logf("%s depth %4d: step %5.2f ms, segments ms:%s", v.name, d*step, stepTot, sb.String())
				}
				steps[k] = tot
				b.ReportMetric(sq/(2*tot), "wait-ms/"+v.name)
				b.ReportMetric(longest, "max-gap-ms/"+v.name)
			}
			b.ReportMetric(steps[1]/steps[0], "step-ratio")
			b.ReportMetric(best[1]/best[0], "best-step-ratio")
			b.ReportMetric(float64(vs[1].cpu)/float64(vs[0].cpu), "cpu-ratio")
		})
	}
}
