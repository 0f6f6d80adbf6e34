package kernels

import (
	"math"
	"os"
)

// Fused multi-query attention: the query rows sharing one KV head (a GQA
// group's heads, and in a prefill block several tokens' groups) go through
// a block of that head's K and V rows in one call each, instead of one
// DotRows/AxpyRows call per query row. K and V rows sit at a fixed stride
// in a KV page (one KV head's slice of each position), as F32 or binary16;
// binary16 rows are widened in registers (exact) by the SIMD paths, in a
// row buffer by Generic.
//
// The results are bitwise those of the per-row forms: every score is
// Dot(q row, K row) in the canonical F32 order, and every output element
// takes exactly AxpyRows's sequence of steps (product rounded, then the
// add) over the block's rows in order. So a caller may split the rows or
// the positions between calls any way it likes (per token or per block,
// per page or per several pages) without changing a bit: attention stays
// batch invariant, and prefill equal to decode.

// MQADot sets out[r*os+j] = Dot(q[r*hd:(r+1)*hd], K row j) for r < m and
// j < p, where K row j is k[j*ks:j*ks+hd] (k is []float32 or []uint16
// binary16). q holds the m query rows packed.
func MQADot[T float32 | uint16](out []float32, os int, q []float32, m, hd int, k []T, ks, p int) {
	if m <= 0 || p <= 0 {
		return
	}
	if !mqaShapeOK(m, hd, os, ks, p) || os < p || ks < hd || len(q) < m*hd || len(out) < (m-1)*os+p || len(k) < (p-1)*ks+hd {
		panic("kernels.MQADot: slices too short for the shape")
	}
	if hd == 0 {
		for r := range m {
			clear(out[r*os : r*os+p])
		}
		return
	}
	switch kk := any(k).(type) {
	case []float32:
		switch CurrentPath() {
		case AVX512:
			if p4 := p &^ 3; m < 4 && p4 > 0 {
				mqaDotP4F32AVX512(&out[0], os, &q[0], m, hd, &kk[0], ks, p4)
				if p4 < p {
					mqaDotF32AVX512(&out[p4], os, &q[0], m, hd, &kk[p4*ks], ks, p-p4)
				}
				return
			}
			mqaDotF32AVX512(&out[0], os, &q[0], m, hd, &kk[0], ks, p)
			return
		case AVX2:
			mqaDotAVX2(mqaDot8F32AVX2, mqaDotP16F32AVX2, mqaDotF32AVX2, hd <= 8, out, os, q, m, hd, kk, ks, p)
			return
		}
		for r := range m {
			qr := q[r*hd : (r+1)*hd]
			for j := range p {
				out[r*os+j] = dotF32Generic(qr, kk[j*ks:j*ks+hd])
			}
		}
	case []uint16:
		switch {
		case CurrentPath() == AVX512:
			if p4 := p &^ 3; m < 4 && p4 > 0 {
				// Fewer than four rows (a decode token with a small
				// group): four positions' trees at once.
				mqaDotP4F16AVX512(&out[0], os, &q[0], m, hd, &kk[0], ks, p4)
				if p4 < p {
					mqaDotF16AVX512(&out[p4], os, &q[0], m, hd, &kk[p4*ks], ks, p-p4)
				}
				return
			}
			if f16YMM && m >= 16 && hd%16 == 0 && hd <= 64 {
				mqaDotAVX2(mqaDot8F16AVX2, mqaDotP16F16AVX2, mqaDotF16AVX2, false, out, os, q, m, hd, kk, ks, p)
				return
			}
			mqaDotF16AVX512(&out[0], os, &q[0], m, hd, &kk[0], ks, p)
			return
		case CurrentPath() == AVX2 && hd%8 == 0:
			mqaDotAVX2(mqaDot8F16AVX2, mqaDotP16F16AVX2, mqaDotF16AVX2, hd == 8, out, os, q, m, hd, kk, ks, p)
			return
		}
		row := make([]float32, hd)
		for j := range p {
			FP16ToFP32Row(row, kk[j*ks:j*ks+hd])
			for r := range m {
				out[r*os+j] = dotF32Generic(q[r*hd:(r+1)*hd], row)
			}
		}
	}
}

