package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/internal/kernels"
)

func ulpDiff(a, b float32) int64 {
	d := int64(math.Float32bits(a)) - int64(math.Float32bits(b))
	if d < 0 {
		d = -d
	}
	return d
}

func TestExpfAccuracy(t *testing.T) {
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
	if v := expf(float32(math.NaN())); v == v {
		t.Fatal("expf(NaN) is not NaN")
	}
}

// TestExpSIMDMatchesGo: the AVX-512 blocks give bitwise the Go expf and
// SwiGLU results, including blocks the assembly hands back to Go (NaN,
// underflow, overflow), at every offset and tail length.
func TestExpSIMDMatchesGo(t *testing.T) {
	if kernels.CurrentPath() != kernels.AVX512 {
		t.Skip("no AVX-512 on this machine: only the Go path exists")
	}
	rng := rand.New(rand.NewPCG(5, 5))
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
		want := make([]float32, n)
		for i, v := range x {
			want[i] = expf(v - m)
		}
		got := slices.Clone(x)
		expSubInPlace(got, m)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("exp(%g - %g): SIMD %g, Go %g", x[i], m, got[i], want[i])
			}
		}
		g := slices.Clone(x)
		swiglu(g, u)
		for i, v := range x {
			w := v / (1 + expf(-v)) * u[i]
			if math.Float32bits(g[i]) != math.Float32bits(w) && !(g[i] != g[i] && w != w) {
				t.Fatalf("swiglu(%g, %g): SIMD %g, Go %g", v, u[i], g[i], w)
			}
		}
	}
	// Dense sweep of the range the assembly handles.
	var xs []float32
	for v := float32(-87); v <= 88; v += 0.0037 {
		xs = append(xs, v)
	}
	got := slices.Clone(xs)
	expSubInPlace(got, 0)
	for i, v := range xs {
		if w := expf(v); math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Fatalf("exp(%g): SIMD %g, Go %g", v, got[i], w)
		}
	}
}

// TestSoftmaxSIMDMatchesGo: the AVX-512 softmax gives the Go softmax's bits
// for every length (tails), spreads that underflow, and refuses NaN/+Inf.
func TestSoftmaxSIMDMatchesGo(t *testing.T) {
	if kernels.CurrentPath() != kernels.AVX512 {
		t.Skip("no AVX-512 on this machine: only the Go path exists")
	}
	rng := rand.New(rand.NewPCG(6, 6))
	for trial := 0; trial < 2000; trial++ {
		n := 1 + rng.IntN(90)
		x := make([]float32, n)
		spread := []float64{0.1, 5, 40, 200}[rng.IntN(4)]
		for i := range x {
			x[i] = float32(rng.NormFloat64() * spread)
			if rng.IntN(40) == 0 {
				x[i] = float32(math.Inf(-1))
			}
		}
		x[rng.IntN(n)] = float32(rng.NormFloat64()) // at least one finite
		want := slices.Clone(x)
		softmaxGo(want)
		got := slices.Clone(x)
		if !softmaxAVX512(got) {
			t.Fatalf("AVX-512 softmax refused finite input %v", x)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d spread %g: element %d: SIMD %g, Go %g (input %g)", n, spread, i, got[i], want[i], x[i])
			}
		}
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
		x := []float32{1, 2, bad, 3}
		if softmaxAVX512(x) || x[0] != 1 || x[3] != 3 {
			t.Fatalf("input with %g: handled or modified", bad)
		}
	}
}
