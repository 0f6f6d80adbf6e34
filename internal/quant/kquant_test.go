package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestGGMLQuantizationError applies ggml's own acceptance test
// (tests/test-quantize-fns.cpp): data 0.1 + 2*cos(i), 4096 values,
// "total error" sqrt(sum of squared errors)/n below 0.002 for every
// 4-bit-or-more type.
func TestGGMLQuantizationError(t *testing.T) {
	const n = 32 * 128
	x := make([]float32, n)
	for i := range x {
		x[i] = 0.1 + 2*float32(math.Cos(float64(i)))
	}
	for _, typ := range []Type{F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K} {
		rb, _ := typ.RowBytes(n)
		buf := make([]byte, rb)
		if err := Quantize(typ, x, buf); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, n)
		if err := Dequantize(typ, buf, y); err != nil {
			t.Fatal(err)
		}
		var ss float64
		for i := range x {
			d := float64(x[i] - y[i])
			ss += d * d
		}
		total := math.Sqrt(ss) / n
		if total > 0.002 {
			t.Errorf("%s: total error %.5f > ggml's 0.002", typ, total)
		}
		t.Logf("%-5s total error %.6f", typ, total)
	}
}

// TestFitAffineImproves: the search starts from the min/max grid, so its
// weighted error can never be worse, and on Gaussian data it is clearly
// better on average.
func TestFitAffineImproves(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	var sumFit, sumGrid float64
	for trial := 0; trial < 500; trial++ {
		x := make([]float32, 32)
		w := make([]float32, 32)
		for i := range x {
			x[i] = float32(r.NormFloat64())
			w[i] = 1 + abs32(x[i])
		}
		L := make([]uint8, 32)
		scale, negMin := fitAffine(x, w, 15, L, -1, 0.1, 20)
		var eFit, eGrid float64
		lo, hi := float32(0), x[0]
		for _, v := range x {
			lo, hi = min(lo, v), max(hi, v)
		}
		gs := (hi - lo) / 15
		for i, v := range x {
			d := float64(scale*float32(L[i]) - negMin - v)
			eFit += float64(w[i]) * d * d
			l := math.Round(float64((v - lo) / gs))
			g := float64(gs)*l + float64(lo) - float64(v)
			eGrid += float64(w[i]) * g * g
		}
		if eFit > eGrid*(1+1e-5) {
			t.Fatalf("trial %d: fitted error %g worse than the min/max grid %g", trial, eFit, eGrid)
		}
		sumFit += eFit
		sumGrid += eGrid
	}
	if sumFit > 0.9*sumGrid {
		t.Errorf("search gains too little: %g vs %g", sumFit, sumGrid)
	}
	t.Logf("weighted error: fitted %.4g, min/max grid %.4g", sumFit, sumGrid)
}

func TestFitSymmetric(t *testing.T) {
	// Data on a grid: the largest magnitude (-4) maps to -32, so the
	// scale is 4/32, and every element is reproduced exactly.
	x := make([]float32, 16)
	for i := range x {
		x[i] = 0.25 * float32(i-16)
	}
	if s := fitSymmetric(x, 32); s != 0.125 {
		t.Errorf("scale %v, want 0.125", s)
	}
	if s := fitSymmetric(make([]float32, 16), 32); s != 0 {
		t.Errorf("zero group scale %v", s)
	}
}
