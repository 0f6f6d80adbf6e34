package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestQuantQ8_KAVX2MatchesQuant: the assembly Q8_K quantizer writes
// exactly quant.QuantizeRowQ8_K's bytes (scale, qs, bsums), including
// all-zero super-blocks, exact .5 ties (|mx| = 127 makes iscale exactly
// -+1), a largest magnitude present with both signs (the first one sets
// the sign of the scale) and widely spread rows; rows holding a NaN or an
// infinity are refused and then quantized by package quant.
func TestQuantQ8_KAVX2MatchesQuant(t *testing.T) {
	if !Available(AVX2) {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(8, 9))
	for trial := 0; trial < 300; trial++ {
		nsb := 1 + trial%4
		x := randVec(r, 256*nsb, []float64{1e-3, 1, 30, 1e6}[trial%4])
		switch trial % 5 {
		case 1:
			clear(x[:256])
		case 2:
			for j := range x[:256] {
				x[j] = float32(j%16) - 7.5 // ties at .5
			}
			x[3] = float32([]int{-127, 127}[trial%2])
		case 3:
			a := float32(r.Float64()*100 + 1)
			x[7], x[200] = a, -a
			if trial%2 == 0 {
				x[7], x[200] = -a, a
			}
		}
		want := make([]byte, 292*nsb)
		quant.QuantizeRowQ8_K(x, want)
		got := bytes.Repeat([]byte{0xa5}, 292*nsb) // every byte must be written
		if !quantQ8_KAVX2(&x[0], nsb, &got[0]) {
			t.Fatalf("trial %d: finite row refused", trial)
		}
		if !bytes.Equal(got, want) {
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("trial %d (nsb %d): byte %d (super-block %d offset %d) = %#x, quant %#x", trial, nsb, i, i/292, i%292, got[i], want[i])
				}
			}
		}
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := randVec(r, 512, 1)
		x[300] = bad
		got := make([]byte, 512/256*292)
		if quantQ8_KAVX2(&x[0], 2, &got[0]) {
			t.Fatalf("row with %g accepted", bad)
		}
		a := prepareQ8_KAsm(x, 1, 512)
		want := make([]byte, len(got))
		quant.QuantizeRowQ8_K(x, want)
		if !bytes.Equal(a.row(0), want) {
			t.Fatalf("row with %g: fallback differs from package quant", bad)
		}
		a.release()
	}
}

// TestQ8TileRowAVX2MatchesGo: the assembly tile layout writer gives
// q8TileRow's bytes for even and odd block counts (after the wrapper
// clears a lone last block's unused half).
func TestQ8TileRowAVX2MatchesGo(t *testing.T) {
	if !Available(AVX2) {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(10, 11))
	for _, nb := range []int{1, 2, 3, 8, 9} {
		x := randVec(r, 32*nb, 2)
		blocks, dx := make([]byte, 34*nb), make([]float32, nb)
		quantRowQ8_0AVX2(x, blocks, dx, nil)
		want := make([]byte, (nb+1)/2*q8TilePair)
		q8TileRow(want, blocks, nb)
		got := bytes.Repeat([]byte{0xa5}, len(want))
		quantRowQ8_0AVX2Tile(x, make([]byte, 34*nb), make([]float32, nb), got)
		if !bytes.Equal(got, want) {
			t.Fatalf("nb=%d: tile rows differ\n go  %x\n asm %x", nb, want, got)
		}
	}
}
