#include "textflag.h"
#include "reduce_amd64.h"

DATA q8mvones<>+0(SB)/8, $0x0001000100010001
DATA q8mvones<>+8(SB)/8, $0x0001000100010001
DATA q8mvones<>+16(SB)/8, $0x0001000100010001
DATA q8mvones<>+24(SB)/8, $0x0001000100010001
GLOBL q8mvones<>(SB), RODATA|NOPTR, $32

// Q8MV adds one weight block (qs at W, fp16 scale at WD) to ACC on AVX2,
// against the activation block in Y0 (qs) and Y1 (its widened scale x8):
// the canonical Q8_0 step of rowsQ8_0AVX2 (|w| times x signed by w with
// VPMADDUBSW, pairs summed by VPMADDWD into 8 int32 lanes, one FMA with
// dw*dx). Clobbers Y3-Y6.
#define Q8MV(W, WD, ACC) \
	VMOVDQU W, Y3 \
	VPSIGNB Y3, Y0, Y4 \
	VPABSB Y3, Y3 \
	VPMADDUBSW Y4, Y3, Y4 \
	VPMADDWD q8mvones<>(SB), Y4, Y4 \
	VCVTDQ2PS Y4, Y4 \
	VPBROADCASTW WD, X5 \
	VCVTPH2PS X5, Y5 \
	VMULPS Y1, Y5, Y5 \
	VFMADD231PS Y5, Y4, ACC

