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
	testRepackLayout(t, 16, func(dst, w *byte, nb int) { repackQ8_0R16(dst, w, nb) })
}

// TestRepackQ8_0R8Layout: the same for the plain AVX2 path's 8-row
// kernel (tileQ8_0R8AVX2, VPSIGNB form): per block, group l's 8 rows' 4
// quants as they are (row r at 32l+4r), then their magnitudes (-128 as
// 128) 256 bytes on, then the 8 scales widened.
func TestRepackQ8_0R8Layout(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	testRepackLayout(t, 8, func(dst, w *byte, nb int) { repackQ8_0R8(dst, w, nb) })
}

// testRepackLayout checks a repack of rows Q8_0 rows (16: tileQ8_0R16's
// layout, 8: tileQ8_0R8AVX2's) against the layout spelled out.
func testRepackLayout(t *testing.T, rows int, repack func(dst, w *byte, nb int)) {
	r := rand.New(rand.NewPCG(7, uint64(rows)))
	per := 576 // bytes per block of the rows
	if rows == 8 {
		per = 544
	}
	scales := []uint16{0x7C00, 0xFC00, 0x7E00, 0x7D01, 0x0001, 0x03FF, 0x7BFF, 0x8000, 0}
	for nb := 1; nb <= 40; nb++ {
		t.Run(fmt.Sprint(nb), func(t *testing.T) {
			rb := nb * 34
			w := make([]byte, rows*rb)
			for i := range w {
				w[i] = byte(r.IntN(256))
			}
			for b := 0; b < rows*nb; b++ {
				if r.IntN(3) == 0 {
					binary.LittleEndian.PutUint16(w[b*34:], scales[r.IntN(len(scales))])
				}
			}
			want := make([]byte, nb*per)
			for b := 0; b < nb; b++ {
				dst := want[b*per:]
				for row := 0; row < rows; row++ {
					blk := w[row*rb+b*34:]
					for l := 0; l < 8; l++ {
						for k := 0; k < 4; k++ {
							q := blk[2+4*l+k]
							if rows == 16 {
								dst[64*l+4*row+k] = q ^ 0x80
								continue
							}
							dst[32*l+4*row+k] = q
							a := int8(q)
							if a < 0 {
								a = -a // -128 stays 0x80: 128 unsigned
							}
							dst[256+32*l+4*row+k] = byte(a)
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
			got := make([]byte, guard+nb*per+guard)
			for i := range got {
				got[i] = 0xA5
			}
			repack(&got[guard], &w[0], nb)
			for i := 0; i < guard; i++ {
				if got[i] != 0xA5 || got[guard+nb*per+i] != 0xA5 {
					t.Fatalf("wrote outside its %d bytes", nb*per)
				}
			}
			if g := got[guard : guard+nb*per]; !bytes.Equal(g, want) {
				for i := range g {
					if g[i] != want[i] {
						b, o := i/per, i%per
						t.Fatalf("block %d byte %d: %#x, want %#x", b, o, g[i], want[i])
					}
				}
			}
		})
	}
}

// BenchmarkRepackQ8_0: one row tile's repack per op, for each kernel
// that repacks per call (24 blocks: a 768-column row, the longest the
// 16-row and 8-row kernels take). The weights are 64 tiles (about 0.8
// MB) read in turn, so they come from L2 or L3, not L1.
func BenchmarkRepackQ8_0(b *testing.B) {
	const nb, tiles = 24, 64
	w := make([]byte, tiles*16*nb*34)
	for i := range w {
		w[i] = byte(i * 7)
	}
	dst := make([]byte, nb*576+64)
	for _, k := range []struct {
		name string
		ok   bool
		fn   func(dst, w *byte, nb int)
	}{{"r16", hasAVX512, func(d, w *byte, nb int) { repackQ8_0R16(d, w, nb) }}, {"r8", hasAVX2, func(d, w *byte, nb int) { repackQ8_0R8(d, w, nb) }}} {
		b.Run(k.name, func(b *testing.B) {
			if !k.ok {
				b.Skip("not on this CPU")
			}
			b.SetBytes(16 * nb * 34)
			for i := 0; i < b.N; i++ {
				k.fn(&dst[0], &w[(i%tiles)*16*nb*34], nb)
			}
		})
	}
}
