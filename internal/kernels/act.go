package kernels

import "math"

// Activations for the forward pass. SiLUMul and ExpSub are element-wise
// and Softmax reduces one row in an order fixed by its length alone, so
// batch invariance is automatic; the assembly reproduces the Go code
// operation for operation, so every path gives the same bits.

// expf is e^x in float32 within 2 ulp: Cephes expf (x = n*ln2 + r,
// |r| <= ln2/2, degree-6 polynomial, scale by 2^n through the exponent
// bits, in two steps near the ends of the range). Softmax and SwiGLU in
// the forward pass run on it; its results are part of the model's logits,
// so any change to it must leave TestExpfRoundsHalfAwayFromZero and the
// reference logits bitwise as they are.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
		hi    = 88.72283905206835
		lo    = -103.97207708
	)
	switch {
	case x != x:
		return x
	case x > hi:
		return float32(math.Inf(1))
	case x < lo:
		return 0
	}
	// n = round(x*log2e), half away from zero (not half up: on the few
	// negative x where z+0.5 lands on an integer, rounding up leaves |r|
	// just above ln2/2 and the result 1 ulp further from e^x).
	z := x * log2e
	var ni int32
	if z >= 0 {
		ni = int32(z + 0.5)
	} else {
		ni = int32(z - 0.5)
	}
	n := float32(ni)
	r := x - float32(n*ln2hi)
	r = r - float32(n*ln2lo)
	p := float32(1.9875691500e-4)
	p = float32(p*r) + 1.3981999507e-3
	p = float32(p*r) + 8.3334519073e-3
	p = float32(p*r) + 4.1665795894e-2
	p = float32(p*r) + 1.6666665459e-1
	p = float32(p*r) + 5.0000001201e-1
	y := float32(float32(p*r)*r) + r + 1
	if ni < -126 {
		y *= math.Float32frombits(uint32(ni+126+127) << 23)
		return y * math.Float32frombits(uint32(1)<<23) // 2^-126
	}
	if ni > 127 {
		return y * 2 * math.Float32frombits(uint32(ni-1+127)<<23)
	}
	return y * math.Float32frombits(uint32(ni+127)<<23)
}

// expConsts feeds the assembly the same float32 constants the Go code
// rounds its untyped constants to.
var expConsts = [...]float32{
	1.44269504088896341, 0.5, 0.693359375, -2.12194440e-4,
	1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
	1.6666665459e-1, 5.0000001201e-1, 1, 88.72283905206835,
	-103.97207708, float32(math.Inf(1)), 2, 0,
}

// SiLUMul computes g[i] = g[i] / (1 + e^-g[i]) * u[i] (SwiGLU: SiLU of the
// gate times the up projection), e^ as expf. len(u) >= len(g).
func SiLUMul(g, u []float32) {
	u = u[:len(g)]
	if len(g) == 0 {
		return
	}
	i := 0
	switch CurrentPath() {
	case AVX512:
		siluMulAVX512(&g[0], &u[0], len(g), &expConsts[0])
		return
	case AVX2:
		// 8 lanes at a time; the tail in Go, which gives the same bits.
		i = len(g) &^ 7
		siluMulAVX2(&g[0], &u[0], i, &expConsts[0])
	}
	for ; i < len(g); i++ {
		x := g[i]
		g[i] = x / (1 + expf(-x)) * u[i]
	}
}

// ExpSub computes x[i] = e^(x[i] - m) (softmax's numerator with m the
// row's maximum), e^ as expf.
func ExpSub(x []float32, m float32) {
	if len(x) == 0 {
		return
	}
	i := 0
	switch CurrentPath() {
	case AVX512:
		expSubAVX512(&x[0], len(x), m, &expConsts[0])
		return
	case AVX2:
		i = len(x) &^ 7
		expSubAVX2(&x[0], i, m, &expConsts[0])
	}
	for ; i < len(x); i++ {
		x[i] = expf(x[i] - m)
	}
}

// Softmax normalises x in place: e^(x[i] - max) as expf, summed in float64
// over 8 lanes in a fixed order (element i into lane i%8; then lanes j+4,
// j+2, j+1 folded in), then scaled by float32(1/sum). ggml also sums in
// double; the fixed lanes let the AVX-512 version give the same bits, and
// the order depends only on len(x), never on the batch or the thread
// count, which keeps attention batch invariant.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	// The assembly refuses (leaving x untouched) a row holding NaN or
	// +Inf, whose max and sum the Go code defines.
	if CurrentPath() == AVX512 && softmaxAVX512(&x[0], len(x), &expConsts[0]) {
		return
	}
	if CurrentPath() == AVX2 && softmaxAVX2(x) {
		return
	}
	softmaxGo(x)
}

// normalizeSum8 divides x by its sum in softmax's canonical order: float64
// sums in 8 lanes (element i into lane i%8), then lanes j += j+4, j += j+2
// and 0 + 1, and one multiply by the float32 reciprocal.
func normalizeSum8(x []float32) {
	var acc [8]float64
	for i, e := range x {
		acc[i%8] += float64(e)
	}
	for j := 0; j < 4; j++ {
		acc[j] += acc[j+4]
	}
	for j := 0; j < 2; j++ {
		acc[j] += acc[j+2]
	}
	inv := float32(1 / (acc[0] + acc[1]))
	for i := range x {
		x[i] *= inv
	}
}

func softmaxGo(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	ExpSub(x, mx)
	normalizeSum8(x)
}
