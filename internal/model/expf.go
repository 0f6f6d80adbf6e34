package model

import "math"

// expf is e^x in float32 to within 2 ulp (the test checks it against
// math.Exp), several times cheaper than math.Exp on float64. Softmax and
// SiLU call it millions of times per step; ggml likewise uses its own
// vectorised expf rather than libm there. It is a pure function of x, so
// it cannot break batch invariance.
//
// Method (Cephes expf): x = n*ln2 + r with |r| <= ln2/2, e^r by a degree-6
// polynomial, then scale by 2^n through the exponent bits.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
		hi    = 88.72283905206835
		lo    = -103.97207708
	)
	if !(x >= lo) { // NaN, or so small the result underflows
		if x != x {
			return x
		}
		return 0
	}
	if x > hi {
		return float32(math.Inf(1))
	}
	// n = round(x*log2e), half away from zero: |r| stays within ln2/2
	// (plus rounding), where the polynomial is accurate.
	z := x * log2e
	var ni int32
	if z >= 0 {
		ni = int32(z + 0.5)
	} else {
		ni = int32(z - 0.5)
	}
	n := float32(ni)
	r := x - n*ln2hi
	r = r - n*ln2lo
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	// 2^n may be outside the normal range for the smallest results; split
	// the scaling in two so subnormals come out right.
	if ni < -126 {
		y *= math.Float32frombits(uint32(ni+126+127) << 23)
		return y * math.Float32frombits(uint32(1)<<23) // 2^-126
	}
	if ni > 127 {
		return y * 2 * math.Float32frombits(uint32(ni-1+127)<<23)
	}
	return y * math.Float32frombits(uint32(ni+127)<<23)
}
