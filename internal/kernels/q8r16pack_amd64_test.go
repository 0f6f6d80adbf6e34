package kernels

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestRepackQ8_0R16Layout: the vector repack of 16 Q8_0 rows writes
// exactly the layout tileQ8_0R16 reads, spelled out here one byte at a
// time: per block, group l's 16 rows' 4 quants as w+128 (row r at
// 64l+4r), then the 16 scales widened (NaN, Inf and subnormal binary16
// included; a signaling NaN comes out quiet, as
// VCVTPH2PS makes it), for every block count up to past q8R16Blocks. The bytes
// around the output are left alone.
func TestRepackQ8_0R16Layout(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	r := rand.New(rand.NewPCG(7, 16))
	scales := []uint16{0x7C00, 0xFC00, 0x7E00, 0x7D01, 0x0001, 0x03FF, 0x7BFF, 0x8000, 0}
	for nb := 1; nb <= 40; nb++ {
		t.Run(fmt.Sprint(nb), func(t *testing.T) {
			rb := nb * 34
			w := make([]byte, 16*rb)
			for i := range w {
				w[i] = byte(r.IntN(256))
			}
			for b := 0; b < 16*nb; b++ {
				if r.IntN(3) == 0 {
					binary.LittleEndian.PutUint16(w[b*34:], scales[r.IntN(len(scales))])
				}
			}
			want := make([]byte, nb*576)
			for b := 0; b < nb; b++ {
				dst := want[b*576:]
				for row := 0; row < 16; row++ {
					blk := w[row*rb+b*34:]
					for l := 0; l < 8; l++ {
						for k := 0; k < 4; k++ {
							dst[64*l+4*row+k] = blk[2+4*l+k] ^ 0x80
						}
					}
					d := math.Float32bits(quant.FP16ToFP32(binary.LittleEndian.Uint16(blk)))
					if d&0x7F800000 == 0x7F800000 && d&0x7FFFFF != 0 {
						d |= 0x400000 // VCVTPH2PS quiets a signaling NaN
					}
					binary.LittleEndian.PutUint32(dst[512+4*row:], d)
				}
			}
			const guard = 64
			got := make([]byte, guard+nb*576+guard)
			for i := range got {
				got[i] = 0xA5
			}
			repackQ8_0R16(&got[guard], &w[0], nb)
			for i := 0; i < guard; i++ {
				if got[i] != 0xA5 || got[guard+nb*576+i] != 0xA5 {
					t.Fatalf("wrote outside its %d bytes", nb*576)
				}
			}
			if g := got[guard : guard+nb*576]; !bytes.Equal(g, want) {
				for i := range g {
					if g[i] != want[i] {
						b, o := i/576, i%576
						t.Fatalf("block %d byte %d: %#x, want %#x", b, o, g[i], want[i])
					}
				}
			}
		})
	}
}
