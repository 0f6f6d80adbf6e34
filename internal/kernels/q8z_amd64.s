#include "textflag.h"

// The AVX-512 path's Q8_0 register tile, 4 rows x 4 tokens (q8z: the
// interleaved layout). Its activation tile rows (q8TileRowZ) and
// repacked weights hold a block pair's two blocks interleaved by 4-byte
// group: bytes 8l+4h..8l+4h+3 are group l of block 2p+h, so VPDPBUSD's
// int32 lane 2l+h is the canonical lane 8h+l of the package doc, and a
// (row, token) pair's two scale products dw*dx fill the 16 lanes as one
// 64-bit broadcast. The 16 products of a pair step come from 4 YMM
// multiplies (the rows' 8 widened scales times each token's 2) through
// the stack, instead of one ZMM multiply per (row, token): that multiply
// was 1 in 4 of the tile's FMA-pipe ZMM operations on Zen 4. The
// reduction (RED4Z) adds the same lanes in the same tree as RED4.

// Q8ZR accumulates one (row, token) pair: the token's qs in Z10 and its
// -128*sum correction in Z11, the row's w+128 in WZ, the pair's two
// products at P (8 bytes); T8 and T9 are scratch.
#define Q8ZR(WZ, P, ACC, T8, T9) \
	VMOVDQA32 Z11, T8 \
	VPDPBUSD Z10, WZ, T8 \
	VCVTDQ2PS T8, T8 \
	VBROADCASTSD P, T9 \
	VFMADD231PS T9, T8, ACC

// Q8ZR1 is Q8ZR for a lone last block: only its lanes (even, mask K2)
// change.
#define Q8ZR1(WZ, P, ACC, T8, T9) \
	VMOVDQA32 Z11, T8 \
	VPDPBUSD Z10, WZ, T8 \
	VCVTDQ2PS T8, T8 \
	VBROADCASTSD P, T9 \
	VFMADD231PS T9, T8, K2, ACC

// RED4Z reduces the accumulators A, B, C, D (4 consecutive outputs) in
// the interleaved lane order by the canonical tree over logical lanes
// (L += L+8: physical 2l += 2l+1; then l += l+4, l += l+2, l += l+1)
// and stores the 4 results at M. T0-T3 are scratch (TX3 is T3's low 128
// bits); K3 must be 0x55.
#define RED4Z(A, B, C, D, M, T0, T1, T2, T3, TX3) \
	VSHUFPS $0x88, B, A, T0 \
	VSHUFPS $0xDD, B, A, T1 \
	VADDPS T1, T0, T0 \
	VSHUFPS $0x88, D, C, T2 \
	VSHUFPS $0xDD, D, C, T3 \
	VADDPS T3, T2, T2 \
	VSHUFF64X2 $0x44, T2, T0, T1 \
	VSHUFF64X2 $0xEE, T2, T0, T3 \
	VADDPS T3, T1, T1 \
	VSHUFF64X2 $0x88, T1, T1, T0 \
	VSHUFF64X2 $0xDD, T1, T1, T3 \
	VADDPS T3, T0, T0 \
	VPERMILPS $0xB1, T0, T3 \
	VADDPS T3, T0, T0 \
	VCOMPRESSPS T0, K3, T3 \
	VMOVUPS TX3, M

// func tileQ8_0Z(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nb int, dx *float32, dxStride int)
// out[t*outStride + r] for 4 tokens t (tile rows of xt, xtStride bytes
// apart; widened block scales at dx, dxStride floats apart) and 4*nGroups
// rows r of weights repacked by repackQ8_0Z. Accumulator of (row r,
// token t) is Z(16+4t+r); the products of token t are at 32t(SP).
TEXT ·tileQ8_0Z(SB), NOSPLIT, $128-72
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R8
	SHLQ $2, R8
	MOVQ wp+16(FP), SI
	MOVQ nGroups+24(FP), R9
	MOVQ xtStride+40(FP), R11
	MOVQ nb+48(FP), R12
	MOVQ dxStride+64(FP), R10
	SHLQ $2, R10
	MOVL $0x5555, AX
	KMOVW AX, K2
	MOVL $0x55, AX
	KMOVW AX, K3

q8z_group:
	TESTQ R9, R9
	JZ   q8z_done
	MOVQ xt+32(FP), DX
	LEAQ (DX)(R11*2), CX
	ADDQ R11, CX          // token 3
	MOVQ dx+56(FP), R14
	LEAQ (R14)(R10*2), AX
	ADDQ R10, AX          // token 3's scales
	MOVQ R12, BX
	INCQ BX
	SHRQ $1, BX
	SHLQ $8, BX
	ADDQ SI, BX           // the group's scales follow its nPairs*256 bytes of qs
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
	MOVQ R12, R13

