package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestTilesOddShapesBitwise is the contract of the register-tiled kernels:
// for every type and path, with rows and columns that are not multiples
// of any tile (1..17 tokens, 1, 2 and 3 threads), every output element is
// bitwise what the Generic path gives for that token computed alone. A
// tile that reorders a reduction, drops the rows or tokens past its last
// full tile, or reads the wrong token's scales fails here.
func TestTilesOddShapesBitwise(t *testing.T) {
	pars := []*Parallel{nil, NewParallel(2), NewParallel(3)}
	defer pars[1].Close()
	defer pars[2].Close()
	const maxTok = 17
	for _, sh := range []struct {
		typ  quant.Type
		cols []int
	}{
		{quant.F32, []int{17, 64, 288}},
		{quant.F16, []int{33, 288}},
		{quant.BF16, []int{40, 64}},
		// Q8_0 (and Q4_0, Q5_0 through its tiles): odd and even block
		// counts, since the AVX2 tile runs the even and odd blocks as two
		// passes (nb = 1 leaves the odd pass empty).
		{quant.Q8_0, []int{32, 64, 96, 288, 544}},
		{quant.Q4_0, []int{64, 96, 288}},
		{quant.Q4_1, []int{96}},
		{quant.Q5_0, []int{64, 96, 288}},
		{quant.Q5_1, []int{96}},
		{quant.Q4_K, []int{256, 768}},
		{quant.Q5_K, []int{256, 768}},
		{quant.Q6_K, []int{256, 768}},
	} {
		for _, cols := range sh.cols {
			for _, rows := range []int{1, 6, 19, 28, 37} {
				name := fmt.Sprintf("%s/%dx%d", sh.typ, rows, cols)
				t.Run(name, func(t *testing.T) {
					m := oddMatrix(t, sh.typ, rows, cols, uint64(rows*cols))
					x := randVec(rand.New(rand.NewPCG(uint64(cols), 5)), maxTok*cols, 1)
					old := CurrentPath()
					defer SetPath(old)
					ref := genericAlone(m, x, maxTok)
					withPath(t, func(p Path) {
						forVariants(p, func(v string) {
							for _, par := range pars {
								for nTok := 1; nTok <= maxTok; nTok++ {
									out := make([]float32, nTok*rows)
									MatMul(par, out, m, x, nTok)
									for k := range out {
										if math.Float32bits(out[k]) != math.Float32bits(ref[k]) {
											t.Fatalf("%v%s threads=%d nTok=%d token %d row %d: %v != generic alone %v", p, v, par.Threads(), nTok, k/rows, k%rows, out[k], ref[k])
										}
									}
								}
							}
						})
					})
				})
			}
		}
	}
}

// genericAlone is the reference of the tile tests: each of nTok tokens of
// x through m on the Generic path, one token per call. It leaves the path
// at Generic; callers restore theirs.
func genericAlone(m *Matrix, x []float32, nTok int) []float32 {
	ref := make([]float32, nTok*m.Rows)
	SetPath(Generic)
	for k := 0; k < nTok; k++ {
		MatMul(nil, ref[k*m.Rows:(k+1)*m.Rows], m, x[k*m.Cols:(k+1)*m.Cols], 1)
	}
	return ref
}

// oddMatrix is makeMatrix for the types package quant quantizes, random
// blocks for the legacy ones.
func oddMatrix(t *testing.T, typ quant.Type, rows, cols int, seed uint64) *Matrix {
	switch typ {
	case quant.Q4_1, quant.Q5_0, quant.Q5_1:
		return randLegacy(rand.New(rand.NewPCG(seed, 2)), typ, rows, cols)
	}
	m, _ := makeMatrix(t, typ, rows, cols, seed)
	return m
}
