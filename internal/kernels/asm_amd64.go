package kernels

import (
	"sync"
	"unsafe"
)

// Assembly entry points (asm_amd64.s). Pointers must be valid for the
// lengths given; the Go wrappers below check lengths.

//go:noescape
func rowsF32AVX2(out, w, x *float32, nRows, n, stride int)

//go:noescape
func rowsF32AVX512(out, w, x *float32, nRows, n, stride int)

//go:noescape
func axpyRowsAVX512(y, w, x *float32, nRows, stride int, mask uint64)

//go:noescape
func rowsF16AVX2(out *float32, w, x *byte, nRows, n int)

//go:noescape
func rowsF16AVX512(out *float32, w, x *byte, nRows, n int)

//go:noescape
func rowsQ8_0AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)

//go:noescape
func rowsQ8_0AVX512(out *float32, w, x *byte, dx *float32, nRows, nb int)

//go:noescape
func quantQ8_0AVX512(x *float32, nb int, blocks *byte, dx *float32, tile *byte)

//go:noescape
func quantQ8_0AVX2(x *float32, nb int, blocks *byte, dx *float32)

//go:noescape
func repackQ8_0Z(dst *byte, w *byte, nGroups, nb int)

//go:noescape
func repackQ8_0R16(dst *byte, w *byte, nb int)

//go:noescape
func repackQ8_0R8(dst *byte, w *byte, nb int)

//go:noescape
func tileQ8_0R8AVX2(out *float32, outStride int, wp *byte, nb int, xb *byte, xStride int, dx *float32, nTok int)

//go:noescape
func tileQ8_0R16(out *float32, outStride int, wp *byte, nb int, xb *byte, xStride int, xt *byte, xtStride int, dx *float32, nTok int)

//go:noescape
func tileQ8_0Z(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nb int, dx *float32, dxStride int)

//go:noescape
func tileF32AVX512(out *float32, outStride int, w *float32, nGroups int, x *float32, n int)

//go:noescape
func tileF32AVX2(out *float32, outStride int, w *float32, nGroups int, x *float32, n int)

//go:noescape
func tileF16AVX2(out *float32, outStride int, w *byte, nGroups int, x *byte, n int)

//go:noescape
func rowsQ4_KAVX2(out *float32, w, x *byte, nRows, nsb int)

//go:noescape
func rowsQ4_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)

//go:noescape
func q4KTile16x2AVX512(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

//go:noescape
func q6KTile8x4AVX2(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

//go:noescape
func q4KTile8x2AVX2(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

//go:noescape
func rowsQ6_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)

//go:noescape
func rowsQ4_0AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)

//go:noescape
func rowsQ5_0AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)

//go:noescape
func rowsQ4_1AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)

//go:noescape
func rowsQ5_1AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)

//go:noescape
func rowsQ5_KAVX2(out *float32, w, x *byte, nRows, nsb int)

//go:noescape
func rowsQ6_KAVX2(out *float32, w, x *byte, nRows, nsb int)

//go:noescape
func siluMulAVX512(gp, u *float32, n int, c *float32)

//go:noescape
func siluMulAVX2(gp, u *float32, n int, c *float32)

//go:noescape
func expSubAVX2(x *float32, n int, m float32, c *float32)

//go:noescape
func expSubAVX512(x *float32, n int, m float32, c *float32)

// softmaxAVX512 is softmaxGo's arithmetic; it returns false without
// touching x when x holds a NaN or +Inf.
//
//go:noescape
func softmaxAVX512(x *float32, n int, c *float32) bool

//go:noescape
func tileF16AVX512(out *float32, outStride int, w *byte, nGroups int, x *byte, n int)

//go:noescape
func rowsBF16AVX2(out *float32, w, x *byte, nRows, n int)

//go:noescape
func rowsBF16AVX512(out *float32, w, x *byte, nRows, n int)

//go:noescape
func rowsQ4_KAVX512(out *float32, outStride int, w, x *byte, xStride, nRows, nsb, nT int)

//go:noescape
func axpyAVX2(y *float32, a float32, x *float32, n int)

