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
	r := rand.New(rand.NewPCG(3, 9))
	for _, typ := range []quant.Type{quant.Q6_K, quant.Q5_K} {
		if !hasAVX2 {
			t.Skip("no AVX2 on this CPU")
		}
		for _, nsb := range []int{1, 3, 9} {
			m := randKQuant(r, typ, 8, 256*nsb)
			rb := len(m.Data) / 8
			pb := 292
			if typ == quant.Q5_K {
				pb = 232
			}
			want := make([]byte, 8*nsb*pb)
			got := make([]byte, len(want))
			if typ == quant.Q6_K {
				q6KPack(want, m.Data, 8, rb, nsb, false)
				q6KPack8AVX2(&got[0], &m.Data[0], rb, nsb)
			} else {
				q5KPack(want, m.Data, 8, rb, nsb, false)
				q5KPack8AVX2(&got[0], &m.Data[0], rb, nsb)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%s 8 rows nsb=%d: byte %d (offset %d in its super-block): %#x, Go packer %#x", typ, nsb, i, i%(8*pb), got[i], want[i])
				}
			}
		}
		if !hasAVX512 {
			continue
		}
		for _, nsb := range []int{1, 3, 9} {
			m := randKQuant(r, typ, 16, 256*nsb)
			rb := len(m.Data) / 16
			pb := 292
			if typ == quant.Q5_K {
				pb = 232
			}
			want := make([]byte, 16*nsb*pb)
			got := make([]byte, len(want))
			if typ == quant.Q6_K {
				q6KPack(want, m.Data, 16, rb, nsb, true)
				q6KPack16VNNI(&got[0], &m.Data[0], rb, nsb)
			} else {
				q5KPack(want, m.Data, 16, rb, nsb, true)
				q5KPack16VNNI(&got[0], &m.Data[0], rb, nsb)
			}
			if !bytes.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s nsb=%d: byte %d (super-block %d, offset %d): %#x, Go packer %#x", typ, nsb, i, i/(16*pb), i%(16*pb), got[i], want[i])
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