// func rowsQ8_0AVX2x4(out *float32, w, x *byte, dx *float32, nGroups, nb int)
// rowsQ8_0AVX2 four rows at a time: each activation block and its scale
// are loaded once for the four rows; pass i computes rows i, Q+i, 2Q+i
// and 3Q+i (Q = nGroups), four streams each read front to back and
// no software prefetch (matvec_amd64.go measures why). Even blocks go to Y8-Y11, odd blocks to Y12-Y15 (the
// canonical lanes 0-7 and 8-15), reduced as rowsQ8_0AVX2 does.
TEXT ·rowsQ8_0AVX2x4(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nGroups+32(FP), R8
	MOVQ nb+40(FP), R9
	MOVQ R9, R14
	IMULQ $34, R14        // row bytes
	// The four rows of a pass are one from each quarter of the rows
	// (i, Q+i, 2Q+i, 3Q+i with Q = nGroups), so that each is read front
	// to back as one long stream.
	MOVQ R8, R13
	IMULQ R14, R13        // a quarter of the rows
	MOVQ R8, R15
	SHLQ $2, R15          // out bytes between the quarters

q8mv_group:
	TESTQ R8, R8
	JZ   q8mv_done
	LEAQ (SI)(R13*2), BX
	ADDQ R13, BX          // row 3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	MOVQ DX, CX
	MOVQ R11, R12
	MOVQ R9, R10

q8mv_pair:
	CMPQ R10, $2
	JLT  q8mv_single
	VMOVDQU 2(CX), Y0
	VBROADCASTSS (R12), Y1
	Q8MV(2(SI), (SI), Y8)
	Q8MV(2(SI)(R13*1), (SI)(R13*1), Y9)
	Q8MV(2(SI)(R13*2), (SI)(R13*2), Y10)
	Q8MV(2(BX), (BX), Y11)
	VMOVDQU 36(CX), Y0
	VBROADCASTSS 4(R12), Y1
	Q8MV(36(SI), 34(SI), Y12)
	Q8MV(36(SI)(R13*1), 34(SI)(R13*1), Y13)
	Q8MV(36(SI)(R13*2), 34(SI)(R13*2), Y14)
	Q8MV(36(BX), 34(BX), Y15)
	ADDQ $68, SI
	ADDQ $68, BX
	ADDQ $68, CX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q8mv_pair

q8mv_single:
	TESTQ R10, R10
	JZ   q8mv_red
	VMOVDQU 2(CX), Y0
	VBROADCASTSS (R12), Y1
	Q8MV(2(SI), (SI), Y8)
	Q8MV(2(SI)(R13*1), (SI)(R13*1), Y9)
	Q8MV(2(SI)(R13*2), (SI)(R13*2), Y10)
	Q8MV(2(BX), (BX), Y11)
	ADDQ $34, BX

q8mv_red:
	// Per row: lanes j += j+8, then j += j+4, j+2, j+1 (REDUCE8Y).
	VADDPS Y12, Y8, Y0
	VADDPS Y13, Y9, Y1
	VADDPS Y14, Y10, Y2
	VADDPS Y15, Y11, Y3
	REDUCE8Y(Y0, X0, X4)
	REDUCE8Y(Y1, X1, X4)
	REDUCE8Y(Y2, X2, X4)
	REDUCE8Y(Y3, X3, X4)
	VMOVSS X0, (DI)
	VMOVSS X1, (DI)(R15*1)
	VMOVSS X2, (DI)(R15*2)
	LEAQ (R15)(R15*2), AX
	VMOVSS X3, (DI)(AX*1)
	ADDQ $4, DI
	MOVQ BX, SI           // BX ended at row 3's end, 3Q rows past the
	SUBQ R13, SI          // next row of stream 0
	SUBQ R13, SI
	SUBQ R13, SI
	DECQ R8
	JMP  q8mv_group

q8mv_done:
	VZEROUPPER
	RET

// Q8ZMV adds weight blocks 2k and 2k+1 of one row (qs at QA and QB, fp16
// scales at DA and DB) to the 16 canonical lanes of ACC: lanes 0-7 take
// the even block, 8-15 the odd one, as in one ZMM. VPDPBUSD wants its
// first factor unsigned, so the weights are offset by 128 (w XOR 0x80 =
// w+128 as an unsigned byte, exact for every w including -128) and the
// lane sums start at -128*sum4(x) (Z2), so each int32 lane is exactly the
// signed sum of its four products. Z0: the two activation blocks' qs; Z1:
// dx_even x8, dx_odd x8; Z31: bytes 0x80; K2: 0xFF00. Clobbers Z8-Z10.
#define Q8ZMV(QA, QB, DA, DB, ACC) \
	VMOVDQU QA, Y8 \
	VINSERTI64X4 $1, QB, Z8, Z8 \
	VPXORD Z31, Z8, Z8 \
	VMOVDQA32 Z2, Z9 \
	VPDPBUSD Z0, Z8, Z9 \
	VCVTDQ2PS Z9, Z9 \
	VPBROADCASTW DA, Y10 \
	VPBROADCASTW DB, K2, Y10 \
	VCVTPH2PS Y10, Z10 \
	VMULPS Z1, Z10, Z10 \
	VFMADD231PS Z10, Z9, ACC

// Q8ZMV1 is Q8ZMV for a last, even block alone: lanes 0-7 only (K1 =
// 0x00FF); the upper half of Z0 is zero.
#define Q8ZMV1(QA, DA, ACC) \
	VMOVDQU QA, Y8 \
	VPXORD Z31, Z8, Z8 \
	VMOVDQA32 Z2, Z9 \
	VPDPBUSD Z0, Z8, Z9 \
	VCVTDQ2PS Z9, Z9 \
	VPBROADCASTW DA, Y10 \
	VCVTPH2PS Y10, Z10 \
	VMULPS Z1, Z10, Z10 \
	VFMADD231PS Z10, Z9, K1, ACC

// func rowsQ8_0AVX512x4(out *float32, w, x *byte, dx *float32, nGroups, nb int)
// The AVX-512 Q8_0 matvec, four rows a pass in the streams of
// rowsQ8_0AVX2x4 (rows i, Q+i, 2Q+i, 3Q+i, each read front to back and
// no software prefetch), two blocks a step in one ZMM per row (the
// even block in lanes 0-7, the odd one in 8-15: the canonical lanes).
TEXT ·rowsQ8_0AVX512x4(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nGroups+32(FP), R8
	MOVQ nb+40(FP), R9
	MOVQ R9, R14
	IMULQ $34, R14        // row bytes
	MOVQ R8, R13
	IMULQ R14, R13        // a quarter of the rows
	MOVQ R8, R15
	SHLQ $2, R15          // out bytes between the quarters
	MOVL $0x80808080, AX
	VPBROADCASTD AX, Z31
	MOVW $0xFF00, AX
	KMOVW AX, K2
	MOVW $0x00FF, AX
	KMOVW AX, K1

q8zmv_group:
	TESTQ R8, R8
	JZ   q8zmv_done
	LEAQ (SI)(R13*2), BX
	ADDQ R13, BX          // row 3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	MOVQ DX, CX
	MOVQ R11, R12
	MOVQ R9, R10

q8zmv_pair:
	CMPQ R10, $2
	JLT  q8zmv_single
	VMOVDQU 2(CX), Y0
	VINSERTI64X4 $1, 36(CX), Z0, Z0
	VBROADCASTSS (R12), Y1
	VBROADCASTSS 4(R12), Y2
	VINSERTF64X4 $1, Y2, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPDPBUSD Z0, Z31, Z2  // 128*sum4(x) a lane
	VPXORD Z3, Z3, Z3
	VPSUBD Z2, Z3, Z2
	Q8ZMV(2(SI), 36(SI), (SI), 34(SI), Z4)
	Q8ZMV(2(SI)(R13*1), 36(SI)(R13*1), (SI)(R13*1), 34(SI)(R13*1), Z5)
	Q8ZMV(2(SI)(R13*2), 36(SI)(R13*2), (SI)(R13*2), 34(SI)(R13*2), Z6)
	Q8ZMV(2(BX), 36(BX), (BX), 34(BX), Z7)
	ADDQ $68, SI
	ADDQ $68, BX
	ADDQ $68, CX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q8zmv_pair

q8zmv_single:
	TESTQ R10, R10
	JZ   q8zmv_red
	VMOVDQU 2(CX), Y0
	VBROADCASTSS (R12), Z1
	VPXORD Z2, Z2, Z2
	VPDPBUSD Z0, Z31, Z2
	VPXORD Z3, Z3, Z3
	VPSUBD Z2, Z3, Z2
	Q8ZMV1(2(SI), (SI), Z4)
	Q8ZMV1(2(SI)(R13*1), (SI)(R13*1), Z5)
	Q8ZMV1(2(SI)(R13*2), (SI)(R13*2), Z6)
	Q8ZMV1(2(BX), (BX), Z7)
	ADDQ $34, BX

q8zmv_red:
	REDUCE16Z(Z4, Y4, X4, Y8, X8)
	REDUCE16Z(Z5, Y5, X5, Y8, X8)
	REDUCE16Z(Z6, Y6, X6, Y8, X8)
	REDUCE16Z(Z7, Y7, X7, Y8, X8)
	VMOVSS X4, (DI)
	VMOVSS X5, (DI)(R15*1)
	VMOVSS X6, (DI)(R15*2)
	LEAQ (R15)(R15*2), AX
	VMOVSS X7, (DI)(AX*1)
	ADDQ $4, DI
	MOVQ BX, SI           // BX ended at row 3's end, 3Q rows past the
	SUBQ R13, SI          // next row of stream 0
	SUBQ R13, SI
	SUBQ R13, SI
	DECQ R8
	JMP  q8zmv_group

q8zmv_done:
	VZEROUPPER
	RET