q8z_pair:
	CMPQ R13, $2
	JLT  q8z_single
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVUPS (BX), Y4
	VBROADCASTSD (R14), Y5
	VMULPS Y5, Y4, Y5
	VMOVUPS Y5, 0(SP)
	VBROADCASTSD (R14)(R10*1), Y6
	VMULPS Y6, Y4, Y6
	VMOVUPS Y6, 32(SP)
	VBROADCASTSD (R14)(R10*2), Y7
	VMULPS Y7, Y4, Y7
	VMOVUPS Y7, 64(SP)
	VBROADCASTSD (AX), Y8
	VMULPS Y8, Y4, Y8
	VMOVUPS Y8, 96(SP)
	VMOVDQU64 (DX), Z10
	VMOVDQU64 64(DX), Z11
	Q8ZR(Z0, 0(SP), Z16, Z8, Z9)
	Q8ZR(Z1, 8(SP), Z17, Z14, Z15)
	Q8ZR(Z2, 16(SP), Z18, Z8, Z9)
	Q8ZR(Z3, 24(SP), Z19, Z14, Z15)
	VMOVDQU64 (DX)(R11*1), Z10
	VMOVDQU64 64(DX)(R11*1), Z11
	Q8ZR(Z0, 32(SP), Z20, Z8, Z9)
	Q8ZR(Z1, 40(SP), Z21, Z14, Z15)
	Q8ZR(Z2, 48(SP), Z22, Z8, Z9)
	Q8ZR(Z3, 56(SP), Z23, Z14, Z15)
	VMOVDQU64 (DX)(R11*2), Z10
	VMOVDQU64 64(DX)(R11*2), Z11
	Q8ZR(Z0, 64(SP), Z24, Z8, Z9)
	Q8ZR(Z1, 72(SP), Z25, Z14, Z15)
	Q8ZR(Z2, 80(SP), Z26, Z8, Z9)
	Q8ZR(Z3, 88(SP), Z27, Z14, Z15)
	VMOVDQU64 (CX), Z10
	VMOVDQU64 64(CX), Z11
	Q8ZR(Z0, 96(SP), Z28, Z8, Z9)
	Q8ZR(Z1, 104(SP), Z29, Z14, Z15)
	Q8ZR(Z2, 112(SP), Z30, Z8, Z9)
	Q8ZR(Z3, 120(SP), Z31, Z14, Z15)
	ADDQ $256, SI
	ADDQ $32, BX
	ADDQ $192, DX
	ADDQ $192, CX
	ADDQ $8, R14
	ADDQ $8, AX
	SUBQ $2, R13
	JMP  q8z_pair

q8z_single:
	TESTQ R13, R13
	JZ   q8z_red
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVUPS (BX), Y4
	VMOVSS (R14), X5
	VBROADCASTSD X5, Y5
	VMULPS Y5, Y4, Y5
	VMOVUPS Y5, 0(SP)
	VMOVSS (R14)(R10*1), X6
	VBROADCASTSD X6, Y6
	VMULPS Y6, Y4, Y6
	VMOVUPS Y6, 32(SP)
	VMOVSS (R14)(R10*2), X7
	VBROADCASTSD X7, Y7
	VMULPS Y7, Y4, Y7
	VMOVUPS Y7, 64(SP)
	VMOVSS (AX), X8
	VBROADCASTSD X8, Y8
	VMULPS Y8, Y4, Y8
	VMOVUPS Y8, 96(SP)
	VMOVDQU64 (DX), Z10
	VMOVDQU64 64(DX), Z11
	Q8ZR1(Z0, 0(SP), Z16, Z8, Z9)
	Q8ZR1(Z1, 8(SP), Z17, Z14, Z15)
	Q8ZR1(Z2, 16(SP), Z18, Z8, Z9)
	Q8ZR1(Z3, 24(SP), Z19, Z14, Z15)
	VMOVDQU64 (DX)(R11*1), Z10
	VMOVDQU64 64(DX)(R11*1), Z11
	Q8ZR1(Z0, 32(SP), Z20, Z8, Z9)
	Q8ZR1(Z1, 40(SP), Z21, Z14, Z15)
	Q8ZR1(Z2, 48(SP), Z22, Z8, Z9)
	Q8ZR1(Z3, 56(SP), Z23, Z14, Z15)
	VMOVDQU64 (DX)(R11*2), Z10
	VMOVDQU64 64(DX)(R11*2), Z11
	Q8ZR1(Z0, 64(SP), Z24, Z8, Z9)
	Q8ZR1(Z1, 72(SP), Z25, Z14, Z15)
	Q8ZR1(Z2, 80(SP), Z26, Z8, Z9)
	Q8ZR1(Z3, 88(SP), Z27, Z14, Z15)
	VMOVDQU64 (CX), Z10
	VMOVDQU64 64(CX), Z11
	Q8ZR1(Z0, 96(SP), Z28, Z8, Z9)
	Q8ZR1(Z1, 104(SP), Z29, Z14, Z15)
	Q8ZR1(Z2, 112(SP), Z30, Z8, Z9)
	Q8ZR1(Z3, 120(SP), Z31, Z14, Z15)
	ADDQ $32, BX

