package kernels

// geluMulAVX2 (act_amd64.s) is geluMulGo over n elements, n a multiple of
// 8: F16C's VCVTPS2PH with round-to-nearest-even (quant.FP32ToFP16's
// rounding) gives the table index, an 8-lane gather the value. The AVX-512
// path runs it too: a 16-lane gather was no faster on Zen 4 (a gather
// fetches one element per cycle either way).

//go:noescape
func geluMulAVX2(gp, u *float32, n int, t *[1 << 16]float32)

// geluMulSIMD runs the current path's GELU kernel over a prefix of g and
// returns how many elements it did; the caller finishes in Go.
func geluMulSIMD(g, u []float32, t *[1 << 16]float32) int {
	n := len(g) &^ 7
	if n == 0 || CurrentPath() == Generic {
		return 0
	}
	geluMulAVX2(&g[0], &u[0], n, t)
	return n
}
