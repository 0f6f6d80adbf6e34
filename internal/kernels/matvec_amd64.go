package kernels

import "unsafe"

// One-token (decode) matvec kernels in matvec_*_amd64.s: several rows per
// pass against one activation row, in each type's canonical order.

//go:noescape
func rowsQ4_KAVX512x4(out *float32, w, x *byte, nGroups, nsb int)

// q4_KRowsAVX512 is the AVX-512 Q4_K matvec: groups of four rows through
// rowsQ4_KAVX512x4, the last len(out)%4 rows through the AVX2 kernel.
func q4_KRowsAVX512(out []float32, w []byte, act actBuf, t int) {
	x := act.row(t)
	nsb := len(x) / 292
	if len(w) < 144*nsb*len(out) || nsb == 0 {
		panic("kernels: short Q4_K weight tile")
	}
	g := len(out) / 4
	if g > 0 {
		rowsQ4_KAVX512x4(&out[0], &w[0], &x[0], g, nsb)
	}
	if r := 4 * g; r < len(out) {
		rowsQ4_KAVX2(&out[r], &w[r*144*nsb], &x[0], len(out)-r, nsb)
	}
}

func init() {
	q4_KKernels[AVX512].rows = q4_KRowsAVX512
}

//go:noescape
func readXORAVX2(p *byte, n int) uint64

func readXORAsm(p unsafe.Pointer, n int) uint64 { return readXORAVX2((*byte)(p), n) }
