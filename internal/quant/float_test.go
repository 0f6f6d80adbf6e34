package quant

import (
	"math"
	"testing"
)

// halfValue decodes binary16 from its definition with float64 arithmetic,
// independently of FP16ToFP32's bit manipulation.
func halfValue(h uint16) float64 {
	s := 1.0
	if h&0x8000 != 0 {
		s = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return s * math.Ldexp(m, -24)
	case 31:
		if m == 0 {
			return s * math.Inf(1)
		}
		return math.NaN()
	}
	return s * math.Ldexp(1+m/1024, e-15)
}

func TestFP16ToFP32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := FP16ToFP32(h)
		want := halfValue(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("FP16ToFP32(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("FP16ToFP32(%#04x) = %v, want %v", h, got, want)
		}
		if back := FP32ToFP16(got); back != h {
			t.Fatalf("FP32ToFP16(FP16ToFP32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestFP32ToFP16Known(t *testing.T) {
	cases := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {0.1, 0x2e66}, {65504, 0x7bff},
		{65519.99, 0x7bff}, {65520, 0x7c00}, // 65520 is the midpoint to 2^16: ties to even = inf
		{float32(math.Ldexp(1, -24)), 0x0001},
		{float32(math.Ldexp(1, -25)), 0x0000},                      // tie between 0 and min subnormal: even = 0
		{float32(math.Ldexp(1.0000001, -25)), 0x0001},              // just above the tie
		{float32(math.Ldexp(3, -25)), 0x0002},                      // 1.5 ulp subnormal: tie, even = 2
		{float32(math.Ldexp(1, -14) - math.Ldexp(1, -25)), 0x0400}, // rounds up into the smallest normal
		{float32(math.Inf(-1)), 0xfc00},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1e-10, 0}, {1e10, 0x7c00},
	}
	for _, c := range cases {
		if got := FP32ToFP16(c.f); got != c.want {
			t.Errorf("FP32ToFP16(%g) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
	if h := FP32ToFP16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("FP32ToFP16(NaN) = %#04x, not a NaN", h)
	}
}

// TestFP32ToFP16Midpoints checks round-to-nearest-even at every midpoint
// between adjacent finite halves, and one float32 ulp either side.
func TestFP32ToFP16Midpoints(t *testing.T) {
	for i := 0; i < 0x7bff; i++ {
		lo, hi := uint16(i), uint16(i+1)
		mid := (halfValue(lo) + halfValue(hi)) / 2
		m := float32(mid)
		if float64(m) != mid {
			t.Fatalf("midpoint %v not representable in float32", mid)
		}
		even := lo
		if lo&1 == 1 {
			even = hi
		}
		for _, sign := range []float32{1, -1} {
			s := uint16(0)
			if sign < 0 {
				s = 0x8000
			}
			if got := FP32ToFP16(sign * m); got != even|s {
				t.Fatalf("FP32ToFP16(%g) = %#04x, want %#04x (ties to even)", sign*m, got, even|s)
			}
			below := math.Nextafter32(m, 0)
			if got := FP32ToFP16(sign * below); got != lo|s {
				t.Fatalf("FP32ToFP16(%g) = %#04x, want %#04x", sign*below, got, lo|s)
			}
			above := math.Nextafter32(m, float32(math.Inf(1)))
			if got := FP32ToFP16(sign * above); got != hi|s {
				t.Fatalf("FP32ToFP16(%g) = %#04x, want %#04x", sign*above, got, hi|s)
			}
		}
	}
}

func TestBF16(t *testing.T) {
	cases := []struct {
		bits uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1.0
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above tie
		{0x7f7fffff, 0x7f80}, // max float rounds to inf
		{0x00000001, 0x0000}, // tiny subnormal rounds to zero
		{0x80000000, 0x8000}, // -0
		{0x7f800001, 0x7fc0}, // signalling NaN forced quiet, not inf
	}
	for _, c := range cases {
		if got := FP32ToBF16(math.Float32frombits(c.bits)); got != c.want {
			t.Errorf("FP32ToBF16(%#08x) = %#04x, want %#04x", c.bits, got, c.want)
		}
	}
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := BF16ToFP32(h)
		if math.Float32bits(f) != uint32(h)<<16 {
			t.Fatalf("BF16ToFP32(%#04x) bits %#08x", h, math.Float32bits(f))
		}
		if !math.IsNaN(float64(f)) && FP32ToBF16(f) != h {
			t.Fatalf("bf16 round trip %#04x -> %#04x", h, FP32ToBF16(f))
		}
	}
}

// TestDequantizeF16Exhaustive runs every half through Dequantize's table.
func TestDequantizeF16Exhaustive(t *testing.T) {
	src := make([]byte, 2<<16)
	for i := 0; i < 1<<16; i++ {
		src[2*i], src[2*i+1] = byte(i), byte(i>>8)
	}
	dst := make([]float32, 1<<16)
	if err := Dequantize(F16, src, dst); err != nil {
		t.Fatal(err)
	}
	for i, got := range dst {
		want := halfValue(uint16(i))
		if float64(got) != want && !(math.IsNaN(want) && math.IsNaN(float64(got))) {
			t.Fatalf("half %#04x -> %v, want %v", i, got, want)
		}
	}
}
