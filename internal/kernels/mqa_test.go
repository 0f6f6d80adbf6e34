package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// mqaVec is randVec with signed zeros, values whose products underflow to
// a signed zero, and exact cancellations mixed in: the cases where a wrong
// tree, a skipped 0*0 lane or a fused product would change the bits.
func mqaVec(r *rand.Rand, n int) []float32 {
	v := randVec(r, n, 1)
	for i := range v {
		switch r.IntN(12) {
		case 0:
			v[i] = float32(math.Copysign(0, -1))
		case 1:
			v[i] = 1e-30 * float32(r.NormFloat64())
		case 2:
			v[i] = 0
		}
	}
	return v
}

// TestMQAMatchesRowForms: on every path, MQADot gives exactly Dot of each
// query row and K row, and MQAAxpy exactly the rounded-product-then-add
// sequence over the rows in order (computed here in float64 then rounded,
// independently of the kernels), for every head dim 1..130, group sizes
// 1..9, 1..17 positions, strides wider than the rows, F32 and binary16
// rows; nothing is written outside the output rows.
func TestMQAMatchesRowForms(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	type shape struct{ hd, m, p int }
	var shapes []shape
	for hd := 1; hd <= 130; hd++ {
		m := 1 + (hd*7)%9
		p := 1 + (hd*5)%17
		if hd%13 == 0 {
			m, p = 17, 16
		}
		shapes = append(shapes, shape{hd, m, p})
	}
	// The models' shapes: stories260K (8-wide heads, 2 per KV head, 8
	// tokens a block), bench-15M (48), TinyLlama (64, 8 per KV head).
	for _, m := range []int{1, 2, 3, 4, 5, 8, 16, 64} {
		shapes = append(shapes, shape{8, m, 16}, shape{48, m, 13}, shape{64, m, 16}, shape{128, m, 7})
	}
	// Many rows over several 16-position groups and a rest: the
	// transposed-K form on the AVX-512 path.
	shapes = append(shapes, shape{16, 16, 40}, shape{32, 20, 17}, shape{64, 64, 48}, shape{128, 33, 35}, shape{144, 16, 16})
	// One and two positions through the pipelined AVX2 form (hd % 16 == 0,
	// four rows at a time): only a first position, or a first and one more.
	for _, hd := range []int{16, 48, 64} {
		shapes = append(shapes, shape{hd, 4, 1}, shape{hd, 8, 2}, shape{hd, 7, 1})
	}
	for _, sh := range shapes {
		hd, m, p := sh.hd, sh.m, sh.p
		ks := hd + r.IntN(3)*hd + r.IntN(4)
		os := p + r.IntN(3)
		q := mqaVec(r, m*hd)
		k32 := mqaVec(r, (p-1)*ks+hd)
		// Query row 0 all -0 against a K row 0 of positive values: every
		// product is -0, the canonical sum +0.
		for d := range hd {
			q[d] = float32(math.Copysign(0, -1))
			k32[d] = float32(math.Abs(float64(k32[d]))) + 1
		}
		k16 := make([]uint16, len(k32))
		for i := range k32 {
			k16[i] = quant.FP32ToFP16(k32[i])
		}
		kw := make([]float32, len(k16)) // k16 widened, for the reference
		for i, h := range k16 {
			kw[i] = quant.FP16ToFP32(h)
		}
		w := mqaVec(r, (m-1)*os+p)
		y0 := mqaVec(r, m*hd)
		for _, f16 := range []bool{false, true} {
			kr := k32
			if f16 {
				kr = kw
			}
			// References: Dot on the Generic path; the axpy sequence in float64.
			old := CurrentPath()
			SetPath(Generic)
			wantS := make([]float32, (m-1)*os+p)
			for i := range m {
				for j := range p {
					wantS[i*os+j] = Dot(q[i*hd:(i+1)*hd], kr[j*ks:j*ks+hd])
				}
			}
			SetPath(old)
			wantY := append([]float32(nil), y0...)
			for i := range m {
				for j := range p {
					for d := range hd {
						prod := float32(float64(w[i*os+j]) * float64(kr[j*ks+d]))
						wantY[i*hd+d] = float32(float64(wantY[i*hd+d]) + float64(prod))
					}
				}
			}
			withPathAttn(t, func(path Path, ymm bool) {
				name := fmt.Sprintf("%v (f16YMM %v) hd=%d m=%d p=%d f16=%v", path, ymm, hd, m, p, f16)
				got := make([]float32, len(wantS)+1)
				for i := range got {
					got[i] = 42
				}
				y := append(append([]float32(nil), y0...), 42)
				if f16 {
					MQADot(got[:len(wantS)], os, q, m, hd, k16, ks, p)
					MQAAxpy(y[:m*hd], w, os, m, hd, k16, ks, p)
				} else {
					MQADot(got[:len(wantS)], os, q, m, hd, k32, ks, p)
					MQAAxpy(y[:m*hd], w, os, m, hd, k32, ks, p)
				}
				for i := range m {
					for j := range os {
						idx := i*os + j
						if idx >= len(wantS) {
							break
						}
						want := wantS[idx]
						if j >= p {
							want = 42
						}
						if math.Float32bits(got[idx]) != math.Float32bits(want) {
							t.Fatalf("%s: score [%d][%d] = %v (%#x), want %v (%#x)", name, i, j, got[idx], math.Float32bits(got[idx]), want, math.Float32bits(want))
						}
					}
				}
				if got[len(wantS)] != 42 || y[m*hd] != 42 {
					t.Fatalf("%s: wrote past the output", name)
				}
				for i := range wantY {
					if math.Float32bits(y[i]) != math.Float32bits(wantY[i]) {
						t.Fatalf("%s: y[%d][%d] = %v, want %v", name, i/hd, i%hd, y[i], wantY[i])
					}
				}
			})
		}
	}
}

