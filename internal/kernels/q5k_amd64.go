package kernels

import (
	"math"
	"unsafe"
)

//go:noescape
func rowsQ5_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)

//go:noescape
func q5KTile8x2AVX2(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

//go:noescape
func q5KPack16VNNI(dst, w *byte, rb, nsb int)

//go:noescape
func q5KPack8AVX2(dst, w *byte, rb, nsb int)

//go:noescape
func q5KTile16x4VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

// q5KPack packs R rows of nsb Q5_K super-blocks (row r at w[r*rb:]) for
// the rows-in-lanes kernels (q5kvnni_amd64.s: 16 rows with VNNI, 8 rows
// on AVX2). Per group of R rows and
// super-block, 232*R bytes; "interleaved" means 4R bytes per 4-byte
// group, row r's 4 bytes at 4r:
//
//	0 .. 128R      qs bytes 32k+4c..+3 (pair k = 0..3, column c = 0..7),
//	               interleaved: low nibbles sub-block 2k, high 2k+1
//	128R .. 160R   qh bytes 4c..+3, interleaved (bit j: sub-block j)
//	160R .. 192R   scales: sub-block j, row r's sc_j int32 (VNNI) or
//	               (sc_j, sc_j) int16 (AVX2)
//	192R .. 224R   mins: sub-block j, row r's (m_j, m_j) int16
//	224R .. 232R   d, then dmin, widened
//
// The specification of the layouts, which the gather packers the kernels
// use (kpack_amd64.s) reproduce byte for byte (TestPackAsmMatchesGo); the
// stores skip bounds checks (d's length is checked once per super-block).
func q5KPack(dst, w []byte, R, rb, nsb int, vnni bool) {
	bb := 232 * R
	for b := 0; b < nsb; b++ {
		d := dst[b*bb : (b+1)*bb]
		_ = d[bb-1]
		for r := 0; r < R; r++ {
			blk := w[r*rb+b*176 : r*rb+b*176+176]
			base := unsafe.Pointer(&d[4*r])
			qs := (*[32]uint32)(unsafe.Pointer(&blk[48]))
			qh := (*[8]uint32)(unsafe.Pointer(&blk[16]))
			for u := 0; u < 32; u++ {
				*(*uint32)(unsafe.Add(base, 4*R*u)) = qs[u]
			}
			for c := 0; c < 8; c++ {
				*(*uint32)(unsafe.Add(base, 128*R+4*R*c)) = qh[c]
			}
			for j := 0; j < 8; j++ {
				sc, m := q4KScaleMin(blk[4:16], j)
				s := uint32(sc)
				if !vnni {
					s |= s << 16
				}
				*(*uint32)(unsafe.Add(base, 160*R+4*R*j)) = s
				*(*uint32)(unsafe.Add(base, 192*R+4*R*j)) = uint32(m) | uint32(m)<<16
			}
			*(*uint32)(unsafe.Add(base, 224*R)) = math.Float32bits(fp16At(blk, 0))
			*(*uint32)(unsafe.Add(base, 228*R)) = math.Float32bits(fp16At(blk, 2))
		}
	}
}

// q5_KTilesLanes returns the Q5_K tiles function of a SIMD path: calls of
// kPackMinTok tokens or more run rows [0, nRows/R*R) through the packed
// R-row kernel (R = 16 with VNNI on AVX-512, 4 tokens a pass; else 8, 2
// tokens) and the rows up to nRows/tileRows*tileRows left over through
// the 4-token per-row kernel small, which also takes smaller calls.
// 2048x768 x 64 tokens, 1 thread, CPU time: AVX-512 4-token kernel 60
// GFLOP/s, 16-row 145-165.
func q5_KTilesLanes(wide bool) tilesFunc {
	small := kTiles4(176, rowsQ5_KAVX2x4)
	R, step := 8, 2
	if wide {
		R, step = 16, 4
	}
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		nsb := act.stride / 292
		if nTok < kPackMinTok[b2i(wide)] || nsb == 0 || nRows < R {
			return small(out, outStride, w, nRows, act, nTok)
		}
		nr := nRows / R * R
		nt := nTok / 4 * 4
		rb := 176 * nsb
		if len(w) < rb*nRows || len(act.bytes) < nt*act.stride || len(out) < (nt-1)*outStride+nRows {
			panic("kernels: bad Q5_K tile")
		}
		need := nr * nsb * 232
		bp := packPool.Get().(*[]byte)
		if cap(*bp) < need {
			*bp = make([]byte, need)
		}
		wp := (*bp)[:need]
		for g := 0; g < nr/R; g++ {
			// q5KPack's layouts, with gathers (kpack_amd64.s) when the rows'
			// offsets fit their int32 indices.
			switch {
			case rb > gatherMaxRowBytes:
				q5KPack(wp[g*R*nsb*232:], w[g*R*rb:], R, rb, nsb, wide)
			case wide:
				q5KPack16VNNI(&wp[g*R*nsb*232], &w[g*R*rb], rb, nsb)
			default:
				q5KPack8AVX2(&wp[g*R*nsb*232], &w[g*R*rb], rb, nsb)
			}
		}
		for t0 := 0; t0 < nt; t0 += step {
			x := &act.bytes[t0*act.stride]
			if wide {
				q5KTile16x4VNNI(&out[t0*outStride], outStride, &wp[0], nr/R, x, act.stride, nsb)
			} else {
				q5KTile8x2AVX2(&out[t0*outStride], outStride, &wp[0], nr/R, x, act.stride, nsb)
			}
		}
		packPool.Put(bp)
		if nr < nRows {
			if k := small(out[nr:], outStride, w[nr*rb:], nRows-nr, act, nt); k != nt && nRows/tileRows*tileRows > nr {
				panic("kernels: Q5_K tile rest")
			}
		}
		return nt
	}
}

