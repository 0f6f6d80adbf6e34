package kernels

import "unsafe"

// One-token (decode) matvec kernels in matvec_*_amd64.s: several rows per
// pass against one activation row, in each type's canonical order.

//go:noescape
func rowsQ4_KAVX512x4s(out *float32, w, x *byte, nGroups, nsb int)

//go:noescape
func rowsQ4_KAVX2x4s(out *float32, w, x *byte, nGroups, nsb int)

// The one-token Q4_K and Q8_0 kernels read their four rows as four long
// front-to-back streams (rows i, Q+i, 2Q+i, 3Q+i of a pass) and leave the
// prefetching to the hardware. TinyLlama's matrices streamed from DRAM
// (620 MB, 1 thread, CPU time, AVX-512, K=2048 / K=5632; read reference
// 18.0-18.3 GB/s, a Zen 5): the four rows of a pass adjacent (rows
// 4i..4i+3), prefetched 8 rows ahead, 13.9 / 15.1 GB/s; the four streams,
// prefetched 1-8 rows ahead, 15.9-16.5 / 15.9-16.1. On a Zen 4
// (BenchmarkMatMulCold tok1 t1, per CPU-second, old and new binaries
// alternated) the software prefetch cost more than it gave: Q4_K AVX2
// 17.0-20.9 -> 18.5-24.0 GB/s and AVX-512 18.4-21.3 -> 18.9-23.1 without
// it (4 or 8 rows ahead was slower than 2), Q8_0 AVX2 14.5-18.3 ->
// 16.4-23.7 and AVX-512 15.0-19.1 -> 17.3-23.1.

// q4_KRows4 is the Q4_K matvec on a SIMD path: groups of four rows
// through kernel4 (pass i computes rows i, g+i, 2g+i and 3g+i of the
// first 4g), the last len(out)%4 rows through the one-row AVX2 kernel.
func q4_KRows4(kernel4 func(out *float32, w, x *byte, nGroups, nsb int)) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		nsb := len(x) / 292
		if len(w) < 144*nsb*len(out) || nsb == 0 {
			panic("kernels: short Q4_K weight tile")
		}
		g := len(out) / 4
		if g > 0 {
			kernel4(&out[0], &w[0], &x[0], g, nsb)
		}
		if r := 4 * g; r < len(out) {
			rowsQ4_KAVX2(&out[r], &w[r*144*nsb], &x[0], len(out)-r, nsb)
		}
	}
}

//go:noescape
func rowsQ8_0AVX2x4(out *float32, w, x *byte, dx *float32, nGroups, nb int)

//go:noescape
func rowsQ8_0AVX512x4(out *float32, w, x *byte, dx *float32, nGroups, nb int)

// q8_0Rows4 is the Q8_0 matvec on a SIMD path: groups of four rows
// through kernel4 (pass i computes rows i, g+i, 2g+i and 3g+i of the
// first 4g), the last len(out)%4 rows through the one-row kernel1.
func q8_0Rows4(kernel4 func(out *float32, w, x *byte, dx *float32, nGroups, nb int),
	kernel1 func(out *float32, w, x *byte, dx *float32, nRows, nb int)) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		nb := act.nb
		dx := act.dx[t*nb : (t+1)*nb]
		if len(w) < 34*nb*len(out) || nb == 0 {
			panic("kernels: short weight tile")
		}
		g := len(out) / 4
		if g > 0 {
			kernel4(&out[0], &w[0], &x[0], &dx[0], g, nb)
		}
		if r := 4 * g; r < len(out) {
			kernel1(&out[r], &w[r*34*nb], &x[0], &dx[0], len(out)-r, nb)
		}
	}
}

// Runs after asm_amd64.go's init (files initialize in name order) and
// replaces its one-row decode kernels.
func init() {
	q8_0Kernels[AVX2].rows = q8_0Rows4(rowsQ8_0AVX2x4, rowsQ8_0AVX2)
	// rowsQ8_0AVX512 took its four rows side by side (4 adjacent rows, one
	// block a YMM): TinyLlama q8_0 decode ran at 12.9 tok/s (45% of the
	// read reference, 0.80x llama.cpp) on a Zen 5, 1 thread; with the
	// four streams and two blocks a ZMM, 17.9-19.7 (66-69%).
	q8_0Kernels[AVX512].rows = q8_0Rows4(rowsQ8_0AVX512x4, rowsQ8_0AVX512)
	q4_KKernels[AVX2].rows = q4_KRows4(rowsQ4_KAVX2x4s)
	q4_KKernels[AVX512].rows = q4_KRows4(rowsQ4_KAVX512x4s)
}

//go:noescape
func readXOR4AVX512(p *byte, n int) uint64

//go:noescape
func readXOR4AVX2(p *byte, n int) uint64

// prefetchL2 issues PREFETCHT1 for every line of [p, p+n) (stream_amd64.s).
//
//go:noescape
func prefetchL2(p *byte, n int)

// readXORAsm reads with the widest loads the CPU has, whatever path is
// selected: the bandwidth reference is the machine's, not the path's.
func readXORAsm(p unsafe.Pointer, n int) uint64 {
	if hasAVX512 {
		return readXOR4AVX512((*byte)(p), n)
	}
	return readXOR4AVX2((*byte)(p), n)
}
