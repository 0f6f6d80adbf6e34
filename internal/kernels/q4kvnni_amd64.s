#include "textflag.h"

// The AVX2 path's Q4_K rows-in-lanes kernel on CPUs with AVX-VNNI
// (q4kvnni_amd64.go): q4KTile8x2AVX2 (asm_amd64.s) with VPDPBUSD.

// VPDPBUSDY(D, U, S): VEX-encoded VPDPBUSD YD, YU, YS (see q8vnni_amd64.s).
DATA q4kvlo<>+0(SB)/8, $0x0000ffff0000ffff
DATA q4kvlo<>+8(SB)/8, $0x0000ffff0000ffff
DATA q4kvlo<>+16(SB)/8, $0x0000ffff0000ffff
DATA q4kvlo<>+24(SB)/8, $0x0000ffff0000ffff
GLOBL q4kvlo<>(SB), RODATA|NOPTR, $32

#define VPDPBUSDY(D, U, S) \
	BYTE $0xC4; BYTE $(0xE2 ^ ((D>>3)<<7) ^ ((S>>3)<<5)); BYTE $(((15-U)<<3) | 5); BYTE $0x50; BYTE $(0xC0 | ((D&7)<<3) | (S&7))

// Q4KVG is Q4K8G with VPDPBUSD: each row lane of the int32 sums A0, A1
// (token 0; sub-blocks 2k, 2k+1) and A2, A3 (token 1) gains the 4 nibble
// products of the group at once. Even groups use Y8-Y11, odd ones Y3-Y6,
// so that VPDPBUSD's latency is not one chain. Exact integer sums, so the
// same values as Q4K8G's once scaled. Clobbers Y0-Y2.
#define Q4KVG(W, XL, XH, A0, A1, A2, A3) \
	VMOVDQU W(SI), Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y7, Y0, Y0 \
	VPAND Y7, Y1, Y1 \
	VPBROADCASTD XL(BX), Y2 \
	VPDPBUSDY(A0, 0, 2) \
	VPBROADCASTD XH(BX), Y2 \
	VPDPBUSDY(A1, 1, 2) \
	VPBROADCASTD XL(BX)(DX*1), Y2 \
	VPDPBUSDY(A2, 0, 2) \
	VPBROADCASTD XH(BX)(DX*1), Y2 \
	VPDPBUSDY(A3, 1, 2)

// Q4KVSC adds the odd groups' sums to the even ones', scales the int32
// sums of sub-blocks 2k and 2k+1 by the rows' scales (the low int16 of
// the packed (sc, sc) pairs) into the isums Y12 (token 0), Y13, and
// clears the sums.
#define Q4KVSC(S0, S1) \
	VPADDD Y3, Y8, Y8 \
	VPADDD Y4, Y9, Y9 \
	VPADDD Y5, Y10, Y10 \
	VPADDD Y6, Y11, Y11 \
	VMOVDQU S0(SI), Y0 \
	VPAND q4kvlo<>(SB), Y0, Y0 \
	VMOVDQU S1(SI), Y1 \
	VPAND q4kvlo<>(SB), Y1, Y1 \
	VPMULLD Y0, Y8, Y8 \
	VPADDD Y8, Y12, Y12 \
	VPMULLD Y1, Y9, Y9 \
	VPADDD Y9, Y12, Y12 \
	VPMULLD Y0, Y10, Y10 \
	VPADDD Y10, Y13, Y13 \
	VPMULLD Y1, Y11, Y11 \
	VPADDD Y11, Y13, Y13 \
	VPXOR Y8, Y8, Y8 \
	VPXOR Y9, Y9, Y9 \
	VPXOR Y10, Y10, Y10 \
	VPXOR Y11, Y11, Y11 \
	VPXOR Y3, Y3, Y3 \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	VPXOR Y6, Y6, Y6

#define Q4KVSUB(W0, K64, S0) \
	Q4KVG(W0, 4+K64, 36+K64, 8, 9, 10, 11) \
	Q4KVG(W0+32, 8+K64, 40+K64, 3, 4, 5, 6) \
	Q4KVG(W0+64, 12+K64, 44+K64, 8, 9, 10, 11) \
	Q4KVG(W0+96, 16+K64, 48+K64, 3, 4, 5, 6) \
	Q4KVG(W0+128, 20+K64, 52+K64, 8, 9, 10, 11) \
	Q4KVG(W0+160, 24+K64, 56+K64, 3, 4, 5, 6) \
	Q4KVG(W0+192, 28+K64, 60+K64, 8, 9, 10, 11) \
	Q4KVG(W0+224, 32+K64, 64+K64, 3, 4, 5, 6) \
	Q4KVSC(S0, S0+32)

// Q4KVMIN and Q4KVFIN are asm_amd64.s's Q4K8MIN and Q4K8FIN (macros do
// not cross assembly files).
#define Q4KVMIN(B, M) \
	VPBROADCASTD B(BX), Y2 \
	VPMADDWD M(SI), Y2, Y2 \
	VPADDD Y2, Y8, Y8 \
	VPBROADCASTD B(BX)(DX*1), Y4 \
	VPMADDWD M(SI), Y4, Y4 \
	VPADDD Y4, Y9, Y9

