package kernels

// RMSNorm's two passes. The sum of squares has a canonical order like the
// dot products' (8 float64 lanes, fixed tree), so that SIMD paths give the
// Generic bits; ggml sums in element order, which is one long chain of
// dependent float64 adds (4 cycles each): at 288 elements that was most of
// rmsNorm, 1.4% of bench-15M-q8_0 prefill. Reordering a float64 sum of
// float32 squares moves it by ~1e-16 relative, far below the float32
// result's rounding.

// SumSquares returns the sum of float64(x[i]*x[i]) (the square rounded to
// float32, as ggml's rms_norm computes it): lane j = i mod 8 adds its
// elements in increasing i, then lanes j += j+4, j += j+2, and lane 0 +
// lane 1.
func SumSquares(x []float32) float64 {
	var acc [8]float64
	n8 := len(x) &^ 7
	if n8 > 0 && CurrentPath() != Generic {
		sumSquaresAsm(x[:n8], &acc)
	} else {
		n8 = 0
	}
	for i := n8; i < len(x); i++ {
		v := x[i]
		acc[i&7] += float64(v * v)
	}
	for j := 0; j < 4; j++ {
		acc[j] += acc[j+4]
	}
	for j := 0; j < 2; j++ {
		acc[j] += acc[j+2]
	}
	return acc[0] + acc[1]
}

// ScaleMul computes y[i] = (x[i]*s)*w[i] for i < len(y), each product
// rounded to float32 (RMSNorm's scaling by the norm and the weights).
func ScaleMul(y, x []float32, s float32, w []float32) {
	x, w = x[:len(y)], w[:len(y)]
	i := 0
	if CurrentPath() != Generic {
		i = len(y) &^ 7
		if i > 0 {
			scaleMulAsm(y[:i], x, s, w)
		}
	}
	for ; i < len(y); i++ {
		y[i] = (x[i] * s) * w[i]
	}
}

// RotatePairs turns each pair (x[2i], x[2i+1]) by the angle whose cosine
// is c[2i] = c[2i+1] and whose sine is s[2i+1] = -s[2i]:
// x[2i], x[2i+1] = x[2i]*c[2i] + x[2i+1]*s[2i], x[2i+1]*c[2i+1] + x[2i]*s[2i+1]
// (RoPE's NORM layout, with the tables expanded per element so that pairs
// need no shuffles of c and s). Each product is rounded, then the sum: the
// same bits as x0*cos - x1*sin and x0*sin + x1*cos. len(c), len(s) >=
// len(x), which is even.
func RotatePairs(x, c, s []float32) {
	c, s = c[:len(x)], s[:len(x)]
	i := 0
	if CurrentPath() != Generic {
		i = len(x) &^ 7
		if i > 0 {
			rotatePairsAsm(x[:i], c, s)
		}
	}
	for ; i+1 < len(x); i += 2 {
		x0, x1 := x[i], x[i+1]
		x[i] = x0*c[i] + x1*s[i]
		x[i+1] = x1*c[i+1] + x0*s[i+1]
	}
}
