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
		// (Capacity cut: q is a pool buffer, not a matrix whose next rows
		// the Q8_0 tile would prefetch.)
		n := q8.tiles(out, outStride, q[:need:need], nr, act, nTok)
		packPool.Put(bp)
		return n
	}
}

// The rewrites work on 8 elements per uint64 (they were a quarter of a
// 64-token Q4_0 tile call as byte loops). spread8 puts bit k of b in bit 0
// of byte k; sext4 and sext5 turn bytes holding 4- and 5-bit values v
// into the int8 bytes v-8 and v-16: v XOR 8 is v-8 mod 16, and bits 4-7
// are set exactly when v < 8 (bit 3 clear), which (^v & 8) * 0x1E does
// byte by byte without carries (8 * 0x1E = 0xF0); likewise for 5 bits.
const (
	lanes01 = 0x0101010101010101
	lanes08 = 0x0808080808080808
	lanes10 = 0x1010101010101010
	lanes0F = 0x0F0F0F0F0F0F0F0F
)

func sext4(v uint64) uint64 { return v ^ lanes08 | (^v&lanes08)*0x1E }
func sext5(v uint64) uint64 { return v ^ lanes10 | (^v&lanes10)*0x0E }

func spread8(b uint64) uint64 {
	m := b * lanes01 & 0x8040201008040201
	return (m + 0x7F7F7F7F7F7F7F7F) >> 7 & lanes01
}

// q4_0AsQ8_0 writes a Q4_0 block (f16 d, 16 bytes of nibbles: element j
// low, j+16 high, offset 8) as a Q8_0 block.
func q4_0AsQ8_0(dst, src []byte) {
	d := (*[34]byte)(dst)
	s := (*[18]byte)(src)
	d[0], d[1] = s[0], s[1]
	le := binary.LittleEndian
	for h := 0; h < 2; h++ {
		q := le.Uint64(s[2+8*h:])
		le.PutUint64(d[2+8*h:], sext4(q&lanes0F))
		le.PutUint64(d[18+8*h:], sext4(q>>4&lanes0F))
	}
}

// q5_0AsQ8_0 writes a Q5_0 block (f16 d, 32 high bits, 16 bytes of
// nibbles; offset 16) as a Q8_0 block.
func q5_0AsQ8_0(dst, src []byte) {
	d := (*[34]byte)(dst)
	s := (*[22]byte)(src)
	d[0], d[1] = s[0], s[1]
	le := binary.LittleEndian
	qh := uint64(le.Uint32(s[2:6]))
	for h := 0; h < 2; h++ {
		q := le.Uint64(s[6+8*h:])
		lo := q&lanes0F | spread8(qh>>(8*h)&0xFF)<<4
		hi := q>>4&lanes0F | spread8(qh>>(16+8*h)&0xFF)<<4
		le.PutUint64(d[2+8*h:], sext5(lo))
		le.PutUint64(d[18+8*h:], sext5(hi))
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