//go:noescape
func scaleAVX2(x *float32, a float32, n int)

func dotF32Asm(a, b []float32) float32 {
	var r float32
	if CurrentPath() == AVX512 {
		rowsF32AVX512(&r, &a[0], &b[0], 1, len(a), len(a))
	} else {
		rowsF32AVX2(&r, &a[0], &b[0], 1, len(a), len(a))
	}
	return r
}

func axpyAsm(y []float32, a float32, x []float32) {
	n := len(y) &^ 7
	axpyAVX2(&y[0], a, &x[0], n)
	for i := n; i < len(y); i++ {
		y[i] += float32(a * x[i])
	}
}

func scaleAsm(x []float32, a float32) {
	n := len(x) &^ 7
	scaleAVX2(&x[0], a, n)
	for i := n; i < len(x); i++ {
		x[i] *= a
	}
}

func f32RowsAsm(avx512 bool) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		n := act.stride
		x := act.f32[t*n : (t+1)*n]
		if len(w) < 4*n*len(out) {
			panic("kernels: short weight tile")
		}
		wp := (*float32)(unsafe.Pointer(&w[0]))
		if avx512 {
			rowsF32AVX512(&out[0], wp, &x[0], len(out), n, n)
		} else {
			rowsF32AVX2(&out[0], wp, &x[0], len(out), n, n)
		}
	}
}

func f16RowsAsm(avx512 bool) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		n := len(x) / 2
		if len(w) < 2*n*len(out) {
			panic("kernels: short weight tile")
		}
		if avx512 {
			rowsF16AVX512(&out[0], &w[0], &x[0], len(out), n)
		} else if n%16 != 0 {
			// The AVX2 kernel has no masked tail; rows of such widths are rare.
			f16RowsGeneric(out, w, act, t)
		} else {
			rowsF16AVX2(&out[0], &w[0], &x[0], len(out), n)
		}
	}
}

func q8_0RowsAsm(avx512 bool) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		nb := act.nb
		dx := act.dx[t*nb : (t+1)*nb]
		if len(w) < 34*nb*len(out) {
			panic("kernels: short weight tile")
		}
		if avx512 {
			rowsQ8_0AVX512(&out[0], &w[0], &x[0], &dx[0], len(out), nb)
		} else {
			rowsQ8_0AVX2(&out[0], &w[0], &x[0], &dx[0], len(out), nb)
		}
	}
}

func quantRowQ8_0AVX2(x []float32, blocks []byte, dx []float32, tile []byte) {
	nb := len(dx)
	if len(x) != 32*nb || len(blocks) != 34*nb || tile != nil {
		panic("kernels: bad Q8_0 quantization lengths")
	}
	quantQ8_0AVX2(&x[0], nb, &blocks[0], &dx[0])
}

// prepareQ8_0AVX2 is prepareQ8_0 with the AVX2 quantizer.
func prepareQ8_0AVX2(x []float32, nTok, cols int) actBuf {
	return prepareQ8_0With(x, nTok, cols, 0, quantRowQ8_0AVX2)
}

func quantRowQ8_0AVX512(x []float32, blocks []byte, dx []float32, tile []byte) {
	nb := len(dx)
	if len(x) != 32*nb || len(blocks) != 34*nb {
		panic("kernels: bad Q8_0 quantization lengths")
	}
	var tp *byte
	if tile != nil {
		if len(tile) != (nb+1)/2*q8TilePairZ {
			panic("kernels: bad Q8_0 tile length")
		}
		if nb%2 == 1 {
			clear(tile[len(tile)-q8TilePairZ:])
		}
		tp = &tile[0]
	}
	quantQ8_0AVX512(&x[0], nb, &blocks[0], &dx[0], tp)
}

