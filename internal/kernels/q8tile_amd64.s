#include "textflag.h"

// VPDPBUSDY(D, U, S): VEX-encoded (AVX-VNNI) VPDPBUSD YD, YU, YS -- YD +=
// per int32 lane the sum of 4 products of YU's unsigned bytes by YS's
// signed bytes. Register numbers, not names: the Go assembler knows only
// the EVEX form, which AVX-VNNI CPUs without AVX-512 (Alder Lake) lack.
#define VPDPBUSDY(D, U, S) \
	BYTE $0xC4; BYTE $(0xE2 ^ ((D>>3)<<7) ^ ((S>>3)<<5)); BYTE $(((15-U)<<3) | 5); BYTE $0x50; BYTE $(0xC0 | ((D&7)<<3) | (S&7))

// Q8_0 multi-token tiles of the AVX2 path: 4 weight rows x 2 tokens, in
// two forms, AVX-VNNI (VPDPBUSD) and plain AVX2 (VPMADDUBSW + VPMADDWD, what
// a Zen 3 runs). The canonical order puts even blocks in lanes 0-7 and odd
// blocks in lanes 8-15; 8 (row, token) outputs times 16 lanes would need 16
// accumulators, so each tile makes two passes over its rows: the even
// blocks into Y0-Y7 (then saved on the stack), the odd blocks into Y0-Y7,
// then lane j (even) + lane j+8 (odd) and the 8-lane tree, exactly the
// canonical reduction. Y(2r+t) is the accumulator of (row r, token t).
//
// Operands, shared by both forms: out[t*outStride + r] for 2 tokens whose
// tile rows (q8tile.go: per block pair 192 bytes of qs, -128*lane sums, dx
// x8) are xtStride bytes apart, and 4*nGroups raw Q8_0 weight rows; dwp
// holds per group of 4 rows and block, in pass order (the even blocks,
// then the odd ones), (dw0, dw1, dw2, dw3) twice. One block step: d =
// dwp x (dx0 x4, dx1 x4), the 8 products dw_r*dx_t in one multiply, stored
// at dd-32(SP) and broadcast per output; then per row the exact integer
// sums of 4 products per lane, converted, and one FMA each.
//
// Registers in the block step: Y8, Y9 the tokens' qs, Y12 the row's
// weights, Y15 a constant (VNNI: 0x80 bytes; plain: int16 ones); AX, BX,
// CX, DX the 4 rows at the current block, R10 and R11 the tokens' tile
// rows at the current block's half, R12 dwp.

#define RED8V(Y, X, TX) \
	VEXTRACTF128 $1, Y, TX \
	VADDPS TX, X, X \
	VMOVHLPS X, X, TX \
	VADDPS TX, X, X \
	VMOVSHDUP X, TX \
	VADDSS TX, X, X

#define Q42D \
	VMOVDQU (R10), Y8 \
	VMOVDQU (R11), Y9 \
	VMOVUPS 128(R10), X14 \
	VINSERTF128 $1, 128(R11), Y14, Y14 \
	VMULPS (R12), Y14, Y14 \
	VMOVUPS X14, dd-32(SP) \
	VEXTRACTF128 $1, Y14, dd-16(SP)

// Q8V42ROW: one weight row (block at W) times both tokens, AVX-VNNI.
// Weights enter VPDPBUSD as w XOR 0x80 = w+128 (unsigned); starting the
// integer sum at the token's correction -128*sum(x) (tile offset 64)
// gives the exact signed sum.
#define Q8V42ROW(W, D0, D1, A0, A1) \
	VPXOR 2(W), Y15, Y12 \
	VMOVDQU 64(R10), Y13 \
	VPDPBUSDY(13, 12, 8) \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D0(SP), Y14 \
	VFMADD231PS Y14, Y13, A0 \
	VMOVDQU 64(R11), Y11 \
	VPDPBUSDY(11, 12, 9) \
	VCVTDQ2PS Y11, Y11 \
	VBROADCASTSS D1(SP), Y10 \
	VFMADD231PS Y10, Y11, A1

// Q8P42ROW: the same with VPMADDUBSW: |w| (unsigned; -128 gives 128) times
// x signed by w, int16 pairs (at most 2*128*127, no saturation) summed by
// VPMADDWD with ones into the 8 int32 lane sums.
#define Q8P42ROW(W, D0, D1, A0, A1) \
	VMOVDQU 2(W), Y12 \
	VPABSB Y12, Y11 \
	VPSIGNB Y12, Y8, Y13 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDWD Y15, Y13, Y13 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D0(SP), Y14 \
	VFMADD231PS Y14, Y13, A0 \
	VPSIGNB Y12, Y9, Y13 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDWD Y15, Y13, Y13 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D1(SP), Y10 \
	VFMADD231PS Y10, Y13, A1

