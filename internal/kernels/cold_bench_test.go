package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// BenchmarkMatMulCold is MatMul as a large model's prefill runs it: the
// weights come from memory, not the caches. Each iteration multiplies the
// next of enough matrices (TinyLlama's shapes) that together they exceed
// the L3, so every call starts with its weights cold.
// Select with e.g. -bench 'MatMulCold/q8_0/2048x2048/tok128/t1'; decode
// (one token, the one-token kernels) with 'MatMulCold/q6_K/.*/tok1$/t1'.
func BenchmarkMatMulCold(b *testing.B) {
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.Q5_K} {
		for _, sh := range [][2]int{{2048, 2048}, {5632, 2048}, {2048, 5632}} {
			for _, nTok := range []int{1, 128, 512} {
				for _, threads := range []int{1, 2} {
					rows, cols := sh[0], sh[1]
					name := fmt.Sprintf("%s/%dx%d/tok%d/t%d", typ, rows, cols, nTok, threads)
					b.Run(name, func(b *testing.B) { benchMatMulCold(b, typ, rows, cols, nTok, threads) })
				}
			}
		}
	}
	// Gemma 3 1B-like decode: n_embd 1152 sends Q4_K tensors to Q5_0, so
	// nearly every decode matvec is Q5_0 on short (36-block) rows.
	for _, sh := range [][2]int{{3456, 1152}, {1152, 3456}, {32000, 1152}} {
		for _, threads := range []int{1, 2} {
			rows, cols := sh[0], sh[1]
			name := fmt.Sprintf("%s/%dx%d/tok1/t%d", quant.Q5_0, rows, cols, threads)
			b.Run(name, func(b *testing.B) { benchMatMulCold(b, quant.Q5_0, rows, cols, 1, threads) })
		}
	}
}

func benchMatMulCold(b *testing.B, typ quant.Type, rows, cols, nTok, threads int) {
	rb, _ := typ.RowBytes(cols)
	r := rand.New(rand.NewPCG(1, 2))
	src := randVec(r, cols, 1)
	one := make([]byte, rb*rows)
	for i := 0; i < rows; i++ {
		quant.Quantize(typ, src, one[i*rb:(i+1)*rb])
	}
	n := max(2, (96<<20)/len(one)+1)
	ms := make([]*Matrix, n)
	for i := range ms {
		d := make([]byte, len(one))
		copy(d, one)
		ms[i] = &Matrix{Type: typ, Rows: rows, Cols: cols, Data: d}
	}
	x := randVec(r, nTok*cols, 1)
	out := make([]float32, nTok*rows)
	par := NewParallel(threads)
	defer par.Close()
	MatMul(par, out, ms[0], x, nTok)
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		MatMul(par, out, ms[i%n], x, nTok)
	}
	sec := b.Elapsed().Seconds() / float64(b.N)
	cpuSec := (cpuSeconds() - cpu0) / float64(b.N) / float64(threads)
	flop := 2 * float64(rows) * float64(cols) * float64(nTok)
	b.ReportMetric(flop/sec/1e9, "GFLOP/s")
	b.ReportMetric(flop/cpuSec/1e9, "cpuGFLOP/s")
	b.ReportMetric(float64(len(one))/sec/1e9, "GB/s")
}
