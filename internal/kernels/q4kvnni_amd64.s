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
	MOVQ AX, X7
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