#define Q42STEP \
	ADDQ $68, AX \
	ADDQ $68, BX \
	ADDQ $68, CX \
	ADDQ $68, DX \
	ADDQ $192, R10 \
	ADDQ $192, R11 \
	ADDQ $32, R12

#define Q42ZERO \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

#define Q42SAVE \
	VMOVUPS Y0, ev-288(SP) \
	VMOVUPS Y1, ev-256(SP) \
	VMOVUPS Y2, ev-224(SP) \
	VMOVUPS Y3, ev-192(SP) \
	VMOVUPS Y4, ev-160(SP) \
	VMOVUPS Y5, ev-128(SP) \
	VMOVUPS Y6, ev-96(SP) \
	VMOVUPS Y7, ev-64(SP)

// Q42FIN1: lane j (odd blocks, Y) + lane j (even blocks, saved at EV) -
// the canonical j += j+8, commutative - then the 8-lane tree, stored.
#define Q42FIN1(Y, X, EV, OUT) \
	VADDPS EV, Y, Y \
	RED8V(Y, X, X8) \
	VMOVSS X, OUT

#define Q42FIN \
	Q42FIN1(Y0, X0, ev-288(SP), (DI)) \
	Q42FIN1(Y1, X1, ev-256(SP), (DI)(R9*1)) \
	Q42FIN1(Y2, X2, ev-224(SP), 4(DI)) \
	Q42FIN1(Y3, X3, ev-192(SP), 4(DI)(R9*1)) \
	Q42FIN1(Y4, X4, ev-160(SP), 8(DI)) \
	Q42FIN1(Y5, X5, ev-128(SP), 8(DI)(R9*1)) \
	Q42FIN1(Y6, X6, ev-96(SP), 12(DI)) \
	Q42FIN1(Y7, X7, ev-64(SP), 12(DI)(R9*1))

// Q42ROWS points AX-DX at the group's 4 rows plus OFF (0: even blocks,
// 34: odd), R10/R11 at the tokens' tile rows plus OFF/34*32, and R13 at
// the pass's block count.
#define Q42ROWS(OFF) \
	LEAQ OFF(SI), AX \
	LEAQ (AX)(R14*1), BX \
	LEAQ (AX)(R14*2), CX \
	LEAQ (BX)(R14*2), DX \
	MOVQ xt+32(FP), R10 \
	ADDQ $(OFF/34*32), R10 \
	MOVQ xtStride+40(FP), R11 \
	ADDQ R10, R11 \
	MOVQ nb+56(FP), R13

#define Q42ARGS \
	MOVQ out+0(FP), DI \
	MOVQ outStride+8(FP), R9 \
	SHLQ $2, R9 \
	MOVQ w+16(FP), SI \
	MOVQ nGroups+24(FP), R8 \
	MOVQ dwp+48(FP), R12 \
	MOVQ nb+56(FP), R14 \
	IMUL3Q $34, R14, R14

// func tileQ8_0x42VNNI(out *float32, outStride int, w *byte, nGroups int, xt *byte, xtStride int, dwp *float32, nb int)
TEXT ·tileQ8_0x42VNNI(SB), NOSPLIT, $288-64
	Q42ARGS
	MOVL $0x80808080, AX
	VMOVQ AX, X15
	VPBROADCASTD X15, Y15

q8v42_group:
	TESTQ R8, R8
	JZ   q8v42_done
	Q42ZERO
	Q42ROWS(0)
	INCQ R13
	SHRQ $1, R13          // even blocks: ceil(nb/2) >= 1

q8v42_even:
	Q42D
	Q8V42ROW(AX, dd-32, dd-16, Y0, Y1)
	Q8V42ROW(BX, dd-28, dd-12, Y2, Y3)
	Q8V42ROW(CX, dd-24, dd-8, Y4, Y5)
	Q8V42ROW(DX, dd-20, dd-4, Y6, Y7)
	Q42STEP
	DECQ R13
	JNZ  q8v42_even
	Q42SAVE
	Q42ZERO
	Q42ROWS(34)
	SHRQ $1, R13          // odd blocks: floor(nb/2)
	JZ   q8v42_fin