func init() {
	f32Kernels[AVX2].rows = f32RowsAsm(false)
	f32Kernels[AVX512].rows = f32RowsAsm(true)
	f32Kernels[AVX512].tiles = f32TilesAVX512
	f16Kernels[AVX512].tiles = f16TilesAVX512
	bf16Kernels[AVX512].rows = func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		n := len(x) / 2
		if len(w) < 2*n*len(out) {
			panic("kernels: short weight tile")
		}
		rowsBF16AVX512(&out[0], &w[0], &x[0], len(out), n)
	}
	bf16Kernels[AVX2].rows = func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		n := len(x) / 2
		if len(w) < 2*n*len(out) {
			panic("kernels: short weight tile")
		}
		if n%16 != 0 {
			// No masked tail on AVX2; rows of such widths are rare.
			bf16RowsGeneric(out, w, act, t)
			return
		}
		rowsBF16AVX2(&out[0], &w[0], &x[0], len(out), n)
	}
	q6_KKernels[AVX2].rows = q6_KRowsAsm
	q6_KKernels[AVX512].rows = q6_KRowsAsm
	q4_KKernels[AVX2].rows = q4_KRowsAsm
	// One token at a time the AVX2 kernel is faster (45 vs 61 GFLOP/s CPU
	// time at 2048x768); four at a time the AVX-512 one wins (+20%).
	q4_KKernels[AVX512].rows = q4_KRowsAsm
	f16Kernels[AVX2].rows = f16RowsAsm(false)
	f16Kernels[AVX512].rows = f16RowsAsm(true)
	q8_0Kernels[AVX2].rows = q8_0RowsAsm(false)
	q8_0Kernels[AVX512].rows = q8_0RowsAsm(true)
	q8_0Kernels[AVX512].prepare = func(x []float32, nTok, cols int) actBuf {
		tiled := 0
		if nTok >= tileTok {
			tiled = q8TilePairZ
		}
		return prepareQ8_0With(x, nTok, cols, tiled, quantRowQ8_0AVX512)
	}
	q8_0Kernels[AVX512].tiles = q8_0TilesAVX512
	q8_0Kernels[AVX2].tiles = q8_0TilesAVX2
	q4_KKernels[AVX2].tiles = q4_KTilesLanes(q4_KTilesAVX2, false)
	q4_KKernels[AVX512].tiles = q4_KTilesLanes(q4_KTilesAVX512, true)
	f32Kernels[AVX2].tiles = f32TilesAVX2
	q6_KKernels[AVX2].tiles = kTilesLanes(q6KLanes, false)
	q5_KKernels[AVX2].rows = q5_KRowsAsm
	q5_KKernels[AVX512].rows = q5_KRowsAsm
	setLegacy(&q4_0Kernels, 18, 34, rowsQ4_0AVX2, rowsQ4_0AVX2x4s, rowsQ4_0AVX512x4z)
	setLegacy(&q5_0Kernels, 22, 34, rowsQ5_0AVX2, rowsQ5_0AVX2x4s, rowsQ5_0AVX512x4z)
	setLegacy(&q4_1Kernels, 20, 36, rowsQ4_1AVX2, rowsQ4_1AVX2x4r, nil)
	setLegacy(&q5_1Kernels, 24, 36, rowsQ5_1AVX2, rowsQ5_1AVX2x4r, rowsQ5_1AVX512x4r)
	q6_KKernels[AVX512].tiles = kTilesLanes(q6KLanes, true)
	f16Kernels[AVX2].tiles = f16TilesAVX2
}

// floatTiles3 runs an AVX2 4-row x 3-token float tile kernel over the rows
// [0, nRows/tileRows*tileRows) and every whole group of 3 tokens; es is
// the element size, n the row length (a multiple of 16: the kernel has no
// masked tail, other widths go through rows).
func floatTiles3(out []float32, outStride int, w []byte, nRows int, x []byte, n, es int, nTok int,
	kernel func(out *float32, outStride int, w *byte, nGroups int, x *byte, n int)) int {
	nGroups := nRows / tileRows
	nt := nTok / 3 * 3
	if nGroups == 0 || nt == 0 || n%16 != 0 {
		return 0
	}
	if len(w) < es*n*nGroups*tileRows || len(x) < es*n*nt || len(out) < (nt-1)*outStride+nGroups*tileRows {
		panic("kernels: bad float tile")
	}
	for t0 := 0; t0 < nt; t0 += 3 {
		kernel(&out[t0*outStride], outStride, &w[0], nGroups, &x[t0*n*es], n)
	}
	return nt
}

