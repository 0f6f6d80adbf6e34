package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowsSIMDMatchSingleCalls: DotRows and AxpyRows give exactly what Dot and
// Axpy give row by row (the model may use either form; batch invariance
// needs them equal), on every path, for strides wider than the rows.
func TestRowsSIMDMatchSingleCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{1, 8, 15, 16, 48, 64, 65, 100, 130} {
		for _, rows := range []int{1, 3, 4, 5, 9, 33} {
			stride := n + 7
			k := randVec(r, rows*stride, 1)
			q := randVec(r, n, 1)
			w := randVec(r, rows, 1)
			y0 := randVec(r, n, 1)
			withPath(t, func(p Path) {
				out := make([]float32, rows)
				DotRows(out, q, k, stride)
				y := append([]float32(nil), y0...)
				AxpyRows(y, w, k, stride)
				yRef := append([]float32(nil), y0...)
				for j := 0; j < rows; j++ {
					row := k[j*stride : j*stride+n]
					if d := Dot(q, row); math.Float32bits(d) != math.Float32bits(out[j]) {
						t.Fatalf("%v n=%d rows=%d: DotRows[%d] = %v, Dot = %v", p, n, rows, j, out[j], d)
					}
					// Reference for Axpy: product rounded, then the sum.
					for i := range yRef {
						yRef[i] = float32(float64(yRef[i]) + float64(float32(float64(w[j])*float64(row[i]))))
					}
				}
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(yRef[i]) {
						t.Fatalf("%v n=%d rows=%d: AxpyRows y[%d] = %v, want %v", p, n, rows, i, y[i], yRef[i])
					}
				}
			})
		}
	}
}
