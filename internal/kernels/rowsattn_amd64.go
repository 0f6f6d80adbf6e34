package kernels

import "math"

// AVX2 forms of attention's AxpyRows and Softmax (rowsattn_amd64.s). On the
// AVX2 path these ran in Go (AxpyRows for rows under 16 elements, as in
// stories260K's 8-wide heads) or one Axpy call per row, and were 60-80% of
// small models' prefill (pprof, pp512, stories260K).

//go:noescape
func axpyRowsAVX2(y, w, x *float32, nRows, stride, n int)

//go:noescape
func maxAVX2(x *float32, n int) (m float32, bad bool)

//go:noescape
func sumF64x8AVX2(x *float32, n int, acc *[8]float64)

// axpyRowsAVX2Go is AxpyRows on the AVX2 path, 32 elements of y at a time
// (each element's sequence of steps is Axpy's whatever the chunking).
func axpyRowsAVX2Go(y, w, x []float32, stride int) {
	for off := 0; off < len(y); off += 32 {
		axpyRowsAVX2(&y[off], &w[0], &x[off], len(w), stride, min(32, len(y)-off))
	}
}

// softmaxAVX2 is softmaxGo with its passes in assembly; it returns false,
// leaving x untouched, when x holds a NaN or +Inf.
func softmaxAVX2(x []float32) bool {
	n8 := len(x) &^ 7
	mx := x[0]
	if n8 > 0 {
		m, bad := maxAVX2(&x[0], n8)
		if bad {
			return false
		}
		mx = m
	}
	for _, v := range x[n8:] {
		if v != v || v > math.MaxFloat32 {
			return false
		}
		mx = max(mx, v)
	}
	ExpSub(x, mx)
	var acc [8]float64
	if n8 > 0 {
		sumF64x8AVX2(&x[0], n8, &acc)
	}
	for i, e := range x[n8:] {
		acc[i] += float64(e)
	}
	for j := 0; j < 4; j++ {
		acc[j] += acc[j+4]
	}
	for j := 0; j < 2; j++ {
		acc[j] += acc[j+2]
	}
	scaleAsm(x, float32(1/(acc[0]+acc[1])))
	return true
}
