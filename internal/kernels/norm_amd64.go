package kernels

//go:noescape
func sumSquaresAVX2(x *float32, n int, acc *[8]float64)

//go:noescape
func scaleMulAVX2(y, x *float32, n int, s float32, w *float32)

// sumSquaresAsm adds the squares of x (len(x) a multiple of 8) into the 8
// lanes of acc; the AVX-512 path runs the AVX2 form (same bits, and a
// 288-element row is too short for wider lanes to matter).
func sumSquaresAsm(x []float32, acc *[8]float64) { sumSquaresAVX2(&x[0], len(x), acc) }

// scaleMulAsm is ScaleMul's loop for len(y) a multiple of 8.
func scaleMulAsm(y, x []float32, s float32, w []float32) {
	scaleMulAVX2(&y[0], &x[0], len(y), s, &w[0])
}

//go:noescape
func rotatePairsAVX2(x, c, s *float32, n int)

// rotatePairsAsm is RotatePairs' loop for len(x) a multiple of 8.
func rotatePairsAsm(x, c, s []float32) { rotatePairsAVX2(&x[0], &c[0], &s[0], len(x)) }
