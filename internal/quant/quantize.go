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
