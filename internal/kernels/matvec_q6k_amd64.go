package kernels

// One-token (decode) Q6_K and Q5_K matvec kernels in matvec_q6k_amd64.s: four
// rows per pass against one activation row, in the type's canonical order.

//go:noescape
func rowsQ6_KAVX512x4(out *float32, w, x *byte, nGroups, nsb int)

//go:noescape
func rowsQ6_KAVX2x4r(out *float32, w, x *byte, nGroups, nsb int)

//go:noescape
func rowsQ5_KAVX512x4(out *float32, w, x *byte, nGroups, nsb int)

//go:noescape
func rowsQ5_KAVX2x4r(out *float32, w, x *byte, nGroups, nsb int)

// kRows4 is a K-quant matvec on a SIMD path for a type of sbBytes bytes
// per super-block: groups of four rows through kernel4, the last
// len(out)%4 rows through the one-row kernel tail.
func kRows4(sbBytes int, kernel4, tail func(out *float32, w, x *byte, n, nsb int)) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		nsb := len(x) / 292
		if nsb == 0 || len(w) < sbBytes*nsb*len(out) {
			panic("kernels: short K-quant weight tile")
		}
		g := len(out) / 4
		if g > 0 {
			kernel4(&out[0], &w[0], &x[0], g, nsb)
		}
		if r := 4 * g; r < len(out) {
			tail(&out[r], &w[r*sbBytes*nsb], &x[0], len(out)-r, nsb)
		}
	}
}

// Runs after asm_amd64.go's init (files initialize in name order) and
// replaces its one-row decode kernels.
func init() {
	q6_KKernels[AVX2].rows = kRows4(210, rowsQ6_KAVX2x4r, rowsQ6_KAVX2)
	q6_KKernels[AVX512].rows = kRows4(210, rowsQ6_KAVX512x4, rowsQ6_KAVX2)
	q5_KKernels[AVX2].rows = kRows4(176, rowsQ5_KAVX2x4r, rowsQ5_KAVX2)
	q5_KKernels[AVX512].rows = kRows4(176, rowsQ5_KAVX512x4, rowsQ5_KAVX2)
}
