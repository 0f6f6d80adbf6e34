package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

func randRow(seed uint64, n int, scale float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 99))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * scale)
	}
	return x
}

// TestQuantizeRoundTrip: every quantizer writes blocks that decode to within
// the type's step size of the input. The bounds are from first principles:
// Q8_0 step amax/127 (error <= step/2 plus f16 rounding of d), Q4_0 step
// amax/8 (a full step at the clamped end opposite the largest value, as ggml), Q4_K step (range of a 32-group)/15 plus 6-bit scale quantization,
// Q6_K step amax/32 per 16-group plus 8-bit scale quantization.
func TestQuantizeRoundTrip(t *testing.T) {
	const n = 4 * QK_K
	for _, tc := range []struct {
		typ Type
		// relative bound on max error divided by the block's max |x|
		rel float64
	}{
		{F32, 0}, {F16, 1.0 / 1024}, {BF16, 1.0 / 128},
		{Q8_0, 0.5/127 + 1e-3}, {Q4_0, 1.0/8 + 1e-2}, {Q4_K, 0.12}, {Q6_K, 0.03},
		{Q4_1, 0.5/15*2 + 1e-2}, {Q5_0, 1.0/16 + 1e-2}, {Q5_1, 0.5/31*2 + 1e-2}, {Q5_K, 0.06}, {Q8_K, 0.5/127 + 1e-6},
	} {
		for seed := uint64(0); seed < 5; seed++ {
			x := randRow(seed, n, math.Pow(10, float64(seed)-2))
			if seed == 4 {
				for i := 0; i < 64; i++ {
					x[i] = 0 // an all-zero block must round-trip to zeros
				}
			}
			rb, _ := tc.typ.RowBytes(n)
			buf := make([]byte, rb)
			if err := Quantize(tc.typ, x, buf); err != nil {
				t.Fatalf("%s: %v", tc.typ, err)
			}
			y := make([]float32, n)
			if err := Dequantize(tc.typ, buf, y); err != nil {
				t.Fatal(err)
			}
			bs := max(tc.typ.BlockSize(), 256)
			for b := 0; b < n/bs; b++ {
				var amax float64
				for _, v := range x[b*bs : (b+1)*bs] {
					amax = max(amax, math.Abs(float64(v)))
				}
				for i := b * bs; i < (b+1)*bs; i++ {
					if e := math.Abs(float64(y[i] - x[i])); e > tc.rel*amax+1e-30 {
						t.Fatalf("%s seed %d: element %d = %v, input %v, error %g > %g", tc.typ, seed, i, y[i], x[i], e, tc.rel*amax)
					}
				}
			}
		}
	}
}

// TestQuantizeQ8_0Ref checks the file quantizer's rounding: roundf, i.e.
// halves away from zero, with d = amax/127.
func TestQuantizeQ8_0Ref(t *testing.T) {
	x := make([]float32, 32)
	x[0] = 127 // d = 1, id = 1
	x[1], x[2], x[3] = 2.5, -2.5, 3.5
	b := make([]byte, 34)
	if err := Quantize(Q8_0, x, b); err != nil {
		t.Fatal(err)
	}
	if d := FP16ToFP32(binary.LittleEndian.Uint16(b)); d != 1 {
		t.Fatalf("d = %v", d)
	}
	if q := [4]int8{int8(b[2]), int8(b[3]), int8(b[4]), int8(b[5])}; q != [4]int8{127, 3, -3, 4} {
		t.Fatalf("q = %v, want [127 3 -3 4]", q)
	}
}

