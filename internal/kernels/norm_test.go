package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSumSquaresScaleMul: every path gives the canonical order's bits,
// restated here independently (lane sums written out, then the tree), and
// ScaleMul's two rounded products, over lengths around the 8-lane step.
func TestSumSquaresScaleMul(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 64, 100, 288, 769} {
		x, w := randVec(r, n, 3), randVec(r, n, 1)
		// Magnitudes 2^-20..2^20: float64 sums of the squares round, so a
		// different order gives different bits (of same-sized values they
		// would be exact in any order).
		for i := range x {
			x[i] *= float32(math.Ldexp(1, r.IntN(41)-20))
		}
		var lanes [8]float64
		var exact float64
		for i, v := range x {
			sq := float64(float32(v * v))
			lanes[i%8] += sq
			exact += float64(v) * float64(v)
		}
		want := ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
		withPath(t, func(p Path) {
			got := SumSquares(x)
			if math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("%v SumSquares n=%d: %v, want %v", p, n, got, want)
			}
			if d := math.Abs(got - exact); d > 1e-6*exact+1e-30 {
				t.Fatalf("%v SumSquares n=%d: %v, exact %v", p, n, got, exact)
			}
			y := make([]float32, n)
			s := float32(0.37)
			ScaleMul(y, x, s, w)
			for i := range y {
				if want := float32(float64(float32(float64(x[i])*float64(s))) * float64(w[i])); y[i] != want {
					t.Fatalf("%v ScaleMul n=%d i=%d: %v, want %v", p, n, i, y[i], want)
				}
			}
		})
	}
}

// TestRotatePairs: on every path, each pair turns as RoPE's formulas
// written out (x0*cos - x1*sin, x0*sin + x1*cos, each product rounded),
// from the expanded tables, over lengths around the 8-element step.
func TestRotatePairs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{2, 4, 6, 8, 10, 14, 16, 18, 30, 48, 64, 130} {
		x0 := randVec(r, n, 2)
		cs, sn := randVec(r, n/2, 1), randVec(r, n/2, 1)
		c, s := make([]float32, n), make([]float32, n)
		for i := range cs {
			c[2*i], c[2*i+1] = cs[i], cs[i]
			s[2*i], s[2*i+1] = -sn[i], sn[i]
		}
		withPath(t, func(p Path) {
			x := append([]float32(nil), x0...)
			RotatePairs(x, c, s)
			for i := range cs {
				a, b := x0[2*i], x0[2*i+1]
				wa := float32(float64(float32(float64(a)*float64(cs[i]))) - float64(float32(float64(b)*float64(sn[i]))))
				wb := float32(float64(float32(float64(a)*float64(sn[i]))) + float64(float32(float64(b)*float64(cs[i]))))
				if x[2*i] != wa || x[2*i+1] != wb {
					t.Fatalf("%v n=%d pair %d: (%v, %v), want (%v, %v)", p, n, i, x[2*i], x[2*i+1], wa, wb)
				}
			}
		})
	}
}