// gatherMaxRowBytes is the longest row the gather packers take: they
// index the 16 rows by int32 offsets r*rb (r <= 15), computed in 32 bits.
var gatherMaxRowBytes = math.MaxInt32 / 16 // a var so that tests can take the Go packers

// kPackMinTok is the smallest call that packs the row tile for the
// Q5_K/Q6_K rows-in-lanes kernels, [AVX2, AVX-512]: below it the 4-token
// per-row kernel is as fast. Both packers gather (kpack_amd64.s; the Go
// packers took ~150 ns per row and super-block, so the 8-row tiles lost
// to the 4-token kernel below ~32 tokens). 2048x768, 1 thread, CPU time:
// AVX-512 Q6_K 4 tokens 50-72 GFLOP/s unpacked, 93 packed; AVX2 Q6_K 4
// tokens ~60 either way, 8 tokens 69 packed.
var kPackMinTok = [2]int{8, 4}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// kTiles4 is the tiles function of a K-quant per-row kernel that takes 4
// tokens at once (rowsQ5_KAVX2x4, rowsQ6_KAVX2x4: each super-block's
// scales and quants are unpacked once per 4 tokens), for a type of
// sbBytes bytes per super-block: rows [0, nRows/tileRows*tileRows), every
// whole group of 4 tokens.
func kTiles4(sbBytes int, kernel func(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)) tilesFunc {
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		nr := nRows / tileRows * tileRows
		nTiles := nTok / tileTok
		nsb := act.stride / 292
		if nr == 0 || nTiles == 0 || nsb == 0 {
			return 0
		}
		if len(w) < sbBytes*nsb*nr || len(act.bytes) < nTiles*tileTok*act.stride || len(out) < (nTiles*tileTok-1)*outStride+nr {
			panic("kernels: bad K-quant tile")
		}
		for g := 0; g < nTiles; g++ {
			t0 := g * tileTok
			kernel(&out[t0*outStride], outStride, &w[0], &act.bytes[t0*act.stride], act.stride, nr, nsb)
		}
		return nTiles * tileTok
	}
}

// q6_KTilesAVX2 is Q6_K's 4-token kernel (calls of fewer than kPackMinTok
// tokens, and the rows past the last packed group).
var q6_KTilesAVX2 = kTiles4(210, rowsQ6_KAVX2x4)

func init() {
	q5_KKernels[AVX2].tiles = q5_KTilesLanes(false)
	q5_KKernels[AVX512].tiles = q5_KTilesLanes(true)
}
