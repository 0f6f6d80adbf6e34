package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestMatMulGroupsBitwise: the mixture-of-experts product must give, for
// every group, bitwise what a separate single-thread MatMul of that
// group's tokens gives, and so, row by row, what a one-token MatMul of
// each token alone gives: a token's expert output cannot depend on which
// other tokens chose the expert, on the thread count, on token chunking,
// or on groups sharing converted activations. Groups of zero tokens,
// shared X between gate- and up-like products, and mixed types are in
// every case.
func TestMatMulGroupsBitwise(t *testing.T) {
	pars := []*Parallel{nil}
	for th := 2; th <= 3; th++ {
		p := NewParallel(th)
		defer p.Close()
		pars = append(pars, p)
	}
	defer func(b int) { tokenChunkBytes = b }(tokenChunkBytes)
	types := []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q6_K}
	const cols, rows, experts = 256, 48, 6
	var s Groups
	for ti, typ := range types {
		ms := make([]*Matrix, experts)
		for e := range ms {
			ms[e], _ = makeMatrix(t, typ, rows+e, cols, uint64(1000*ti+e))
		}
		rng := rand.New(rand.NewPCG(7, uint64(ti)))
		withPath(t, func(p Path) {
			for _, chunkBytes := range []int{4 << 20, 1 << 12} {
				tokenChunkBytes = chunkBytes
				for _, counts := range [][]int{{1, 0, 1, 0, 0, 1}, {3, 0, 17, 1, 40, 2}, {0, 0, 0, 0, 0, 0}} {
					gs := make([]Group, 0, 2*experts)
					var xs [][]float32
					for e, n := range counts {
						x := randVec(rng, max(n, 1)*cols, 1)
						xs = append(xs, x)
						// Two products over the same X, as gate and up.
						gs = append(gs, Group{Out: make([]float32, n*ms[e].Rows), W: ms[e], X: x, NTok: n},
							Group{Out: make([]float32, n*ms[(e+1)%experts].Rows), W: ms[(e+1)%experts], X: x, NTok: n})
					}
					for _, par := range pars {
						for i := range gs {
							clear(gs[i].Out)
						}
						s.MatMulGroups(par, gs)
						for i, g := range gs {
							for tok := 0; tok < g.NTok; tok++ {
								want := make([]float32, g.W.Rows)
								MatMul(nil, want, g.W, xs[i/2][tok*cols:], 1)
								for r, v := range want {
									if got := g.Out[tok*g.W.Rows+r]; math.Float32bits(got) != math.Float32bits(v) {
										t.Fatalf("%v %s counts %v threads=%d chunk=%d group %d token %d row %d: %v != one-token MatMul %v",
											p, typ, counts, par.Threads(), chunkBytes, i, tok, r, got, v)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}
