package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src into dst as type t (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K). dst must be exactly the size of
// len(src) elements of t. The block quantizers are reference quality (close
// to ggml's *_ref routines, without importance weighting): every block is a
// valid ggml block and round-trips through Dequantize with an error bounded
// by the type's step size.
func Quantize(t Type, src []float32, dst []byte) error {
	if err := checkLens("quantize", t, len(dst), len(src)); err != nil {
		return err
	}
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], FP32ToFP16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], FP32ToBF16(v))
		}
	case Q8_0:
		forBlocks(t, src, dst, quantBlockQ8_0Ref)
	case Q4_0:
		forBlocks(t, src, dst, quantBlockQ4_0)
	case Q4_1:
		forBlocks(t, src, dst, quantBlockQ4_1)
	case Q5_0:
		forBlocks(t, src, dst, quantBlockQ5_0)
	case Q5_1:
		forBlocks(t, src, dst, quantBlockQ5_1)
	case Q4_K:
		forBlocks(t, src, dst, quantBlockQ4_K)
	case Q5_K:
		forBlocks(t, src, dst, quantBlockQ5_K)
	case Q6_K:
		forBlocks(t, src, dst, quantBlockQ6_K)
	case Q8_K:
		QuantizeRowQ8_K(src, dst)
	default:
		return &Error{Code: ErrUnsupportedType, Msg: fmt.Sprintf("quantize: no quantizer for type %s", t)}
	}
	return nil
}

func forBlocks(t Type, src []float32, dst []byte, fn func(x []float32, b []byte)) {
	bs, bb := t.BlockSize(), t.BlockBytes()
	for i := 0; i < len(src)/bs; i++ {
		fn(src[i*bs:(i+1)*bs], dst[i*bb:(i+1)*bb])
	}
}

func putF16(b []byte, off int, f float32) { binary.LittleEndian.PutUint16(b[off:], FP32ToFP16(f)) }

// roundAway is C's roundf: halfway cases away from zero.
func roundAway(x float32) int { return int(math.Round(float64(x))) }

// nearestInt is ggml's nearest_int: adding 1.5*2^23 in float32 arithmetic
// rounds to the nearest integer with ties to even (the FPU's mode), which
// differs from roundf on exact halves. Valid for |x| <= 2^22.
func nearestInt(x float32) int {
	v := x + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// quantBlockQ8_0Ref is ggml's quantize_row_q8_0_ref (what llama-quantize
// writes into files): d = amax/127, q = roundf(x * (1/d)).
func quantBlockQ8_0Ref(x []float32, b []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, 0, d)
	for j, v := range x {
		b[2+j] = byte(int8(roundAway(float32(v * id))))
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

// quantBlockQ4_0 follows quantize_row_q4_0_ref: the value of largest
// magnitude maps to -8 exactly, so the sign of d follows it.
func quantBlockQ4_0(x []float32, b []byte) {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, 0, d)
	for j := 0; j < 16; j++ {
		x0 := min(15, int(int8(float32(x[j]*id)+8.5)))
		x1 := min(15, int(int8(float32(x[j+16]*id)+8.5)))
		b[2+j] = byte(x0) | byte(x1)<<4
	}
}

// quantBlockQ4_K and quantBlockQ5_K: per 32-element sub-block an affine
// range [min, max] (min clipped to <= 0, as ggml does) gives a scale and a
// min; those are quantized to 6 bits against the block's d and dmin, and
// the elements are quantized against the quantized scale/min so encode and
// decode agree.
func quantBlockQ4_K(x []float32, b []byte) { quantBlockKAffine(x, b, 15) }
func quantBlockQ5_K(x []float32, b []byte) { quantBlockKAffine(x, b, 31) }

func quantBlockKAffine(x []float32, b []byte, nmax int) {
	var scales, mins [8]float32
	for s := 0; s < 8; s++ {
		sub := x[s*32 : (s+1)*32]
		lo, hi := float32(0), sub[0]
		for _, v := range sub {
			lo = min(lo, v)
			hi = max(hi, v)
		}
		hi = max(hi, lo)
		scales[s] = (hi - lo) / float32(nmax)
		mins[s] = -lo
	}
	var maxScale, maxMin float32
	for s := 0; s < 8; s++ {
		maxScale = max(maxScale, scales[s])
		maxMin = max(maxMin, mins[s])
	}
	for i := range b {
		b[i] = 0
	}
	// Use the f16-rounded values so element quantization sees what decode sees.
	putF16(b, 0, maxScale/63)
	putF16(b, 2, maxMin/63)
	d, dmin := f16at(b, 0), f16at(b, 2)
	var ls, lm [8]uint8
	for s := 0; s < 8; s++ {
		if d > 0 {
			ls[s] = uint8(min(63, max(0, nearestInt(scales[s]/d))))
		}
		if dmin > 0 {
			// Round the min up so the sub-block's lowest value stays in range.
			lm[s] = uint8(min(63, max(0, int(math.Ceil(float64(mins[s]/dmin))))))
		}
	}
	sc := b[4:16]
	for j := 0; j < 8; j++ {
		if j < 4 {
			sc[j] = ls[j]
			sc[j+4] = lm[j]
		} else {
			sc[j+4] = ls[j]&0xf | lm[j]<<4
			sc[j-4] |= ls[j] >> 4 << 6
			sc[j] |= lm[j] >> 4 << 6
		}
	}
	q := b[16:144]
	var qh []byte
	if nmax == 31 {
		qh = b[16:48]
		q = b[48:176]
	}
	for s := 0; s < 8; s++ {
		dl := d * float32(ls[s])
		ml := dmin * float32(lm[s])
		for l := 0; l < 32; l++ {
			v := 0
			if dl != 0 {
				v = min(nmax, max(0, nearestInt((x[s*32+l]+ml)/dl)))
			}
			// Sub-blocks 2k and 2k+1 share bytes 32k..32k+31: low then high
			// nibble; Q5_K's fifth bit of sub-block s is bit s of qh[l].
			idx := (s/2)*32 + l
			if s%2 == 0 {
				q[idx] |= byte(v & 15)
			} else {
				q[idx] |= byte(v&15) << 4
			}
			if qh != nil && v >= 16 {
				qh[l] |= 1 << s
			}
		}
	}
}

// quantBlockQ4_1 follows quantize_row_q4_1_ref: d = (max-min)/15, m = min.
func quantBlockQ4_1(x []float32, b []byte) {
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	d := (hi - lo) / 15
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, 0, d)
	putF16(b, 2, lo)
	for j := 0; j < 16; j++ {
		x0 := min(15, int(int8(float32((x[j]-lo)*id)+0.5)))
		x1 := min(15, int(int8(float32((x[j+16]-lo)*id)+0.5)))
		b[4+j] = byte(x0) | byte(x1)<<4
	}
}

