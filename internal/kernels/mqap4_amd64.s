#include "textflag.h"

// MQADot on AVX-512 for fewer than four query rows (a decode token of a
// model with one or two query heads per KV head): one query row against
// four K rows at a time. The per-row kernel (mqa_amd64.s, grp1) ran each
// position's FMA chain and then its 16-lane tree one after the other;
// here four positions' chains run side by side and their four trees go
// through one shuffle network (red4 of mqa_amd64.s: j += j+8 and j += j+4
// by 128-bit blocks, then in-block permutes), so each score is the same
// canonical dot, bit for bit, with a third of the reduction work.
//
// func mqaDotP4F32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)
// func mqaDotP4F16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)
// p % 4 == 0, p > 0, m > 0.
//
// Registers: SI q row, DI out row, R8 os*4, BX hd*4, R11 ks*ES, R9 rows
// left, R10 K row j, R12 groups of four left, R14 out moving, AX q
// moving, DX K row j moving, R13 K row j+3 moving, CX chunks; K1 the tail
// lanes, K3 lanes 0, 4, 8, 12 (the four sums after the tree).

#define MQA_DOTP4_512(LD4, KSTEP, TAIL4, KSHIFT) \
	MOVQ out+0(FP), DI \
	MOVQ os+8(FP), R8 \
	SHLQ $2, R8 \
	MOVQ q+16(FP), SI \
	MOVQ m+24(FP), R9 \
	MOVQ hd+32(FP), BX \
	MOVQ BX, CX \
	ANDQ $15, CX \
	MOVQ $1, AX \
	SHLQ CX, AX \
	DECQ AX \
	KMOVW AX, K1 \
	MOVL $0x1111, AX \
	KMOVW AX, K3 \
	SHLQ $2, BX \
	MOVQ ks+48(FP), R11 \
	SHLQ $KSHIFT, R11 \
prow: \
	MOVQ k+40(FP), R10 \
	MOVQ p+56(FP), R12 \
	SHRQ $2, R12 \
	MOVQ DI, R14 \
ppos: \
	VXORPS Z0, Z0, Z0 \
	VXORPS Z1, Z1, Z1 \
	VXORPS Z2, Z2, Z2 \
	VXORPS Z3, Z3, Z3 \
	MOVQ SI, AX \
	MOVQ R10, DX \
	LEAQ (R10)(R11*2), R13 \
	ADDQ R11, R13 \
	MOVQ hd+32(FP), CX \
	SHRQ $4, CX \
	JZ   ptail \
pchunk: \
	VMOVUPS (AX), Z12 \
	LD4 \
	VFMADD231PS Z12, Z8, Z0 \
	VFMADD231PS Z12, Z9, Z1 \
	VFMADD231PS Z12, Z10, Z2 \
	VFMADD231PS Z12, Z11, Z3 \
	ADDQ $64, AX \
	ADDQ $KSTEP, DX \
	ADDQ $KSTEP, R13 \
	DECQ CX \
	JNZ  pchunk \
ptail: \
	KORTESTW K1, K1 \
	JZ   pred \
	VMOVUPS.Z (AX), K1, Z12 \
	TAIL4 \
	VFMADD231PS Z12, Z8, Z0 \
	VFMADD231PS Z12, Z9, Z1 \
	VFMADD231PS Z12, Z10, Z2 \
	VFMADD231PS Z12, Z11, Z3 \
pred: \
	VSHUFF64X2 $0x44, Z1, Z0, Z10 \
	VSHUFF64X2 $0xee, Z1, Z0, Z11 \
	VADDPS Z11, Z10, Z10 \
	VSHUFF64X2 $0x44, Z3, Z2, Z12 \
	VSHUFF64X2 $0xee, Z3, Z2, Z13 \
	VADDPS Z13, Z12, Z12 \
	VSHUFF64X2 $0x88, Z12, Z10, Z11 \
	VSHUFF64X2 $0xdd, Z12, Z10, Z13 \
	VADDPS Z13, Z11, Z11 \
	VPERMILPS $0x4e, Z11, Z12 \
	VADDPS Z12, Z11, Z11 \
	VPERMILPS $0xb1, Z11, Z12 \
	VADDPS Z12, Z11, Z11 \
	VCOMPRESSPS Z11, K3, Z12 \
	VMOVUPS X12, (R14) \
	ADDQ $16, R14 \
	LEAQ (R10)(R11*4), R10 \
	DECQ R12 \
	JNZ  ppos \
	ADDQ R8, DI \
	ADDQ BX, SI \
	DECQ R9 \
	JNZ  prow \
	VZEROUPPER \
	RET

#define LD4Z32 \
	VMOVUPS (DX), Z8 \
	VMOVUPS (DX)(R11*1), Z9 \
	VMOVUPS (DX)(R11*2), Z10 \
	VMOVUPS (R13), Z11
#define TAIL4Z32 \
	VMOVUPS.Z (DX), K1, Z8 \
	VMOVUPS.Z (DX)(R11*1), K1, Z9 \
	VMOVUPS.Z (DX)(R11*2), K1, Z10 \
	VMOVUPS.Z (R13), K1, Z11
#define LD4Z16 \
	VCVTPH2PS (DX), Z8 \
	VCVTPH2PS (DX)(R11*1), Z9 \
	VCVTPH2PS (DX)(R11*2), Z10 \
	VCVTPH2PS (R13), Z11
#define TAIL4Z16 \
	VMOVDQU16.Z (DX), K1, Y8 \
	VMOVDQU16.Z (DX)(R11*1), K1, Y9 \
	VMOVDQU16.Z (DX)(R11*2), K1, Y10 \
	VMOVDQU16.Z (R13), K1, Y11 \
	VCVTPH2PS Y8, Z8 \
	VCVTPH2PS Y9, Z9 \
	VCVTPH2PS Y10, Z10 \
	VCVTPH2PS Y11, Z11

// func mqaDotP4F32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)
TEXT ·mqaDotP4F32AVX512(SB), NOSPLIT, $0-64
	MQA_DOTP4_512(LD4Z32, 64, TAIL4Z32, 2)

// func mqaDotP4F16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)
TEXT ·mqaDotP4F16AVX512(SB), NOSPLIT, $0-64
	MQA_DOTP4_512(LD4Z16, 32, TAIL4Z16, 1)