// f16YMM sends the AVX-512 path's F16 attention of prefill blocks (16 or
// more query rows a call; head dims up to 64 for the scores) through the
// AVX2 kernels: on Zen 4, whose 512-bit operations are two 256-bit
// halves, the YMM forms widen and multiply F16 rows faster
// (BenchmarkAttentionPrefillDepth, bench-110M attention, pp512 after 8192
// positions, one layer, 1 thread, interleaved x2 under load: 442-444 ->
// 319-331 cpu-ms a step). Decode's few rows a call keep the ZMM kernels
// (no difference measured there). The bits are the same: every kernel
// computes the canonical order. On Intel CPUs, whose 512-bit operations
// run at full width, the ZMM kernels are kept: an Intel Xeon (family 6
// model 167), 1 thread pinned, interleaved x3, BenchmarkMQAPrefill
// cpu-ns/row-pos m=64 hd=64 YMM / ZMM: axpy 2.04-2.05 / 1.90-1.92, dot
// 1.94-2.03 / 1.96; BenchmarkAttentionPrefillDepth (pp512 after 8192) 370,
// 374 / 354, 358 cpu-ms a step. SLUICE_ATTN_ZMM=1 (ZMM) or 0 (YMM)
// overrides the choice, for A/B runs.
var f16YMM = attnF16YMM(os.Getenv("SLUICE_ATTN_ZMM"), cpuVendorAMD())

// attnF16YMM is f16YMM's choice: the YMM kernels on AMD CPUs, the ZMM ones
// elsewhere, unless env ("1" ZMM, "0" YMM) says otherwise.
func attnF16YMM(env string, amd bool) bool {
	switch env {
	case "1":
		return false
	case "0":
		return true
	}
	return amd
}

// mqaDotKernel is the signature of the AVX2 score kernels (mqa_amd64.s).
type mqaDotKernel[T float32 | uint16] func(out *float32, os int, q *float32, m, hd int, k *T, ks, p int)

// mqaDotAVX2 splits one MQADot call between the AVX2 score kernels: dot8
// (8 positions a tree, for head dims where dot8OK) over whole groups of 8
// positions, p16 (pipelined trees, hd % 16 == 0) over whole groups of 4
// rows, rows (any shape) for the rest. All compute the canonical dot, so
// the split changes no bit.
func mqaDotAVX2[T float32 | uint16](dot8, p16, rows mqaDotKernel[T], dot8OK bool, out []float32, os int, q []float32, m, hd int, k []T, ks, p int) {
	if p8 := p &^ 7; dot8OK && p8 > 0 {
		dot8(&out[0], os, &q[0], m, hd, &k[0], ks, p8)
		if p8 < p {
			rows(&out[p8], os, &q[0], m, hd, &k[p8*ks], ks, p-p8)
		}
		return
	}
	if m4 := m &^ 3; hd%16 == 0 && m4 > 0 {
		p16(&out[0], os, &q[0], m4, hd, &k[0], ks, p)
		if m4 < m {
			rows(&out[m4*os], os, &q[m4*hd], m-m4, hd, &k[0], ks, p)
		}
		return
	}
	rows(&out[0], os, &q[0], m, hd, &k[0], ks, p)
}

// mqaShapeOK: every size non-negative and under 2^31, so the products of
// the bounds checks cannot overflow (the assembly trusts those checks).
func mqaShapeOK(sizes ...int) bool {
	for _, n := range sizes {
		if n < 0 || n >= 1<<31 {
			return false
		}
	}
	return true
}

