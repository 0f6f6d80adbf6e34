package kernels

import (
	"encoding/binary"
	"math"
)

// Tile layout of one Q8_0 activation row for the blocked AVX-512 kernel,
// per pair of blocks (2p, 2p+1), q8TilePair bytes:
//
//	0..63     qs of block 2p then 2p+1 (signed; zeros past the last block)
//	64..127   16 int32: -128 * (sum of the 4 qs of lane l), lanes as qs
//	128..191  16 float32: dx of block 2p (x8) then of 2p+1 (x8, 0 past the end)
//
// The kernel feeds weights to VPDPBUSD as unsigned bytes w+128 (w XOR
// 0x80); starting each block's integer sum at the correction gives the
// exact signed sum Σ w*x without a per-token sign fix-up.
const q8TilePair = 192

func q8TileRow(dst, blocks []byte, nb int) {
	for i := range dst {
		dst[i] = 0
	}
	for b := 0; b < nb; b++ {
		p := dst[(b/2)*q8TilePair:]
		h := b & 1
		qs := blocks[34*b+2 : 34*b+34]
		copy(p[32*h:32*h+32], qs)
		for l := 0; l < 8; l++ {
			s := int32(0)
			for k := 0; k < 4; k++ {
				s += int32(int8(qs[4*l+k]))
			}
			binary.LittleEndian.PutUint32(p[64+4*(8*h+l):], uint32(-128*s))
		}
		dx := math.Float32bits(fp16At(blocks, 34*b))
		for l := 0; l < 8; l++ {
			binary.LittleEndian.PutUint32(p[128+4*(8*h+l):], dx)
		}
	}
}

// Tile layout of one Q8_0 activation row for the AVX-512 kernel
// (q8z_amd64.s), per pair of blocks (2p, 2p+1), q8TilePairZ bytes:
//
//	0..63     qs, 4-byte group l of block 2p+h at bytes 8l+4h (zeros
//	          past the last block)
//	64..127   16 int32: -128 * (sum of the 4 qs of group 2l+h), as qs
//	128..191  the same 16 sums as float32, block 2p's 8 then 2p+1's (the
//	          16-row kernel, q8t16_amd64.s)
//
// The scales come from the widened ones (actBuf.dx). Lane 2l+h is the
// canonical lane 8h+l (package doc).
const q8TilePairZ = 192

func q8TileRowZ(dst, blocks []byte, nb int) {
	clear(dst)
	for b := 0; b < nb; b++ {
		p := dst[(b/2)*q8TilePairZ:]
		h := b & 1
		qs := blocks[34*b+2 : 34*b+34]
		for l := 0; l < 8; l++ {
			copy(p[8*l+4*h:8*l+4*h+4], qs[4*l:4*l+4])
			s := int32(0)
			for k := 0; k < 4; k++ {
				s += int32(int8(qs[4*l+k]))
			}
			binary.LittleEndian.PutUint32(p[64+8*l+4*h:], uint32(-128*s))
			binary.LittleEndian.PutUint32(p[128+32*h+4*l:], math.Float32bits(float32(-128*s)))
		}
	}
}
