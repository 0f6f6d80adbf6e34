package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestFP16RowsMatchScalar: on every path, widening every binary16 value
// and narrowing float32s of every kind (each binary16 exactly, the
// midpoints between neighbours, where round-to-nearest-even decides, just
// off them, subnormals, overflow, infinities, NaNs, random bits) give
// exactly quant.FP16ToFP32 (a signaling NaN made quiet, as vcvtph2ps
// does: measured here) / quant.FP32ToFP16 (RNE as ggml_fp32_to_fp16), at every
// length 1..40 so each tail is covered.
func TestFP16RowsMatchScalar(t *testing.T) {
	all := make([]uint16, 1<<16)
	for i := range all {
		all[i] = uint16(i)
	}
	var fs []float32
	for _, h := range all {
		f := quant.FP16ToFP32(h)
		fs = append(fs, f)
		if h&0x7c00 == 0x7c00 {
			continue
		}
		next := quant.FP16ToFP32(h + 1)
		if h&0x7fff == 0x7bff {
			next = float32(math.Copysign(65520, float64(f))) // the overflow threshold
		}
		mid := float32((float64(f) + float64(next)) / 2)
		fs = append(fs, mid, math.Nextafter32(mid, f), math.Nextafter32(mid, next))
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1 << 16 {
		fs = append(fs, math.Float32frombits(rng.Uint32()))
	}
	fs = append(fs, float32(math.Inf(1)), float32(math.Inf(-1)), 1e-30, -1e-30, 1e30, math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00123))
	withPath(t, func(p Path) {
		wide := make([]float32, len(all))
		FP16ToFP32Row(wide, all)
		for i, h := range all {
			want := quant.FP16ToFP32(h)
			if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
				want = math.Float32frombits(math.Float32bits(want) | 0x400000) // vcvtph2ps quiets a signaling NaN
			}
			if math.Float32bits(wide[i]) != math.Float32bits(want) {
				t.Fatalf("%v: widen %#04x = %#08x, want %#08x", p, h, math.Float32bits(wide[i]), math.Float32bits(want))
			}
		}
		narrow := make([]uint16, len(fs))
		FP32ToFP16Row(narrow, fs)
		for i, f := range fs {
			if want := quant.FP32ToFP16(f); narrow[i] != want {
				t.Fatalf("%v: narrow %#08x (%g) = %#04x, want %#04x", p, math.Float32bits(f), f, narrow[i], want)
			}
		}
		for n := 1; n <= 40; n++ {
			off := rng.IntN(len(fs) - n)
			got := make([]uint16, n+1)
			FP32ToFP16Row(got[:n], fs[off:off+n])
			back := make([]float32, n+1)
			FP16ToFP32Row(back[:n], got[:n])
			for i := range n {
				if got[i] != quant.FP32ToFP16(fs[off+i]) || math.Float32bits(back[i]) != math.Float32bits(widen16(got[i])) {
					t.Fatalf("%v n=%d: element %d converted wrongly", p, n, i)
				}
			}
			if got[n] != 0 || back[n] != 0 {
				t.Fatalf("%v n=%d: wrote past the row", p, n)
			}
		}
	})
}

// TestWidenRowsOddShapes: WidenRows over odd head dims, row counts and
// strides (a KV head's slice of a block) gives, on every path, exactly the
// scalar widening of each element, and writes nothing past the rows.
func TestWidenRowsOddShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	withPath(t, func(p Path) {
		for _, cols := range []int{1, 3, 7, 8, 9, 15, 16, 17, 31, 64, 65, 80, 128} {
			for _, rows := range []int{1, 2, 5, 16, 17} {
				stride := cols + rng.IntN(3)*cols + rng.IntN(5)
				src := make([]uint16, (rows-1)*stride+cols)
				for i := range src {
					src[i] = quant.FP32ToFP16(float32(rng.NormFloat64()))
				}
				dst := make([]float32, rows*cols+1)
				dst[rows*cols] = 42
				WidenRows(dst[:rows*cols], src, rows, stride)
				for j := range rows {
					for d := range cols {
						if want := quant.FP16ToFP32(src[j*stride+d]); math.Float32bits(dst[j*cols+d]) != math.Float32bits(want) {
							t.Fatalf("%v cols=%d rows=%d stride=%d: [%d][%d] = %v, want %v", p, cols, rows, stride, j, d, dst[j*cols+d], want)
						}
					}
				}
				if dst[rows*cols] != 42 {
					t.Fatalf("%v cols=%d rows=%d: wrote past the rows", p, cols, rows)
				}
			}
		}
	})
}
