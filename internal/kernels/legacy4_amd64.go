package kernels

// One-token kernels, four rows per pass (asm_amd64.s).

//go:noescape
func rowsQ4_1AVX2x4r(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ5_1AVX2x4r(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ5_1AVX512x4r(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ4_1AVX2x4(out *float32, outStride int, w, x *byte, dx *float32, xStride, nRows, nb int)

//go:noescape
func rowsQ5_1AVX2x4(out *float32, outStride int, w, x *byte, dx *float32, xStride, nRows, nb int)

// legacyTiles4 is the tiles function of Q4_1 or Q5_1 (wb bytes per
// block) on both SIMD paths: kernel takes 4 tokens of Q8_1 activations
// (with prepareQ8_1's widened (d, s)) at once, rows [0,
// nRows/tileRows*tileRows), every whole group of 4 tokens. Same order as
// the one-token kernel, lane for lane.
func legacyTiles4(wb int, kernel func(out *float32, outStride int, w, x *byte, dx *float32, xStride, nRows, nb int)) tilesFunc {
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		nb := act.nb
		nr := nRows / tileRows * tileRows
		nt := nTok / tileTok * tileTok
		if nr == 0 || nt == 0 || nb == 0 {
			return 0
		}
		if len(w) < wb*nb*nr || act.stride != 36*nb || len(act.bytes) < nt*act.stride || len(act.dx) < 2*nb*nt ||
			len(out) < (nt-1)*outStride+nr {
			panic("kernels: bad legacy tile")
		}
		for t0 := 0; t0 < nt; t0 += tileTok {
			kernel(&out[t0*outStride], outStride, &w[0], &act.bytes[t0*act.stride], &act.dx[2*nb*t0], act.stride, nr, nb)
		}
		return nt
	}
}

func init() {
	for _, p := range []Path{AVX2, AVX512} {
		q4_1Kernels[p].tiles = legacyTiles4(20, rowsQ4_1AVX2x4)
		q5_1Kernels[p].tiles = legacyTiles4(24, rowsQ5_1AVX2x4)
	}
}

//go:noescape
func rowsQ5_0AVX2x4s(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ5_0AVX512x4z(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ4_0AVX2x4s(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ4_0AVX512x4z(out *float32, w, x *byte, dx *float32, nGroups, nb int)
