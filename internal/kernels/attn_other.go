//go:build !amd64

package kernels

func cvtF32F16AVX2(dst *uint16, src *float32, n int)                  { panic("unreachable") }
func cvtF16F32AVX2(dst *float32, src *uint16, n int)                  { panic("unreachable") }
func widenRowsAVX2(dst *float32, src *uint16, rows, cols, stride int) { panic("unreachable") }
