package kernels

import (
	"math"
	"unsafe"
)

//go:noescape
func rowsQ5_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)

//go:noescape
func q5KTile8x2AVX2(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

//go:noescape
func q5KPack16VNNI(dst, w *byte, rb, nsb int)

//go:noescape
func q5KPack8AVX2(dst, w *byte, rb, nsb int)

//go:noescape
func q5KTile16x4VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

// q5KPack packs R rows of nsb Q5_K super-blocks (row r at w[r*rb:]) for
// the rows-in-lanes kernels (q5kvnni_amd64.s: 16 rows with VNNI, 8 rows
// on AVX2). Per group of R rows and
// super-block, 232*R bytes; "interleaved" means 4R bytes per 4-byte
// group, row r's 4 bytes at 4r:
//
//	0 .. 128R      qs bytes 32k+4c..+3 (pair k = 0..3, column c = 0..7),
//	               interleaved: low nibbles sub-block 2k, high 2k+1
//	128R .. 160R   qh bytes 4c..+3, interleaved (bit j: sub-block j)
//	160R .. 192R   scales: sub-block j, row r's sc_j int32 (VNNI) or
//	               (sc_j, sc_j) int16 (AVX2)
//	192R .. 224R   mins: sub-block j, row r's (m_j, m_j) int16
//	224R .. 232R   d, then dmin, widened
//
// The specification of the layouts, which the gather packers the kernels
// use (kpack_amd64.s) reproduce byte for byte (TestPackAsmMatchesGo); the
// stores skip bounds checks (d's length is checked once per super-block).
func q5KPack(dst, w []byte, R, rb, nsb int, vnni bool) {
	bb := 232 * R
	for b := 0; b < nsb; b++ {
		d := dst[b*bb : (b+1)*bb]
		_ = d[bb-1]
		for r := 0; r < R; r++ {
			blk := w[r*rb+b*176 : r*rb+b*176+176]
			base := unsafe.Pointer(&d[4*r])
			qs := (*[32]uint32)(unsafe.Pointer(&blk[48]))
			qh := (*[8]uint32)(unsafe.Pointer(&blk[16]))
			for u := 0; u < 32; u++ {
				*(*uint32)(unsafe.Add(base, 4*R*u)) = qs[u]
			}
			for c := 0; c < 8; c++ {
				*(*uint32)(unsafe.Add(base, 128*R+4*R*c)) = qh[c]
			}
			for j := 0; j < 8; j++ {
				sc, m := q4KScaleMin(blk[4:16], j)
				s := uint32(sc)
				if !vnni {
					s |= s << 16
				}
				*(*uint32)(unsafe.Add(base, 160*R+4*R*j)) = s
				*(*uint32)(unsafe.Add(base, 192*R+4*R*j)) = uint32(m) | uint32(m)<<16
			}
			*(*uint32)(unsafe.Add(base, 224*R)) = math.Float32bits(fp16At(blk, 0))
			*(*uint32)(unsafe.Add(base, 228*R)) = math.Float32bits(fp16At(blk, 2))
		}
	}
}

// q5KLanes is Q5_K's rows-in-lanes kernel set (klanes_amd64.go).
var q5KLanes = lanesSpec{
	name: "Q5_K", sbBytes: 176, packBytes: 232, goPack: q5KPack,
	asmPack: [2]func(dst, w *byte, rb, nsb int){q5KPack8AVX2, q5KPack16VNNI},
	kernel:  [2]func(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int){q5KTile8x2AVX2, q5KTile16x4VNNI},
	step:    [2]int{2, 4},
	small:   kTiles4(176, rowsQ5_KAVX2x4),
}

func init() {
	q5_KKernels[AVX2].tiles = kTilesLanes(q5KLanes, false)
	q5_KKernels[AVX512].tiles = kTilesLanes(q5KLanes, true)
}
