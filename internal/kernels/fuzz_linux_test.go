package kernels

import (
	"math"
	"os"
	"syscall"
	"testing"
	"unsafe"

	"sluice/internal/quant"
)

// guarded returns n bytes ending exactly at an inaccessible page, so a
// kernel reading one byte past its input faults instead of passing.
func guarded(t testing.TB, n int) []byte {
	page := os.Getpagesize()
	np := (n+page-1)/page + 1
	mem, err := syscall.Mmap(-1, 0, np*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[(np-1)*page:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	return mem[(np-1)*page-n : (np-1)*page]
}

func sameBits(a, b float32) bool {
	if a != a && b != b {
		return true // NaN payloads may differ between Go and the FPU
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

var fuzzTypes = []quant.Type{quant.F32, quant.F16, quant.BF16, quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q4_K, quant.Q6_K}

// FuzzMatMul: arbitrary weight bytes (NaN and infinite scales included) of
// every type, placed against a guard page, never make a kernel read out of
// bounds, and every path and batch size agree bit for bit (NaN = NaN).
// Activations are finite, as a model's are.
func FuzzMatMul(f *testing.F) {
	f.Add([]byte{1, 2, 3, 250, 0x7c, 0xff}, uint8(3), uint8(4), uint8(1), uint8(4))
	f.Add([]byte{0x80, 0x80, 0x7f}, uint8(8), uint8(2), uint8(0), uint8(5))
	f.Add([]byte{9}, uint8(0), uint8(5), uint8(17), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, typSel, rowsSel, colsSel, tokSel uint8) {
		typ := fuzzTypes[int(typSel)%len(fuzzTypes)]
		bs := typ.BlockSize()
		var cols int
		switch {
		case bs == 1:
			cols = 1 + int(colsSel)%70
		case bs == 256:
			cols = 256 * (1 + int(colsSel)%2)
		default:
			cols = 32 * (1 + int(colsSel)%5)
		}
		rows := 1 + int(rowsSel)%11
		nTok := 1 + int(tokSel)%6
		rb, _ := typ.RowBytes(cols)
		w := guarded(t, rows*rb)
		for i := range w {
			if len(data) > 0 {
				w[i] = data[i%len(data)] ^ byte(i*7)
			}
		}
		m := &Matrix{Type: typ, Rows: rows, Cols: cols, Data: w}
		xb := guarded(t, 4*nTok*cols)
		x := unsafe.Slice((*float32)(unsafe.Pointer(&xb[0])), nTok*cols)
		for i := range x {
			v := byte(i * 13)
			if len(data) > 0 {
				v = data[(i*3+1)%len(data)]
			}
			x[i] = float32(int8(v)) / 16
		}
		var ref []float32
		withPath(t, func(p Path) {
			out := make([]float32, nTok*rows)
			MatMul(nil, out, m, x, nTok)
			one := make([]float32, rows)
			for tk := 0; tk < nTok; tk++ {
				MatMul(nil, one, m, x[tk*cols:(tk+1)*cols], 1)
				for i := range one {
					if !sameBits(one[i], out[tk*rows+i]) {
						t.Fatalf("%v %s %dx%d token %d row %d: alone %v, batch of %d %v", p, typ, rows, cols, tk, i, one[i], nTok, out[tk*rows+i])
					}
				}
			}
			if ref == nil {
				ref = out
				return
			}
			for k := range out {
				if !sameBits(out[k], ref[k]) {
					t.Fatalf("%v %s %dx%d elem %d: %v != generic %v", p, typ, rows, cols, k, out[k], ref[k])
				}
			}
		})
	})
}
