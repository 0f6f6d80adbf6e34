#include "textflag.h"

// AVX-VNNI Q8_0 tile for the AVX2 path (q8vnni_amd64.go).

// VPDPBUSDY(D, U, S): VEX-encoded (AVX-VNNI) VPDPBUSD YD, YU, YS -- YD +=
// per int32 lane the sum of 4 products of YU's unsigned bytes by YS's
// signed bytes. Register numbers, not names: the Go assembler knows only
// the EVEX form, which AVX-VNNI CPUs without AVX-512 (Alder Lake) lack.
#define VPDPBUSDY(D, U, S) \
	BYTE $0xC4; BYTE $(0xE2 ^ ((D>>3)<<7) ^ ((S>>3)<<5)); BYTE $(((15-U)<<3) | 5); BYTE $0x50; BYTE $(0xC0 | ((D&7)<<3) | (S&7))

#define RED8V(Y, X, TX) \
	VEXTRACTF128 $1, Y, TX \
	VADDPS TX, X, X \
	VMOVHLPS X, X, TX \
	VADDPS TX, X, X \
	VMOVSHDUP X, TX \
	VADDSS TX, X, X

// Q8V22(OFF, A00, A01, A10, A11) adds one Q8_0 block to the 2x2 (row,
// token) tile: weight rows at SI and SI+R14 (raw Q8_0 blocks), the tokens'
// tile layout (q8tile.go) at BX and BX+DX, the block's qs at OFF and its
// correction -128*(lane sums of x) at OFF+64. Weights enter VPDPBUSD as
// w XOR 0x80 = w+128 (unsigned), so correction + sum((w+128)*x) is the
// exact sum of w*x: the canonical integer sum, then one FMA with
// d = dw*dx (the four products from one 4-lane multiply of R12's
// (dw0, dw0, dw1, dw1) by (dx0, dx1, dx0, dx1), blended from the tile
// rows' widened scales at OFF+128).
// A_rt: accumulator register numbers of (row r, token t). Y15: 0x80 bytes.
#define Q8V22(OFF, A00, A01, A10, A11) \
	VPXOR 2(SI), Y15, Y8 \
	VPXOR 2(SI)(R14*1), Y15, Y9 \
	VMOVUPS OFF+128(BX), X11 \
	VBLENDPS $0x0a, OFF+128(BX)(DX*1), X11, X11 \
	VMULPS (R12), X11, X11 \
	VMOVUPS X11, dd-16(SP) \
	VMOVDQU OFF(BX), Y13 \
	VMOVDQU OFF+64(BX), Y10 \
	VMOVDQU OFF+64(BX), Y12 \
	VPDPBUSDY(10, 8, 13) \
	VPDPBUSDY(12, 9, 13) \
	VCVTDQ2PS Y10, Y10 \
	VCVTDQ2PS Y12, Y12 \
	VBROADCASTSS dd-16(SP), Y11 \
	VFMADD231PS Y11, Y10, A00 \
	VBROADCASTSS dd-8(SP), Y14 \
	VFMADD231PS Y14, Y12, A10 \
	VMOVDQU OFF(BX)(DX*1), Y13 \
	VMOVDQU OFF+64(BX)(DX*1), Y10 \
	VMOVDQU OFF+64(BX)(DX*1), Y12 \
	VPDPBUSDY(10, 8, 13) \
	VPDPBUSDY(12, 9, 13) \
	VCVTDQ2PS Y10, Y10 \
	VCVTDQ2PS Y12, Y12 \
	VBROADCASTSS dd-12(SP), Y11 \
	VFMADD231PS Y11, Y10, A01 \
	VBROADCASTSS dd-4(SP), Y14 \
	VFMADD231PS Y14, Y12, A11 \
	ADDQ $34, SI \
	ADDQ $16, R12

// func tileQ8_0VNNI(out *float32, outStride int, w *byte, nPairs int, xt *byte, xtStride int, dwp *float32, nb int)
// tileQ8_0AVX2's tile and order with VPDPBUSD: out[t*outStride + r] for 2
// tokens t (tile rows xtStride bytes apart) and 2*nPairs weight rows r.
// Even blocks go to Y0-Y3, odd blocks to Y4-Y7 (canonical lanes 0-7 and
// 8-15).
TEXT ·tileQ8_0VNNI(SB), NOSPLIT, $16-64
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ nPairs+24(FP), R8
	MOVQ xt+32(FP), AX
	MOVQ xtStride+40(FP), DX
	MOVQ dwp+48(FP), R12
	MOVQ nb+56(FP), R13
	IMUL3Q $34, R13, R14  // weight row bytes
	MOVL $0x80808080, R10
	MOVQ R10, X15
	VPBROADCASTD X15, Y15

q8v_pair:
	TESTQ R8, R8
	JZ   q8v_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	MOVQ AX, BX
	MOVQ R13, R10

q8v_blk:
	CMPQ R10, $2
	JLT  q8v_single
	Q8V22(0, Y0, Y1, Y2, Y3)
	Q8V22(32, Y4, Y5, Y6, Y7)
	ADDQ $192, BX
	SUBQ $2, R10
	JMP  q8v_blk

q8v_single:
	TESTQ R10, R10
	JZ   q8v_red
	Q8V22(0, Y0, Y1, Y2, Y3)

q8v_red:
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	RED8V(Y0, X0, X8)
	RED8V(Y1, X1, X8)
	RED8V(Y2, X2, X8)
	RED8V(Y3, X3, X8)
	VMOVSS X0, (DI)
	VMOVSS X2, 4(DI)
	VMOVSS X1, (DI)(R9*1)
	VMOVSS X3, 4(DI)(R9*1)
	ADDQ $8, DI
	ADDQ R14, SI          // SI ended at row 1: skip it
	DECQ R8
	JMP  q8v_pair

q8v_done:
	VZEROUPPER
	RET

// func q8TileRowAVX2(dst, blocks *byte, nb int)
// q8TileRow in assembly: per block b, in its pair's 192 bytes at half
// h = b%2, the qs (32 B at 32h), -128 times the sums of each 4 qs (8 int32
// at 64+32h) and dx widened x8 (at 128+32h). The caller clears the unused
// half of a lone last block.
TEXT ·q8TileRowAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ blocks+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVL $0x01010101, AX
	VMOVQ AX, X15
	VPBROADCASTD X15, Y15      // u8 ones
	MOVL $0x00010001, AX
	VMOVQ AX, X14
	VPBROADCASTD X14, Y14      // i16 ones
	XORQ DX, DX                // half offset: 0 or 32

q8tr_blk:
	TESTQ CX, CX
	JZ   q8tr_done
	VMOVDQU 2(SI), Y0
	VMOVDQU Y0, (DI)(DX*1)
	VPMADDUBSW Y0, Y15, Y1
	VPMADDWD Y14, Y1, Y1
	VPSLLD $7, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPSUBD Y1, Y2, Y1
	VMOVDQU Y1, 64(DI)(DX*1)
	MOVWLZX (SI), AX
	VMOVQ AX, X3
	VCVTPH2PS X3, X3
	VBROADCASTSS X3, Y3
	VMOVUPS Y3, 128(DI)(DX*1)
	ADDQ $34, SI
	XORQ $32, DX
	JNZ  q8tr_next
	ADDQ $192, DI

q8tr_next:
	DECQ CX
	JMP  q8tr_blk

q8tr_done:
	VZEROUPPER
	RET
