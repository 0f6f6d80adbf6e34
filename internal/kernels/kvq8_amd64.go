package kernels

// dequantQ8RowsAVX2 (kvq8_amd64.s): rows > 0 rows of nb > 0 Q8_0 blocks,
// row j at src+j*stride bytes, into dst packed. The AVX-512 path uses it
// too: the conversion is limited by the loads and stores, not the width.
//
//go:noescape
func dequantQ8RowsAVX2(dst *float32, src *byte, rows, nb, stride int)
