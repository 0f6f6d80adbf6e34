package kernels

import (
	"math"
	"unsafe"
)

// Q4_K with rows in the lanes: 8 rows per YMM register (q4KTile8x2AVX2)
// or 16 per ZMM register (q4KTile16x2AVX512). A row tile's weights are
// repacked once per MatMul call and reused by every pair of tokens, so
// the scales are unpacked and widened once per call instead of once per
// token, and the rows' results leave the kernel in one register with no
// horizontal sums. Per group of R rows and super-block, 200*R bytes:
//
//	0 .. 128R      qs: for sub-block pair k, element group g (4 elements),
//	               4R bytes: row r's qs[32k+4g .. 32k+4g+3] at 4r (low
//	               nibbles: sub-block 2k, high: 2k+1)
//	128R .. 160R   scales: sub-block j, 4R bytes: row r's (sc_j, sc_j) int16
//	160R .. 192R   mins, as the scales
//	192R .. 196R   d widened, row r at 4r
//	196R .. 200R   dmin widened

// q4k8MinTok is the smallest call that repacks: below it the 4-token
// kernel (no repacking) is as fast.
const q4k8MinTok = 8

// q4KPack packs R rows of nsb Q4_K super-blocks (row r at w[r*rb:]).
// It is the layout's specification and the fallback of q4KPackAVX2
// (q4kpack_amd64.s, the same bytes; q4KPackRows picks), which replaced
// it in the tiles: 2048 columns, 8 rows, cache-warm, Zen 3: 2.9 us Go,
// 0.23 us assembly; tinyllama-q4_K pp128, 1 thread: 11-14% of prefill
// CPU -> ~3%. Its inner copy avoids bounds checks (the slices' lengths
// are checked once per block).
func q4KPack(dst, w []byte, R, rb, nsb int) {
	bb := 200 * R
	for b := 0; b < nsb; b++ {
		d := dst[b*bb : (b+1)*bb]
		for r := 0; r < R; r++ {
			blk := w[r*rb+b*144 : r*rb+b*144+144]
			qs := (*[32]uint32)(unsafe.Pointer(&blk[16]))
			base := unsafe.Pointer(&d[4*r])
			_ = d[31*4*R+4*r+3]
			for c := 0; c < 32; c++ { // c = 8k + g: 4 bytes of qs each
				*(*uint32)(unsafe.Add(base, c*4*R)) = qs[c]
			}
			// The 8 (scale, min) pairs as q4KScaleMin unpacks them, stored
			// without per-store bounds checks (d's length is checked below).
			s := (*[12]byte)(blk[4:16])
			_ = d[196*R+4*r+3]
			for j := 0; j < 4; j++ {
				sc, m := uint32(s[j]&63), uint32(s[j+4]&63)
				*(*uint32)(unsafe.Add(base, 128*R+4*R*j)) = sc | sc<<16
				*(*uint32)(unsafe.Add(base, 160*R+4*R*j)) = m | m<<16
				sc = uint32(s[j+8]&0xF | (s[j]>>6)<<4)
				m = uint32(s[j+8]>>4 | (s[j+4]>>6)<<4)
				*(*uint32)(unsafe.Add(base, 128*R+4*R*(j+4))) = sc | sc<<16
				*(*uint32)(unsafe.Add(base, 160*R+4*R*(j+4))) = m | m<<16
			}
			*(*uint32)(unsafe.Add(base, 192*R)) = math.Float32bits(fp16At(blk, 0))
			*(*uint32)(unsafe.Add(base, 196*R)) = math.Float32bits(fp16At(blk, 2))
		}
	}
}

//go:noescape
func q4KPackAVX2(dst, w *byte, R, rb, nsb int)

// q4KPackAsm selects q4KPackAVX2 (q4kpack_amd64.s) over the Go packer;
// a var so that tests can take either.
var q4KPackAsm = hasAVX2

