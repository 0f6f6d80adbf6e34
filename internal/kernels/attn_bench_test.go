package kernels

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"sluice/internal/quant"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAttendDecode: one decode token's attention for one KV head of
// TinyLlama-1.1B's shape (8 query heads of 64 sharing it, KV rows of 256,
// 16-slot blocks) over n positions. "fused" is the way model.attendUnit
// runs it (MQADot, ScaleSoftmax, MQAAxpy: one call per page for all 8
// heads, F16 rows widened in registers); "rows" is the per-head form it
// replaced (DotRows/AxpyRows per head and page, F16 pages widened into
// scratch by WidenRows), kept for the comparison. cpu-ns/pos is CPU time
// per context position (all 8 heads, K and V).
func BenchmarkAttendDecode(b *testing.B) {
	const hd, group, kvd, ps = 64, 8, 256, 16
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{128, 1024, 4096} {
		k32, v32 := randVec(rng, n*kvd, 1), randVec(rng, n*kvd, 1)
		k16, v16 := make([]uint16, n*kvd), make([]uint16, n*kvd)
		for i := range k32 {
			k16[i], v16[i] = quant.FP32ToFP16(k32[i]), quant.FP32ToFP16(v32[i])
		}
		q := randVec(rng, group*hd, 1)
		scores := make([]float32, group*n)
		out := make([]float32, group*hd)
		wide := make([]float32, ps*hd)
		for _, typ := range []string{"f32", "f16"} {
			b.Run(fmt.Sprintf("n=%d/%s/fused", n, typ), func(b *testing.B) {
				cpu0 := cpuNow()
				for it := 0; it < b.N; it++ {
					for j := 0; j < n; j += ps {
						cnt := min(ps, n-j)
						if typ == "f16" {
							MQADot(scores[j:], n, q, group, hd, k16[j*kvd:], kvd, cnt)
						} else {
							MQADot(scores[j:], n, q, group, hd, k32[j*kvd:], kvd, cnt)
						}
					}
					for g := 0; g < group; g++ {
						ScaleSoftmax(scores[g*n:(g+1)*n], 0.125)
					}
					clear(out)
					for j := 0; j < n; j += ps {
						cnt := min(ps, n-j)
						if typ == "f16" {
							MQAAxpy(out, scores[j:], n, group, hd, v16[j*kvd:], kvd, cnt)
						} else {
							MQAAxpy(out, scores[j:], n, group, hd, v32[j*kvd:], kvd, cnt)
						}
					}
				}
				b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/pos")
			})
			b.Run(fmt.Sprintf("n=%d/%s/rows", n, typ), func(b *testing.B) {
				cpu0 := cpuNow()
				for it := 0; it < b.N; it++ {
					for j := 0; j < n; j += ps {
						cnt := min(ps, n-j)
						kb, stride := k32[j*kvd:], kvd
						if typ == "f16" {
							WidenRows(wide[:cnt*hd], k16[j*kvd:], cnt, kvd)
							kb, stride = wide, hd
						}
						for g := 0; g < group; g++ {
							DotRows(scores[g*n+j:g*n+j+cnt], q[g*hd:(g+1)*hd], kb, stride)
						}
					}
					for g := 0; g < group; g++ {
						Scale(scores[g*n:(g+1)*n], 0.125)
						Softmax(scores[g*n : (g+1)*n])
						clear(out[g*hd : (g+1)*hd])
					}
					for j := 0; j < n; j += ps {
						cnt := min(ps, n-j)
						vb, stride := v32[j*kvd:], kvd
						if typ == "f16" {
							WidenRows(wide[:cnt*hd], v16[j*kvd:], cnt, kvd)
							vb, stride = wide, hd
						}
						for g := 0; g < group; g++ {
							AxpyRows(out[g*hd:(g+1)*hd], scores[g*n+j:g*n+j+cnt], vb, stride)
						}
					}
				}
				b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/pos")
			})
		}
	}
}

// BenchmarkMQAPrefill: the kernels of one prefill block's attention for
// one KV head, the way model.attendTokens calls them: m query rows (a
// block of tokens) against one 16-position page of F16 K and V rows, at
// the head dims of bench-15M (48) and TinyLlama/bench-110M (64).
// cpu-ns/row-pos is CPU time per query row and position.
func BenchmarkMQAPrefill(b *testing.B) {
	const p = 16
	for _, m := range []int{1, 8, 16, 64} {
		for _, hd := range []int{48, 64, 128} {
			benchMQA(b, m, p, hd)
		}
	}
}

func benchMQA(b *testing.B, m, p, hd int) {
	rng := rand.New(rand.NewPCG(3, 4))
	{
		k16, v16 := make([]uint16, p*hd), make([]uint16, p*hd)
		for i := range k16 {
			k16[i] = quant.FP32ToFP16(float32(rng.NormFloat64()))
			v16[i] = quant.FP32ToFP16(float32(rng.NormFloat64()))
		}
		q := randVec(rng, m*hd, 1)
		w := randVec(rng, m*p, 1)
		y := make([]float32, m*hd)
		scores := make([]float32, m*p)
		k32, v32 := make([]float32, p*hd), make([]float32, p*hd)
		FP16ToFP32Row(k32, k16)
		FP16ToFP32Row(v32, v16)
		for _, op := range []string{"dot", "axpy", "axpy1", "widen+dot32", "widen+axpy32"} {
			b.Run(fmt.Sprintf("m=%d/hd=%d/%s", m, hd, op), func(b *testing.B) {
				cpu0 := cpuNow()
				for it := 0; it < b.N; it++ {
					switch op {
					case "dot":
						MQADot(scores, p, q, m, hd, k16, hd, p)
					case "axpy":
						MQAAxpy(y, w, p, m, hd, v16, hd, p)
					case "widen+dot32": // F16 widened once, then the F32 kernel
						WidenRows(k32, k16, p, hd)
						MQADot(scores, p, q, m, hd, k32, hd, p)
					case "widen+axpy32":
						WidenRows(v32, v16, p, hd)
						MQAAxpy(y, w, p, m, hd, v32, hd, p)
					case "axpy1": // the block's diagonal: one row a call
						for r := 0; r < m; r++ {
							MQAAxpy(y[r*hd:], w[r*p:], p, 1, hd, v16, hd, p)
						}
					}
				}
				b.ReportMetric(float64((cpuNow()-cpu0).Nanoseconds())/float64(b.N*m*p), "cpu-ns/row-pos")
			})
		}
	}
}
