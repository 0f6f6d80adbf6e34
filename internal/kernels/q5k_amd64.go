package kernels

//go:noescape
func rowsQ5_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)

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

// q6_KTilesAVX2 is Q6_K's 4-token kernel (calls of fewer than q4k8MinTok
// tokens, and the rows past the last packed group).
var q6_KTilesAVX2 = kTiles4(210, rowsQ6_KAVX2x4)

func init() {
	q5_KKernels[AVX2].tiles = kTiles4(176, rowsQ5_KAVX2x4)
	q5_KKernels[AVX512].tiles = q5_KKernels[AVX2].tiles
}