func f32TilesAVX2(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	if len(act.f32) == 0 {
		return 0
	}
	x := unsafe.Slice((*byte)(unsafe.Pointer(&act.f32[0])), 4*len(act.f32))
	return floatTiles3(out, outStride, w, nRows, x, act.stride, 4, nTok, func(out *float32, outStride int, w *byte, nGroups int, x *byte, n int) {
		tileF32AVX2(out, outStride, (*float32)(unsafe.Pointer(w)), nGroups, (*float32)(unsafe.Pointer(x)), n)
	})
}

func f16TilesAVX2(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	return floatTiles3(out, outStride, w, nRows, act.bytes, act.stride/2, 2, nTok, tileF16AVX2)
}

// q4_KTilesAVX2 runs the Q4_K kernel on 4 tokens at a time so each
// super-block's scales and nibbles are unpacked once per 4 tokens.
func q4_KTilesAVX2(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	nt := nRows / tileRows * tileRows
	nTiles := nTok / tileTok
	nsb := act.stride / 292
	if nt == 0 || nTiles == 0 || nsb == 0 {
		return 0
	}
	if len(w) < 144*nsb*nt || len(act.bytes) < nTiles*tileTok*act.stride || len(out) < (nTiles*tileTok-1)*outStride+nt {
		panic("kernels: bad Q4_K tile")
	}
	for g := 0; g < nTiles; g++ {
		t0 := g * tileTok
		rowsQ4_KAVX2x4(&out[t0*outStride], outStride, &w[0], &act.bytes[t0*act.stride], act.stride, nt, nsb)
	}
	return nTiles * tileTok
}

// rowPrefetch spreads PREFETCHT1s of the next row tile over a tile
// kernel's token steps. A tile call's pack is its only read of the weights
// from memory, and by the end of its token loop the hardware prefetcher
// has lost the rows' stream, so the pack of every tile started cold (6% of
// bench-110M-q8_0 prefill on a Zen 3, 2% with this). The next tile's rows
// are the ones after w: MatMul passes each tile as a subslice of the
// matrix, whose capacity runs on through it (a buffer that is not a
// matrix must be passed with its capacity cut, s[:n:n]).
type rowPrefetch struct {
	next []byte
	per  int
}

func newRowPrefetch(w []byte, steps int) rowPrefetch {
	next := w[len(w):min(cap(w), 2*len(w))]
	return rowPrefetch{next, ceilDiv(len(next), max(steps, 1))}
}

func (p *rowPrefetch) step() {
	if len(p.next) == 0 {
		return
	}
	n := min(p.per, len(p.next))
	prefetchL2(&p.next[0], n)
	p.next = p.next[n:]
}

// q8_0TilesAVX2 runs the 4-row x 2-token register tile (q8tile_amd64.s;
// VPDPBUSD where the CPU has AVX-VNNI, else VPMADDUBSW) over the rows
// [0, nRows/tileRows*tileRows) for every pair of tokens: each weight block
// is loaded once per two tokens, each activation block once per four rows,
// and the 8 scale products of a block come from one multiply of the rows'
// widened scales (repacked once per call with the weights, in the
// kernel's pass order) by the tokens'. Same order as rows, so the odd token left over goes through
// rows.
func q8_0TilesAVX2(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	nb := act.nb
	nGroups := nRows / tileRows
	nt := nTok / 2 * 2
	if nGroups == 0 || nt == 0 || act.tile == nil {
		return 0
	}
	if len(w) < 34*nb*nGroups*tileRows || len(act.tile) < nt*act.tstr || act.tstr != (nb+1)/2*q8TilePair ||
		len(out) < (nt-1)*outStride+nGroups*tileRows {
		panic("kernels: bad Q8_0 tile")
	}
	vnni, sign := avx2VNNI, avx2Sign
	if nRows == rowTile && nb <= q8R8Blocks && sign && !vnni {
		return q8_0TilesR8(out, outStride, w, act, nTok)
	}
	// The row tile is repacked once for all token pairs (w+128, or the
	// sign mask of w (or w) and |w|, and the widened scales, in the
	// kernel's pass order).
	need := nGroups * nb * q8PackBytes(vnni)
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	wp := (*bp)[:need]
	mode := q8PackMask
	switch {
	case vnni:
		mode = q8PackVNNI
	case sign:
		mode = q8PackSign
	}
	q8PackTile(&wp[0], &w[0], nGroups, nb, mode)
	pf := newRowPrefetch(w, nt/2)
	if vnni {
		for t0 := 0; t0 < nt; t0 += 2 {
			pf.step()
			tileQ8_0x42VNNI(&out[t0*outStride], outStride, &wp[0], nGroups, &act.tile[t0*act.tstr], act.tstr, nb)
		}
	} else {
		q8TilesPlain(out, outStride, wp, nGroups, act, nt/2, sign, pf)
	}
	packPool.Put(bp)
	return nt
}

