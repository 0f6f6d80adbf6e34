//go:build !amd64

package kernels

func geluMulSIMD(g, u []float32, t *[1 << 16]float32) int { return 0 }
