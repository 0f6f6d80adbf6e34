package kernels

import (
	"encoding/binary"
	"math"
)

// Q4_K with 8 rows in the lanes (q4KTile8x2AVX2). A row tile's weights are
// repacked once per MatMul call and reused by every pair of tokens, so
// the scales are unpacked and widened once per call instead of once per
// token, and the 8 rows' results leave the kernel in one register with no
// horizontal sums. Per group of 8 rows and super-block, q4k8Block bytes:
//
//	0..1023     qs: for sub-block pair k, element group g (4 elements),
//	            32 bytes: row r's qs[32k+4g .. 32k+4g+3] at 4r (low
//	            nibbles: sub-block 2k, high: 2k+1)
//	1024..1279  scales: sub-block j, 32 bytes: row r's (sc_j, sc_j) int16
//	1280..1535  mins, as the scales
//	1536..1567  d widened, row r at 4r
//	1568..1599  dmin widened
const q4k8Block = 1600

// q4k8MinTok is the smallest call that repacks: below it the 4-token
// kernel (no repacking) is as fast.
const q4k8MinTok = 8

// q4KPack8 packs 8 rows of nsb Q4_K super-blocks (row r at w[r*rb:]).
func q4KPack8(dst, w []byte, rb, nsb int) {
	for b := 0; b < nsb; b++ {
		d := dst[b*q4k8Block : (b+1)*q4k8Block]
		for r := 0; r < 8; r++ {
			blk := w[r*rb+b*144 : r*rb+b*144+144]
			qs := blk[16:144]
			for c := 0; c < 32; c++ { // c = 8k + g: 4 bytes of qs each
				binary.LittleEndian.PutUint32(d[c*32+4*r:], binary.LittleEndian.Uint32(qs[4*c:]))
			}
			for j := 0; j < 8; j++ {
				sc, m := q4KScaleMin(blk[4:16], j)
				binary.LittleEndian.PutUint32(d[1024+32*j+4*r:], uint32(sc)|uint32(sc)<<16)
				binary.LittleEndian.PutUint32(d[1280+32*j+4*r:], uint32(m)|uint32(m)<<16)
			}
			binary.LittleEndian.PutUint32(d[1536+4*r:], math.Float32bits(fp16At(blk, 0)))
			binary.LittleEndian.PutUint32(d[1568+4*r:], math.Float32bits(fp16At(blk, 2)))
		}
	}
}

// q4_KTiles8 returns the tiles function of Q4_K on the SIMD paths: for
// calls of q4k8MinTok tokens or more, rows [0, nRows/8*8) with the packed
// 8-row kernel for every pair of tokens and the 4 rows up to
// nRows/tileRows*tileRows left over with the per-row kernel; smaller calls
// (and tiles of fewer than 8 rows) go to the path's 4-token kernel small.
// (The 8-row kernel is AVX2 code; on the AVX-512 path it beats the
// AVX-512 4-token kernel too: 110 vs 69 GFLOP/s at 2048x768 x 64 tokens.)
func q4_KTiles8(small func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int) func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		nsb := act.stride / 292
		if nTok < q4k8MinTok || nsb == 0 || nRows < 8 {
			return small(out, outStride, w, nRows, act, nTok)
		}
		return q4_KTiles8Run(out, outStride, w, nRows, act, nTok, nsb)
	}
}

func q4_KTiles8Run(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok, nsb int) int {
	n8 := nRows / 8 * 8
	nt := nTok / 2 * 2
	rb := 144 * nsb
	if len(w) < rb*nRows || len(act.bytes) < nt*act.stride || len(out) < (nt-1)*outStride+nRows {
		panic("kernels: bad Q4_K tile")
	}
	need := n8 / 8 * nsb * q4k8Block
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	wp := (*bp)[:need]
	for g := 0; g < n8/8; g++ {
		q4KPack8(wp[g*nsb*q4k8Block:], w[g*8*rb:], rb, nsb)
	}
	for t0 := 0; t0 < nt; t0 += 2 {
		q4KTile8x2AVX2(&out[t0*outStride], outStride, &wp[0], n8/8, &act.bytes[t0*act.stride], act.stride, nsb)
	}
	packPool.Put(bp)
	if n4 := nRows / tileRows * tileRows; n4 > n8 {
		for t := 0; t < nt; t++ {
			q4_KRowsAsm(out[t*outStride+n8:t*outStride+n4], w[n8*rb:n4*rb], act, t)
		}
	}
	return nt
}