// q8ChunkBlocks is about how many blocks of its rows the plain AVX2 Q8_0
// tile takes in one sweep over the token pairs, once the rows have more
// than 1.5 times as many (chunks are even: each starts at an even block).
// A group step's working set, the 4 rows' packed blocks and the 2 tokens'
// tile rows (416 bytes a block), stays in a 32 KiB L1 up to ~75 blocks;
// TinyLlama's FF down (5632 columns, 176 blocks) in one sweep ran at 61-64
// GFLOP/s against 69-72 for its 2048-column matrices, 64-67 in chunks
// (tokenChunkBytes has the rest of its gain).
var q8ChunkBlocks = 64

// q8TilesPlain runs the plain AVX2 tile over nPairs token pairs: rows of
// up to 1.5 q8ChunkBlocks blocks in one sweep (tileQ8_0x42AVX2), longer
// ones in column chunks (tileQ8_0x42AVX2C), each chunk a sweep over all
// the pairs that leaves the accumulators in acc for the next. The kernel
// loops over the token pairs itself and spreads the prefetch of the next
// row tile over the (last chunk's) pairs.
func q8TilesPlain(out []float32, outStride int, wp []byte, nGroups int, act actBuf, nPairs int, sign bool, pf rowPrefetch) {
	nb := act.nb
	if nb <= q8ChunkBlocks+q8ChunkBlocks/2 {
		var next *byte
		if len(pf.next) > 0 {
			next = &pf.next[0]
		}
		tileQ8_0x42AVX2(&out[0], outStride, &wp[0], nGroups, &act.tile[0], act.tstr, nb, sign, nPairs, next, pf.per, len(pf.next))
		return
	}
	n := ceilDiv(nb, q8ChunkBlocks)
	chunk := ceilDiv(ceilDiv(nb, n), 2) * 2 // 176 blocks: 60, 60, 56
	nEvenAll, pb := (nb+1)/2, q8PackBytes(false)
	accPairStride := nGroups * 512
	need := nPairs * accPairStride / 4
	ap := accPool.Get().(*[]float32)
	if cap(*ap) < need {
		*ap = make([]float32, need)
	}
	acc := (*ap)[:need]
	flags := 0
	if sign {
		flags = 1
	}
	for b0 := 0; b0 < nb; b0 += chunk {
		b1 := min(b0+chunk, nb)
		f := flags
		if b0 > 0 {
			f |= 2
		}
		var next *byte
		per, pn := 0, 0
		if b1 == nb {
			f |= 4
			if len(pf.next) > 0 {
				next, per, pn = &pf.next[0], pf.per, len(pf.next)
			}
		}
		// Block b0 (even) starts pair b0/2 of the tile rows; its even
		// blocks are the group's b0/2.., its odd ones nEvenAll+b0/2...
		nEven, nOdd := (b1-b0+1)/2, (b1-b0)/2
		tileQ8_0x42AVX2C(&out[0], outStride, &wp[0], nGroups, &act.tile[b0/2*q8TilePair], act.tstr, nPairs, next, per, pn,
			nb*pb, b0/2*pb, (nEvenAll+b0/2)*pb, nEven, nOdd, &acc[0], accPairStride, f)
	}
	accPool.Put(ap)
}

