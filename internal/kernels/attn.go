package kernels

import (
	"math"

	"sluice/internal/quant"
)

// Binary16 rows of an F16 KV pool (kv.F16). Widening is exact (every
// binary16 is a float32), so attention over F16 pages widens a block's rows
// and runs the canonical F32 orders of DotRows and AxpyRows on them: the
// result is bitwise the same on every path, whatever the batch or thread
// count, and the F16 path adds no reduction order of its own. Narrowing
// rounds to nearest even, overflow to infinity, bit for bit as ggml's
// GGML_FP32_TO_FP16 (F16C's vcvtps2ph with rounding mode 0), so the pages
// hold what llama.cpp's F16 KV cache holds for the same rows.

// FP32ToFP16Row narrows src into dst (len(dst) >= len(src)): quant.FP32ToFP16
// per element.
func FP32ToFP16Row(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	i := 0
	if CurrentPath() != Generic && len(src) >= 8 {
		i = len(src) &^ 7
		cvtF32F16AVX2(&dst[0], &src[0], i)
	}
	for ; i < len(src); i++ {
		dst[i] = quant.FP32ToFP16(src[i])
	}
}

// FP16ToFP32Row widens src into dst (len(dst) >= len(src)), exactly, as
// vcvtph2ps does: a signaling NaN comes out quiet (its payload kept), so
// every path gives the same bits for whatever bytes a page holds.
func FP16ToFP32Row(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := 0
	if CurrentPath() != Generic && len(src) >= 8 {
		i = len(src) &^ 7
		cvtF16F32AVX2(&dst[0], &src[0], i)
	}
	for ; i < len(src); i++ {
		dst[i] = widen16(src[i])
	}
}

func widen16(h uint16) float32 {
	f := f16Table[h]
	if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
		return math.Float32frombits(math.Float32bits(f) | 0x400000)
	}
	return f
}

// WidenRows widens rows rows of len(dst)/rows elements, row j starting at
// src[j*stride], into dst packed (row j at dst[j*cols]): one KV head's
// slice of a block's K or V rows, ready for DotRows/AxpyRows with stride
// cols.
func WidenRows(dst []float32, src []uint16, rows, stride int) {
	if rows <= 0 {
		return
	}
	cols := len(dst) / rows
	if cols > stride || len(src) < (rows-1)*stride+cols {
		panic("kernels.WidenRows: src too short for the rows")
	}
	if CurrentPath() != Generic && cols > 0 && cols%8 == 0 {
		// One call for the block: per-row calls cost more than the
		// conversion of a 64-wide head (measured: 69 ns a row).
		widenRowsAVX2(&dst[0], &src[0], rows, cols, stride)
		return
	}
	for j := range rows {
		FP16ToFP32Row(dst[j*cols:(j+1)*cols], src[j*stride:j*stride+cols])
	}
}
