package kernels

// F16C conversions (attn_amd64.s), n a multiple of 8. The AVX-512 path
// uses them too: every AVX-512 CPU has F16C, and a conversion is limited
// by the loads, not the vector width.

//go:noescape
func cvtF32F16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func cvtF16F32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func widenRowsAVX2(dst *float32, src *uint16, rows, cols, stride int)
