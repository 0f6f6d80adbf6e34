package kernels

import (
	"encoding/binary"
)

// Multi-token tiles for Q4_0 and Q5_0 on the SIMD paths. Their canonical
// order is Q8_0's (package doc: the same 16 lanes of exact 4-product
// integer sums times dw*dx), and every weight is an int8 (-8..7, -16..15)
// with the block's own f16 scale, so a row tile rewritten as Q8_0 blocks
// gives bitwise the same products through the Q8_0 tile kernels. The
// rewrite runs once per MatMul call and row tile and is reused by every
// token, as the Q4_K repack.

// legacyTiles returns the tiles function of a legacy type whose blocks
// of wb bytes conv rewrites as Q8_0 blocks, running path p's Q8_0 tiles.
func legacyTiles(p Path, wb int, conv func(dst, src []byte)) tilesFunc {
	return func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int {
		q8 := &q8_0Kernels[p]
		nb := act.nb
		nr := nRows / tileRows * tileRows
		// (The Q8_0 tiles need the tile layout, prepared from 2 tokens
		// on (AVX2) or 4 (AVX-512): do not rewrite weights they would not
		// use.)
		if q8.tiles == nil || nr == 0 || nTok < 2 || nb == 0 || act.tile == nil {
			return 0
		}
		if len(w) < wb*nb*nr {
			panic("kernels: short legacy weight tile")
		}
		bp := packPool.Get().(*[]byte)
		need := 34 * nb * nr
		if cap(*bp) < need {
			*bp = make([]byte, need)
		}
		q := (*bp)[:need]
		for i := 0; i < nb*nr; i++ {
			conv(q[34*i:34*i+34], w[wb*i:wb*i+wb])
		}
		n := q8.tiles(out, outStride, q, nr, act, nTok)
		packPool.Put(bp)
		return n
	}
}

// q4_0AsQ8_0 writes a Q4_0 block (f16 d, 16 bytes of nibbles: element j
// low, j+16 high, offset 8) as a Q8_0 block.
func q4_0AsQ8_0(dst, src []byte) {
	d := (*[34]byte)(dst)
	s := (*[18]byte)(src)
	d[0], d[1] = s[0], s[1]
	for j := 0; j < 16; j++ {
		d[2+j] = byte(int8(s[2+j]&15) - 8)
		d[18+j] = byte(int8(s[2+j]>>4) - 8)
	}
}

// q5_0AsQ8_0 writes a Q5_0 block (f16 d, 32 high bits, 16 bytes of
// nibbles; offset 16) as a Q8_0 block.
func q5_0AsQ8_0(dst, src []byte) {
	d := (*[34]byte)(dst)
	s := (*[22]byte)(src)
	d[0], d[1] = s[0], s[1]
	qh := binary.LittleEndian.Uint32(s[2:6])
	for j := 0; j < 16; j++ {
		d[2+j] = byte(int8(s[6+j]&15|byte(qh>>j&1)<<4) - 16)
		d[18+j] = byte(int8(s[6+j]>>4|byte(qh>>(j+16)&1)<<4) - 16)
	}
}

// setLegacyTiles installs the Q4_0 and Q5_0 tiles on both SIMD paths,
// with the Q8_0 kernels' activation preparation (the tiles need its
// layout; the matvecs read only the blocks and scales every layout has).
func setLegacyTiles() {
	for _, p := range []Path{AVX2, AVX512} {
		q4_0Kernels[p].prepare = q8_0Kernels[p].prepare
		q5_0Kernels[p].prepare = q8_0Kernels[p].prepare
		q4_0Kernels[p].tiles = legacyTiles(p, 18, q4_0AsQ8_0)
		q5_0Kernels[p].tiles = legacyTiles(p, 22, q5_0AsQ8_0)
	}
}
