#include "textflag.h"

// The AVX-512 path's Q8_0 kernel for 16 rows (a whole row tile) and any
// number of tokens, with the rows in the lanes: ZMM lane r holds row r.
// Each output's 16 canonical lanes (package doc: lane 8h+l sums block b's
// group l, h = b%2) are then lane r of 16 accumulators Z(16+8h+l), one
// token at a time, and the canonical tree is 15 adds of whole registers.
// Per block: one multiply makes the 16 rows' scale products dw*dx (the
// token's dx an embedded broadcast), shared by the block's 8 groups; per
// group, VPDPBUSD takes the rows' 16 weight groups (w+128, repacked) and
// the token's 4 quants as a 32-bit embedded broadcast, the integer sum is
// converted, the token's correction -128*sum(x) (a float in its tile row,
// q8TileRowZ; exact: both are integers below 2^24) added, then one FMA.
// The 4x4 tile (q8z_amd64.s) needs a 64-bit broadcast of two different
// products per (row, token) and block pair; this needs none.

// func tileQ8_0R16(out *float32, outStride int, wp *byte, nb int, xb *byte, xStride int, xt *byte, xtStride int, dx *float32, nTok int)
// out[t*outStride + r], r < 16, t < nTok: weights repacked by
// repackQ8_0R16 at wp; the tokens' Q8_0 blocks at xb (xStride bytes
// apart), tile rows at xt (xtStride apart) and widened scales at dx (nb
// floats apart).
TEXT ·tileQ8_0R16(SB), NOSPLIT, $0-80
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R8
	SHLQ $2, R8
	MOVQ xb+32(FP), BX
	MOVQ xt+48(FP), CX
	MOVQ dx+64(FP), DX
	MOVQ nTok+72(FP), R9

r16_tok:
	TESTQ R9, R9
	JZ   r16_done
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	MOVQ wp+16(FP), SI
	MOVQ BX, R10
	MOVQ CX, R11
	MOVQ DX, R12
	MOVQ nb+24(FP), R13

r16_pair:
	CMPQ R13, $2
	JLT  r16_single
	VMOVUPS 512(SI), Z0
	VMULPS.BCST 0(R12), Z0, Z1
	VMOVDQU32 0(SI), Z2
	VPXORD Z3, Z3, Z3
	VPDPBUSD.BCST 2(R10), Z2, Z3
	VCVTDQ2PS Z3, Z3
	VADDPS.BCST 128(R11), Z3, Z3
	VFMADD231PS Z1, Z3, Z16
	VMOVDQU32 64(SI), Z4
	VPXORD Z5, Z5, Z5
	VPDPBUSD.BCST 6(R10), Z4, Z5
	VCVTDQ2PS Z5, Z5
	VADDPS.BCST 132(R11), Z5, Z5
	VFMADD231PS Z1, Z5, Z17
	VMOVDQU32 128(SI), Z6
	VPXORD Z7, Z7, Z7
	VPDPBUSD.BCST 10(R10), Z6, Z7
	VCVTDQ2PS Z7, Z7
	VADDPS.BCST 136(R11), Z7, Z7
	VFMADD231PS Z1, Z7, Z18
	VMOVDQU32 192(SI), Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD.BCST 14(R10), Z8, Z9
	VCVTDQ2PS Z9, Z9
	VADDPS.BCST 140(R11), Z9, Z9
	VFMADD231PS Z1, Z9, Z19
	VMOVDQU32 256(SI), Z2
	VPXORD Z3, Z3, Z3
	VPDPBUSD.BCST 18(R10), Z2, Z3
	VCVTDQ2PS Z3, Z3
	VADDPS.BCST 144(R11), Z3, Z3
	VFMADD231PS Z1, Z3, Z20
	VMOVDQU32 320(SI), Z4
	VPXORD Z5, Z5, Z5
	VPDPBUSD.BCST 22(R10), Z4, Z5
	VCVTDQ2PS Z5, Z5
	VADDPS.BCST 148(R11), Z5, Z5
	VFMADD231PS Z1, Z5, Z21
	VMOVDQU32 384(SI), Z6
	VPXORD Z7, Z7, Z7
	VPDPBUSD.BCST 26(R10), Z6, Z7
	VCVTDQ2PS Z7, Z7
	VADDPS.BCST 152(R11), Z7, Z7
	VFMADD231PS Z1, Z7, Z22
	VMOVDQU32 448(SI), Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD.BCST 30(R10), Z8, Z9
	VCVTDQ2PS Z9, Z9
	VADDPS.BCST 156(R11), Z9, Z9
	VFMADD231PS Z1, Z9, Z23
	VMOVUPS 1088(SI), Z0
	VMULPS.BCST 4(R12), Z0, Z1
	VMOVDQU32 576(SI), Z2
	VPXORD Z3, Z3, Z3
	VPDPBUSD.BCST 36(R10), Z2, Z3
	VCVTDQ2PS Z3, Z3
	VADDPS.BCST 160(R11), Z3, Z3
	VFMADD231PS Z1, Z3, Z24
	VMOVDQU32 640(SI), Z4
	VPXORD Z5, Z5, Z5
	VPDPBUSD.BCST 40(R10), Z4, Z5
	VCVTDQ2PS Z5, Z5
	VADDPS.BCST 164(R11), Z5, Z5
	VFMADD231PS Z1, Z5, Z25
	VMOVDQU32 704(SI), Z6
	VPXORD Z7, Z7, Z7
	VPDPBUSD.BCST 44(R10), Z6, Z7
	VCVTDQ2PS Z7, Z7
	VADDPS.BCST 168(R11), Z7, Z7
	VFMADD231PS Z1, Z7, Z26
	VMOVDQU32 768(SI), Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD.BCST 48(R10), Z8, Z9
	VCVTDQ2PS Z9, Z9
	VADDPS.BCST 172(R11), Z9, Z9
	VFMADD231PS Z1, Z9, Z27
	VMOVDQU32 832(SI), Z2
	VPXORD Z3, Z3, Z3
	VPDPBUSD.BCST 52(R10), Z2, Z3
	VCVTDQ2PS Z3, Z3
	VADDPS.BCST 176(R11), Z3, Z3
	VFMADD231PS Z1, Z3, Z28
	VMOVDQU32 896(SI), Z4
	VPXORD Z5, Z5, Z5
	VPDPBUSD.BCST 56(R10), Z4, Z5
	VCVTDQ2PS Z5, Z5
	VADDPS.BCST 180(R11), Z5, Z5
	VFMADD231PS Z1, Z5, Z29
	VMOVDQU32 960(SI), Z6
	VPXORD Z7, Z7, Z7
	VPDPBUSD.BCST 60(R10), Z6, Z7
	VCVTDQ2PS Z7, Z7
	VADDPS.BCST 184(R11), Z7, Z7
	VFMADD231PS Z1, Z7, Z30
	VMOVDQU32 1024(SI), Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD.BCST 64(R10), Z8, Z9
	VCVTDQ2PS Z9, Z9
	VADDPS.BCST 188(R11), Z9, Z9
	VFMADD231PS Z1, Z9, Z31
	ADDQ $1152, SI
	ADDQ $68, R10
	ADDQ $192, R11
	ADDQ $8, R12
	SUBQ $2, R13
	JMP  r16_pair

