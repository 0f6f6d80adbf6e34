package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestPackAsmMatchesGo: the gather packers (kpack_amd64.s) write the same
// bytes as q6KPack and q5KPack (VNNI layout for 16 rows, AVX2 layout for
// 8) for random blocks, including a row tile at the very end of its
// buffer (no read past the last block).
func TestPackAsmMatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(3, 9))
	for _, s := range []lanesSpec{q6KLanes, q5KLanes} {
		typ := quant.Q6_K
		if s.name == "Q5_K" {
			typ = quant.Q5_K
		}
		for i, R := range []int{8, 16} {
			if R == 16 && !hasAVX512 {
				continue
			}
			for _, nsb := range []int{1, 3, 9} {
				m := randKQuant(r, typ, R, 256*nsb)
				rb := len(m.Data) / R
				want := make([]byte, R*nsb*s.packBytes)
				got := make([]byte, len(want))
				s.goPack(want, m.Data, R, rb, nsb, R == 16)
				s.asmPack[i](&got[0], &m.Data[0], rb, nsb)
				if bytes.Equal(got, want) {
					continue
				}
				for k := range got {
					if got[k] != want[k] {
						sb := R * s.packBytes
						t.Fatalf("%s %d rows nsb=%d: byte %d (super-block %d, offset %d): %#x, Go packer %#x", typ, R, nsb, k, k/sb, k%sb, got[k], want[k])
					}
				}
			}
		}
	}
}

// TestPackFallbackBitwise: rows too long for the gathers' int32 offsets
// take the Go packers; forced here (the limit lowered to 0), the tiles
// still give Generic's bits.
func TestPackFallbackBitwise(t *testing.T) {
	defer func(v int) { gatherMaxRowBytes = v }(gatherMaxRowBytes)
	gatherMaxRowBytes = 0
	const rows, cols, nTok = 37, 512, 12
	for _, typ := range []quant.Type{quant.Q6_K, quant.Q5_K} {
		m := randKQuant(rand.New(rand.NewPCG(5, 5)), typ, rows, cols)
		x := randVec(rand.New(rand.NewPCG(6, 6)), nTok*cols, 1)
		var ref []float32
		withPath(t, func(p Path) {
			out := make([]float32, nTok*rows)
			MatMul(nil, out, m, x, nTok)
			if p == Generic {
				ref = out
				return
			}
			for k := range out {
				if math.Float32bits(out[k]) != math.Float32bits(ref[k]) {
					t.Fatalf("%v %s elem %d: %v != generic %v", p, typ, k, out[k], ref[k])
				}
			}
		})
	}
}
