package kernels

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// q4KPackTestRows returns R rows of nsb random Q4_K super-blocks, row r
// at r*rb, the last row ending at the end of the slice. Scale bytes are
// per block all 0xFF, all 0x00 or random; d and dmin are any binary16
// (NaNs, signalling ones included, infinities, subnormals, zeros).
func q4KPackTestRows(r *rand.Rand, R, rb, nsb int) []byte {
	w := make([]byte, (R-1)*rb+144*nsb)
	for i := range w {
		w[i] = byte(r.IntN(256))
	}
	special := []uint16{0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7c01, 0xfdff, 0x7e00, 0xffff, 0x3c00, 0x7bff}
	for row := 0; row < R; row++ {
		for b := 0; b < nsb; b++ {
			blk := w[row*rb+144*b : row*rb+144*b+144]
			for k := 0; k < 2; k++ {
				if r.IntN(3) == 0 {
					binary.LittleEndian.PutUint16(blk[2*k:], special[r.IntN(len(special))])
				}
			}
			switch r.IntN(3) {
			case 0:
				for i := 4; i < 16; i++ {
					blk[i] = 0xff
				}
			case 1:
				for i := 4; i < 16; i++ {
					blk[i] = 0
				}
			}
		}
	}
	return w
}

// TestQ4KPackAsmMatchesGo: q4KPackAVX2 writes q4KPack's bytes for 8 and
// 16 rows over 1..22 super-blocks (rows back to back and with a gap),
// and nothing past the packed tile.
func TestQ4KPackAsmMatchesGo(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(4, 4))
	const guard = 64
	for _, R := range []int{8, 16} {
		for _, nsb := range []int{1, 2, 3, 8, 22} {
			for _, gap := range []int{0, 16} {
				rb := 144*nsb + gap
				for rep := 0; rep < 4; rep++ {
					w := q4KPackTestRows(r, R, rb, nsb)
					n := 200 * R * nsb
					want := make([]byte, n)
					q4KPack(want, w, R, rb, nsb)
					got := make([]byte, n+guard)
					for i := range got {
						got[i] = 0xa5
					}
					q4KPackAVX2(&got[0], &w[0], R, rb, nsb)
					for i := 0; i < n; i++ {
						if got[i] != want[i] {
							o := i % (200 * R)
							t.Fatalf("R=%d nsb=%d rb=%d: byte %d (super-block %d, slot %d, row %d, byte %d): %#x, Go packer %#x",
								R, nsb, rb, i, i/(200*R), o/(4*R), o%(4*R)/4, o%4, got[i], want[i])
						}
					}
					for i := n; i < n+guard; i++ {
						if got[i] != 0xa5 {
							t.Fatalf("R=%d nsb=%d rb=%d: guard byte %d past the tile written (%#x)", R, nsb, rb, i-n, got[i])
						}
					}
				}
			}
		}
	}
}

// TestQ4KPackRowsFallback: q4KPackRows gives the same bytes with the
// assembly packer and with the Go one.
func TestQ4KPackRowsFallback(t *testing.T) {
	defer func(v bool) { q4KPackAsm = v }(q4KPackAsm)
	r := rand.New(rand.NewPCG(7, 1))
	for _, R := range []int{8, 16} {
		const nsb = 3
		w := q4KPackTestRows(r, R, 144*nsb, nsb)
		var out [2][]byte
		for i, asm := range []bool{false, hasAVX2} {
			q4KPackAsm = asm
			out[i] = make([]byte, 200*R*nsb)
			q4KPackRows(out[i], w, R, 144*nsb, nsb)
		}
		if string(out[0]) != string(out[1]) {
			t.Fatalf("R=%d: q4KPackRows differs between the Go and assembly packers", R)
		}
	}
}

// BenchmarkQ4KPack: one 8-row (16-row) tile of 2048 columns, cache-warm
// ("warm", the same rows every time) and streamed from memory ("cold":
// successive tiles of a 64 MiB matrix), Go packer against assembly.
func BenchmarkQ4KPack(b *testing.B) {
	if !hasAVX2 {
		b.Skip("no AVX2 on this CPU")
	}
	const nsb = 8
	rb := 144 * nsb
	r := rand.New(rand.NewPCG(1, 1))
	big := q4KPackTestRows(r, 64<<20/rb, rb, nsb)
	for _, R := range []int{8, 16} {
		dst := make([]byte, 200*R*nsb)
		tiles := len(big) / (R * rb)
		for _, mode := range []string{"warm", "cold"} {
			for _, asm := range []bool{false, true} {
				name := map[bool]string{false: "go", true: "asm"}[asm]
				b.Run(fmt.Sprintf("R%d/%s/%s", R, mode, name), func(b *testing.B) {
					b.SetBytes(int64(R * rb))
					for i := 0; i < b.N; i++ {
						w := big
						if mode == "cold" {
							w = big[i%tiles*R*rb:]
						}
						if asm {
							q4KPackAVX2(&dst[0], &w[0], R, rb, nsb)
						} else {
							q4KPack(dst, w, R, rb, nsb)
						}
					}
				})
			}
		}
	}
}
