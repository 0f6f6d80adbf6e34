package kernels

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"sluice/internal/quant"
)

// Shapes of the bench-15M and bench-110M models' matmuls (rows x cols).
var benchShapes = [][2]int{
	{288, 288}, {768, 288}, {288, 768}, {32000, 288},
	{768, 768}, {2048, 768}, {768, 2048}, {32000, 768},
}

// copyGBps measures a raw copy of n bytes (read n + write n) in the same
// process and moment as the kernel, the memory-bandwidth yardstick the
// kernel's weight-read rate is compared with.
func copyGBps(n int) float64 {
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	// Best of several short runs: on a shared machine the slowest runs
	// measure the neighbours, not the memory.
	best := 0.0
	for r := 0; r < 7; r++ {
		iters := 0
		start := time.Now()
		for time.Since(start) < 5*time.Millisecond {
			copy(dst, src)
			iters++
		}
		best = max(best, float64(n)*float64(iters)/time.Since(start).Seconds()/1e9)
	}
	return best
}

// BenchmarkMatMul reports, per type, shape, token count, thread count and
// path: GB/s of weight bytes read, GFLOP/s (2 per multiply-add) and
// bw_ratio = (weight GB/s) / (raw copy GB/s of the same bytes). Select with
// e.g. -bench 'MatMul/q8_0/32000x288/tok1/t1/avx512'.
func BenchmarkMatMul(b *testing.B) {
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.BF16} {
		for _, sh := range benchShapes {
			rows, cols := sh[0], sh[1]
			if cols%typ.BlockSize() != 0 {
				continue
			}
			for _, nTok := range []int{1, 64} {
				for _, threads := range []int{1, 2} {
					for _, p := range Paths() {
						name := fmt.Sprintf("%s/%dx%d/tok%d/t%d/%s", typ, rows, cols, nTok, threads, p)
						b.Run(name, func(b *testing.B) { benchMatMul(b, typ, rows, cols, nTok, threads, p) })
					}
				}
			}
		}
	}
}

func benchMatMul(b *testing.B, typ quant.Type, rows, cols, nTok, threads int, p Path) {
	old := CurrentPath()
	defer SetPath(old)
	SetPath(p)
	rb, _ := typ.RowBytes(cols)
	m := &Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rb*rows)}
	r := rand.New(rand.NewPCG(1, 2))
	src := randVec(r, cols, 1)
	for i := 0; i < rows; i++ {
		quant.Quantize(typ, src, m.Data[i*rb:(i+1)*rb])
	}
	x := randVec(r, nTok*cols, 1)
	out := make([]float32, nTok*rows)
	par := NewParallel(threads)
	defer par.Close()
	cp := copyGBps(len(m.Data))
	MatMul(par, out, m, x, nTok)
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		MatMul(par, out, m, x, nTok)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	// On a shared machine wall time includes time spent descheduled; CPU
	// time of the process divided by the thread count is the steadier
	// figure (it includes GC, which these loops barely trigger).
	cpuSec := (cpuSeconds() - cpu0) / float64(b.N) / float64(threads)
	b.ReportMetric(2*float64(rows)*float64(cols)*float64(nTok)/cpuSec/1e9, "cpuGFLOP/s")
	gbps := float64(len(m.Data)) / sec / 1e9
	b.ReportMetric(gbps, "GB/s")
	b.ReportMetric(2*float64(rows)*float64(cols)*float64(nTok)/sec/1e9, "GFLOP/s")
	b.ReportMetric(gbps/cp, "bw_ratio")
	b.SetBytes(int64(len(m.Data)))
}

func BenchmarkDot(b *testing.B) {
	for _, n := range []int{8, 64, 128, 768} {
		for _, p := range Paths() {
			b.Run(fmt.Sprintf("n%d/%s", n, p), func(b *testing.B) {
				old := CurrentPath()
				defer SetPath(old)
				SetPath(p)
				r := rand.New(rand.NewPCG(1, 2))
				x, y := randVec(r, n, 1), randVec(r, n, 1)
				var s float32
				for i := 0; i < b.N; i++ {
					s += Dot(x, y)
				}
				_ = s
			})
		}
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// BenchmarkParallelFor is the pool's per-call overhead: an empty loop body
// split over the workers.
func BenchmarkParallelFor(b *testing.B) {
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("t%d", threads), func(b *testing.B) {
			p := NewParallel(threads)
			defer p.Close()
			var sink [64]int
			for i := 0; i < b.N; i++ {
				p.For(8, func(lo, hi int) { sink[lo*8%64]++ })
			}
		})
	}
}

func BenchmarkSiLUMul(b *testing.B) {
	for _, p := range Paths() {
		b.Run(p.String(), func(b *testing.B) {
			old := CurrentPath()
			defer SetPath(old)
			SetPath(p)
			r := rand.New(rand.NewPCG(1, 2))
			g0, u := randVec(r, 768, 2), randVec(r, 768, 1)
			g := make([]float32, len(g0))
			b.SetBytes(4 * 768)
			for i := 0; i < b.N; i++ {
				copy(g, g0)
				SiLUMul(g, u)
			}
		})
	}
}

// BenchmarkMatMulSmall is the per-call overhead regime (stories260K's 64-wide
// layers): allocation, dispatch and activation preparation dominate.
func BenchmarkMatMulSmall(b *testing.B) {
	for _, typ := range []quant.Type{quant.F32, quant.Q8_0} {
		b.Run(typ.String(), func(b *testing.B) {
			m, _ := makeMatrix(b, typ, 64, 64, 1)
			x := randVec(rand.New(rand.NewPCG(1, 1)), 64, 1)
			out := make([]float32, 64)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				MatMul(nil, out, m, x, 1)
			}
		})
	}
}
