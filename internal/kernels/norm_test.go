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
