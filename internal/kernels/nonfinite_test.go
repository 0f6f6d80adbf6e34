package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// A token whose activations hold NaN or Inf (a diverged sequence, a
// hostile one) poisons only its own outputs: every other token of the
// batch gets bitwise what it gets alone, on every path and variant, for
// the quantized types' tiles and odd shapes.
func TestNonFiniteTokenStaysItsOwn(t *testing.T) {
	par := NewParallel(2)
	defer par.Close()
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		for _, cols := range []int{256, 288 * 2} {
			if typ.BlockSize() > 0 && cols%typ.BlockSize() != 0 {
				continue
			}
			rows := 19
			name := fmt.Sprintf("%s/%d", typ, cols)
			t.Run(name, func(t *testing.T) {
				m := oddMatrix(t, typ, rows, cols, 7)
				const nTok = 13
				x := randVec(rand.New(rand.NewPCG(uint64(cols), 9)), nTok*cols, 1)
				bad := []int{0, 5, 12}
				x[0*cols+3] = float32(math.NaN())
				x[5*cols+cols-1] = float32(math.Inf(1))
				for i := 12 * cols; i < 13*cols; i++ {
					x[i] = float32(math.Inf(-1))
				}
				withPath(t, func(p Path) {
					forVariants(p, func(v string) {
						alone := make([]float32, nTok*rows)
						for k := 0; k < nTok; k++ {
							MatMul(nil, alone[k*rows:(k+1)*rows], m, x[k*cols:(k+1)*cols], 1)
						}
						for _, pp := range []*Parallel{nil, par} {
							out := make([]float32, nTok*rows)
							MatMul(pp, out, m, x, nTok)
							for k := range out {
								tok := k / rows
								isBad := tok == bad[0] || tok == bad[1] || tok == bad[2]
								if isBad {
									continue
								}
								if math.Float32bits(out[k]) != math.Float32bits(alone[k]) {
									t.Fatalf("%v%s token %d row %d: %v in the batch, %v alone", p, v, tok, k%rows, out[k], alone[k])
								}
							}
						}
					})
				})
			})
		}
	}
}