// withPathAttn runs f on every path, the AVX-512 path twice: with the F16
// prefill attention on the YMM kernels (f16YMM, Zen 4's default) and on
// the ZMM ones (the default elsewhere).
func withPathAttn(t testing.TB, f func(p Path, ymm bool)) {
	old := f16YMM
	defer func() { f16YMM = old }()
	withPath(t, func(p Path) {
		for _, ymm := range []bool{true, false} {
			if p != AVX512 && !ymm {
				continue
			}
			f16YMM = ymm
			f(p, ymm)
		}
	})
}

// sameBits32: equal bits, or both NaN.
func sameBits32(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// TestScaleSoftmaxMatchesGeneric: on every path ScaleSoftmax (and FlashTile,
// its numerators, max and sum without the normalisation) gives exactly
// its definition (written out in the test: expf, 0 below attnFlush, the
// float64 lane sums), for every length 1..300 and rows of every kind:
// narrow and wide spreads (around -50 and -87), signed zeros, -Inf, +Inf,
// NaN, all equal.
func TestScaleSoftmaxMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	kinds := []func(i int) float32{
		func(int) float32 { return float32(r.NormFloat64() * 3) },
		func(int) float32 { return float32(r.NormFloat64() * 40) },
		func(int) float32 { return float32(r.Float64()*86.9) - 40 },
		func(int) float32 { return float32(r.Float64()*50.3) - 40 },
		func(int) float32 { return float32(r.Float64()*49.9) - 40 },
		func(int) float32 { return float32(r.Float64()*87.2) - 40 },
		func(int) float32 { return float32(r.Float64() * -110) }, // subnormal and zero results
		func(int) float32 { return float32(math.Copysign(0, float64(r.IntN(2)*2-1))) },
		func(int) float32 { return 1.5 },
		func(i int) float32 {
			if i%7 == 3 {
				return float32(math.Inf(-1))
			}
			return float32(r.NormFloat64())
		},
		func(i int) float32 {
			if i%11 == 5 {
				return float32(math.Inf(1))
			}
			return float32(r.NormFloat64())
		},
		func(i int) float32 {
			if i%13 == 2 {
				return float32(math.NaN())
			}
			return float32(r.NormFloat64())
		},
	}
	for n := 1; n <= 300; n++ {
		for ki, kind := range kinds {
			x := make([]float32, n)
			for i := range x {
				x[i] = kind(i)
			}
			scale := float32(0.125 + r.Float64())
			// The reference, written out here: scale, max, e^(x - max) as
			// expf or 0 below attnFlush, float64 lane sums, normalise.
			want := append([]float32(nil), x...)
			mx := float32(math.Inf(-1))
			for i := range want {
				want[i] *= scale
				mx = max(mx, want[i])
			}
			var acc [8]float64
			for i, v := range want {
				if d := v - mx; d < -50 {
					want[i] = 0
				} else {
					want[i] = expf(d)
				}
				acc[i%8] += float64(want[i])
			}
			sum := ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
			num := append([]float32(nil), want...) // FlashTile's numerators
			fmx := mx
			if fmx == 0 {
				fmx = 0 // FlashTile's max of zero is +0
			}
			for i := range want {
				want[i] *= float32(1 / sum)
			}
			withPath(t, func(p Path) {
				got := append(append([]float32(nil), x...), 42)
				gm, gs := FlashTile(got[:n], scale)
				if !sameBits32(gm, fmx) || math.Float64bits(gs) != math.Float64bits(sum) && !(gs != gs && sum != sum) {
					t.Fatalf("%v n=%d kind %d: FlashTile max, sum = %v, %v, want %v, %v", p, n, ki, gm, gs, fmx, sum)
				}
				for i := range num {
					if !sameBits32(got[i], num[i]) {
						t.Fatalf("%v n=%d kind %d: FlashTile x[%d] = %v, want %v", p, n, ki, i, got[i], num[i])
					}
				}
				if got[n] != 42 {
					t.Fatalf("%v n=%d kind %d: FlashTile wrote past the row", p, n, ki)
				}
			})
			withPath(t, func(p Path) {
				got := append(append([]float32(nil), x...), 42)
				ScaleSoftmax(got[:n], scale)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(want[i] != want[i] && got[i] != got[i]) {
						t.Fatalf("%v n=%d kind %d: x[%d] = %v, want %v", p, n, ki, i, got[i], want[i])
					}
				}
				if got[n] != 42 {
					t.Fatalf("%v n=%d kind %d: wrote past the row", p, n, ki)
				}
			})
		}
	}
}

