//go:build !amd64

package kernels

func sumSquaresAsm(x []float32, acc *[8]float64) {
	for i, v := range x {
		acc[i&7] += float64(v * v)
	}
}

func scaleMulAsm(y, x []float32, s float32, w []float32) {
	for i := range y {
		y[i] = (x[i] * s) * w[i]
	}
}
