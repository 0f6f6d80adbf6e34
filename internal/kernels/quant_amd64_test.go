package kernels

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestQuantQ8_0AVX512MatchesQuant: the AVX-512 and AVX2 activation
// quantizers must
// equal quant.QuantizeRowQ8_0 (ggml's x86 rounding) byte for byte,
// including all-zero blocks and exact .5 ties (amax 127 makes id exactly 1).
func TestQuantQ8_0AVX512MatchesQuant(t *testing.T) {
	if !Available(AVX2) {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, nb := range []int{1, 2, 3, 9, 24} {
		x := randVec(r, 32*nb, 3)
		clear(x[:32]) // an all-zero block: d = 0, q = 0
		if nb > 1 {
			for j := 0; j < 32; j++ {
				x[32+j] = float32(j%8) - 3.5 // ties at .5
			}
			x[32] = 127
		}
		// The AVX2 quantizer writes no tile layout.
		b2, d2 := make([]byte, 34*nb), make([]float32, nb)
		quantRowQ8_0AVX2(x, b2, d2, nil)
		if !Available(AVX512) {
			want := make([]byte, 34*nb)
			wd := make([]float32, nb)
			quantRowQ8_0(x, want, wd, nil)
			if !bytes.Equal(want, b2) || !slices.Equal(wd, d2) {
				t.Fatalf("nb=%d: AVX2 quantizer differs\n go  %x\n asm %x", nb, want, b2)
			}
			continue
		}
		var gb, ab [2][]byte
		var gd [2][]float32
		for i, f := range []func([]float32, []byte, []float32, []byte){quantRowQ8_0, quantRowQ8_0AVX512} {
			blocks := make([]byte, 34*nb)
			dx := make([]float32, nb)
			tile := bytes.Repeat([]byte{0xEE}, (nb+1)/2*q8TilePairZ)
			if i == 0 {
				// The generic quantizer writes the AVX2 tiles' layout.
				f(x, blocks, dx, nil)
				q8TileRowZ(tile, blocks, nb)
			} else {
				f(x, blocks, dx, tile)
			}
			gb[i], ab[i], gd[i] = blocks, tile, dx
		}
		if !bytes.Equal(gb[0], gb[1]) {
			t.Fatalf("nb=%d: blocks differ\n go  %x\n asm %x", nb, gb[0], gb[1])
		}
		if !slices.Equal(gd[0], gd[1]) {
			t.Fatalf("nb=%d: widened scales differ: %v vs %v", nb, gd[0], gd[1])
		}
		if !bytes.Equal(gb[0], b2) || !slices.Equal(gd[0], d2) {
			t.Fatalf("nb=%d: AVX2 quantizer differs\n go  %x\n asm %x\n dx %v vs %v", nb, gb[0], b2, gd[0], d2)
		}
		if !bytes.Equal(ab[0], ab[1]) {
			t.Fatalf("nb=%d: tile layout differs\n go  %x\n asm %x", nb, ab[0], ab[1])
		}
	}
}
