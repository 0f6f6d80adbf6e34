package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func actInputs() []float32 {
	in := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 88.72283905206835, -103.97207708, 88.7228, 88.73, -103.98, -103.9,
		-87.3, -90, -100, 80, 88.5, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-30, -1e-30, 0.5, -0.5}
	r := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 3000; i++ {
		in = append(in, float32((r.Float64()*2-1)*110))
	}
	for i := 0; i < 1000; i++ {
		in = append(in, float32(r.NormFloat64()*3))
	}
	return in
}

// ulpDiff counts float32 steps between a and b (same sign assumed).
func ulpDiff(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	if d < 0 {
		d = -d
	}
	return d
}

// TestExpfAgainstMathExp: the reference is math.Exp in float64, rounded.
func TestExpfAgainstMathExp(t *testing.T) {
	for _, x := range actInputs() {
		got := expf(x)
		want := float32(math.Exp(float64(x)))
		if math.IsNaN(float64(x)) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("expf(NaN) = %v", got)
			}
			continue
		}
		if want < 1.2e-38 { // subnormal or zero: absolute bound
			if math.Abs(float64(got)-float64(want)) > 3e-45 {
				t.Fatalf("expf(%v) = %v, want %v", x, got, want)
			}
			continue
		}
		if ulpDiff(got, want) > 2 {
			t.Fatalf("expf(%v) = %v, want %v (%d ulp)", x, got, want, ulpDiff(got, want))
		}
	}
}

// TestActivationsPathsBitwiseEqual: SiLUMul and ExpSub give identical bits
// on every path, including NaN, infinities, the overflow and subnormal
// scaling branches, and tails shorter than a vector.
func TestActivationsPathsBitwiseEqual(t *testing.T) {
	in := actInputs()
	u := make([]float32, len(in))
	for i := range u {
		u[i] = float32(i%7) - 2.5
	}
	for _, n := range []int{1, 5, 16, 17, 33, len(in)} {
		var refS, refE []float32
		withPath(t, func(p Path) {
			g := append([]float32(nil), in[:n]...)
			SiLUMul(g, u)
			e := append([]float32(nil), in[:n]...)
			ExpSub(e, 0.25)
			if p == Generic {
				refS, refE = g, e
				for i, x := range in[:n] {
					// Independent restatement of SiLU*u for finite results.
					want := float64(x) / (1 + math.Exp(-float64(x))) * float64(u[i])
					if !math.IsNaN(want) && !math.IsInf(want, 0) && math.Abs(float64(g[i])-want) > 1e-6*math.Abs(want)+1e-30 {
						t.Fatalf("SiLUMul(%v)*%v = %v, want %v", x, u[i], g[i], want)
					}
				}
				return
			}
			for i := range g {
				if math.Float32bits(g[i]) != math.Float32bits(refS[i]) {
					t.Fatalf("%v SiLUMul n=%d x=%v: %v != generic %v", p, n, in[i], g[i], refS[i])
				}
				if math.Float32bits(e[i]) != math.Float32bits(refE[i]) {
					t.Fatalf("%v ExpSub n=%d x=%v: %v != generic %v", p, n, in[i], e[i], refE[i])
				}
			}
		})
	}
}

