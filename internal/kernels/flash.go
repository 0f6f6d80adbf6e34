package kernels

import "math"

// Flash attention's two steps (llama.cpp's flash_attn_ext and
// flash-decoding, in a fixed order). Attention over a context is cut into
// tiles of consecutive positions; each tile gives a partial softmax of its
// own (its max, the sum of its numerators, and the numerators' weighted
// sum of value rows), and the partials are folded left to right. The model
// fixes the tiles by absolute position, never by page, thread or batch, so
// the fold is one sequence of operations whoever computes which tile.

// tileStat is scaleSoftmaxAVX2's result for a tile (FlashTile): the
// float64 sum of the numerators and the tile's max. The layout is the
// assembly's (sum at 0, max at 8).
type tileStat struct {
	sum float64
	max float32
}

// FlashTile turns a tile's scores into its softmax numerators: x *= a;
// mx = the max of x; x[i] = e^(x[i] - mx) as expf, or 0 when x[i] - mx <
// attnFlush (as ScaleSoftmax); sum = their float64 sum in ScaleSoftmax's
// order (lanes i % 8, then the fixed tree). Every path gives the same
// bits (a max of zero is +0). len(x) must be > 0.
func FlashTile(x []float32, a float32) (mx float32, sum float64) {
	if CurrentPath() != Generic {
		var st tileStat
		if scaleSoftmaxAVX2(&x[0], len(x), a, &expConsts[0], &st) {
			mx, sum = st.max, st.sum
		} else {
			mx, sum = flashTileGo(x) // x is scaled: NaN, +Inf or all -Inf decide in Go
		}
	} else {
		for i := range x {
			x[i] *= a
		}
		mx, sum = flashTileGo(x)
	}
	if mx == 0 {
		// VMAXPS and Go's max disagree on the sign of a zero max; +0 for
		// both (it changes no numerator: e^(x - ±0) is the same for all x).
		mx = 0
	}
	return mx, sum
}

func flashTileGo(x []float32) (float32, float64) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var acc [8]float64
	for i, v := range x {
		if d := v - mx; d < attnFlush {
			x[i] = 0
		} else {
			x[i] = expf(d)
		}
		acc[i%8] += float64(x[i])
	}
	for j := 0; j < 4; j++ {
		acc[j] += acc[j+4]
	}
	for j := 0; j < 2; j++ {
		acc[j] += acc[j+2]
	}
	return mx, acc[0] + acc[1]
}

// flashWeight is e^d for a fold's rescaling, 0 below attnFlush like a
// softmax weight (a tile far below the running max adds nothing float32
// could keep, and its products would be subnormal).
func flashWeight(d float32) float32 {
	if d < attnFlush {
		return 0
	}
	return expf(d)
}

// FlashMerge folds a tile's partial softmax (its max mj, numerator sum lj
// and weighted value sum oj) into the running one (*m, *l, o) of the
// tiles before it: with mn = max(*m, mj), o = o*e^(*m-mn) + oj*e^(mj-mn)
// (each product rounded, then the sum: Scale then Axpy, the same on every
// path), *l likewise in float64, *m = mn. The fold's order is the
// caller's: tiles left to right.
func FlashMerge(o []float32, m *float32, l *float64, oj []float32, mj float32, lj float64) {
	mn := max(*m, mj)
	a, b := flashWeight(*m-mn), flashWeight(mj-mn)
	if a != 1 {
		Scale(o, a)
	}
	if b != 0 {
		Axpy(o, b, oj)
	}
	*l = *l*float64(a) + lj*float64(b)
	*m = mn
}
