package kernels

import (
	"math"
	"testing"

	"sluice/internal/quant"
)

// geluInputs: every binary16 value as a float32 (each table entry), the
// clamp edges and their neighbours, values that round to binary16 across
// a tie, and specials.
func geluInputs() []float32 {
	var in []float32
	for h := 0; h < 1<<16; h++ {
		in = append(in, quant.FP16ToFP32(uint16(h)))
	}
	for _, x := range []float32{10, -10, 9.999999, -9.999999, 10.000001, -10.000001, 9.996, -9.996} {
		in = append(in, x, math.Nextafter32(x, 0), math.Nextafter32(x, 100))
	}
	// Halfway between two binary16 values (ties go to even) and 1 ulp
	// either side.
	for _, h := range []uint16{0x3c00, 0x3c01, 0xbc01, 0x0001, 0x4000, 0x48ff} {
		a, b := quant.FP16ToFP32(h), quant.FP16ToFP32(h+1)
		mid := (a + b) / 2
		in = append(in, mid, math.Nextafter32(mid, a), math.Nextafter32(mid, b))
	}
	in = append(in, 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)))
	return append(in, actInputs()...)
}

// TestGELUMulPathsBitwiseEqual: every path gives the Go code's bits, also
// on tails shorter than a vector, and x <= -10 gives 0 even where u is
// infinite or NaN (ggml writes 0 there, not 0*u).
func TestGELUMulPathsBitwiseEqual(t *testing.T) {
	in := geluInputs()
	u := make([]float32, len(in))
	for i := range u {
		switch i % 11 {
		case 3:
			u[i] = float32(math.Inf(1))
		case 7:
			u[i] = float32(math.NaN())
		default:
			u[i] = float32(i%7) - 2.5
		}
	}
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 33, len(in)} {
		for _, off := range []int{0, 65536} {
			if off+n > len(in) {
				continue
			}
			x, uu := in[off:off+n], u[off:off+n]
			want := append([]float32(nil), x...)
			geluMulGo(want, uu, gelus())
			withPath(t, func(p Path) {
				g := append([]float32(nil), x...)
				GELUMul(g, uu)
				for i := range g {
					if nan := math.IsNaN(float64(g[i])); nan && math.IsNaN(float64(want[i])) {
						continue // (which operand's payload a NaN carries is the compiler's choice)
					}
					if math.Float32bits(g[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v GELUMul n=%d x=%v u=%v: %v (%#x) != Go %v (%#x)", p, n, x[i], uu[i], g[i], math.Float32bits(g[i]), want[i], math.Float32bits(want[i]))
					}
				}
			})
		}
	}
}

// TestGELUMulAgainstFormula restates ggml's GELU independently: float64
// gelu_tanh of the input rounded to binary16, within binary16 rounding
// of the table's value (plus float32's cancellation in 1+tanh near -1:
// up to 2^-24 times x/2, and binary16 subnormals: 2^-25); 0 at -10 and below, x at 10 and above.
func TestGELUMulAgainstFormula(t *testing.T) {
	in := geluInputs()
	g := append([]float32(nil), in...)
	u := make([]float32, len(in))
	for i := range u {
		u[i] = 1
	}
	GELUMul(g, u)
	for i, x := range in {
		var want float64
		switch {
		case math.IsNaN(float64(x)):
			if !math.IsNaN(float64(g[i])) {
				t.Fatalf("GELU(NaN) = %v", g[i])
			}
			continue
		case x <= -10:
			want = 0
		case x >= 10:
			want = float64(x)
		default:
			h := float64(quant.FP16ToFP32(quant.FP32ToFP16(x)))
			want = 0.5 * h * (1 + math.Tanh(math.Sqrt(2/math.Pi)*h*(1+0.044715*h*h)))
		}
		if d := math.Abs(float64(g[i]) - want); d > math.Abs(want)/1024+math.Abs(float64(x))*0x1p-24+0x1p-25 {
			t.Fatalf("GELU(%v) = %v, want %v", x, g[i], want)
		}
	}
}

// BenchmarkGELUMul: one gemma3 FFN's activation for a 128-token prompt
// (FFN 3456), per path.
func BenchmarkGELUMul(b *testing.B) {
	n := 128 * 3456
	src := make([]float32, n)
	u := make([]float32, n)
	for i := range src {
		src[i] = float32(i%2000)/100 - 10
		u[i] = 1
	}
	g := make([]float32, n)
	withPath(b, func(p Path) {
		b.Run(p.String(), func(b *testing.B) {
			b.SetBytes(int64(8 * n))
			for range b.N {
				copy(g, src)
				GELUMul(g, u)
			}
		})
	})
}
