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
