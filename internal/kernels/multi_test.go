package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestMatMulManyBitwise: fusing products into one parallel loop must give
// bitwise what separate single-thread MatMul calls give (batch invariance,
// DESIGN.md "Determinism"): a chunk boundary that falls inside a product,
// shared activations between products of one type, or a product split
// across threads must not change an element. Mixed types over the same
// columns check that activations are converted per type, not reused across
// types.
func TestMatMulManyBitwise(t *testing.T) {
	pars := []*Parallel{nil}
	for th := 2; th <= 4; th++ {
		p := NewParallel(th)
		defer p.Close()
		pars = append(pars, p)
	}
	cases := []struct {
		cols  int
		types []quant.Type
		rows  []int
	}{
		{288, []quant.Type{quant.Q8_0, quant.Q8_0, quant.Q8_0}, []int{288, 97, 97}},
		{288, []quant.Type{quant.F32, quant.Q8_0, quant.F32}, []int{61, 130, 5}},
		{288, []quant.Type{quant.F16, quant.Q4_0}, []int{200, 77}},
		{768, []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q4_K, quant.Q8_0}, []int{64, 33, 1, 90}},
	}
	for ci, c := range cases {
		ms := make([]*Matrix, len(c.types))
		for i, typ := range c.types {
			ms[i], _ = makeMatrix(t, typ, c.rows[i], c.cols, uint64(100*ci+i))
		}
		const maxTok = 33
		x := randVec(rand.New(rand.NewPCG(3, uint64(ci))), maxTok*c.cols, 1)
		withPath(t, func(p Path) {
			for _, nTok := range []int{1, 4, 9, maxTok} {
				want := make([][]float32, len(ms))
				for i, m := range ms {
					want[i] = make([]float32, nTok*m.Rows)
					MatMul(nil, want[i], m, x, nTok)
				}
				for _, par := range pars {
					ps := make([]Product, len(ms))
					for i, m := range ms {
						ps[i] = Product{Out: make([]float32, nTok*m.Rows), W: m}
					}
					MatMulMany(par, x, nTok, ps...)
					for i := range ps {
						for k, v := range ps[i].Out {
							if math.Float32bits(v) != math.Float32bits(want[i][k]) {
								t.Fatalf("%v case %d threads=%d nTok=%d product %d (%s) elem %d: %v != separate MatMul %v",
									p, ci, par.Threads(), nTok, i, ms[i].Type, k, v, want[i][k])
							}
						}
					}
				}
			}
		})
	}
}

// Past tokenChunkBytes MatMul and MatMulMany run the tokens in chunks of
// 16 (or more), each a full pass over the rows with a view of the
// converted activations: the results must be bitwise those of one pass,
// for every type's activation layout (F32 rows, F16 halves, Q8_0 blocks,
// scales and tile rows, Q8_1's (d, s) pairs, Q8_K), path and thread count,
// with token counts that leave a partial last chunk and odd tokens.
func TestMatMulTokenChunksBitwise(t *testing.T) {
	par := NewParallel(2)
	defer par.Close()
	types := []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.BF16}
	defer func(b int) { tokenChunkBytes = b }(tokenChunkBytes)
	const cols, maxTok = 512, 53
	x := randVec(rand.New(rand.NewPCG(5, 6)), maxTok*cols, 1)
	for ti, typ := range types {
		m, _ := makeMatrix(t, typ, 37, cols, uint64(200+ti))
		m2, _ := makeMatrix(t, typ, 20, cols, uint64(300+ti))
		withPath(t, func(p Path) {
			for _, nTok := range []int{17, 33, maxTok} {
				tokenChunkBytes = 1 << 40
				want := make([]float32, nTok*m.Rows)
				MatMul(nil, want, m, x, nTok)
				want2 := make([]float32, nTok*m2.Rows)
				MatMul(nil, want2, m2, x, nTok)
				tokenChunkBytes = 1 // chunks of 16 tokens
				for _, pr := range []*Parallel{nil, par} {
					got := make([]float32, nTok*m.Rows)
					MatMul(pr, got, m, x, nTok)
					ps := []Product{{Out: make([]float32, nTok*m.Rows), W: m}, {Out: make([]float32, nTok*m2.Rows), W: m2}}
					MatMulMany(pr, x, nTok, ps...)
					for _, c := range []struct {
						name      string
						got, want []float32
					}{{"MatMul", got, want}, {"MatMulMany 0", ps[0].Out, want}, {"MatMulMany 1", ps[1].Out, want2}} {
						for i := range c.want {
							if math.Float32bits(c.got[i]) != math.Float32bits(c.want[i]) {
								t.Fatalf("%v %s %s nTok=%d threads=%d elem %d: %v in chunks, %v in one pass", p, typ, c.name, nTok, pr.Threads(), i, c.got[i], c.want[i])
							}
						}
					}
				}
			}
		})
	}
}

// TestMatMulAllocatesNothing: on the pool, MatMul and MatMulMany allocate
// nothing once warm (their jobs and loop functions are pooled). A serving
// process runs them for every layer of every step, so what they allocate
// sets how often its GC stops every goroutine.
func TestMatMulAllocatesNothing(t *testing.T) {
	if raceDetector {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	par := NewParallel(2)
	defer par.Close()
	const cols, maxTok = 288, 64
	m, _ := makeMatrix(t, quant.Q8_0, 288, cols, 1)
	m2, _ := makeMatrix(t, quant.Q8_0, 97, cols, 2)
	x := randVec(rand.New(rand.NewPCG(7, 8)), maxTok*cols, 1)
	out := make([]float32, maxTok*m.Rows)
	ps := []Product{{Out: make([]float32, maxTok*m.Rows), W: m}, {Out: make([]float32, maxTok*m2.Rows), W: m2}}
	for _, nTok := range []int{2, 9, maxTok} { // each parallel (minParallelMACs)
		if n := testing.AllocsPerRun(100, func() { MatMul(par, out, m, x, nTok) }); n != 0 {
			t.Errorf("MatMul of %d tokens on 2 threads: %v allocations a call, want 0", nTok, n)
		}
		if n := testing.AllocsPerRun(100, func() { MatMulMany(par, x, nTok, ps...) }); n != 0 {
			t.Errorf("MatMulMany of %d tokens on 2 threads: %v allocations a call, want 0", nTok, n)
		}
	}
}