// TestQuantizeRowQ8_0 checks the activation quantizer's x86 semantics:
// id = 127/amax, round half to even.
func TestQuantizeRowQ8_0(t *testing.T) {
	x := make([]float32, 64)
	x[0] = -127
	x[1], x[2], x[3], x[4] = 2.5, -2.5, 3.5, 0.5
	// second block all zeros
	b := make([]byte, 68)
	QuantizeRowQ8_0(x, b)
	if d := FP16ToFP32(binary.LittleEndian.Uint16(b)); d != 1 {
		t.Fatalf("d = %v", d)
	}
	got := [5]int8{int8(b[2]), int8(b[3]), int8(b[4]), int8(b[5]), int8(b[6])}
	if got != [5]int8{-127, 2, -2, 4, 0} {
		t.Fatalf("q = %v, want [-127 2 -2 4 0] (ties to even)", got)
	}
	for _, v := range b[34:] {
		if v != 0 {
			t.Fatal("zero block not all zero")
		}
	}
	// Against a float64 reference on random data.
	x = randRow(7, 32*8, 3)
	b = make([]byte, 34*8)
	QuantizeRowQ8_0(x, b)
	for blk := 0; blk < 8; blk++ {
		var amax float32
		for _, v := range x[32*blk : 32*blk+32] {
			amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
		}
		id := float32(127) / amax
		if got, want := binary.LittleEndian.Uint16(b[34*blk:]), FP32ToFP16(amax/127); got != want {
			t.Fatalf("block %d d = %#x want %#x", blk, got, want)
		}
		for j := 0; j < 32; j++ {
			want := int8(math.RoundToEven(float64(float32(x[32*blk+j] * id))))
			if got := int8(b[34*blk+2+j]); got != want {
				t.Fatalf("block %d q[%d] = %d want %d", blk, j, got, want)
			}
		}
	}
}

func TestQuantizeRowQ8_K(t *testing.T) {
	x := make([]float32, 2*QK_K)
	x[0] = -127 // max by magnitude, negative: iscale = 1, d = 1
	x[1] = 127  // equal magnitude later: the first one wins
	x[2], x[3], x[17] = 2.5, 3.5, -0.5
	b := make([]byte, 2*Q8_KBlockBytes)
	for i := range b {
		b[i] = 0xAA // the zero block must be fully written
	}
	QuantizeRowQ8_K(x, b)
	if d := math.Float32frombits(binary.LittleEndian.Uint32(b)); d != 1 {
		t.Fatalf("d = %v, want 1", d)
	}
	q := func(j int) int8 { return int8(b[4+j]) }
	if q(0) != -127 || q(1) != 127 || q(2) != 2 || q(3) != 4 || q(17) != 0 {
		t.Fatalf("q = %d %d %d %d %d, want -127 127 2 4 0", q(0), q(1), q(2), q(3), q(17))
	}
	if s := int16(binary.LittleEndian.Uint16(b[260:])); s != -127+127+2+4 {
		t.Fatalf("bsums[0] = %d", s)
	}
	for i, v := range b[Q8_KBlockBytes:] {
		if v != 0 {
			t.Fatalf("zero block byte %d = %#x", i, v)
		}
	}

	// Positive max: iscale = -127/max makes q negative, d negative.
	x = randRow(3, QK_K, 1)
	var amax, mx float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, mx = a, v
		}
	}
	b = b[:Q8_KBlockBytes]
	QuantizeRowQ8_K(x, b)
	iscale := float32(-127) / mx
	if d := math.Float32frombits(binary.LittleEndian.Uint32(b)); d != 1/iscale {
		t.Fatalf("d = %v want %v", d, 1/iscale)
	}
	for s := 0; s < 16; s++ {
		sum := 0
		for j := 16 * s; j < 16*s+16; j++ {
			want := min(127, int(math.RoundToEven(float64(float32(iscale*x[j])))))
			if int(int8(b[4+j])) != want {
				t.Fatalf("q[%d] = %d want %d", j, int8(b[4+j]), want)
			}
			sum += want
		}
		if got := int16(binary.LittleEndian.Uint16(b[260+2*s:])); int(got) != sum {
			t.Fatalf("bsums[%d] = %d want %d", s, got, sum)
		}
	}
}
