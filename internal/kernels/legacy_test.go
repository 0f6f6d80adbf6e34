package kernels

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// randLegacy fills rows x cols of t with random quants and small random
// f16 scales and offsets.
func randLegacy(r *rand.Rand, t quant.Type, rows, cols int) *Matrix {
	bb := t.BlockBytes()
	m := &Matrix{Type: t, Rows: rows, Cols: cols, Data: make([]byte, rows*cols/32*bb)}
	for b := 0; b < len(m.Data)/bb; b++ {
		blk := m.Data[b*bb : (b+1)*bb]
		for i := range blk {
			blk[i] = byte(r.IntN(256))
		}
		binary.LittleEndian.PutUint16(blk, quant.FP32ToFP16(float32(r.Float64()*0.05)))
		if t == quant.Q4_1 || t == quant.Q5_1 {
			binary.LittleEndian.PutUint16(blk[2:], quant.FP32ToFP16(float32(r.Float64()-0.5)))
		}
	}
	return m
}

// TestQuantRowQ8_1: qs and d as quant.QuantizeRowQ8_0 (ggml's x86 path),
// s = f16(amax/127 * Σq).
func TestQuantRowQ8_1(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	x := randVec(r, 96, 2)
	clear(x[32:64])
	got := make([]byte, 3*36)
	quantRowQ8_1(x, got)
	q8 := make([]byte, 3*34)
	quant.QuantizeRowQ8_0(x, q8)
	for b := 0; b < 3; b++ {
		g, w := got[36*b:36*b+36], q8[34*b:34*b+34]
		if !bytes.Equal(g[0:2], w[0:2]) || !bytes.Equal(g[4:], w[2:]) {
			t.Fatalf("block %d: d/qs differ from QuantizeRowQ8_0", b)
		}
		var amax float64
		sum := 0
		for j := 0; j < 32; j++ {
			amax = math.Max(amax, math.Abs(float64(x[32*b+j])))
			sum += int(int8(w[2+j]))
		}
		want := quant.FP32ToFP16(float32(amax/127) * float32(sum))
		if s := binary.LittleEndian.Uint16(g[2:]); s != want {
			t.Fatalf("block %d: s = %#x, want %#x", b, s, want)
		}
	}
}

// TestLegacyAgainstFloat64: dequantize (package quant) and dot in float64.
func TestLegacyAgainstFloat64(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	for _, typ := range []quant.Type{quant.Q4_1, quant.Q5_0, quant.Q5_1} {
		const rows, cols, nTok = 7, 96, 5
		m := randLegacy(r, typ, rows, cols)
		if err := m.Check(); err != nil {
			t.Fatal(err)
		}
		deq := make([]float32, rows*cols)
		if err := quant.Dequantize(typ, m.Data, deq); err != nil {
			t.Fatal(err)
		}
		x := randVec(r, nTok*cols, 1)
		out := make([]float32, nTok*rows)
		MatMul(nil, out, m, x, nTok)
		for tk := 0; tk < nTok; tk++ {
			xa := actAsSeen(t, quant.Q8_0, x[tk*cols:(tk+1)*cols])
			for i := 0; i < rows; i++ {
				var s, a, slack float64
				for j := 0; j < cols; j++ {
					p := float64(deq[i*cols+j]) * float64(xa[j])
					s += p
					a += math.Abs(p)
				}
				if typ != quant.Q5_0 {
					// m*s uses s = f16(d*Σq): allow its rounding per block.
					for b := 0; b < cols/32; b++ {
						var bs float64
						for j := 32 * b; j < 32*b+32; j++ {
							bs += math.Abs(float64(xa[j]))
						}
						mw := math.Abs(float64(quant.FP16ToFP32(binary.LittleEndian.Uint16(m.Data[(i*cols/32+b)*typ.BlockBytes()+2:]))))
						slack += mw * bs * 2e-3
					}
				}
				got := out[tk*rows+i]
				if d := math.Abs(float64(got) - s); d > 4e-6*a+slack+1e-30 {
					t.Errorf("%s token %d row %d: %v, float64 reference %v (|diff| %.3g)", typ, tk, i, got, s, d)
				}
			}
		}
	}
}
