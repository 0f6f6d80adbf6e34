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

func rotatePairsAsm(x, c, s []float32) {
	for i := 0; i+1 < len(x); i += 2 {
		x0, x1 := x[i], x[i+1]
		x[i] = x0*c[i] + x1*s[i]
		x[i+1] = x1*c[i+1] + x0*s[i+1]
	}
}
