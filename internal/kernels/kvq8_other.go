//go:build !amd64

package kernels

func dequantQ8RowsAVX2(dst *float32, src *byte, rows, nb, stride int) { panic("unreachable") }