r16_single:
	TESTQ R13, R13
	JZ   r16_red
	VMOVUPS 512(SI), Z0
	VMULPS.BCST 0(R12), Z0, Z1
	VMOVDQU32 0(SI), Z2
	VPXORD Z3, Z3, Z3
	VPDPBUSD.BCST 2(R10), Z2, Z3
	VCVTDQ2PS Z3, Z3
	VADDPS.BCST 128(R11), Z3, Z3
	VFMADD231PS Z1, Z3, Z16
	VMOVDQU32 64(SI), Z4
	VPXORD Z5, Z5, Z5
	VPDPBUSD.BCST 6(R10), Z4, Z5
	VCVTDQ2PS Z5, Z5
	VADDPS.BCST 132(R11), Z5, Z5
	VFMADD231PS Z1, Z5, Z17
	VMOVDQU32 128(SI), Z6
	VPXORD Z7, Z7, Z7
	VPDPBUSD.BCST 10(R10), Z6, Z7
	VCVTDQ2PS Z7, Z7
	VADDPS.BCST 136(R11), Z7, Z7
	VFMADD231PS Z1, Z7, Z18
	VMOVDQU32 192(SI), Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD.BCST 14(R10), Z8, Z9
	VCVTDQ2PS Z9, Z9
	VADDPS.BCST 140(R11), Z9, Z9
	VFMADD231PS Z1, Z9, Z19
	VMOVDQU32 256(SI), Z2
	VPXORD Z3, Z3, Z3
	VPDPBUSD.BCST 18(R10), Z2, Z3
	VCVTDQ2PS Z3, Z3
	VADDPS.BCST 144(R11), Z3, Z3
	VFMADD231PS Z1, Z3, Z20
	VMOVDQU32 320(SI), Z4
	VPXORD Z5, Z5, Z5
	VPDPBUSD.BCST 22(R10), Z4, Z5
	VCVTDQ2PS Z5, Z5
	VADDPS.BCST 148(R11), Z5, Z5
	VFMADD231PS Z1, Z5, Z21
	VMOVDQU32 384(SI), Z6
	VPXORD Z7, Z7, Z7
	VPDPBUSD.BCST 26(R10), Z6, Z7
	VCVTDQ2PS Z7, Z7
	VADDPS.BCST 152(R11), Z7, Z7
	VFMADD231PS Z1, Z7, Z22
	VMOVDQU32 448(SI), Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD.BCST 30(R10), Z8, Z9
	VCVTDQ2PS Z9, Z9
	VADDPS.BCST 156(R11), Z9, Z9
	VFMADD231PS Z1, Z9, Z23

