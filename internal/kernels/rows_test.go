package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestRowsMatchDotAxpy: DotRows/AxpyRows equal Dot/Axpy row by row, bit
// for bit, on every available path (the contract attention relies on).
func TestRowsMatchDotAxpy(t *testing.T) {
	prev := CurrentPath()
	defer SetPath(prev)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range Paths() {
		if err := SetPath(p); err != nil {
			continue
		}
		for _, n := range []int{1, 7, 8, 16, 33, 48, 64, 128} {
			stride := n + rng.IntN(40)
			rows := 1 + rng.IntN(20)
			q := make([]float32, n)
			k := make([]float32, (rows-1)*stride+n)
			for i := range q {
				q[i] = float32(rng.NormFloat64())
			}
			for i := range k {
				k[i] = float32(rng.NormFloat64())
			}
			got := make([]float32, rows)
			DotRows(got, q, k, stride)
			w := make([]float32, rows)
			for j := range got {
				if want := Dot(q, k[j*stride:j*stride+n]); math.Float32bits(got[j]) != math.Float32bits(want) {
					t.Fatalf("%v n=%d row %d: DotRows %v, Dot %v", p, n, j, got[j], want)
				}
				w[j] = float32(rng.NormFloat64())
			}
			y1 := make([]float32, n)
			y2 := make([]float32, n)
			AxpyRows(y1, w, k, stride)
			for j, a := range w {
				Axpy(y2, a, k[j*stride:j*stride+n])
			}
			for i := range y1 {
				if math.Float32bits(y1[i]) != math.Float32bits(y2[i]) {
					t.Fatalf("%v n=%d: AxpyRows[%d] %v, Axpy loop %v", p, n, i, y1[i], y2[i])
				}
			}
		}
	}
}
