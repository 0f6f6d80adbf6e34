package kernels

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"sluice/internal/quant"
)

// guardedF32 and guardedU16 copy src into memory ending against an
// inaccessible page (guarded, fuzz_linux_test.go).
func guardedF32(t testing.TB, src []float32) []float32 {
	b := guarded(t, 4*len(src))
	if len(src) == 0 {
		return nil
	}
	f := unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(src))
	copy(f, src)
	return f
}

func guardedU16(t testing.TB, src []uint16) []uint16 {
	b := guarded(t, 2*len(src))
	f := unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(src))
	copy(f, src)
	return f
}

// No kernel reads or writes past the end of its weights, activations or
// outputs (FuzzMatMul guards weights and activations of the plain paths):
// every type's matrix product with odd shapes (rows not a multiple of the
// tiles', 1..9 tokens, odd block counts) and the attention kernels over
// every head dim 1..130, each operand ending against an inaccessible
// page, on every path and variant.
func TestKernelsStayInBounds(t *testing.T) {
	for _, sh := range []struct {
		typ  quant.Type
		cols []int
	}{
		{quant.F32, []int{1, 17, 288}},
		{quant.F16, []int{1, 33, 288}},
		{quant.BF16, []int{3, 40}},
		{quant.Q8_0, []int{32, 96, 544}},
		{quant.Q4_0, []int{32, 96}},
		{quant.Q4_1, []int{96}},
		{quant.Q5_0, []int{96}},
		{quant.Q5_1, []int{96}},
		{quant.Q4_K, []int{256}},
		{quant.Q5_K, []int{256}},
		{quant.Q6_K, []int{256}},
	} {
		for _, cols := range sh.cols {
			for _, rows := range []int{1, 5, 19} {
				m := oddMatrix(t, sh.typ, rows, cols, uint64(rows+cols))
				gm := &Matrix{Type: m.Type, Rows: m.Rows, Cols: m.Cols, Data: guarded(t, len(m.Data))}
				copy(gm.Data, m.Data)
				withPath(t, func(p Path) {
					forVariants(p, func(v string) {
						for _, nTok := range []int{1, 2, 3, 4, 5, 8, 9} {
							x := guardedF32(t, randVec(rand.New(rand.NewPCG(uint64(nTok), 3)), nTok*cols, 1))
							out := guardedF32(t, make([]float32, nTok*rows))
							MatMul(nil, out, gm, x, nTok)
						}
					})
				})
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for hd := 1; hd <= 130; hd++ {
		for _, m := range []int{1, 3, 16, 17} {
			p := 1 + (hd*5)%17
			q := guardedF32(t, randVec(r, m*hd, 1))
			k32 := guardedF32(t, randVec(r, (p-1)*hd+hd, 1))
			k16s := make([]uint16, len(k32))
			for i := range k32 {
				k16s[i] = quant.FP32ToFP16(k32[i])
			}
			k16 := guardedU16(t, k16s)
			w := guardedF32(t, randVec(r, (m-1)*p+p, 1))
			withPath(t, func(path Path) {
				s := guardedF32(t, make([]float32, (m-1)*p+p))
				y := guardedF32(t, make([]float32, m*hd))
				MQADot(s, p, q, m, hd, k32, hd, p)
				MQAAxpy(y, w, p, m, hd, k32, hd, p)
				MQADot(s, p, q, m, hd, k16, hd, p)
				MQAAxpy(y, w, p, m, hd, k16, hd, p)
			})
		}
	}
	for _, n := range []int{1, 7, 8, 9, 16, 33} {
		withPath(t, func(path Path) {
			g := guardedF32(t, randVec(r, n, 4))
			u := guardedF32(t, randVec(r, n, 1))
			GELUMul(g, u)
		})
	}
}
