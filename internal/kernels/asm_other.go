//go:build !amd64

package kernels

import "unsafe"

func dotF32Asm(a, b []float32) float32 { return dotF32Generic(a, b) }

func axpyAsm(y []float32, a float32, x []float32) {
	for i := range y {
		y[i] += float32(a * x[i])
	}
}

func scaleAsm(x []float32, a float32) {
	for i := range x {
		x[i] *= a
	}
}

func siluMulAVX512(gp, u *float32, n int, c *float32)       { panic("unreachable") }
func siluMulAVX2(gp, u *float32, n int, c *float32)         { panic("unreachable") }
func expSubAVX2(x *float32, n int, m float32, c *float32)   { panic("unreachable") }
func expSubAVX512(x *float32, n int, m float32, c *float32) { panic("unreachable") }
func softmaxAVX512(x *float32, n int, c *float32) bool      { panic("unreachable") }
func softmaxAVX2(x []float32) bool                          { panic("unreachable") }

func dotRowsAsm(out, q, k []float32, stride int) {
	for j := range out {
		out[j] = dotF32Generic(q, k[j*stride:j*stride+len(q)])
	}
}

func axpyRowsAsm(y, w, x []float32, stride int) bool { return false }

func readXORAsm(p unsafe.Pointer, n int) uint64 { panic("unreachable") }