q8z_red:
	MOVQ DI, R13
	RED4Z(Z16, Z17, Z18, Z19, (R13), Z0, Z1, Z2, Z3, X3)
	ADDQ R8, R13
	RED4Z(Z20, Z21, Z22, Z23, (R13), Z0, Z1, Z2, Z3, X3)
	ADDQ R8, R13
	RED4Z(Z24, Z25, Z26, Z27, (R13), Z0, Z1, Z2, Z3, X3)
	ADDQ R8, R13
	RED4Z(Z28, Z29, Z30, Z31, (R13), Z0, Z1, Z2, Z3, X3)
	ADDQ $16, DI
	MOVQ BX, SI           // next group
	DECQ R9
	JMP  q8z_group

q8z_done:
	VZEROUPPER
	RET

// func repackQ8_0Z(dst *byte, w *byte, nGroups, nb int)
// Rewrites nGroups groups of 4 Q8_0 rows for tileQ8_0Z: per group, per
// block pair, per row, 64 bytes: the pair's qs as unsigned w+128,
// interleaved by 4-byte group (a lone last block's partner is 0x80, w =
// 0); then per block pair 8 float32: the widened scale of row r, block
// 2p+h at 2r+h (0 for a lone last block's partner).
TEXT ·repackQ8_0Z(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+16(FP), R9
	MOVQ nb+24(FP), R12
	MOVQ R12, R10
	IMULQ $34, R10        // row bytes
	MOVQ R12, R11
	INCQ R11
	SHRQ $1, R11
	SHLQ $8, R11          // qs bytes of a group
	MOVL $0x80, AX
	VPBROADCASTB AX, Z13

q8zr_group:
	TESTQ R9, R9
	JZ   q8zr_done
	LEAQ (DI)(R11*1), R8  // the group's scales
	MOVQ SI, AX           // row 0 of the group, at the current pair
	MOVQ R12, R13

q8zr_pair:
	TESTQ R13, R13
	JZ   q8zr_next
	MOVQ AX, BX
	XORQ CX, CX           // row
	VPXORD X6, X6, X6

q8zr_row:
	VPMOVZXDQ 2(BX), Z0   // block 2p: group l in qword l's low half
	MOVWLZX (BX), DX
	CMPQ R13, $2
	JLT  q8zr_lone
	VPMOVZXDQ 36(BX), Z1
	VPSLLQ $32, Z1, Z1
	VPORQ Z1, Z0, Z0
	MOVWLZX 34(BX), R14
	SHLL $16, R14
	ORL  R14, DX

q8zr_lone:
	VPXORD Z13, Z0, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ $64, DI
	// Scales of row CX: halves 2CX, 2CX+1 of X6.
	CMPQ CX, $0
	JNE  q8zr_r1
	VPINSRD $0, DX, X6, X6
	JMP  q8zr_rnext

q8zr_r1:
	CMPQ CX, $1
	JNE  q8zr_r2
	VPINSRD $1, DX, X6, X6
	JMP  q8zr_rnext

q8zr_r2:
	CMPQ CX, $2
	JNE  q8zr_r3
	VPINSRD $2, DX, X6, X6
	JMP  q8zr_rnext

q8zr_r3:
	VPINSRD $3, DX, X6, X6

q8zr_rnext:
	ADDQ R10, BX
	INCQ CX
	CMPQ CX, $4
	JLT  q8zr_row
	VCVTPH2PS X6, Y6
	VMOVUPS Y6, (R8)
	ADDQ $32, R8
	ADDQ $68, AX
	SUBQ $2, R13
	JGE  q8zr_pair
	XORQ R13, R13
	JMP  q8zr_pair

q8zr_next:
	MOVQ R8, DI
	LEAQ (SI)(R10*4), SI
	DECQ R9
	JMP  q8zr_group

q8zr_done:
	VZEROUPPER
	RET