var accPool = sync.Pool{New: func() any { b := make([]float32, 0, 1<<12); return &b }}

// q8_0TilesAVX512 repacks the row tile once (asm, repackQ8_0Z: 288 B
// per 4 rows and block pair) and runs the 4x4 register tile over every
// group of 4 tokens (q8z_amd64.s).
func q8_0TilesAVX512(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	nb := act.nb
	nGroups := nRows / tileRows
	nTiles := nTok / tileTok
	if nGroups == 0 || nTiles == 0 || act.tile == nil {
		return 0
	}
	if len(w) < 34*nb*nRows || len(act.tile) < nTiles*tileTok*act.tstr || act.tstr != (nb+1)/2*q8TilePairZ ||
		len(act.dx) < nTiles*tileTok*nb || len(out) < (nTiles*tileTok-1)*outStride+nRows {
		panic("kernels: bad Q8_0 tile")
	}
	if nRows == rowTile && nb <= q8R16Blocks {
		return q8_0TilesR16(out, outStride, w, act, nTok)
	}
	need := nGroups*(nb+1)/2*288 + 64
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	buf := (*bp)[:need]
	off := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
	wp := buf[off:]
	repackQ8_0Z(&wp[0], &w[0], nGroups, nb)
	for g := 0; g < nTiles; g++ {
		t0 := g * tileTok
		tileQ8_0Z(&out[t0*outStride], outStride, &wp[0], nGroups, &act.tile[t0*act.tstr], act.tstr, nb, &act.dx[t0*nb], nb)
	}
	packPool.Put(bp)
	return nTiles * tileTok
}

// q8R16Blocks is the longest row (in blocks) that takes the 16-row kernel
// for whole row tiles. It reloads the 16 rows' repacked blocks (576 bytes
// each) for every token, so it wins while they stay near L1. Zen 4, 1
// thread pinned, tokens per CPU-second, interleaved, under load:
// bench-15M-q8_0 (288 and 768 columns) pp128 / pp512 6,650-6,830 /
// 5,320-5,430 with the 4x4 tile only, 9,010-9,420 / 7,740-7,890 with the
// 16-row kernel; bench-110M-q8_0 (768 and 2048 columns) 753-761 / 626-637
// with the 4x4 tile only, 813-837 / 712-785 up to 24 blocks (768
// columns), 739-825 / 706-708 up to 64 (2048 columns too). In the matmul
// benchmark at 64 tokens (tok64 t1 cpuGFLOP/s, 4x4 / 16-row) 768x288
// gains (98-101 / 114-130), 2048x768 is even (105-110 / 98-102) and
// 768x2048 loses (118-140 / 108-109). Tests set it to 0 and to a large
// value to cover both kernels.
var q8R16Blocks = 24

// q8_0TilesR16 runs the 16-row kernel (q8t16_amd64.s) over every token
// of act (tile rows present: nTok >= tileTok).
func q8_0TilesR16(out []float32, outStride int, w []byte, act actBuf, nTok int) int {
	nb := act.nb
	if len(w) < 34*nb*rowTile || len(act.bytes) < nTok*act.stride || len(act.tile) < nTok*act.tstr ||
		len(act.dx) < nTok*nb || len(out) < (nTok-1)*outStride+rowTile {
		panic("kernels: bad Q8_0 16-row tile")
	}
	need := nb*576 + 64
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	buf := (*bp)[:need]
	off := int(-uintptr(unsafe.Pointer(&buf[0])) & 63)
	wp := buf[off:]
	repackQ8_0R16(&wp[0], &w[0], nb)
	// The tokens in steps of q8R16PrefetchStep, each step prefetching its
	// share of the next row tile (rowPrefetch): the repack is the tile's
	// only read of the weights from memory.
	steps := ceilDiv(nTok, q8R16PrefetchStep)
	pf := newRowPrefetch(w[:rowTile*34*nb:cap(w)], steps)
	for t0 := 0; t0 < nTok; t0 += q8R16PrefetchStep {
		n := min(q8R16PrefetchStep, nTok-t0)
		pf.step()
		tileQ8_0R16(&out[t0*outStride], outStride, &wp[0], nb, &act.bytes[t0*act.stride], act.stride, &act.tile[t0*act.tstr], act.tstr, &act.dx[t0*nb], n)
	}
	packPool.Put(bp)
	return nTok
}

