package kernels

import "sluice/internal/quant"

// quantQ8_KAVX2 is quant.QuantizeRowQ8_K in AVX2 assembly (q8k_amd64.s);
// false when the row holds a NaN or an infinity. The Go quantizer was 8%
// of bench-110M q4_K prefill on the AVX-512 path (pprof, 1 thread).
//
//go:noescape
func quantQ8_KAVX2(x *float32, nsb int, dst *byte) bool

// prepareQ8_KAsm is prepareQ8_K with the assembly quantizer; rows it
// refuses go through package quant, which defines them.
func prepareQ8_KAsm(x []float32, nTok, cols int) actBuf {
	nsb := cols / 256
	rb := nsb * 292
	a := newActBytes(nTok * rb)
	for t := 0; t < nTok; t++ {
		row, dst := x[t*cols:(t+1)*cols], a.bytes[t*rb:(t+1)*rb]
		if nsb == 0 || !quantQ8_KAVX2(&row[0], nsb, &dst[0]) {
			quant.QuantizeRowQ8_K(row, dst)
		}
	}
	a.stride = rb
	return a
}

func init() {
	for _, p := range []Path{AVX2, AVX512} {
		q4_KKernels[p].prepare = prepareQ8_KAsm
		q5_KKernels[p].prepare = prepareQ8_KAsm
		q6_KKernels[p].prepare = prepareQ8_KAsm
	}
}
