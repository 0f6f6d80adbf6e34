package kernels

import (
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestLegacyAsQ8_0 checks the SWAR rewrites of Q4_0 and Q5_0 blocks as
// Q8_0 (the legacy tiles' input) against package quant's dequantizer on
// random blocks: every element must be the same int8 times the same scale.
func TestLegacyAsQ8_0(t *testing.T) {
	r := rand.New(rand.NewPCG(40, 50))
	for _, c := range []struct {
		typ  quant.Type
		size int
		conv func(dst, src []byte)
	}{{quant.Q4_0, 18, q4_0AsQ8_0}, {quant.Q5_0, 22, q5_0AsQ8_0}} {
		src := make([]byte, c.size)
		dst := make([]byte, 34)
		deq := make([]float32, 32)
		for it := 0; it < 2000; it++ {
			for i := range src {
				src[i] = byte(r.Uint32())
			}
			src[0], src[1] = 0x00, 0x3c // d = 1: the dequantized values are the integers
			c.conv(dst, src)
			if err := quant.Dequantize(c.typ, src, deq); err != nil {
				t.Fatal(err)
			}
			if dst[0] != src[0] || dst[1] != src[1] {
				t.Fatalf("%v: scale bytes %x %x, want %x %x", c.typ, dst[0], dst[1], src[0], src[1])
			}
			for j := 0; j < 32; j++ {
				if got := float32(int8(dst[2+j])); got != deq[j] {
					t.Fatalf("%v block %x element %d: %v, dequantized %v", c.typ, src, j, got, deq[j])
				}
			}
		}
	}
}