// q8R16PrefetchStep is how many tokens the 16-row kernel takes between
// two slices of the next row tile's prefetch.
const q8R16PrefetchStep = 8

// q8R8Blocks is the longest row (in blocks) that the plain AVX2 path
// (VPSIGNB form) runs through the 8-row kernel for whole row tiles; as
// the AVX-512 16-row kernel, it reloads the rows' repacked blocks (544
// bytes) for every token. Tests set it to 0 and to a large value to cover
// both kernels.
var q8R8Blocks = 24

// q8_0TilesR8 runs the 8-row kernel (q8r8_amd64.s) over every token of
// act, the row tile's two halves in turn.
func q8_0TilesR8(out []float32, outStride int, w []byte, act actBuf, nTok int) int {
	nb := act.nb
	if len(w) < 34*nb*rowTile || len(act.bytes) < nTok*act.stride || len(act.dx) < nTok*nb ||
		len(out) < (nTok-1)*outStride+rowTile {
		panic("kernels: bad Q8_0 8-row tile")
	}
	need := nb * 544
	bp := packPool.Get().(*[]byte)
	if cap(*bp) < need {
		*bp = make([]byte, need)
	}
	wp := (*bp)[:need]
	for h := 0; h < rowTile; h += 8 {
		repackQ8_0R8(&wp[0], &w[h*34*nb], nb)
		tileQ8_0R8AVX2(&out[h], outStride, &wp[0], nb, &act.bytes[0], act.stride, &act.dx[0], nTok)
	}
	packPool.Put(bp)
	return nTok
}

func f32TilesAVX512(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	n := act.stride
	nGroups := nRows / tileRows
	nTiles := nTok / tileTok
	if nGroups == 0 || nTiles == 0 {
		return 0
	}
	if len(w) < 4*n*nRows || len(act.f32) < nTiles*tileTok*n || len(out) < (nTiles*tileTok-1)*outStride+nRows {
		panic("kernels: bad F32 tile")
	}
	wp := (*float32)(unsafe.Pointer(&w[0]))
	for g := 0; g < nTiles; g++ {
		t0 := g * tileTok
		tileF32AVX512(&out[t0*outStride], outStride, wp, nGroups, &act.f32[t0*n], n)
	}
	return nTiles * tileTok
}

func q4_KRowsAsm(out []float32, w []byte, act actBuf, t int) {
	x := act.row(t)
	nsb := len(x) / 292
	if len(w) < 144*nsb*len(out) || nsb == 0 {
		panic("kernels: short Q4_K weight tile")
	}
	rowsQ4_KAVX2(&out[0], &w[0], &x[0], len(out), nsb)
}

// setLegacy installs a legacy type's matvec on both SIMD paths: groups
// of four rows through fn4 (fn4z on AVX-512 when not nil; the rest is AVX2
// code), the rest through the one-row kernel fn. wb and xb are the weight
// and activation block bytes; Q8_0 activations (xb 34) come with widened
// scales in act.dx, Q8_1 ones (xb 36) with widened (d, s) pairs
// (prepareQ8_1).
func setLegacy(k *[3]typeKernel, wb, xb int, fn, fn4, fn4z func(out *float32, w, x *byte, dx *float32, nRows, nb int)) {
	rows := func(fn4 func(out *float32, w, x *byte, dx *float32, nRows, nb int)) func(out []float32, w []byte, act actBuf, t int) {
		return func(out []float32, w []byte, act actBuf, t int) {
			x := act.row(t)
			nb := len(x) / xb
			if nb == 0 || len(w) < wb*nb*len(out) {
				panic("kernels: short legacy weight tile")
			}
			per := nb
			if xb == 36 {
				per = 2 * nb
			}
			dx := act.dx[t*per : (t+1)*per]
			g := len(out) / 4
			if g > 0 {
				fn4(&out[0], &w[0], &x[0], &dx[0], g, nb)
			}
			if r := 4 * g; r < len(out) {
				fn(&out[r], &w[r*wb*nb], &x[0], &dx[0], len(out)-r, nb)
			}
		}
	}
	if fn4z == nil {
		fn4z = fn4
	}
	k[AVX2].rows = rows(fn4)
	k[AVX512].rows = rows(fn4z)
	if xb == 34 {
		k[AVX2].prepare = prepareQ8_0AVX2
		k[AVX512].prepare = func(x []float32, nTok, cols int) actBuf {
			return prepareQ8_0With(x, nTok, cols, 0, quantRowQ8_0AVX512)
		}
	}
}

