package kernels

import (
	"encoding/binary"
	"math"
	"math/rand"
	"testing"
)

// TestDequantQ8Rows: every path gives the bits of q*d computed in float64
// (exact, so the float32 product must equal it), for strided rows of one
// to five blocks, scales over binary16's range (subnormals too) and a NaN
// scale (the pool's poison) that makes its whole block NaN.
func TestDequantQ8Rows(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, nb := range []int{1, 2, 4, 5} {
		const rows = 5
		cols := nb * 32
		stride := nb*34 + 6
		src := make([]byte, rows*stride)
		rng.Read(src)
		for j := range rows {
			for b := range nb {
				s := src[j*stride+b*34:]
				h := uint16(rng.Intn(0x7c00)) // finite, either sign below
				if rng.Intn(2) == 0 {
					h |= 0x8000
				}
				if j == 3 && b == nb-1 {
					h = 0x7EAD // PoisonBits16
				}
				binary.LittleEndian.PutUint16(s, h)
			}
		}
		var first []float32
		withPath(t, func(p Path) {
			dst := make([]float32, rows*cols+3)
			DequantQ8Rows(dst, src, rows, cols, stride)
			if first == nil {
				first = dst
			}
			for i := range dst {
				if math.Float32bits(dst[i]) != math.Float32bits(first[i]) {
					t.Fatalf("%v nb %d element %d: %#x, first path %#x", p, nb, i, math.Float32bits(dst[i]), math.Float32bits(first[i]))
				}
			}
			for j := range rows {
				for i := range cols {
					blk := src[j*stride+i/32*34:]
					h := binary.LittleEndian.Uint16(blk)
					got := dst[j*cols+i]
					if h == 0x7EAD {
						if math.Float32bits(got)&0x7fc00000 != 0x7fc00000 {
							t.Fatalf("%v nb %d row %d col %d: %v under a NaN scale", p, nb, j, i, got)
						}
						continue
					}
					want := float64(int8(blk[2+i%32])) * float64(f16Table[h])
					if float64(got) != want || math.Float32bits(got) != math.Float32bits(float32(want)) {
						t.Fatalf("%v nb %d row %d col %d: %v, want %v", p, nb, j, i, got, want)
					}
				}
			}
			if dst[rows*cols] != 0 {
				t.Fatalf("%v: wrote past the rows", p)
			}
		})
	}
}