// TestExpfRoundsHalfAwayFromZero: the only float32 inputs (found by an
// exhaustive sweep of all 2^32) on which rounding n = x*log2e half up
// instead of half away from zero changes expf's result. Half away from
// zero is what internal/model's softmax has always used; half up gave
// 1 ulp more error on 9 of these 10 inputs. want is float32(math.Exp(x))
// except at the last input, where even half away from zero is 1 ulp off
// (within expf's 2 ulp bound); every path must give exactly these bits.
func TestExpfRoundsHalfAwayFromZero(t *testing.T) {
	cases := []struct{ x, want uint32 }{
		{0xc1e09466, 0x2b3504fb}, {0xc1ebab88, 0x2a3504ef}, {0xc1f6c2a9, 0x293504fb},
		{0xc2067876, 0x273504fb}, {0xc20c0407, 0x263504ef}, {0xc23b2656, 0x1db504d3},
		{0xc24377ae, 0x1c350505}, {0xc2490340, 0x1b3504cd}, {0xc25f3183, 0x173504cd},
		{0xc28e185d, 0x0c350504},
	}
	for i, c := range cases {
		x := math.Float32frombits(c.x)
		exact := math.Float32bits(float32(math.Exp(float64(x))))
		if d := ulpDiff(math.Float32frombits(c.want), math.Float32frombits(exact)); d > 1 || (d != 0) != (i == 9) {
			t.Fatalf("table entry %d: want %#x is %d ulp from math.Exp's %#x", i, c.want, d, exact)
		}
		if got := math.Float32bits(expf(x)); got != c.want {
			t.Errorf("expf(%#x) = %#x, want %#x", c.x, got, c.want)
		}
	}
	withPath(t, func(p Path) {
		in := make([]float32, len(cases))
		for i, c := range cases {
			in[i] = math.Float32frombits(c.x)
		}
		e := append([]float32(nil), in...)
		ExpSub(e, 0) // x - 0 is x exactly
		g := make([]float32, len(in))
		u := make([]float32, len(in))
		for i, x := range in {
			g[i], u[i] = -x, 1
		}
		SiLUMul(g, u) // g/(1+e^-g) with e^-g = expf(x)
		for i, c := range cases {
			if got := math.Float32bits(e[i]); got != c.want {
				t.Errorf("%v ExpSub(%#x) = %#x, want %#x", p, c.x, got, c.want)
			}
			want := -in[i] / (1 + math.Float32frombits(c.want))
			if math.Float32bits(g[i]) != math.Float32bits(want) {
				t.Errorf("%v SiLUMul(%v) = %v, want %v", p, -in[i], g[i], want)
			}
		}
	})
}

// TestExpfAccuracySweep: 2M random inputs over the whole finite range and
// its edges, within 2 ulp of math.Exp (absolute bound for subnormal
// results, exact 0 and +Inf beyond the ends).
func TestExpfAccuracySweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	worst := int64(0)
	check := func(x float32) {
		want := float32(math.Exp(float64(x)))
		got := expf(x)
		if want == 0 || math.IsInf(float64(want), 0) {
			if got != want {
				t.Fatalf("expf(%g) = %g, want %g", x, got, want)
			}
			return
		}
		if want < 1.2e-38 { // subnormal results: absolute error is what counts
			if math.Abs(float64(got-want)) > 2e-45*4 {
				t.Fatalf("expf(%g) = %g, want %g", x, got, want)
			}
			return
		}
		worst = max(worst, ulpDiff(got, want))
	}
	for i := 0; i < 2_000_000; i++ {
		check(float32(rng.Float64()*190 - 104))
	}
	for _, x := range []float32{0, -0, 1, -1, 88.7, 88.8, -87.3, -103, -104, -200, 200, 1e-10, -1e-10} {
		check(x)
	}
	if worst > 2 {
		t.Fatalf("expf is off by up to %d ulp, want <= 2", worst)
	}
}

// TestExpSubSiLUMulRandomBlocks: every path gives the Go expf's bits on
// blocks mixing NaN, underflow and overflow lanes at every offset and tail
// length, and on a dense sweep of the range where results are normal.
func TestExpSubSiLUMulRandomBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
	withPath(t, func(p Path) {
		for trial := 0; trial < 400; trial++ {
			n := rng.IntN(100)
			x := make([]float32, n)
			u := make([]float32, n)
			for i := range x {
				switch rng.IntN(50) {
				case 0:
					x[i] = float32(math.NaN())
				case 1:
					x[i] = -100 - float32(rng.Float64())*20
				case 2:
					x[i] = 88 + float32(rng.Float64())
				default:
					x[i] = float32(rng.Float64()*60 - 40)
				}
				u[i] = float32(rng.NormFloat64())
			}
			m := float32(rng.Float64()*4 - 2)
			got := slices.Clone(x)
			ExpSub(got, m)
			for i, v := range x {
				if w := expf(v - m); !same(got[i], w) {
					t.Fatalf("%v exp(%g - %g): %g, Go expf %g", p, v, m, got[i], w)
				}
			}
			g := slices.Clone(x)
			SiLUMul(g, u)
			for i, v := range x {
				if w := v / (1 + expf(-v)) * u[i]; !same(g[i], w) {
					t.Fatalf("%v SiLUMul(%g, %g): %g, Go %g", p, v, u[i], g[i], w)
				}
			}
		}
		var xs []float32
		for v := float32(-87); v <= 88; v += 0.0037 {
			xs = append(xs, v)
		}
		got := slices.Clone(xs)
		ExpSub(got, 0)
		for i, v := range xs {
			if w := expf(v); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Fatalf("%v exp(%g): %g, Go expf %g", p, v, got[i], w)
			}
		}
	})
}