func q5_KRowsAsm(out []float32, w []byte, act actBuf, t int) {
	x := act.row(t)
	nsb := len(x) / 292
	if len(w) < 176*nsb*len(out) || nsb == 0 {
		panic("kernels: short Q5_K weight tile")
	}
	rowsQ5_KAVX2(&out[0], &w[0], &x[0], len(out), nsb)
}

func q6_KRowsAsm(out []float32, w []byte, act actBuf, t int) {
	x := act.row(t)
	nsb := len(x) / 292
	if len(w) < 210*nsb*len(out) || nsb == 0 {
		panic("kernels: short Q6_K weight tile")
	}
	rowsQ6_KAVX2(&out[0], &w[0], &x[0], len(out), nsb)
}

// dotRowsAsm is DotRows on a SIMD path: one call, rows sharing q's loads.
func dotRowsAsm(out, q, k []float32, stride int) {
	if CurrentPath() == AVX512 {
		rowsF32AVX512(&out[0], &k[0], &q[0], len(out), len(q), stride)
	} else {
		rowsF32AVX2(&out[0], &k[0], &q[0], len(out), len(q), stride)
	}
}

// axpyRowsAsm is AxpyRows on the AVX-512 path, 64 elements of y at a time.
func axpyRowsAsm(y, w, x []float32, stride int) bool {
	if CurrentPath() == AVX2 {
		axpyRowsAVX2Go(y, w, x, stride)
		return true
	}
	if CurrentPath() != AVX512 {
		return false
	}
	for off := 0; off < len(y); off += 64 {
		c := len(y) - off
		mask := ^uint64(0)
		if c < 64 {
			mask = 1<<c - 1
		}
		axpyRowsAVX512(&y[off], &w[0], &x[off], len(w), stride, mask)
	}
	return true
}

func f16TilesAVX512(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	n := act.stride / 2
	nGroups := nRows / tileRows
	nTiles := nTok / tileTok
	if nGroups == 0 || nTiles == 0 {
		return 0
	}
	if len(w) < 2*n*nRows || len(act.bytes) < nTiles*tileTok*act.stride || len(out) < (nTiles*tileTok-1)*outStride+nRows {
		panic("kernels: bad F16 tile")
	}
	for g := 0; g < nTiles; g++ {
		t0 := g * tileTok
		tileF16AVX512(&out[t0*outStride], outStride, &w[0], nGroups, &act.bytes[t0*act.stride], n)
	}
	return nTiles * tileTok
}

// q4_KTilesAVX512 runs the Q4_K kernel on 4 tokens at a time so each
// super-block is unpacked once per 4 tokens.
func q4_KTilesAVX512(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
	nt := nRows / tileRows * tileRows
	nTiles := nTok / tileTok
	nsb := act.stride / 292
	if nt == 0 || nTiles == 0 {
		return 0
	}
	if len(w) < 144*nsb*nt || len(act.bytes) < nTiles*tileTok*act.stride || len(out) < (nTiles*tileTok-1)*outStride+nt {
		panic("kernels: bad Q4_K tile")
	}
	for g := 0; g < nTiles; g++ {
		t0 := g * tileTok
		rowsQ4_KAVX512(&out[t0*outStride], outStride, &w[0], &act.bytes[t0*act.stride], act.stride, nt, nsb, tileTok)
	}
	return nTiles * tileTok
}