q8v42_odd:
	Q42D
	Q8V42ROW(AX, dd-32, dd-16, Y0, Y1)
	Q8V42ROW(BX, dd-28, dd-12, Y2, Y3)
	Q8V42ROW(CX, dd-24, dd-8, Y4, Y5)
	Q8V42ROW(DX, dd-20, dd-4, Y6, Y7)
	Q42STEP
	DECQ R13
	JNZ  q8v42_odd

q8v42_fin:
	Q42FIN
	ADDQ $16, DI
	LEAQ (SI)(R14*4), SI
	DECQ R8
	JMP  q8v42_group

q8v42_done:
	VZEROUPPER
	RET

// func tileQ8_0x42AVX2(out *float32, outStride int, w *byte, nGroups int, xt *byte, xtStride int, dwp *float32, nb int)
TEXT ·tileQ8_0x42AVX2(SB), NOSPLIT, $288-64
	Q42ARGS
	MOVL $0x00010001, AX
	VMOVQ AX, X15
	VPBROADCASTD X15, Y15

q8p42_group:
	TESTQ R8, R8
	JZ   q8p42_done
	Q42ZERO
	Q42ROWS(0)
	INCQ R13
	SHRQ $1, R13

q8p42_even:
	Q42D
	Q8P42ROW(AX, dd-32, dd-16, Y0, Y1)
	Q8P42ROW(BX, dd-28, dd-12, Y2, Y3)
	Q8P42ROW(CX, dd-24, dd-8, Y4, Y5)
	Q8P42ROW(DX, dd-20, dd-4, Y6, Y7)
	Q42STEP
	DECQ R13
	JNZ  q8p42_even
	Q42SAVE
	Q42ZERO
	Q42ROWS(34)
	SHRQ $1, R13
	JZ   q8p42_fin

q8p42_odd:
	Q42D
	Q8P42ROW(AX, dd-32, dd-16, Y0, Y1)
	Q8P42ROW(BX, dd-28, dd-12, Y2, Y3)
	Q8P42ROW(CX, dd-24, dd-8, Y4, Y5)
	Q8P42ROW(DX, dd-20, dd-4, Y6, Y7)
	Q42STEP
	DECQ R13
	JNZ  q8p42_odd

q8p42_fin:
	Q42FIN
	ADDQ $16, DI
	LEAQ (SI)(R14*4), SI
	DECQ R8
	JMP  q8p42_group

q8p42_done:
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

// Q42DW writes the widened scales of the block at offset OFF of the 4
// rows AX, BX, CX, DX as (dw0, dw1, dw2, dw3) twice at DI, and advances DI.
#define Q42DW \
	MOVWLZX (AX)(R11*1), R12 \
	MOVWLZX (BX)(R11*1), R13 \
	SHLQ $16, R13 \
	ORQ  R13, R12 \
	MOVWLZX (CX)(R11*1), R13 \
	SHLQ $32, R13 \
	ORQ  R13, R12 \
	MOVWLZX (DX)(R11*1), R13 \
	SHLQ $48, R13 \
	ORQ  R13, R12 \
	VMOVQ R12, X0 \
	VCVTPH2PS X0, X0 \
	VINSERTF128 $1, X0, Y0, Y0 \
	VMOVUPS Y0, (DI) \
	ADDQ $32, DI

// func q8DwPackAVX2(dwp *float32, w *byte, nGroups, nb int)
// q8DwPack in assembly (in Go it was 8% of a 64-token tile call).
TEXT ·q8DwPackAVX2(SB), NOSPLIT, $0-32
	MOVQ dwp+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+16(FP), R8
	MOVQ nb+24(FP), R9
	IMUL3Q $34, R9, R10   // row bytes

q8dw_group:
	TESTQ R8, R8
	JZ   q8dw_done
	MOVQ SI, AX
	LEAQ (SI)(R10*1), BX
	LEAQ (SI)(R10*2), CX
	LEAQ (BX)(R10*2), DX
	XORQ R11, R11         // byte offset of the block
	MOVQ R9, R14
	INCQ R14
	SHRQ $1, R14          // even blocks

q8dw_even:
	Q42DW
	ADDQ $68, R11
	DECQ R14
	JNZ  q8dw_even
	MOVQ $34, R11
	MOVQ R9, R14
	SHRQ $1, R14          // odd blocks
	JZ   q8dw_next

q8dw_odd:
	Q42DW
	ADDQ $68, R11
	DECQ R14
	JNZ  q8dw_odd

q8dw_next:
	LEAQ (SI)(R10*4), SI
	DECQ R8
	JMP  q8dw_group

q8dw_done:
	VZEROUPPER
	RET
