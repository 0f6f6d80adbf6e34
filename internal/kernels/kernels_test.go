package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"sluice/internal/quant"
)

// withPath runs f once per path this CPU supports and restores the path.
func withPath(t testing.TB, f func(p Path)) {
	old := CurrentPath()
	defer SetPath(old)
	for _, p := range Paths() {
		if err := SetPath(p); err != nil {
			t.Fatal(err)
		}
		f(p)
	}
}

func randVec(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

func makeMatrix(t testing.TB, typ quant.Type, rows, cols int, seed uint64) (*Matrix, []float32) {
	r := rand.New(rand.NewPCG(seed, 1))
	src := randVec(r, rows*cols, 1)
	rb, err := typ.RowBytes(cols)
	if err != nil {
		t.Fatal(err)
	}
	m := &Matrix{Type: typ, Rows: rows, Cols: cols, Data: make([]byte, rb*rows)}
	if err := quant.Quantize(typ, src, m.Data); err != nil {
		t.Fatal(err)
	}
	deq := make([]float32, rows*cols)
	if err := quant.Dequantize(typ, m.Data, deq); err != nil {
		t.Fatal(err)
	}
	return m, deq
}

// actAsSeen returns the activations as the dot product of typ consumes them
// (rounded to F16/BF16, or quantized to Q8_0/Q8_K and widened back), using
// only package quant: the reference this package is checked against.
func actAsSeen(t testing.TB, typ quant.Type, x []float32) []float32 {
	var at quant.Type
	switch typ {
	case quant.F32:
		return x
	case quant.F16, quant.BF16:
		at = typ
	case quant.Q8_0, quant.Q4_0:
		at = quant.Q8_0
	case quant.Q4_K, quant.Q5_K, quant.Q6_K:
		at = quant.Q8_K
	}
	rb, _ := at.RowBytes(len(x))
	buf := make([]byte, rb)
	switch at {
	case quant.Q8_0:
		quant.QuantizeRowQ8_0(x, buf)
	case quant.Q8_K:
		quant.QuantizeRowQ8_K(x, buf)
	default:
		if err := quant.Quantize(at, x, buf); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]float32, len(x))
	if err := quant.Dequantize(at, buf, out); err != nil {
		t.Fatal(err)
	}
	return out
}

var testShapes = []struct {
	typ  quant.Type
	cols []int
}{
	{quant.F32, []int{1, 5, 16, 17, 31, 64, 100, 288}},
	{quant.F16, []int{1, 7, 16, 33, 64, 288}},
	{quant.BF16, []int{3, 16, 40, 288}},
	{quant.Q8_0, []int{32, 64, 288, 768}},
	{quant.Q4_0, []int{32, 288}},
	{quant.Q4_K, []int{256, 768}},
	{quant.Q5_K, []int{256, 768}},
	{quant.Q6_K, []int{256, 768}},
}

// TestMatMulAgainstFloat64 checks every path against dequantize + dot in
// float64 over the activations as the type consumes them. The bound is the
// float32 accumulation error: a few ulps of the sum of |terms|.
func TestMatMulAgainstFloat64(t *testing.T) {
	for _, sh := range testShapes {
		for _, cols := range sh.cols {
			rows, nTok := 13, 5
			m, deq := makeMatrix(t, sh.typ, rows, cols, uint64(cols))
			r := rand.New(rand.NewPCG(7, uint64(cols)))
			x := randVec(r, nTok*cols, 2)
			want := make([]float64, nTok*rows)
			bound := make([]float64, nTok*rows)
			for tk := 0; tk < nTok; tk++ {
				xa := actAsSeen(t, sh.typ, x[tk*cols:(tk+1)*cols])
				for i := 0; i < rows; i++ {
					var s, a float64
					for j := 0; j < cols; j++ {
						p := float64(deq[i*cols+j]) * float64(xa[j])
						s += p
						a += math.Abs(p)
					}
					want[tk*rows+i] = s
					bound[tk*rows+i] = 4e-6*a + 1e-30
				}
			}
			withPath(t, func(p Path) {
				out := make([]float32, nTok*rows)
				MatMul(nil, out, m, x, nTok)
				for k := range out {
					if d := math.Abs(float64(out[k]) - want[k]); !(d <= bound[k]) {
						t.Errorf("%v %s cols=%d elem %d: got %v want %v (|diff| %.3g > %.3g)", p, sh.typ, cols, k, out[k], want[k], d, bound[k])
						return
					}
				}
			})
		}
	}
}

