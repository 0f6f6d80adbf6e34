package kernels

import "math"

// lanesSpec is a K-quant type's rows-in-lanes kernel set (Q5_K: q5kvnni_amd64.s,
// Q6_K: q6kvnni_amd64.s and asm_amd64.s): the row tile is packed once per
// call (goPack is the layouts' specification, asmPack[i] the gather
// packers for 8 rows on AVX2 and 16 on AVX-512) and kernel[i] runs
// step[i] tokens at a time over it; small is the 4-token per-row kernel
// for the rest.
type lanesSpec struct {
	name               string
	sbBytes, packBytes int // per row and super-block: in the file, packed
	goPack             func(dst, w []byte, R, rb, nsb int, vnni bool)
	asmPack            [2]func(dst, w *byte, rb, nsb int)
	kernel             [2]func(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)
	step               [2]int
	small              tilesFunc
}

// kTilesLanes returns the tiles function of s on a SIMD path: calls of
// kPackMinTok tokens or more run rows [0, nRows/R*R) through the packed
// R-row kernel (R = 16 with VNNI on AVX-512, else 8) and the rows up to
// nRows/tileRows*tileRows left over through s.small, which also takes
// smaller calls. 2048x768 x 64 tokens, 1 thread, CPU time: AVX-512 Q5_K
// 4-token kernel 60 GFLOP/s, 16-row 235; Q6_K 82 -> 180-214.
func kTilesLanes(s lanesSpec, wide bool) tilesFunc {
	R, i := 8, 0
	if wide {
		R, i = 16, 1
	}
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		nsb := act.stride / 292
		if nTok < kPackMinTok[i] || nsb == 0 || nRows < R {
			return s.small(out, outStride, w, nRows, act, nTok)
		}
		nr := nRows / R * R
		nt := nTok / 4 * 4
		rb := s.sbBytes * nsb
		if len(w) < rb*nRows || len(act.bytes) < nt*act.stride || len(out) < (nt-1)*outStride+nRows {
			panic("kernels: bad " + s.name + " tile")
		}
		gb := R * nsb * s.packBytes // one packed group of R rows
		need := nr / R * gb
		bp := packPool.Get().(*[]byte)
		if cap(*bp) < need {
			*bp = make([]byte, need)
		}
		wp := (*bp)[:need]
		for g := 0; g < nr/R; g++ {
			// Gathers index the rows by int32 offsets; longer rows (no
			// real model has them) take the Go packer.
			if rb > gatherMaxRowBytes {
				s.goPack(wp[g*gb:], w[g*R*rb:], R, rb, nsb, wide)
			} else {
				s.asmPack[i](&wp[g*gb], &w[g*R*rb], rb, nsb)
			}
		}
		pf := newRowPrefetch(w[:rb*nRows], ceilDiv(nt, s.step[i]))
		for t0 := 0; t0 < nt; t0 += s.step[i] {
			pf.step()
			s.kernel[i](&out[t0*outStride], outStride, &wp[0], nr/R, &act.bytes[t0*act.stride], act.stride, nsb)
		}
		packPool.Put(bp)
		if nr < nRows {
			if k := s.small(out[nr:], outStride, w[nr*rb:], nRows-nr, act, nt); k != nt && nRows/tileRows*tileRows > nr {
				panic("kernels: " + s.name + " tile rest")
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
