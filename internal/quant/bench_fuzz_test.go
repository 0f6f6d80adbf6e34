package quant

import (
	"math"
	"testing"
)

// FuzzDequantize decodes arbitrary bytes as every supported type: tensor
// data comes from files, so no byte pattern may panic, and a length that
// is not whole blocks must be an error.
func FuzzDequantize(f *testing.F) {
	f.Add([]byte{0x00, 0x3c, 1, 2, 3})
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		for typ, ti := range types {
			if !ti.supported {
				continue
			}
			nb := len(data) / ti.blockBytes
			dst := make([]float32, nb*ti.blockSize)
			if err := Dequantize(typ, data[:nb*ti.blockBytes], dst); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			if len(data)%ti.blockBytes != 0 {
				bad := make([]float32, (nb+1)*ti.blockSize)
				if Dequantize(typ, data, bad) == nil {
					t.Fatalf("%s: %d bytes accepted for %d elements", typ, len(data), len(bad))
				}
			}
		}
	})
}

func BenchmarkDequantize(b *testing.B) {
	const n = 64 * QK_K
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	for _, typ := range []Type{F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K} {
		rb, _ := typ.RowBytes(n)
		src := make([]byte, rb)
		if err := Quantize(typ, x, src); err != nil {
			b.Fatal(err)
		}
		dst := make([]float32, n)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(n * 4))
			for i := 0; i < b.N; i++ {
				_ = Dequantize(typ, src, dst)
			}
		})
	}
}

func BenchmarkQuantizeRow(b *testing.B) {
	const n = 16 * QK_K
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Cos(float64(i)))
	}
	q8 := make([]byte, n/32*Q8_0BlockBytes)
	qk := make([]byte, n/QK_K*Q8_KBlockBytes)
	b.Run("q8_0", func(b *testing.B) {
		b.SetBytes(n * 4)
		for i := 0; i < b.N; i++ {
			QuantizeRowQ8_0(x, q8)
		}
	})
	b.Run("q8_K", func(b *testing.B) {
		b.SetBytes(n * 4)
		for i := 0; i < b.N; i++ {
			QuantizeRowQ8_K(x, qk)
		}
	})
}
