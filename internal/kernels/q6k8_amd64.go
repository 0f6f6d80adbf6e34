package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// Q6_K with 8 rows in the lanes of a YMM register (q6KTile8x4AVX2), as
// q4k8_amd64.go does for Q4_K: a row tile is repacked once per call and
// reused by every group of 4 tokens (the 6-bit decode is shared by 4). Per group of 8 rows and super-block,
// q6k8Block bytes; "interleaved" means 32 bytes per 4-byte group, row r's
// 4 bytes at 4r:
//
//	0..511      ql bytes 64h+4c..+3 (half h, group c = 0..7), interleaved
//	512..1023   ql bytes 64h+32+4c..+3, interleaved
//	1024..1535  qh bytes 32h+4c..+3, interleaved
//	1536..2047  scales: sub-block g, 32 bytes: row r's (sc_g, sc_g) int16
//	2048..2303  bsum scales: pair m, 32 bytes: row r's (sc_2m, sc_2m+1)
//	2304..2335  d widened
const q6k8Block = 2336

// q6KPack8 packs 8 rows of nsb Q6_K super-blocks (row r at w[r*rb:]).
func q6KPack8(dst, w []byte, rb, nsb int) {
	for b := 0; b < nsb; b++ {
		d := dst[b*q6k8Block : (b+1)*q6k8Block]
		_ = d[q6k8Block-1]
		for r := 0; r < 8; r++ {
			blk := w[r*rb+b*210 : r*rb+b*210+210]
			base := unsafe.Pointer(&d[4*r])
			ql := (*[32]uint32)(unsafe.Pointer(&blk[0]))
			qh := (*[16]uint32)(unsafe.Pointer(&blk[128]))
			for h := 0; h < 2; h++ {
				for c := 0; c < 8; c++ {
					i := 8*h + c
					*(*uint32)(unsafe.Add(base, 32*i)) = ql[16*h+c]
					*(*uint32)(unsafe.Add(base, 512+32*i)) = ql[16*h+8+c]
					*(*uint32)(unsafe.Add(base, 1024+32*i)) = qh[8*h+c]
				}
			}
			for g := 0; g < 16; g++ {
				sc := uint32(uint16(int16(int8(blk[192+g]))))
				binary.LittleEndian.PutUint32(d[1536+32*g+4*r:], sc|sc<<16)
			}
			for m := 0; m < 8; m++ {
				s0 := uint32(uint16(int16(int8(blk[192+2*m]))))
				s1 := uint32(uint16(int16(int8(blk[193+2*m]))))
				binary.LittleEndian.PutUint32(d[2048+32*m+4*r:], s0|s1<<16)
			}
			binary.LittleEndian.PutUint32(d[2304+4*r:], math.Float32bits(fp16At(blk, 208)))
		}
	}
}

// q6_KTilesLanes is the Q6_K tiles function on the SIMD paths: calls of
// q4k8MinTok tokens or more run rows [0, nRows/8*8) through the packed
// 8-row kernel for every group of 4 tokens and the 4 rows up to
// nRows/tileRows*tileRows left over through the per-row kernel; smaller
// calls go to the 4-token kernel.
func q6_KTilesLanes(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	nsb := act.stride / 292
	if nTok < q4k8MinTok || nsb == 0 || nRows < 8 {
		return q6_KTilesAVX2(out, outStride, w, nRows, act, nTok)
	}
	n8 := nRows / 8 * 8
	nt := nTok / 4 * 4
	rb := 210 * nsb
	if len(w) < rb*nRows || len(act.bytes) < nt*act.stride || len(out) < (nt-1)*outStride+nRows {
		panic("kernels: bad Q6_K tile")
	}
	need := n8 / 8 * nsb * q6k8Block
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	wp := (*bp)[:need]
	for g := 0; g < n8/8; g++ {
		q6KPack8(wp[g*nsb*q6k8Block:], w[g*8*rb:], rb, nsb)
	}
	for t0 := 0; t0 < nt; t0 += 4 {
		q6KTile8x4AVX2(&out[t0*outStride], outStride, &wp[0], n8/8, &act.bytes[t0*act.stride], act.stride, nsb)
	}
	packPool.Put(bp)
	if n4 := nRows / tileRows * tileRows; n4 > n8 {
		for t := 0; t < nt; t++ {
			q6_KRowsAsm(out[t*outStride+n8:t*outStride+n4], w[n8*rb:n4*rb], act, t)
		}
	}
	return nt
}