// MQAAxpy adds, for j = 0, 1, ..., p-1 in that order, w[r*ws+j] times V
// row j (v[j*vs:j*vs+hd], []float32 or []uint16 binary16) into
// y[r*hd:(r+1)*hd], for every r < m: each element exactly AxpyRows's
// sequence. y holds the m output rows packed.
func MQAAxpy[T float32 | uint16](y, w []float32, ws, m, hd int, v []T, vs, p int) {
	if m <= 0 || p <= 0 || hd == 0 {
		return
	}
	if !mqaShapeOK(m, hd, ws, vs, p) || ws < p || vs < hd || len(y) < m*hd || len(w) < (m-1)*ws+p || len(v) < (p-1)*vs+hd {
		panic("kernels.MQAAxpy: slices too short for the shape")
	}
	switch vv := any(v).(type) {
	case []float32:
		switch CurrentPath() {
		case AVX512:
			mqaAxpyF32AVX512(&y[0], &w[0], ws, m, hd, &vv[0], vs, p)
			return
		case AVX2:
			mqaAxpyF32AVX2(&y[0], &w[0], ws, m, hd, &vv[0], vs, p)
			return
		}
		for r := range m {
			yr := y[r*hd : (r+1)*hd]
			for j := range p {
				a, xr := w[r*ws+j], vv[j*vs:j*vs+hd]
				for i := range yr {
					yr[i] += float32(a * xr[i])
				}
			}
		}
	case []uint16:
		switch {
		case CurrentPath() == AVX512 && !(f16YMM && m >= 16 && hd%8 == 0):
			mqaAxpyF16AVX512(&y[0], &w[0], ws, m, hd, &vv[0], vs, p)
			return
		case CurrentPath() != Generic && hd%8 == 0:
			mqaAxpyF16AVX2(&y[0], &w[0], ws, m, hd, &vv[0], vs, p)
			return
		}
		row := make([]float32, hd)
		for j := range p {
			FP16ToFP32Row(row, vv[j*vs:j*vs+hd])
			for r := range m {
				a, yr := w[r*ws+j], y[r*hd:(r+1)*hd]
				for i := range yr {
					yr[i] += float32(a * row[i])
				}
			}
		}
	}
}

// attnFlush is where attention's softmax stops computing numerators:
// e^(x - max) for x - max below it is taken as exactly 0. e^-50 is 2e-22,
// under float32's resolution of a sum whose largest term is 1 (6e-8), so
// no weight is lost that float32 could have kept; and with it no softmax
// weight, and no product of a weight with a binary16 value, is ever a
// subnormal float, which x86 computes by a microcode assist of ~150
// cycles a vector: on stories260K's sharp attention that was most of the
// prefill's value sums (measured: 42 against 0.3 ns a row and position).
const attnFlush = -50

// ScaleSoftmax is attention's softmax of a score row: x *= a, then x[i] =
// e^(x[i] - max) as expf, or 0 when x[i] - max < attnFlush; the sum in
// float64 over 8 lanes as Softmax's; x[i] *= float32(1/sum). Every path
// gives the same bits (the SIMD paths run it in one call).
func ScaleSoftmax(x []float32, a float32) {
	if len(x) == 0 {
		return
	}
	if CurrentPath() != Generic {
		// AVX2 instructions, on the AVX-512 path too.
		if scaleSoftmaxAVX2(&x[0], len(x), a, &expConsts[0], nil) {
			return
		}
		flushSoftmaxGo(x) // x is scaled: NaN, +Inf or all -Inf decide in Go
		return
	}
	for i := range x {
		x[i] *= a
	}
	flushSoftmaxGo(x)
}

// flushSoftmaxGo is softmaxGo with the numerators below attnFlush taken
// as 0 (NaN stays NaN: the comparison is false).
func flushSoftmaxGo(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	for i, v := range x {
		if d := v - mx; d < attnFlush {
			x[i] = 0
		} else {
			x[i] = expf(d)
		}
	}
	normalizeSum8(x)
}
