#include "textflag.h"

// q4KPackAVX2: q4KPack (q4k8_amd64.go, the layout's specification) for 8
// or 16 rows with AVX2 transposes instead of gathers, so it serves the
// AVX2 tile (8 rows) and the AVX-512 one (16 rows, two groups of 8).
//
// A Q4_K super-block is 36 dwords: dword 0 is (d, dmin), 1..3 the 12
// scale bytes, 4..35 the 32 qs words. Every field of the packed layout is
// a slot of 4R bytes (slot k at k*4R: qs word c at slot c, sc_j at 32+j,
// m_j at 40+j, d at 48, dmin at 49; 50 slots = 200R bytes) holding row r
// at 4r, so a group of 8 rows is an 8 x 36 dword transpose written at
// 32*group inside each slot: per 4 dwords, 4 xmm loads with the rows
// 4..7 inserted above rows 0..3, then a 4x4 dword transpose in each
// 128-bit lane (unpack dq, then qdq), which leaves dword c of rows 0..7
// in order in one register. The scale words are unpacked in the lanes
// after the transpose (every row's 12 bytes in the same dword lane), and
// d, dmin are widened with VCVTPH2PS, then corrected for the halves with
// an all-ones exponent (VCVTPH2PS quiets signalling NaNs; the Go table
// keeps the payload as it is).

// q4kpsh<>+32j: VPSHUFB control taking byte j of every dword to both of
// its words (v | v<<16).
DATA q4kpsh<>+0(SB)/8, $0x8004800480008000
DATA q4kpsh<>+8(SB)/8, $0x800c800c80088008
DATA q4kpsh<>+16(SB)/8, $0x8004800480008000
DATA q4kpsh<>+24(SB)/8, $0x800c800c80088008
DATA q4kpsh<>+32(SB)/8, $0x8005800580018001
DATA q4kpsh<>+40(SB)/8, $0x800d800d80098009
DATA q4kpsh<>+48(SB)/8, $0x8005800580018001
DATA q4kpsh<>+56(SB)/8, $0x800d800d80098009
DATA q4kpsh<>+64(SB)/8, $0x8006800680028002
DATA q4kpsh<>+72(SB)/8, $0x800e800e800a800a
DATA q4kpsh<>+80(SB)/8, $0x8006800680028002
DATA q4kpsh<>+88(SB)/8, $0x800e800e800a800a
DATA q4kpsh<>+96(SB)/8, $0x8007800780038003
DATA q4kpsh<>+104(SB)/8, $0x800f800f800b800b
DATA q4kpsh<>+112(SB)/8, $0x8007800780038003
DATA q4kpsh<>+120(SB)/8, $0x800f800f800b800b
GLOBL q4kpsh<>(SB), RODATA|NOPTR, $128

// Q4KPT4(off): Y0..Y3 = dwords off/4 .. off/4+3 of the 8 rows (row r in
// dword lane r). Rows 0..3 at AX, BX, CX, DX; rows 4..7 4*rb (R15)
// further on.
#define Q4KPT4(off) \
	VMOVDQU off(AX), X0 \
	VINSERTI128 $1, off(AX)(R15*4), Y0, Y0 \
	VMOVDQU off(BX), X1 \
	VINSERTI128 $1, off(BX)(R15*4), Y1, Y1 \
	VMOVDQU off(CX), X2 \
	VINSERTI128 $1, off(CX)(R15*4), Y2, Y2 \
	VMOVDQU off(DX), X3 \
	VINSERTI128 $1, off(DX)(R15*4), Y3, Y3 \
	VPUNPCKLDQ Y1, Y0, Y4 \
	VPUNPCKHDQ Y1, Y0, Y5 \
	VPUNPCKLDQ Y3, Y2, Y6 \
	VPUNPCKHDQ Y3, Y2, Y7 \
	VPUNPCKLQDQ Y6, Y4, Y0 \
	VPUNPCKHQDQ Y6, Y4, Y1 \
	VPUNPCKLQDQ Y7, Y5, Y2 \
	VPUNPCKHQDQ Y7, Y5, Y3

// Q4KPST4(a, b, c, d): store 4 consecutive slots (R12 = 4R bytes, R13 =
// 12R) and step DI past them.
#define Q4KPST4(a, b, c, d) \
	VMOVDQU a, (DI) \
	VMOVDQU b, (DI)(R12*1) \
	VMOVDQU c, (DI)(R12*2) \
	VMOVDQU d, (DI)(R13*1) \
	LEAQ (DI)(R12*4), DI

#define Q4KPQS(off) \
	Q4KPT4(off) \
	Q4KPST4(Y0, Y1, Y2, Y3)