// softmaxRef is softmax from first principles in float64, of the float32
// differences x[i] - max (as ggml and Softmax define it: that subtraction
// rounds, and e^ magnifies its error beyond float32 precision).
func softmaxRef(x []float32) []float64 {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	out := make([]float64, len(x))
	sum := 0.0
	for i, v := range x {
		out[i] = math.Exp(float64(v - mx))
		sum += out[i]
	}
	for i := range out {
		out[i] /= sum
	}
	return out
}

// TestSoftmax: on every path Softmax gives the Go code's bits for every
// length (tails), spreads that underflow and -Inf (masked) entries, and is
// within float32 rounding of a float64 softmax.
func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	var inputs [][]float32
	for trial := 0; trial < 2000; trial++ {
		n := 1 + rng.IntN(90)
		if trial%8 == 0 {
			n = 1 + rng.IntN(700) // prefill rows: the SIMD passes' main loops
		}
		x := make([]float32, n)
		spread := []float64{0.1, 5, 40, 200}[rng.IntN(4)]
		for i := range x {
			x[i] = float32(rng.NormFloat64() * spread)
			if rng.IntN(40) == 0 {
				x[i] = float32(math.Inf(-1))
			}
		}
		x[rng.IntN(n)] = float32(rng.NormFloat64()) // at least one finite
		inputs = append(inputs, x)
	}
	want := make([][]float32, len(inputs))
	for i, x := range inputs {
		want[i] = slices.Clone(x)
		softmaxGo(want[i])
		ref := softmaxRef(x)
		for j := range ref {
			if d := math.Abs(float64(want[i][j]) - ref[j]); d > 1e-6*ref[j]+1e-37 {
				t.Fatalf("n=%d element %d: %g, float64 softmax %g", len(x), j, want[i][j], ref[j])
			}
		}
	}
	withPath(t, func(p Path) {
		for i, x := range inputs {
			got := slices.Clone(x)
			Softmax(got)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("%v n=%d element %d: %g, Go %g (input %g)", p, len(x), j, got[j], want[i][j], x[j])
				}
			}
		}
		// NaN and +Inf rows go to the Go code on every path: the max is
		// NaN or +Inf, so is the sum, and every element becomes NaN.
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			// In the tail and in the SIMD body of a row.
			for _, at := range [][2]int{{4, 2}, {21, 3}, {21, 18}} {
				x := make([]float32, at[0])
				for j := range x {
					x[j] = float32(j)
				}
				x[at[1]] = bad
				Softmax(x)
				for j, v := range x {
					if v == v {
						t.Fatalf("%v softmax of %d with %g at %d: element %d = %g, want NaN", p, at[0], bad, at[1], j, v)
					}
				}
			}
		}
	})
	if Available(AVX2) {
		// The AVX2 passes refuse the row too, in the SIMD body and the tail.
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			for _, at := range []int{3, 18} {
				x := make([]float32, 21)
				x[at] = bad
				if softmaxAVX2(x) || x[0] != 0 || x[20] != 0 {
					t.Fatalf("AVX2 softmax with %g at %d: handled or modified", bad, at)
				}
			}
		}
	}
	if CurrentPath() == AVX512 {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			x := []float32{1, 2, bad, 3}
			if softmaxAVX512(&x[0], len(x), &expConsts[0]) || x[0] != 1 || x[3] != 3 {
				t.Fatalf("AVX-512 softmax with %g: handled or modified", bad)
			}
		}
	}
}
