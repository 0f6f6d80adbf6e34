package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestQ8_0ExtremeWeights: Q8_0 files may hold -128 (ggml's quantizer never
// writes it, other tools can). The sign trick on weights would turn
// -128*-x into -128*x; every path and every batch size must still give the
// generic (exact) result, or batch invariance breaks on such files.
func TestQ8_0ExtremeWeights(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	const rows, cols = 9, 96
	nb := cols / 32
	m := &Matrix{Type: quant.Q8_0, Rows: rows, Cols: cols, Data: make([]byte, rows*nb*34)}
	for b := 0; b < rows*nb; b++ {
		blk := m.Data[b*34:]
		binary.LittleEndian.PutUint16(blk, quant.FP32ToFP16(float32(0.01+r.Float64()*0.02)))
		for j := 0; j < 32; j++ {
			v := []int8{-128, 127, -127, int8(r.IntN(256) - 128)}[r.IntN(4)]
			blk[2+j] = byte(v)
		}
	}
	const nTok = 5
	x := randVec(r, nTok*cols, 1)
	deq := make([]float32, rows*cols)
	if err := quant.Dequantize(quant.Q8_0, m.Data, deq); err != nil {
		t.Fatal(err)
	}
	var ref []float32
	withPath(t, func(p Path) {
		forVariants(p, func(v string) {
			out := make([]float32, nTok*rows)
			MatMul(nil, out, m, x, nTok) // tokens 0-3 go through the tile kernels
			single := make([]float32, rows)
			for tk := 0; tk < nTok; tk++ {
				MatMul(nil, single, m, x[tk*cols:(tk+1)*cols], 1)
				xa := actAsSeen(t, quant.Q8_0, x[tk*cols:(tk+1)*cols])
				for i := 0; i < rows; i++ {
					var s, a float64
					for j := 0; j < cols; j++ {
						pr := float64(deq[i*cols+j]) * float64(xa[j])
						s += pr
						a += math.Abs(pr)
					}
					got := out[tk*rows+i]
					if math.Abs(float64(got)-s) > 4e-6*a+1e-30 {
						t.Fatalf("%v%s token %d row %d: %v, float64 reference %v", p, v, tk, i, got, s)
					}
					if math.Float32bits(single[i]) != math.Float32bits(got) {
						t.Fatalf("%v%s token %d row %d: alone %v, in batch %v", p, v, tk, i, single[i], got)
					}
				}
			}
			if p == Generic {
				ref = out
				return
			}
			for k := range out {
				if math.Float32bits(out[k]) != math.Float32bits(ref[k]) {
					t.Fatalf("%v%s elem %d: %v != generic %v", p, v, k, out[k], ref[k])
				}
			}
		})
	})
}