// Q4KPSPREAD(v): slots of bytes 0..3 of v's dwords, each as (b, b) words
// (Y9..Y12 the q4kpsh controls; temps Y1..Y3, Y8).
#define Q4KPSPREAD(v) \
	VPSHUFB Y9, v, Y1 \
	VPSHUFB Y10, v, Y2 \
	VPSHUFB Y11, v, Y3 \
	VPSHUFB Y12, v, Y8 \
	Q4KPST4(Y1, Y2, Y3, Y8)

// Q4KPFIX(x, f): f = the widened halves x (zero-extended dwords) as
// FP16ToFP32 makes them: where the exponent is all ones,
// sign | 0x7f800000 | mant<<13 (temps Y1..Y3; Y7 = 0x7c00).
#define Q4KPFIX(x, f) \
	VPAND Y7, x, Y1 \
	VPCMPEQD Y7, Y1, Y1 \
	VPSLLD $13, x, Y2 \
	MOVL $0x0fffe000, SI \
	VMOVD SI, X3 \
	VPBROADCASTD X3, Y3 \
	VPAND Y3, Y2, Y2 \
	MOVL $0x70000000, SI \
	VMOVD SI, X3 \
	VPBROADCASTD X3, Y3 \
	VPOR Y3, Y2, Y2 \
	VPSLLD $16, x, Y3 \
	VPSRLD $31, Y3, Y3 \
	VPSLLD $31, Y3, Y3 \
	VPOR Y3, Y2, Y2 \
	VPBLENDVB Y1, Y2, f, f

// func q4KPackAVX2(dst, w *byte, R, rb, nsb int)
// q4KPack(dst, w, R, rb, nsb) for R = 8 or 16, nsb >= 1.
TEXT ·q4KPackAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), R10
	MOVQ w+8(FP), R11
	MOVQ R+16(FP), R12
	MOVQ rb+24(FP), R15
	MOVQ R12, R9
	SHRQ $3, R9              // groups of 8 rows
	SHLQ $2, R12             // slot bytes 4R
	LEAQ (R12)(R12*2), R13   // 12R
	MOVL $0x3f3f3f3f, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x30303030, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VMOVDQU q4kpsh<>+0(SB), Y9
	VMOVDQU q4kpsh<>+32(SB), Y10
	VMOVDQU q4kpsh<>+64(SB), Y11
	VMOVDQU q4kpsh<>+96(SB), Y12

q4kp_group:
	MOVQ R11, AX
	LEAQ (AX)(R15*1), BX
	LEAQ (AX)(R15*2), CX
	LEAQ (BX)(R15*2), DX
	MOVQ R10, DI
	MOVQ nsb+32(FP), R8

q4kp_sb:
	Q4KPQS(16)
	Q4KPQS(32)
	Q4KPQS(48)
	Q4KPQS(64)
	Q4KPQS(80)
	Q4KPQS(96)
	Q4KPQS(112)
	Q4KPQS(128)
	// Y0 = (d, dmin), Y1..Y3 = scale bytes 0..3, 4..7, 8..11.
	Q4KPT4(0)
	VPAND Y13, Y1, Y4        // sc_j = s[j]&63
	VPAND Y13, Y2, Y5        // m_j = s[j+4]&63
	VPSRLD $2, Y1, Y6
	VPAND Y15, Y6, Y6
	VPAND Y14, Y3, Y7
	VPOR Y7, Y6, Y6          // sc_{j+4} = s[j+8]&15 | (s[j]>>6)<<4
	VPSRLD $2, Y2, Y7
	VPAND Y15, Y7, Y7
	VPSRLD $4, Y3, Y3
	VPAND Y14, Y3, Y3
	VPOR Y3, Y7, Y7          // m_{j+4} = s[j+8]>>4 | (s[j+4]>>6)<<4
	Q4KPSPREAD(Y4)
	Q4KPSPREAD(Y6)
	Q4KPSPREAD(Y5)
	Q4KPSPREAD(Y7)
	VPSLLD $16, Y0, Y4
	VPSRLD $16, Y4, Y4       // d halves
	VPSRLD $16, Y0, Y5       // dmin halves
	VPACKUSDW Y5, Y4, Y6
	VPERMQ $0xd8, Y6, Y6     // d of rows 0..7, then dmin
	VCVTPH2PS X6, Y0
	VEXTRACTI128 $1, Y6, X6
	VCVTPH2PS X6, Y6
	MOVL $0x7c00, SI
	VMOVD SI, X7
	VPBROADCASTD X7, Y7
	Q4KPFIX(Y4, Y0)
	Q4KPFIX(Y5, Y6)
	VMOVDQU Y0, (DI)
	VMOVDQU Y6, (DI)(R12*1)
	LEAQ (DI)(R12*2), DI     // the next super-block's slot 0
	ADDQ $144, AX
	ADDQ $144, BX
	ADDQ $144, CX
	ADDQ $144, DX
	DECQ R8
	JNZ  q4kp_sb
	LEAQ (R11)(R15*8), R11
	ADDQ $32, R10
	DECQ R9
	JNZ  q4kp_group
	VZEROUPPER
	RET
