package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// The Q8_0 kernels that take whole 16-row tiles (the AVX-512 16-row
// kernel among them, which the 9-row TestQ8_0ExtremeWeights and the
// fuzzer's 1-11 rows never reach) on hostile weights: -128 quants (which
// ggml's quantizer never writes, other tools can), block scales of NaN,
// +-Inf, subnormals and the largest binary16, odd and even block counts
// up to past the 16-row kernel's limit. Every path and variant, in a
// batch or alone, gives the Generic path's bits (NaN = NaN).
func TestQ8_0RowTilesHostileWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 16))
	scales := []uint16{0x7C00, 0xFC00, 0x7E00, 0x0001, 0x7BFF, 0x8000, 0}
	for _, rows := range []int{16, 19, 32} {
		for _, nb := range []int{1, 3, 8, 24, 25} {
			for _, hostileScales := range []bool{false, true} {
				t.Run(fmt.Sprintf("%dx%d/scales=%v", rows, nb*32, hostileScales), func(t *testing.T) {
					cols := nb * 32
					m := &Matrix{Type: quant.Q8_0, Rows: rows, Cols: cols, Data: make([]byte, rows*nb*34)}
					for b := 0; b < rows*nb; b++ {
						blk := m.Data[b*34:]
						s := quant.FP32ToFP16(float32(0.01 + r.Float64()*0.02))
						if hostileScales && r.IntN(5) == 0 {
							s = scales[r.IntN(len(scales))]
						}
						binary.LittleEndian.PutUint16(blk, s)
						for j := 0; j < 32; j++ {
							blk[2+j] = byte([]int8{-128, 127, -127, int8(r.IntN(256) - 128)}[r.IntN(4)])
						}
					}
					const nTok = 9
					x := randVec(r, nTok*cols, 1)
					old := CurrentPath()
					defer SetPath(old)
					ref := genericAlone(m, x, nTok)
					withPath(t, func(p Path) {
						forVariants(p, func(v string) {
							out := make([]float32, nTok*rows)
							MatMul(nil, out, m, x, nTok)
							for k := range out {
								if a, b := out[k], ref[k]; !(a != a && b != b) && math.Float32bits(a) != math.Float32bits(b) {
									t.Fatalf("%v%s token %d row %d: %v, generic alone %v", p, v, k/rows, k%rows, a, b)
								}
							}
						})
					})
				})
			}
		}
	}
}
