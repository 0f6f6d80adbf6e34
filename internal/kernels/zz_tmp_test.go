package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkTmpSoftmax(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{8, 64, 256, 1024} {
		x := randVec(rng, n, 3)
		y := make([]float32, n)
		b.Run(fmt.Sprint("old", n), func(b *testing.B) {
			c0 := cpuNow()
			for i := 0; i < b.N; i++ {
				copy(y, x)
				Scale(y, 0.3)
				Softmax(y)
			}
			b.ReportMetric(float64((cpuNow()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprint("fused", n), func(b *testing.B) {
			c0 := cpuNow()
			for i := 0; i < b.N; i++ {
				copy(y, x)
				ScaleSoftmax(y, 0.3)
			}
			b.ReportMetric(float64((cpuNow()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