r16_red:
	VADDPS Z24, Z16, Z16
	VADDPS Z25, Z17, Z17
	VADDPS Z26, Z18, Z18
	VADDPS Z27, Z19, Z19
	VADDPS Z28, Z20, Z20
	VADDPS Z29, Z21, Z21
	VADDPS Z30, Z22, Z22
	VADDPS Z31, Z23, Z23
	VADDPS Z20, Z16, Z16
	VADDPS Z21, Z17, Z17
	VADDPS Z22, Z18, Z18
	VADDPS Z23, Z19, Z19
	VADDPS Z18, Z16, Z16
	VADDPS Z19, Z17, Z17
	VADDPS Z17, Z16, Z16
	VMOVUPS Z16, (DI)
	ADDQ R8, DI
	ADDQ xStride+40(FP), BX
	ADDQ xtStride+56(FP), CX
	MOVQ nb+24(FP), AX
	LEAQ (DX)(AX*4), DX
	DECQ R9
	JMP  r16_tok

r16_done:
	VZEROUPPER
	RET

// func repackQ8_0R16(dst *byte, w *byte, nb int)
// Rewrites 16 Q8_0 rows for tileQ8_0R16: per block, 576 bytes: for each
// group l, the 16 rows' 4 weights as unsigned w+128 (64 bytes, row r at
// 4r), then the 16 rows' widened scales. It runs on every call of the
// 16-row kernel, so a block is moved with vector operations: rows r and
// r+8's 32 quants are one ZMM (halves), and the 16 x 8 groups are
// transposed in registers (dwords, then qwords, within 128-bit lanes; a
// two-table qword permute puts rows 0-3, 4-7, 8-11, 12-15 in order); the
// 16 scales are gathered into one XMM pair with VPINSRW, so no wide load
// reads back narrow stores. The scalar loop it replaced (a load, XOR and
// store per row and group) was 15% of bench-110M-q8_0's CPU prefilling
// in 64-token steps (docs/kernels.md).
TEXT ·repackQ8_0R16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ CX, R10
	IMULQ $34, R10        // row bytes
	LEAQ (R10)(R10*2), R11 // 3 rows
	LEAQ (R10)(R10*4), R13 // 5 rows
	LEAQ (R11)(R10*4), R8  // 7 rows
	LEAQ (R10*8), R9       // 8 rows
	MOVL $0x80808080, DX
	VPBROADCASTD DX, Z31
	VMOVDQU64 r16rIdx<>+0(SB), Z29
	VMOVDQU64 r16rIdx<>+64(SB), Z30

