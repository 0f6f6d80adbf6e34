package kernels

import (
	"math"
	"unsafe"
)

// Q6_K with rows in the lanes, as q4k8_amd64.go does for Q4_K: 8 rows per
// YMM register (q6KTile8x4AVX2, asm_amd64.s) or 16 per ZMM register
// (q6KTile16x4VNNI, q6kvnni_amd64.s). A row tile is repacked once per call
// and reused by every group of 4 tokens (the 6-bit decode is shared by
// 4). Per group of R rows and super-block, 292*R bytes; "interleaved"
// means 4R bytes per 4-byte group, row r's 4 bytes at 4r:
//
//	0 .. 64R       ql bytes 64h+4c..+3 (half h, group c = 0..7), interleaved
//	64R .. 128R    ql bytes 64h+32+4c..+3, interleaved
//	128R .. 192R   qh bytes 32h+4c..+3, interleaved
//	192R .. 256R   scales: sub-block g, 4R bytes: row r's (sc_g, sc_g)
//	               int16 (AVX2) or sc_g int32 (VNNI)
//	256R .. 288R   bsum scales: pair m, 4R bytes: row r's (sc_2m, sc_2m+1)
//	               int16 (AVX2) or (-32*sc_2m, -32*sc_2m+1) (VNNI)
//	288R .. 292R   d widened

// q6KPack packs R rows of nsb Q6_K super-blocks (row r at w[r*rb:]) in
// the AVX2 or (vnni) the AVX-512 layout: the specification of the layouts,
// which the gather packers the kernels use (kpack_amd64.s, several times
// faster) reproduce byte for byte (TestPackAsmMatchesGo). The stores skip
// bounds checks (d's length is checked once per super-block).
func q6KPack(dst, w []byte, R, rb, nsb int, vnni bool) {
	bb := 292 * R
	for b := 0; b < nsb; b++ {
		d := dst[b*bb : (b+1)*bb]
		_ = d[bb-1]
		for r := 0; r < R; r++ {
			blk := w[r*rb+b*210 : r*rb+b*210+210]
			base := unsafe.Pointer(&d[4*r])
			ql := (*[32]uint32)(unsafe.Pointer(&blk[0]))
			qh := (*[16]uint32)(unsafe.Pointer(&blk[128]))
			for h := 0; h < 2; h++ {
				for c := 0; c < 8; c++ {
					i := 8*h + c
					*(*uint32)(unsafe.Add(base, 4*R*i)) = ql[16*h+c]
					*(*uint32)(unsafe.Add(base, 64*R+4*R*i)) = ql[16*h+8+c]
					*(*uint32)(unsafe.Add(base, 128*R+4*R*i)) = qh[8*h+c]
				}
			}
			sc := (*[16]int8)(unsafe.Pointer(&blk[192]))
			for g := 0; g < 16; g++ {
				s := uint32(uint16(int16(sc[g])))
				if vnni {
					s = uint32(int32(sc[g]))
				} else {
					s |= s << 16
				}
				*(*uint32)(unsafe.Add(base, 192*R+4*R*g)) = s
			}
			k := int16(1)
			if vnni {
				k = -32
			}
			for m := 0; m < 8; m++ {
				s0 := uint32(uint16(k * int16(sc[2*m])))
				s1 := uint32(uint16(k * int16(sc[2*m+1])))
				*(*uint32)(unsafe.Add(base, 256*R+4*R*m)) = s0 | s1<<16
			}
			*(*uint32)(unsafe.Add(base, 288*R)) = math.Float32bits(fp16At(blk, 208))
		}
	}
}

//go:noescape
func q6KPack16VNNI(dst, w *byte, rb, nsb int)

//go:noescape
func q6KPack8AVX2(dst, w *byte, rb, nsb int)

//go:noescape
func q6KTile16x4VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

// q6KLanes is Q6_K's rows-in-lanes kernel set (klanes_amd64.go).
var q6KLanes = lanesSpec{
	name: "Q6_K", sbBytes: 210, packBytes: 292, goPack: q6KPack,
	asmPack: [2]func(dst, w *byte, rb, nsb int){q6KPack8AVX2, q6KPack16VNNI},
	kernel:  [2]func(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int){q6KTile8x4AVX2, q6KTile16x4VNNI},
	step:    [2]int{4, 4},
	small:   q6_KTilesAVX2,
}
