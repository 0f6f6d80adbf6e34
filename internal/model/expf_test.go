package model

import (
	"math"
	"math/rand/v2"
	"testing"
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