#define Q4KVFIN(DXM, ISUM, IMIN, F) \
	VCVTDQ2PS ISUM, ISUM \
	VCVTDQ2PS IMIN, IMIN \
	VBROADCASTSS DXM, Y2 \
	VMULPS 1536(SI), Y2, Y3 \
	VMULPS 1568(SI), Y2, Y4 \
	VMULPS Y3, ISUM, ISUM \
	VMULPS Y4, IMIN, IMIN \
	VSUBPS IMIN, ISUM, ISUM \
	VADDPS ISUM, F, F

// func q4KTile8x2VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)
TEXT ·q4KTile8x2VNNI(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ wp+16(FP), SI
	MOVQ nGroups+24(FP), R8
	MOVQ x+32(FP), R11
	MOVQ xStride+40(FP), DX
	MOVQ nsb+48(FP), R10
	MOVL $0x0f0f0f0f, AX
	VMOVQ AX, X7
	VPBROADCASTD X7, Y7

q4kv_group:
	TESTQ R8, R8
	JZ   q4kv_done
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	MOVQ R11, BX
	MOVQ R10, CX

q4kv_sb:
	PREFETCHT0 1600(SI)
	PREFETCHT0 1664(SI)
	PREFETCHT0 1728(SI)
	PREFETCHT0 1792(SI)
	VPXOR Y12, Y12, Y12
	VPXOR Y13, Y13, Y13
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	Q4KVSUB(0, 0, 1024)
	Q4KVSUB(256, 64, 1088)
	Q4KVSUB(512, 128, 1152)
	Q4KVSUB(768, 192, 1216)
	Q4KVMIN(260, 1280)
	Q4KVMIN(264, 1312)
	Q4KVMIN(268, 1344)
	Q4KVMIN(272, 1376)
	Q4KVMIN(276, 1408)
	Q4KVMIN(280, 1440)
	Q4KVMIN(284, 1472)
	Q4KVMIN(288, 1504)
	Q4KVFIN((BX), Y12, Y8, Y14)
	Q4KVFIN((BX)(DX*1), Y13, Y9, Y15)
	ADDQ $1600, SI
	ADDQ $292, BX
	DECQ CX
	JNZ  q4kv_sb

	VMOVUPS Y14, (DI)
	VMOVUPS Y15, (DI)(R9*1)
	ADDQ $32, DI
	DECQ R8
	JMP  q4kv_group

q4kv_done:
	VZEROUPPER
	RET

// Q4KZG4 is asm_amd64.s's Q4K16G for 4 tokens with VPDPBUSD (AVX-512
// VNNI): the 4 nibble products of a group go into each row lane's int32
// sum at once,
// the tokens' 4 q8 broadcast from memory. Token t's sums: A(2t) (sub-block
// 2k) and A(2t+1) (2k+1); even groups use Z8-Z15, odd ones Z24-Z31 (two
// chains for VPDPBUSD's latency). Clobbers Z0, Z1.
#define Q4KZG4(W, XL, XH, A0, A1, A2, A3, A4, A5, A6, A7) \
	VMOVDQU64 W(SI), Z0 \
	VPSRLW $4, Z0, Z1 \
	VPANDD Z7, Z0, Z0 \
	VPANDD Z7, Z1, Z1 \
	VPDPBUSD.BCST XL(BX), Z0, A0 \
	VPDPBUSD.BCST XH(BX), Z1, A1 \
	VPDPBUSD.BCST XL(BX)(DX*1), Z0, A2 \
	VPDPBUSD.BCST XH(BX)(DX*1), Z1, A3 \
	VPDPBUSD.BCST XL(BX)(DX*2), Z0, A4 \
	VPDPBUSD.BCST XH(BX)(DX*2), Z1, A5 \
	VPDPBUSD.BCST XL(BX)(R11*1), Z0, A6 \
	VPDPBUSD.BCST XH(BX)(R11*1), Z1, A7

#define Q4KZG4E(W, XL, XH) Q4KZG4(W, XL, XH, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15)
#define Q4KZG4O(W, XL, XH) Q4KZG4(W, XL, XH, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31)

// Q4KZSC1 folds the odd sums into the even one A, scales it by the rows'
// scales SC (int32) and adds it to the token's isum I.
#define Q4KZSC1(A, O, SC, I) \
	VPADDD O, A, A \
	VPMULLD SC, A, A \
	VPADDD A, I, I \
	VPXORD A, A, A \
	VPXORD O, O, O

// Q4KZSC4: the rows' scales are the low int16 of the packed (sc, sc)
// pairs (Z6 = 0xffff per dword).
#define Q4KZSC4(S0, S1) \
	VPANDD S0(SI), Z6, Z2 \
	VPANDD S1(SI), Z6, Z3 \
	Q4KZSC1(Z8, Z24, Z2, Z16) \
	Q4KZSC1(Z9, Z25, Z3, Z16) \
	Q4KZSC1(Z10, Z26, Z2, Z17) \
	Q4KZSC1(Z11, Z27, Z3, Z17) \
	Q4KZSC1(Z12, Z28, Z2, Z18) \
	Q4KZSC1(Z13, Z29, Z3, Z18) \
	Q4KZSC1(Z14, Z30, Z2, Z19) \
	Q4KZSC1(Z15, Z31, Z3, Z19)

#define Q4KZSUB4(W0, K64, S0) \
	Q4KZG4E(W0, 4+K64, 36+K64) \
	Q4KZG4O(W0+64, 8+K64, 40+K64) \
	Q4KZG4E(W0+128, 12+K64, 44+K64) \
	Q4KZG4O(W0+192, 16+K64, 48+K64) \
	Q4KZG4E(W0+256, 20+K64, 52+K64) \
	Q4KZG4O(W0+320, 24+K64, 56+K64) \
	Q4KZG4E(W0+384, 28+K64, 60+K64) \
	Q4KZG4O(W0+448, 32+K64, 64+K64) \
	Q4KZSC4(S0, S0+64)

// Q4KZMIN4 is asm_amd64.s's Q4K16MIN for 4 tokens; Q4KZFIN is its
// Q4K16FIN (macros do not cross assembly files).
#define Q4KZMIN4(B, M) \
	VPBROADCASTD B(BX), Z2 \
	VPMADDWD M(SI), Z2, Z2 \
	VPADDD Z2, Z8, Z8 \
	VPBROADCASTD B(BX)(DX*1), Z2 \
	VPMADDWD M(SI), Z2, Z2 \
	VPADDD Z2, Z9, Z9 \
	VPBROADCASTD B(BX)(DX*2), Z2 \
	VPMADDWD M(SI), Z2, Z2 \
	VPADDD Z2, Z10, Z10 \
	VPBROADCASTD B(BX)(R11*1), Z2 \
	VPMADDWD M(SI), Z2, Z2 \
	VPADDD Z2, Z11, Z11

#define Q4KZFIN(DXM, ISUM, IMIN, F) \
	VCVTDQ2PS ISUM, ISUM \
	VCVTDQ2PS IMIN, IMIN \
	VBROADCASTSS DXM, Z2 \
	VMULPS 3072(SI), Z2, Z3 \
	VMULPS 3136(SI), Z2, Z4 \
	VMULPS Z3, ISUM, ISUM \
	VMULPS Z4, IMIN, IMIN \
	VSUBPS IMIN, ISUM, ISUM \
	VADDPS ISUM, F, F

// func q4KTile16x4VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)
// q4KTile16x2AVX512 (16 rows in the lanes) for 4 tokens, with VPDPBUSD:
// token t's sums Z(8+2t), Z(9+2t) (and Z(24+2t), Z(25+2t)), isum Z(16+t),
// float accumulator Z(20+t); imins reuse Z8-Z11.
TEXT ·q4KTile16x4VNNI(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	LEAQ (R9)(R9*2), R12
	MOVQ wp+16(FP), SI
	MOVQ nGroups+24(FP), R8
	MOVQ x+32(FP), AX
	MOVQ xStride+40(FP), DX
	LEAQ (DX)(DX*2), R11
	MOVQ nsb+48(FP), R10
	MOVL $0x0f0f0f0f, R13
	VPBROADCASTD R13, Z7
	MOVL $0x0000ffff, R13
	VPBROADCASTD R13, Z6

q4kz4_group:
	TESTQ R8, R8
	JZ   q4kz4_done
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	MOVQ AX, BX
	MOVQ R10, CX

q4kz4_sb:
	PREFETCHT0 3200(SI)
	PREFETCHT0 3264(SI)
	PREFETCHT0 3328(SI)
	PREFETCHT0 3392(SI)
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	Q4KZSUB4(0, 0, 2048)
	Q4KZSUB4(512, 64, 2176)
	Q4KZSUB4(1024, 128, 2304)
	Q4KZSUB4(1536, 192, 2432)
	Q4KZMIN4(260, 2560)
	Q4KZMIN4(264, 2624)
	Q4KZMIN4(268, 2688)
	Q4KZMIN4(272, 2752)
	Q4KZMIN4(276, 2816)
	Q4KZMIN4(280, 2880)
	Q4KZMIN4(284, 2944)
	Q4KZMIN4(288, 3008)
	Q4KZFIN((BX), Z16, Z8, Z20)
	Q4KZFIN((BX)(DX*1), Z17, Z9, Z21)
	Q4KZFIN((BX)(DX*2), Z18, Z10, Z22)
	Q4KZFIN((BX)(R11*1), Z19, Z11, Z23)
	ADDQ $3200, SI
	ADDQ $292, BX
	DECQ CX
	JNZ  q4kz4_sb

	VMOVUPS Z20, (DI)
	VMOVUPS Z21, (DI)(R9*1)
	VMOVUPS Z22, (DI)(R9*2)
	VMOVUPS Z23, (DI)(R12*1)
	ADDQ $64, DI
	DECQ R8
	JMP  q4kz4_group

q4kz4_done:
	VZEROUPPER
	RET