// q4KPackRows is q4KPack through the assembly packer when there is one
// (the same bytes; Go stays the specification and the fallback).
func q4KPackRows(dst, w []byte, R, rb, nsb int) {
	if !q4KPackAsm || nsb < 1 || (R != 8 && R != 16) {
		q4KPack(dst, w, R, rb, nsb)
		return
	}
	if rb < 0 || len(dst) < 200*R*nsb || len(w) < (R-1)*rb+144*nsb {
		panic("kernels: bad Q4_K pack")
	}
	q4KPackAVX2(&dst[0], &w[0], R, rb, nsb)
}

type tilesFunc = func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int

// q4_KTilesLanes returns the tiles function of Q4_K on a SIMD path: for
// calls of q4k8MinTok tokens or more, rows [0, nRows/8*8) with the packed
// rows-in-lanes kernels for every pair of tokens (16-row groups on
// AVX-512 when wide, then 8-row groups) and the 4 rows up to
// nRows/tileRows*tileRows left over with the per-row kernel; smaller calls
// (and tiles of fewer than 8 rows) go to the path's 4-token kernel small.
// 2048x768 x 64 tokens, 1 thread, CPU time: AVX2 4-token kernel 70
// GFLOP/s, 8-row 110.
func q4_KTilesLanes(small tilesFunc, wide bool) tilesFunc {
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		nsb := act.stride / 292
		if nTok < q4k8MinTok || nsb == 0 || nRows < 8 {
			return small(out, outStride, w, nRows, act, nTok)
		}
		return q4_KTilesLanesRun(out, outStride, w, nRows, act, nTok, nsb, wide)
	}
}

func q4_KTilesLanesRun(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok, nsb int, wide bool) int {
	n16 := 0
	if wide {
		n16 = nRows / 16 * 16
	}
	n8 := n16 + (nRows-n16)/8*8
	nt := nTok / 2 * 2
	rb := 144 * nsb
	if len(w) < rb*nRows || len(act.bytes) < nt*act.stride || len(out) < (nt-1)*outStride+nRows {
		panic("kernels: bad Q4_K tile")
	}
	need := n8 * nsb * 200
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	wp := (*bp)[:need]
	for g := 0; g < n16/16; g++ {
		q4KPackRows(wp[g*16*nsb*200:], w[g*16*rb:], 16, rb, nsb)
	}
	for r := n16; r < n8; r += 8 {
		q4KPackRows(wp[r*nsb*200:], w[r*rb:], 8, rb, nsb)
	}
	steps := nt / 2
	if n16 > 0 {
		steps = ceilDiv(nt, 4)
	}
	pf := newRowPrefetch(w[:rb*nRows], steps)
	if n16 > 0 {
		// 4 tokens at a time (one nibble unpack serves 4), a last pair
		// with the 2-token kernel.
		t0 := 0
		for ; t0+4 <= nt; t0 += 4 {
			pf.step()
			q4KTile16x4VNNI(&out[t0*outStride], outStride, &wp[0], n16/16, &act.bytes[t0*act.stride], act.stride, nsb)
		}
		if t0 < nt {
			pf.step()
			q4KTile16x2AVX512(&out[t0*outStride], outStride, &wp[0], n16/16, &act.bytes[t0*act.stride], act.stride, nsb)
		}
	}
	for t0 := 0; t0 < nt; t0 += 2 {
		x := &act.bytes[t0*act.stride]
		if n16 == 0 {
			pf.step()
		}
		if n8 > n16 {
			q4KTile8x2(&out[t0*outStride+n16], outStride, &wp[n16*nsb*200], (n8-n16)/8, x, act.stride, nsb)
		}
	}
	packPool.Put(bp)
	if n4 := nRows / tileRows * tileRows; n4 > n8 {
		for t := 0; t < nt; t++ {
			q4_KRowsAsm(out[t*outStride+n8:t*outStride+n4], w[n8*rb:n4*rb], act, t)
		}
	}
	return nt
}
