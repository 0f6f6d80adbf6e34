package kernels

import (
	"encoding/binary"
	"math"

	"sluice/internal/quant"
)

// Q4_1, Q5_0 and Q5_1: the "legacy" 32-element types that Q4_K_M downloads
// use for tensors whose rows are not a multiple of 256. Matvec in
// assembly on the SIMD paths (asm_amd64.go); Q5_0 (and Q4_0) tiles go
// through the Q8_0 tiles (legacytile_amd64.go), Q4_1 and Q5_1 through
// 4-token kernels (one weight unpack serves 4 tokens; legacy4_amd64.go).
// Q5_0 takes Q8_0 activations like Q4_0; Q4_1 and Q5_1 take Q8_1
// activations (Q8_0 plus s = d*Σq), as ggml does, so the offset m enters
// once per block as m*s. Canonical order: Q8_0's 16 even/odd lanes; after
// a block's 8 fused steps, its half's lane 0 adds float32(m_w*s_x).

// quantRowQ8_1 quantizes x to Q8_1 blocks (f16 d, f16 s, int8 qs[32]) as
// ggml's x86 quantize_row_q8_1: d and q exactly as QuantizeRowQ8_0,
// s = f16(d * Σq) with d before its f16 rounding.
func quantRowQ8_1(x []float32, dst []byte) {
	for b := 0; b < len(x)/32; b++ {
		v := x[32*b : 32*b+32]
		blk := dst[36*b : 36*b+36]
		var amax float32
		for _, f := range v {
			amax = max(amax, float32(math.Abs(float64(f))))
		}
		d := amax / 127
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		sum := 0
		for j, f := range v {
			q := int(math.RoundToEven(float64(float32(f * id))))
			blk[4+j] = byte(int8(q))
			sum += q
		}
		binary.LittleEndian.PutUint16(blk, quant.FP32ToFP16(d))
		binary.LittleEndian.PutUint16(blk[2:], quant.FP32ToFP16(d*float32(sum)))
	}
}

func prepareQ8_1(x []float32, nTok, cols int) actBuf {
	nb := cols / 32
	rb := nb * 36
	// One pooled buffer: [dx][blocks]; dx holds every block's (d, s)
	// widened, 2*nb per token, for the 4-token kernels.
	a := newActBytes(8*nTok*nb + nTok*rb)
	a.dx = f32Bytes(a.bytes[:8*nTok*nb])
	blocks := a.bytes[8*nTok*nb:]
	for t := 0; t < nTok; t++ {
		row := blocks[t*rb : (t+1)*rb]
		quantRowQ8_1(x[t*cols:(t+1)*cols], row)
		dx := a.dx[2*t*nb : 2*(t+1)*nb]
		for b := 0; b < nb; b++ {
			dx[2*b], dx[2*b+1] = fp16At(row, 36*b), fp16At(row, 36*b+2)
		}
	}
	a.bytes, a.stride, a.nb = blocks, rb, nb
	return a
}

// legacyBlock decodes weight block b of a row into 32 integers (before the
// scale) and returns the scale d and the offset m (0 for Q5_0).
func legacyBlock(t quant.Type, w []byte, b int, q *[32]int32) (d, m float32) {
	switch t {
	case quant.Q4_1:
		blk := w[20*b : 20*b+20]
		for j := 0; j < 16; j++ {
			q[j] = int32(blk[4+j] & 15)
			q[j+16] = int32(blk[4+j] >> 4)
		}
		return fp16At(blk, 0), fp16At(blk, 2)
	case quant.Q5_0:
		blk := w[22*b : 22*b+22]
		qh := binary.LittleEndian.Uint32(blk[2:])
		for j := 0; j < 16; j++ {
			q[j] = int32(blk[6+j]&15|byte(qh>>j&1)<<4) - 16
			q[j+16] = int32(blk[6+j]>>4|byte(qh>>(j+16)&1)<<4) - 16
		}
		return fp16At(blk, 0), 0
	case quant.Q5_1:
		blk := w[24*b : 24*b+24]
		qh := binary.LittleEndian.Uint32(blk[4:])
		for j := 0; j < 16; j++ {
			q[j] = int32(blk[8+j]&15 | byte(qh>>j&1)<<4)
			q[j+16] = int32(blk[8+j]>>4 | byte(qh>>(j+16)&1)<<4)
		}
		return fp16At(blk, 0), fp16At(blk, 2)
	}
	panic("kernels: not a legacy type")
}

// dotLegacyGeneric: w holds nb blocks of t; x nb Q8_0 (Q5_0) or Q8_1
// (Q4_1, Q5_1) blocks.
func dotLegacyGeneric(t quant.Type, w, x []byte, nb int) float32 {
	xb, xq := 34, 2 // Q8_0: d, qs
	if t != quant.Q5_0 {
		xb, xq = 36, 4 // Q8_1: d, s, qs
	}
	var acc [16]float32
	var q [32]int32
	for b := 0; b < nb; b++ {
		dw, mw := legacyBlock(t, w, b, &q)
		xblk := x[xb*b : xb*b+xb]
		d := dw * fp16At(xblk, 0)
		lanes := acc[8*(b&1) : 8*(b&1)+8]
		for l := 0; l < 8; l++ {
			var s int32
			for k := 4 * l; k < 4*l+4; k++ {
				s += q[k] * int32(int8(xblk[xq+k]))
			}
			lanes[l] = fma32(float32(s), d, lanes[l])
		}
		if t != quant.Q5_0 {
			lanes[0] += float32(mw * fp16At(xblk, 2))
		}
	}
	return reduce16(&acc)
}

func legacyKernel(t quant.Type) typeKernel {
	prep := prepareQ8_1
	if t == quant.Q5_0 {
		prep = prepareQ8_0
	}
	return typeKernel{prepare: prep, rows: genericRows(func(w, x []byte, n int) float32 {
		return dotLegacyGeneric(t, w, x, n/32)
	}, t.BlockBytes(), 32)}
}

// Indexed by Path; the assembly files fill in their entries in init.
var (
	q4_1Kernels = fill3(legacyKernel(quant.Q4_1))
	q5_0Kernels = fill3(legacyKernel(quant.Q5_0))
	q5_1Kernels = fill3(legacyKernel(quant.Q5_1))
)