r16r_block:
	TESTQ CX, CX
	JZ   r16r_done
	MOVQ SI, AX
	LEAQ (SI)(R9*1), BX
	// The 16 rows' scales, widened.
	MOVWLZX 0(AX), DX
	VMOVD DX, X0
	VPINSRW $1, 0(AX)(R10*1), X0, X0
	VPINSRW $2, 0(AX)(R10*2), X0, X0
	VPINSRW $3, 0(AX)(R11*1), X0, X0
	VPINSRW $4, 0(AX)(R10*4), X0, X0
	VPINSRW $5, 0(AX)(R13*1), X0, X0
	VPINSRW $6, 0(AX)(R11*2), X0, X0
	VPINSRW $7, 0(AX)(R8*1), X0, X0
	MOVWLZX 0(BX), DX
	VMOVD DX, X1
	VPINSRW $1, 0(BX)(R10*1), X1, X1
	VPINSRW $2, 0(BX)(R10*2), X1, X1
	VPINSRW $3, 0(BX)(R11*1), X1, X1
	VPINSRW $4, 0(BX)(R10*4), X1, X1
	VPINSRW $5, 0(BX)(R13*1), X1, X1
	VPINSRW $6, 0(BX)(R11*2), X1, X1
	VPINSRW $7, 0(BX)(R8*1), X1, X1
	VINSERTI128 $1, X1, Y0, Y0
	VCVTPH2PS Y0, Z0
	VMOVUPS Z0, 512(DI)
	// Zk: row k's 32 quants (low half), row k+8's (high), as w+128.
	VMOVDQU 2(AX), Y0
	VINSERTI64X4 $1, 2(BX), Z0, Z0
	VMOVDQU 2(AX)(R10*1), Y1
	VINSERTI64X4 $1, 2(BX)(R10*1), Z1, Z1
	VMOVDQU 2(AX)(R10*2), Y2
	VINSERTI64X4 $1, 2(BX)(R10*2), Z2, Z2
	VMOVDQU 2(AX)(R11*1), Y3
	VINSERTI64X4 $1, 2(BX)(R11*1), Z3, Z3
	VMOVDQU 2(AX)(R10*4), Y4
	VINSERTI64X4 $1, 2(BX)(R10*4), Z4, Z4
	VMOVDQU 2(AX)(R13*1), Y5
	VINSERTI64X4 $1, 2(BX)(R13*1), Z5, Z5
	VMOVDQU 2(AX)(R11*2), Y6
	VINSERTI64X4 $1, 2(BX)(R11*2), Z6, Z6
	VMOVDQU 2(AX)(R8*1), Y7
	VINSERTI64X4 $1, 2(BX)(R8*1), Z7, Z7
	VPXORD Z31, Z0, Z0
	VPXORD Z31, Z1, Z1
	VPXORD Z31, Z2, Z2
	VPXORD Z31, Z3, Z3
	VPXORD Z31, Z4, Z4
	VPXORD Z31, Z5, Z5
	VPXORD Z31, Z6, Z6
	VPXORD Z31, Z7, Z7
	// Dwords: Z8 = rows 0,1 groups 0,1 (4,5 in the next lane), Z9 = groups 2,3 (6,7); ...
	VPUNPCKLDQ Z1, Z0, Z8
	VPUNPCKHDQ Z1, Z0, Z9
	VPUNPCKLDQ Z3, Z2, Z10
	VPUNPCKHDQ Z3, Z2, Z11
	VPUNPCKLDQ Z5, Z4, Z12
	VPUNPCKHDQ Z5, Z4, Z13
	VPUNPCKLDQ Z7, Z6, Z14
	VPUNPCKHDQ Z7, Z6, Z15
	// Qwords: Zk = rows 0-3 group k | group k+4 | rows 8-11 group k |
	// group k+4 (128-bit lanes), Z(4+k) the same for rows 4-7 and 12-15.
	VPUNPCKLQDQ Z10, Z8, Z0
	VPUNPCKHQDQ Z10, Z8, Z1
	VPUNPCKLQDQ Z11, Z9, Z2
	VPUNPCKHQDQ Z11, Z9, Z3
	VPUNPCKLQDQ Z14, Z12, Z4
	VPUNPCKHQDQ Z14, Z12, Z5
	VPUNPCKLQDQ Z15, Z13, Z6
	VPUNPCKHQDQ Z15, Z13, Z7
	VMOVDQA64 Z0, Z8
	VPERMT2Q Z4, Z29, Z8
	VPERMT2Q Z4, Z30, Z0
	VMOVDQU32 Z8, 0(DI)
	VMOVDQU32 Z0, 256(DI)
	VMOVDQA64 Z1, Z9
	VPERMT2Q Z5, Z29, Z9
	VPERMT2Q Z5, Z30, Z1
	VMOVDQU32 Z9, 64(DI)
	VMOVDQU32 Z1, 320(DI)
	VMOVDQA64 Z2, Z10
	VPERMT2Q Z6, Z29, Z10
	VPERMT2Q Z6, Z30, Z2
	VMOVDQU32 Z10, 128(DI)
	VMOVDQU32 Z2, 384(DI)
	VMOVDQA64 Z3, Z11
	VPERMT2Q Z7, Z29, Z11
	VPERMT2Q Z7, Z30, Z3
	VMOVDQU32 Z11, 192(DI)
	VMOVDQU32 Z3, 448(DI)
	ADDQ $576, DI
	ADDQ $34, SI
	DECQ CX
	JMP  r16r_block

r16r_done:
	VZEROUPPER
	RET

// r16rIdx: the qword indexes (first table 0-7, second 8-15) that put
// lanes 0 and 2 of the two qword-unpacked registers in row order (group
// k), then lanes 1 and 3 (group k+4).
DATA r16rIdx<>+0(SB)/8, $0
DATA r16rIdx<>+8(SB)/8, $1
DATA r16rIdx<>+16(SB)/8, $8
DATA r16rIdx<>+24(SB)/8, $9
DATA r16rIdx<>+32(SB)/8, $4
DATA r16rIdx<>+40(SB)/8, $5
DATA r16rIdx<>+48(SB)/8, $12
DATA r16rIdx<>+56(SB)/8, $13
DATA r16rIdx<>+64(SB)/8, $2
DATA r16rIdx<>+72(SB)/8, $3
DATA r16rIdx<>+80(SB)/8, $10
DATA r16rIdx<>+88(SB)/8, $11
DATA r16rIdx<>+96(SB)/8, $6
DATA r16rIdx<>+104(SB)/8, $7
DATA r16rIdx<>+112(SB)/8, $14
DATA r16rIdx<>+120(SB)/8, $15
GLOBL r16rIdx<>(SB), RODATA|NOPTR, $128