// TestMQARefusesBadShapes: sizes that do not fit the slices, negative or
// large enough to overflow the bounds arithmetic panic before any kernel
// runs.
func TestMQARefusesBadShapes(t *testing.T) {
	q, out, k := make([]float32, 64), make([]float32, 64), make([]float32, 64)
	for _, c := range []struct{ m, hd, os, ks, p int }{
		{2, 8, 4, 8, 5},       // os < p
		{2, 8, 8, 4, 2},       // ks < hd
		{9, 8, 8, 8, 1},       // q too short
		{1, 8, 8, 8, 9},       // k too short
		{1 << 40, 8, 8, 8, 1}, // overflowing m
		{5, 8, 1 << 62, 8, 1}, // (m-1)*os wraps to 0
		{1, -8, 8, 8, 1},      // negative hd
	} {
		for _, axpy := range []bool{false, true} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%+v axpy=%v: no panic", c, axpy)
					}
				}()
				if axpy {
					MQAAxpy(out, q, c.os, c.m, c.hd, k, c.ks, c.p)
				} else {
					MQADot(out, c.os, q, c.m, c.hd, k, c.ks, c.p)
				}
			}()
		}
	}
}

// TestAttnF16YMMChoice: the F16 prefill attention takes the YMM kernels on
// AMD CPUs and the ZMM ones elsewhere; SLUICE_ATTN_ZMM=1 / 0 forces ZMM /
// YMM on either.
func TestAttnF16YMMChoice(t *testing.T) {
	for _, c := range []struct {
		env      string
		amd, ymm bool
	}{
		{"", true, true}, {"", false, false},
		{"1", true, false}, {"1", false, false},
		{"0", true, true}, {"0", false, true},
		{"yes", true, true}, {"yes", false, false},
	} {
		if got := attnF16YMM(c.env, c.amd); got != c.ymm {
			t.Errorf("attnF16YMM(%q, amd %v) = %v, want %v", c.env, c.amd, got, c.ymm)
		}
	}
}
