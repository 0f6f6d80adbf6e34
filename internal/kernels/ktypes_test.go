package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// randKQuant fills rows x cols of a K-quant type with random bytes (every
// quant and scale value, including Q6_K scales of -128 and all-ones
// 6-bit values, which ggml's quantizer rarely or never writes) and
// random f16 super-block scales of either sign.
func randKQuant(r *rand.Rand, t quant.Type, rows, cols int) *Matrix {
	bb := t.BlockBytes()
	m := &Matrix{Type: t, Rows: rows, Cols: cols, Data: make([]byte, rows*cols/256*bb)}
	for b := 0; b < len(m.Data)/bb; b++ {
		blk := m.Data[b*bb : (b+1)*bb]
		for i := range blk {
			blk[i] = byte(r.IntN(256))
		}
		if r.IntN(8) == 0 { // runs of the extreme values
			for i := range blk {
				blk[i] = []byte{0xff, 0x80, 0x00}[r.IntN(3)]
			}
		}
		d := func() uint16 { return quant.FP32ToFP16(float32((r.Float64() - 0.5) * 0.02)) }
		switch t {
		case quant.Q6_K:
			binary.LittleEndian.PutUint16(blk[208:], d())
		default: // Q4_K, Q5_K: d, dmin first
			binary.LittleEndian.PutUint16(blk[0:], d())
			binary.LittleEndian.PutUint16(blk[2:], d())
		}
	}
	return m
}

// extremeLegacy is randLegacy with some blocks of only the extreme
// values (all quants 0 or 15/31, qh all ones or zeros) and larger scales.
func extremeLegacy(r *rand.Rand, t quant.Type, rows, cols int) *Matrix {
	m := randLegacy(r, t, rows, cols)
	bb := t.BlockBytes()
	for b := 0; b < len(m.Data)/bb; b++ {
		if r.IntN(6) != 0 {
			continue
		}
		blk := m.Data[b*bb : (b+1)*bb]
		v := []byte{0x00, 0xff}[r.IntN(2)]
		for i := 2; i < bb; i++ {
			blk[i] = v
		}
		binary.LittleEndian.PutUint16(blk, quant.FP32ToFP16(float32(r.Float64()*4-2)))
		if t == quant.Q4_1 || t == quant.Q5_1 {
			binary.LittleEndian.PutUint16(blk[2:], quant.FP32ToFP16(float32(r.Float64()*8-4)))
		}
	}
	return m
}

// TestTypesDecodeExtremeBitwise covers the Q6_K, Q5_K and legacy kernels
// (four-row decode matvec plus one-row tail, multi-token tiles) on random
// blocks with extreme values: products large enough that the pool splits
// them, row counts that leave a partial tile and a partial group of four,
// odd block counts, 1..33 tokens, 1-3
// threads, both AVX2 forms. Every
// output is bitwise the Generic path's for that token alone.
func TestTypesDecodeExtremeBitwise(t *testing.T) {
	pars := []*Parallel{nil, NewParallel(2), NewParallel(3)}
	defer pars[1].Close()
	defer pars[2].Close()
	const maxTok = 33
	for _, typ := range []quant.Type{quant.Q6_K, quant.Q5_K, quant.Q4_0, quant.Q5_0, quant.Q4_1, quant.Q5_1} {
		shapes := [][2]int{{203, 768}, {518, 256}, {37, 2304}}
		if typ.BlockSize() == 32 {
			shapes = [][2]int{{203, 672}, {518, 288}, {37, 2336}}
		}
		for _, sh := range shapes {
			rows, cols := sh[0], sh[1]
			t.Run(fmt.Sprintf("%s/%dx%d", typ, rows, cols), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(rows), uint64(cols)))
				var m *Matrix
				if typ.BlockSize() == 32 {
					m = extremeLegacy(r, typ, rows, cols)
				} else {
					m = randKQuant(r, typ, rows, cols)
				}
				x := randVec(r, maxTok*cols, 1)
				for i := 0; i < cols; i += 7 { // saturate some Q8_K blocks
					x[i] *= 100
				}
				old := CurrentPath()
				defer SetPath(old)
				ref := genericAlone(m, x, maxTok)
				withPath(t, func(p Path) {
					forVariants(p, func(v string) {
						for _, par := range pars {
							for _, nTok := range []int{1, 3, 4, 5, 9, 17, 33} {
								out := make([]float32, nTok*rows)
								MatMul(par, out, m, x, nTok)
								for k := range out {
									if math.Float32bits(out[k]) != math.Float32bits(ref[k]) {
										t.Fatalf("%v%s threads=%d nTok=%d token %d row %d: %v != generic alone %v", p, v, par.Threads(), nTok, k/rows, k%rows, out[k], ref[k])
									}
								}
							}
						}
					})
				})
			})
		}
	}
}