// quantBlockQ5_0 follows quantize_row_q5_0_ref: the largest-magnitude
// value maps to -16.
func quantBlockQ5_0(x []float32, b []byte) {
	var amax, mx float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, mx = a, v
		}
	}
	d := mx / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, 0, d)
	var qh uint32
	for j := 0; j < 16; j++ {
		x0 := min(31, int(int8(float32(x[j]*id)+16.5)))
		x1 := min(31, int(int8(float32(x[j+16]*id)+16.5)))
		b[6+j] = byte(x0&15) | byte(x1&15)<<4
		qh |= uint32(x0>>4&1)<<j | uint32(x1>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(b[2:], qh)
}

// quantBlockQ5_1 follows quantize_row_q5_1_ref: d = (max-min)/31, m = min.
func quantBlockQ5_1(x []float32, b []byte) {
	lo, hi := x[0], x[0]
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	d := (hi - lo) / 31
	var id float32
	if d != 0 {
		id = 1 / d
	}
	putF16(b, 0, d)
	putF16(b, 2, lo)
	var qh uint32
	for j := 0; j < 16; j++ {
		x0 := min(31, int(uint8(float32((x[j]-lo)*id)+0.5)))
		x1 := min(31, int(uint8(float32((x[j+16]-lo)*id)+0.5)))
		b[8+j] = byte(x0&15) | byte(x1&15)<<4
		qh |= uint32(x0>>4&1)<<j | uint32(x1>>4&1)<<(j+16)
	}
	binary.LittleEndian.PutUint32(b[4:], qh)
}

// quantBlockQ6_K: per 16-element sub-block a signed scale mapping the
// largest-magnitude value to -32 (as ggml's make_qx_quants with nmax 32),
// scales quantized to int8 against d, elements re-quantized against the
// quantized scale.
func quantBlockQ6_K(x []float32, b []byte) {
	var scales [16]float32
	var maxScale, amaxScale float32
	for s := 0; s < 16; s++ {
		var amax, mx float32
		for _, v := range x[s*16 : (s+1)*16] {
			if a := abs32(v); a > amax {
				amax, mx = a, v
			}
		}
		scales[s] = mx / -32
		if a := abs32(scales[s]); a > amaxScale {
			amaxScale, maxScale = a, scales[s]
		}
	}
	for i := range b {
		b[i] = 0
	}
	ql := b[0:128]
	qh := b[128:192]
	sc := b[192:208]
	if amaxScale == 0 {
		return
	}
	iscale := -128 / maxScale
	putF16(b, 208, 1/iscale)
	d := f16at(b, 208)
	var ls [16]int
	for s := 0; s < 16; s++ {
		ls[s] = min(127, nearestInt(iscale*scales[s]))
		sc[s] = byte(int8(ls[s]))
	}
	var L [QK_K]int
	for s := 0; s < 16; s++ {
		dl := d * float32(ls[s])
		for l := 0; l < 16; l++ {
			v := 0
			if dl != 0 {
				v = max(-32, min(31, nearestInt(x[s*16+l]/dl)))
			}
			L[s*16+l] = v + 32
		}
	}
	for n := 0; n < QK_K; n += 128 {
		for l := 0; l < 32; l++ {
			q1 := L[n+l]
			q2 := L[n+l+32]
			q3 := L[n+l+64]
			q4 := L[n+l+96]
			ql[n/2+l] = byte(q1&0xf | (q3&0xf)<<4)
			ql[n/2+l+32] = byte(q2&0xf | (q4&0xf)<<4)
			qh[n/4+l] = byte(q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6)
		}
	}
}
