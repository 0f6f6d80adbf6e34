package kernels

import (
	"math"
	"sync"

	"sluice/internal/quant"
)

// GELU (tanh approximation) as ggml's CPU backend computes it, which is
// what llama.cpp's gemma graphs run: the input is rounded to binary16 and
// looked up in a table of gelu_tanh over every binary16 value, itself
// rounded to binary16 (GGML_GELU_FP16, on by default); inputs <= -10 give 0
// and inputs >= 10 pass through. The rounding is coarse (11 bits), so
// computing GELU in full precision would move logits enough to flip close
// greedy choices against llama.cpp. Each element depends only on itself,
// so the split across threads cannot change a bit, and the SIMD paths
// (F16C rounding, which is round-to-nearest-even as quant.FP32ToFP16, and
// a gather from the same table) give the Go code's bits.

var (
	geluOnce  sync.Once
	geluTable *[1 << 16]float32
)

// geluTanh32 is ggml_gelu_f32: 0.5x(1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2)))
// in float32 arithmetic (tanh rounded to float32 from float64).
func geluTanh32(x float32) float32 {
	const a = float32(0.044715)
	const s = float32(0.79788456080286535587989211986876)
	// Explicit conversions round every step, so no platform fuses them
	// into FMAs and the table is the same everywhere.
	in := float32(float32(s*x) * float32(1+float32(float32(a*x)*x)))
	return float32(float32(0.5*x) * float32(1+float32(math.Tanh(float64(in)))))
}

func gelus() *[1 << 16]float32 {
	geluOnce.Do(func() {
		t := new([1 << 16]float32)
		for h := range t {
			x := quant.FP16ToFP32(uint16(h))
			t[h] = quant.FP16ToFP32(quant.FP32ToFP16(geluTanh32(x)))
		}
		geluTable = t
	})
	return geluTable
}

// GELUMul sets g[i] = gelu_tanh(g[i]) * u[i], ggml's geglu (gemma's FFN).
// len(u) >= len(g).
func GELUMul(g, u []float32) {
	t := gelus()
	u = u[:len(g)]
	i := geluMulSIMD(g, u, t)
	geluMulGo(g[i:], u[i:], t)
}

func geluMulGo(g, u []float32, t *[1 << 16]float32) {
	u = u[:len(g)]
	for i, x := range g {
		switch {
		case x <= -10:
			g[i] = 0
		case x >= 10:
			g[i] = x * u[i]
		default:
			g[i] = t[quant.FP32ToFP16(x)] * u[i]
		}
	}
}
