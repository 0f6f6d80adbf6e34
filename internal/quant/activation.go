package quant

import (
	"encoding/binary"
	"math"
)

// Q8_KBlockBytes is the size of one Q8_K block.
//
// Q8_K layout (256 elements, 292 bytes, little-endian), as ggml's block_q8_K:
//
//	bytes   0..3    float32 d        scale: element j = qs[j] * d
//	bytes   4..259  int8 qs[256]     quantized values, in element order
//	bytes 260..291  int16 bsums[16]  bsums[i] = sum of qs[16*i .. 16*i+15]
//
// bsums let K-quant dot products apply per-sub-block mins without a second
// pass over qs.
const Q8_KBlockBytes = 292

// Q8_0BlockBytes is the size of one Q8_0 block: f16 d, int8 qs[32].
const Q8_0BlockBytes = 34

// QuantizeRowQ8_0 quantizes an activation row to Q8_0 exactly as ggml's
// CPU backend does on x86 (quantize_row_q8_0, the AVX2 path llama.cpp runs
// on this project's machines) before a Q8_0/Q4_0 dot product:
//
//	amax = max |x|;  d = amax/127 stored as f16;  id = 127/amax (0 if amax == 0)
//	q = round-half-to-even(x * id)
//
// This differs from the portable quantize_row_q8_0_ref (id = 1/d, roundf,
// used by Quantize for files) in the last bit of id and on exact ties.
// len(src) must be a multiple of 32 and len(dst) = len(src)/32*34; it
// panics otherwise, as a kernel's programming error.
func QuantizeRowQ8_0(src []float32, dst []byte) {
	if len(src)%32 != 0 || len(dst) != len(src)/32*Q8_0BlockBytes {
		panic("quant.QuantizeRowQ8_0: length mismatch")
	}
	for i := 0; i < len(src)/32; i++ {
		x := src[i*32 : (i+1)*32]
		b := dst[i*Q8_0BlockBytes : (i+1)*Q8_0BlockBytes]
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		binary.LittleEndian.PutUint16(b, FP32ToFP16(d))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for j, v := range x {
			// float32(...) stops the compiler fusing into an FMA; the
			// product must be rounded to float32 before rounding to int.
			// nearestInt rounds half to even, as _mm256_round_ps does.
			p := float32(v * id)
			b[2+j] = byte(int8(nearestInt(p)))
		}
	}
}

// QuantizeRowQ8_K quantizes an activation row to Q8_K exactly as ggml's
// quantize_row_q8_K_ref (which x86 uses as is): per block of 256, the
// element of largest magnitude (first one on ties) sets iscale = -127/max,
// q = min(127, nearest_int(iscale*x)) with ties to even, d = 1/iscale, and
// bsums are sums of 16 consecutive q. An all-zero block has d = 0, q = 0,
// bsums = 0. len(src) must be a multiple of 256 and len(dst) =
// len(src)/256*292; it panics otherwise.
func QuantizeRowQ8_K(src []float32, dst []byte) {
	if len(src)%QK_K != 0 || len(dst) != len(src)/QK_K*Q8_KBlockBytes {
		panic("quant.QuantizeRowQ8_K: length mismatch")
	}
	for i := 0; i < len(src)/QK_K; i++ {
		x := src[i*QK_K : (i+1)*QK_K]
		b := dst[i*Q8_KBlockBytes : (i+1)*Q8_KBlockBytes]
		var amax, mx float32
		for _, v := range x {
			if a := abs32(v); a > amax {
				amax, mx = a, v
			}
		}
		if amax == 0 {
			for k := range b {
				b[k] = 0
			}
			continue
		}
		iscale := -127 / mx
		for j, v := range x {
			q := min(127, nearestInt(float32(iscale*v)))
			b[4+j] = byte(int8(q))
		}
		for s := 0; s < 16; s++ {
			sum := 0
			for _, q := range b[4+16*s : 4+16*s+16] {
				sum += int(int8(q))
			}
			binary.LittleEndian.PutUint16(b[260+2*s:], uint16(int16(sum)))
		}
		binary.LittleEndian.PutUint32(b, math.Float32bits(1/iscale))
	}
}
