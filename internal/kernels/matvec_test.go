package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestDecodeMatvecThreadsBitwise covers the one-token kernels (four rows a
// pass plus a one-row tail) the way decode calls them: products large
// enough that the pool splits them in 16-row tiles, row counts that leave
// a partial tile and a partial group of four, odd block counts (Q8_0's
// unpaired last block), 1-3 threads. Every output is bitwise the Generic
// path's.
func TestDecodeMatvecThreadsBitwise(t *testing.T) {
	pars := []*Parallel{nil, NewParallel(2), NewParallel(3)}
	defer pars[1].Close()
	defer pars[2].Close()
	for _, sh := range []struct {
		typ  quant.Type
		cols []int
	}{
		{quant.Q4_K, []int{768, 2304}},
		{quant.Q8_0, []int{672, 2048}},
	} {
		for _, cols := range sh.cols {
			for _, rows := range []int{203, 518} {
				t.Run(fmt.Sprintf("%s/%dx%d", sh.typ, rows, cols), func(t *testing.T) {
					if rows*cols < minParallelMACs {
						t.Fatalf("%dx%d is too small for the pool", rows, cols)
					}
					m, _ := makeMatrix(t, sh.typ, rows, cols, uint64(rows+cols))
					x := randVec(rand.New(rand.NewPCG(uint64(cols), 9)), cols, 1)
					ref := make([]float32, rows)
					old := CurrentPath()
					defer SetPath(old)
					SetPath(Generic)
					MatMul(nil, ref, m, x, 1)
					withPath(t, func(p Path) {
						for _, par := range pars {
							out := make([]float32, rows)
							MatMul(par, out, m, x, 1)
							for r := range out {
								if math.Float32bits(out[r]) != math.Float32bits(ref[r]) {
									t.Fatalf("%v threads=%d row %d: %v != generic %v", p, par.Threads(), r, out[r], ref[r])
								}
							}
						}
					})
				})
			}
		}
	}
}

// TestDecodeQ4_KAnyScaleBits runs the one-token Q4_K kernels over weight
// bytes drawn at random (every bit pattern of the packed 6-bit scales and
// mins, of the nibbles) with finite fp16 d and dmin, at row counts 1..13
// and 29 (full groups of four and every tail) and 1-3 super-blocks: each
// output bitwise the Generic path's. Quantized weights (the other tests)
// never reach some scale and min bit patterns the vector unpack of the
// four rows' scales must get right.
func TestDecodeQ4_KAnyScaleBits(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 4))
	for _, nsb := range []int{1, 2, 3} {
		cols := 256 * nsb
		x := randVec(r, cols, 3)
		for _, rows := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 29} {
			m := &Matrix{Type: quant.Q4_K, Rows: rows, Cols: cols, Data: make([]byte, 144*nsb*rows)}
			for i := range m.Data {
				m.Data[i] = byte(r.Uint32())
			}
			for b := 0; b < rows*nsb; b++ {
				// d, dmin: fp16 with exponent 8..22 and a random sign and
				// mantissa (finite, not subnormal).
				for h := 0; h < 2; h++ {
					v := uint16(r.Uint32())&0x83ff | uint16(8+r.IntN(15))<<10
					m.Data[b*144+2*h], m.Data[b*144+2*h+1] = byte(v), byte(v>>8)
				}
			}
			ref := make([]float32, rows)
			old := CurrentPath()
			SetPath(Generic)
			MatMul(nil, ref, m, x, 1)
			withPath(t, func(p Path) {
				out := make([]float32, rows)
				MatMul(nil, out, m, x, 1)
				for i := range out {
					if math.Float32bits(out[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("%v %dx%d row %d: %v != generic %v", p, rows, cols, i, out[i], ref[i])
					}
				}
			})
			SetPath(old)
		}
	}
}
