package quant

import "math"

// FP16ToFP32 widens an IEEE 754 binary16 value. The conversion is exact for
// every input (subnormals, infinities and NaN payloads included), as F16C's
// vcvtph2ps is.
func FP16ToFP32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		// Inf or NaN: keep the payload in the top mantissa bits.
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	default:
		// Subnormal half: normalise into a float32 normal.
		e := uint32(113)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
}

// FP32ToFP16 narrows to binary16 with round-to-nearest-even, overflow to
// infinity and gradual underflow, bit-for-bit what F16C's vcvtps2ph (and so
// ggml's GGML_FP32_TO_FP16 on x86) produces. NaNs stay NaN (made quiet).
func FP32ToFP16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 31 {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			// Below half the smallest subnormal (2^-25): rounds to zero.
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		q := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && q&1 == 1) {
			q++ // may carry into the smallest normal, which is correct
		}
		return sign | uint16(q)
	}
	q := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && q&1 == 1) {
		q++ // a carry into the exponent rounds up to the next binade or to inf
	}
	return sign | uint16(q)
}

// BF16ToFP32 widens a bfloat16 (the top half of a float32).
func BF16ToFP32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FP32ToBF16 narrows to bfloat16 the way ggml's ggml_compute_fp32_to_bf16
// does: round-to-nearest-even on the dropped 16 bits, NaN forced quiet
// (bit 6 of the result set) so rounding can never turn it into infinity.
// Subnormal inputs keep their rounded value; AVX512_BF16's vcvtneps2bf16,
// which ggml uses for activations on such CPUs, flushes them to zero
// instead (a difference only below 1.2e-38).
func FP32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + (u>>16)&1)) >> 16)
}
