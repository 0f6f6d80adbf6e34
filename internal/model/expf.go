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
	// Every product is rounded on its own (float32(...)): the compiler may
	// not fuse it into an FMA, so this and the assembly (expf_amd64.s, the
	// same operations in the same order) agree bit for bit.
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

// expSubInPlace sets x[i] = expf(x[i] - m).
func expSubInPlace(x []float32, m float32) {
	for i := range x {
		x[i] -= m
	}
	for i := 0; i < len(x); {
		if useAVX512() {
			i += expBlocksAVX512(x[i:])
			if i >= len(x) {
				break
			}
		}
		// The tail, or a block the assembly leaves to the exact Go path.
		end := min(len(x), i+16)
		for ; i < end; i++ {
			x[i] = expf(x[i])
		}
	}
}

// swiglu: g = silu(g) * u, with silu(x) = x / (1 + e^-x) as ggml computes it.
func swiglu(g, u []float32) {
	u = u[:len(g)]
	for i := 0; i < len(g); {
		if useAVX512() {
			i += swigluBlocksAVX512(g[i:], u[i:])
			if i >= len(g) {
				break
			}
		}
		end := min(len(g), i+16)
		for ; i < end; i++ {
			x := g[i]
			g[i] = x / (1 + expf(-x)) * u[i]
		}
	}
}