// TestPathsBitwiseEqual: every path reproduces the generic (canonical)
// order exactly, so tokens do not depend on the CPU a worker runs on.
func TestPathsBitwiseEqual(t *testing.T) {
	for _, sh := range testShapes {
		for _, cols := range sh.cols {
			rows, nTok := 23, 6
			m, _ := makeMatrix(t, sh.typ, rows, cols, 99+uint64(cols))
			x := randVec(rand.New(rand.NewPCG(3, 4)), nTok*cols, 1)
			var ref []float32
			withPath(t, func(p Path) {
				out := make([]float32, nTok*rows)
				MatMul(nil, out, m, x, nTok)
				if p == Generic {
					ref = out
					return
				}
				for k := range out {
					if math.Float32bits(out[k]) != math.Float32bits(ref[k]) {
						t.Errorf("%v %s cols=%d elem %d: %v (%#x) != generic %v (%#x)", p, sh.typ, cols, k, out[k], math.Float32bits(out[k]), ref[k], math.Float32bits(ref[k]))
						return
					}
				}
			})
		}
	}
}

// TestMatMulBatchInvariant is the batch-invariance contract (DESIGN.md
// "Determinism"): a token's outputs are bitwise the same whether it is
// alone, in a batch of 7 or of 64, at any position, with 1 to 4 threads
// (prefill-sized calls split one row tile per chunk, decode-sized ones a
// few tiles per chunk). Breaking it (e.g. splitting a dot product across
// threads, or a register-blocked kernel with a different order for
// multi-token calls) makes this test fail.
func TestMatMulBatchInvariant(t *testing.T) {
	var pars []*Parallel
	for th := 2; th <= 4; th++ {
		p := NewParallel(th)
		defer p.Close()
		pars = append(pars, p)
	}
	for _, sh := range testShapes {
		for _, cols := range sh.cols {
			testBatchInvariant(t, pars, sh.typ, cols)
		}
	}
}

func testBatchInvariant(t *testing.T, pars []*Parallel, typ quant.Type, cols int) {
	for _, rows := range []int{37, 101} {
		sh := struct{ typ quant.Type }{typ}
		m, _ := makeMatrix(t, sh.typ, rows, cols, 5)
		const maxTok = 64
		x := randVec(rand.New(rand.NewPCG(11, 12)), maxTok*cols, 1)
		withPath(t, func(p Path) {
			// Token k alone, one thread, is the reference for token k.
			single := make([]float32, maxTok*rows)
			for k := 0; k < maxTok; k++ {
				MatMul(nil, single[k*rows:(k+1)*rows], m, x[k*cols:(k+1)*cols], 1)
			}
			for _, par := range append([]*Parallel{nil}, pars...) {
				for _, nTok := range []int{1, 7, 64} {
					for start := 0; start+nTok <= maxTok; start += max(nTok, 19) {
						out := make([]float32, nTok*rows)
						MatMul(par, out, m, x[start*cols:(start+nTok)*cols], nTok)
						for k := range out {
							ref := single[start*rows+k]
							if math.Float32bits(out[k]) != math.Float32bits(ref) {
								t.Fatalf("%v %s threads=%d nTok=%d start=%d elem %d: %v != alone %v", p, sh.typ, par.Threads(), nTok, start, k, out[k], ref)
							}
						}
					}
				}
			}
		})
	}
}

func TestDotAxpyScale(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 8, 15, 16, 17, 48, 64, 100, 129} {
		a, b := randVec(r, n, 1), randVec(r, n, 1)
		var s, abs float64
		for i := range a {
			s += float64(a[i]) * float64(b[i])
			abs += math.Abs(float64(a[i]) * float64(b[i]))
		}
		var ref float32
		withPath(t, func(p Path) {
			got := Dot(a, b)
			if d := math.Abs(float64(got) - s); d > 4e-6*abs+1e-30 {
				t.Errorf("%v Dot n=%d: %v want %v", p, n, got, s)
			}
			if p == Generic {
				ref = got
			} else if math.Float32bits(got) != math.Float32bits(ref) {
				t.Errorf("%v Dot n=%d: %v != generic %v", p, n, got, ref)
			}
			y := append([]float32(nil), b...)
			Axpy(y, 0.75, a)
			z := append([]float32(nil), a...)
			Scale(z, -1.5)
			for i := range y {
				// Independent restatement of the contract: round the product,
				// then the sum (float64 holds the exact product and sum).
				wantY := float32(float64(b[i]) + float64(float32(0.75*float64(a[i]))))
				if y[i] != wantY {
					t.Fatalf("%v Axpy n=%d i=%d: %v want %v", p, n, i, y[i], wantY)
				}
				if wantZ := float32(-1.5 * float64(a[i])); z[i] != wantZ {
					t.Fatalf("%v Scale n=%d i=%d: %v want %v", p, n, i, z[i], wantZ)
				}
			}
		})
	}
}

func TestParallelCoversOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewParallel(threads)
		for _, n := range []int{0, 1, 2, 5, 31, 1000} {
			hits := make([]int32, n)
			p.For(n, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i]++ // ranges are disjoint, so no race
				}
			})
			for i, h := range hits {
				if h != 1 {
					t.Fatalf("threads=%d n=%d: index %d visited %d times", threads, n, i, h)
				}
			}
		}
		// Nested For runs inline instead of deadlocking.
		var total int
		p.For(4, func(lo, hi int) {
			p.For(3, func(lo2, hi2 int) {})
		})
		_ = total
		p.Close()
		p.Close()
		ran := false
		p.For(1, func(lo, hi int) { ran = true })
		if !ran {
			t.Fatalf("For after Close did not run")
		}
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		m    Matrix
		code ErrorCode
	}{
		{Matrix{Type: quant.Q3_K, Rows: 1, Cols: 256, Data: make([]byte, 110)}, ErrUnsupportedType},
		{Matrix{Type: quant.Q5_K, Rows: 1, Cols: 256, Data: make([]byte, 176)}, ""},
		{Matrix{Type: quant.Q8_0, Rows: 1, Cols: 33, Data: make([]byte, 34)}, ErrShape},
		{Matrix{Type: quant.Q8_0, Rows: 2, Cols: 32, Data: make([]byte, 34)}, ErrShape},
		{Matrix{Type: quant.F32, Rows: 2, Cols: 3, Data: make([]byte, 24)}, ""},
	}
	for _, c := range cases {
		err := c.m.Check()
		var code ErrorCode
		if e, ok := err.(*Error); ok {
			code = e.Code
		} else if err != nil {
			t.Fatalf("%v: error %T is not *Error", c.m.Type, err)
		}
		if code != c.code {
			t.Errorf("%v %dx%d len %d: code %q want %q (%v)", c.m.Type, c.m.Rows, c.m.Cols, len(c.m.Data), code, c.code, err)
		}
	}
}

func ExampleMatMul() {
	w := &Matrix{Type: quant.F32, Rows: 2, Cols: 3, Data: make([]byte, 24)}
	quant.Quantize(quant.F32, []float32{1, 2, 3, 4, 5, 6}, w.Data)
	out := make([]float32, 2)
	MatMul(nil, out, w, []float32{1, 0, -1}, 1)
	fmt.Println(out)
	// Output: [-2 -2]
}

func TestDescribe(t *testing.T) {
	old := CurrentPath()
	defer SetPath(old)
	if err := SetPath(Generic); err != nil {
		t.Fatal(err)
	}
	if got := Describe(); len(got) < len("generic (available: generic)") || got[:8] != "generic " {
		t.Fatalf("Describe() = %q", got)
	}
	if err := SetPath(Path(7)); err == nil {
		t.Fatal("SetPath accepted an unknown path")
	}
}

// TestParallelBackToBack: loops issued back to back, so workers often wake
// for a loop that has already finished; none may run a chunk twice, skip
// one, or run a chunk of one loop with another loop's function.
func TestParallelBackToBack(t *testing.T) {
	for _, threads := range []int{2, 3} {
		p := NewParallel(threads)
		var hits [64]atomic.Int32
		for it := 0; it < 3000; it++ {
			n := 1 + it*7%63
			tag := int32(it)
			p.For(n, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					if hits[i].Load() != tag {
						t.Errorf("loop %d: index %d visited twice or by a stale loop", it, i)
					}
					hits[i].Store(tag + 1)
				}
			})
			for i := 0; i < n; i++ {
				if hits[i].Load() != tag+1 {
					t.Fatalf("threads=%d loop %d (n=%d): index %d not visited", threads, it, n, i)
				}
			}
			for i := 0; i < 64; i++ {
				hits[i].Store(tag + 1)
			}
		}
		p.Close()
	}
}
