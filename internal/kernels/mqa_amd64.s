#include "textflag.h"
#include "reduce_amd64.h"

// Fused multi-query attention kernels (mqa.go): the scores of every query
// row sharing a KV head against a block of K rows, and the value rows of a
// block summed into every output row, in one call, with F16 rows widened
// in registers (VCVTPH2PS) instead of into a scratch copy. Each score is
// Dot's canonical order (16 lanes: lanes 0-7 and 8-15 of the 16 in two
// YMM registers on AVX2, one ZMM on AVX-512; FMA per chunk; the tail chunk
// zero-masked, so lanes past the end add 0*0; then the fixed tree), each
// output element Axpy's sequence (product rounded, then the add) in row
// order.

// mqaIota: int32 0..15, for the lane masks of the first n elements.
DATA mqaIota<>+0(SB)/8, $0x0000000100000000
DATA mqaIota<>+8(SB)/8, $0x0000000300000002
DATA mqaIota<>+16(SB)/8, $0x0000000500000004
DATA mqaIota<>+24(SB)/8, $0x0000000700000006
DATA mqaIota<>+32(SB)/8, $0x0000000900000008
DATA mqaIota<>+40(SB)/8, $0x0000000b0000000a
DATA mqaIota<>+48(SB)/8, $0x0000000d0000000c
DATA mqaIota<>+56(SB)/8, $0x0000000f0000000e
GLOBL mqaIota<>(SB), RODATA|NOPTR, $64

// The reductions (REDUCE8Y, REDUCE16Z) are reduce_amd64.h's.

// ---------------------------------------------------------------- AVX2 scores
//
// func mqaDotXAVX2(out *float32, os int, q *float32, m, hd int, k *T, ks, p int)
// out[r*os+j] = dot(q[r*hd:(r+1)*hd], k[j*ks:j*ks+hd]), r < m, j < p.
// Four query rows at a time share each K chunk's load (and widening), and
// their four trees run together (VPERM2F128 pairs rows for j += j+4,
// VSHUFPS does j += j+2 and j += j+1). For F16, hd % 8 == 0.
//
// Registers: SI q of the row group, BX hd*4 (q row stride), DI out of the
// row group (advancing by position), R8 os*4, R14 out row 3, R10 K row,
// R11 ks*ES, R12 positions left, R9 rows left, AX/R13 q rows 0/3 moving,
// DX K moving, CX chunks; Y14/Y15 the tail masks of lanes 0-7/8-15.

// MQA_DOT_BODY(LDK, KO2, KSTEP, TAILK, KSHIFT): LDK(off, reg) loads 8
// lanes of a K chunk at off(DX), KO2 the offset of lanes 8-15, KSTEP bytes
// per 16 lanes, TAILK loads the tail chunk into Y8/Y9, KSHIFT log2 of the
// element size.
#define MQA_DOT_BODY(LDK, KO2, KSTEP, TAILK, KSHIFT) \
	MOVQ out+0(FP), DI \
	MOVQ os+8(FP), R8 \
	SHLQ $2, R8 \
	MOVQ q+16(FP), SI \
	MOVQ m+24(FP), R9 \
	MOVQ hd+32(FP), BX \
	MOVQ BX, AX \
	ANDQ $15, AX \
	VMOVQ AX, X0 \
	VPBROADCASTD X0, Y0 \
	VPCMPGTD mqaIota<>+0(SB), Y0, Y14 \
	VPCMPGTD mqaIota<>+32(SB), Y0, Y15 \
	SHLQ $2, BX \
	MOVQ ks+48(FP), R11 \
	SHLQ $KSHIFT, R11 \
grp4: \
	CMPQ R9, $4 \
	JLT  grp1 \
	MOVQ k+40(FP), R10 \
	MOVQ p+56(FP), R12 \
	LEAQ (DI)(R8*2), R14 \
	ADDQ R8, R14 \
pos4: \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	MOVQ SI, AX \
	LEAQ (SI)(BX*2), R13 \
	ADDQ BX, R13 \
	MOVQ R10, DX \
	MOVQ hd+32(FP), CX \
	SHRQ $4, CX \
	JZ   tail4 \
chunk4: \
	LDK(0, Y8) \
	LDK(KO2, Y9) \
	VFMADD231PS (AX), Y8, Y0 \
	VFMADD231PS 32(AX), Y9, Y1 \
	VFMADD231PS (AX)(BX*1), Y8, Y2 \
	VFMADD231PS 32(AX)(BX*1), Y9, Y3 \
	VFMADD231PS (AX)(BX*2), Y8, Y4 \
	VFMADD231PS 32(AX)(BX*2), Y9, Y5 \
	VFMADD231PS (R13), Y8, Y6 \
	VFMADD231PS 32(R13), Y9, Y7 \
	ADDQ $64, AX \
	ADDQ $64, R13 \
	ADDQ $KSTEP, DX \
	DECQ CX \
	JNZ  chunk4 \
tail4: \
	MOVQ hd+32(FP), CX \
	ANDQ $15, CX \
	JZ   red4 \
	TAILK \
	VMASKMOVPS (AX), Y14, Y10 \
	VMASKMOVPS 32(AX), Y15, Y11 \
	VFMADD231PS Y10, Y8, Y0 \
	VFMADD231PS Y11, Y9, Y1 \
	VMASKMOVPS (AX)(BX*1), Y14, Y10 \
	VMASKMOVPS 32(AX)(BX*1), Y15, Y11 \
	VFMADD231PS Y10, Y8, Y2 \
	VFMADD231PS Y11, Y9, Y3 \
	VMASKMOVPS (AX)(BX*2), Y14, Y10 \
	VMASKMOVPS 32(AX)(BX*2), Y15, Y11 \
	VFMADD231PS Y10, Y8, Y4 \
	VFMADD231PS Y11, Y9, Y5 \
	VMASKMOVPS (R13), Y14, Y10 \
	VMASKMOVPS 32(R13), Y15, Y11 \
	VFMADD231PS Y10, Y8, Y6 \
	VFMADD231PS Y11, Y9, Y7 \
red4: \
	VADDPS Y1, Y0, Y0 \
	VADDPS Y3, Y2, Y2 \
	VADDPS Y5, Y4, Y4 \
	VADDPS Y7, Y6, Y6 \
	VPERM2F128 $0x20, Y2, Y0, Y8 \
	VPERM2F128 $0x31, Y2, Y0, Y9 \
	VADDPS Y9, Y8, Y0 \
	VPERM2F128 $0x20, Y6, Y4, Y8 \
	VPERM2F128 $0x31, Y6, Y4, Y9 \
	VADDPS Y9, Y8, Y4 \
	VSHUFPS $0x44, Y4, Y0, Y8 \
	VSHUFPS $0xee, Y4, Y0, Y9 \
	VADDPS Y9, Y8, Y0 \
	VSHUFPS $0x88, Y0, Y0, Y8 \
	VSHUFPS $0xdd, Y0, Y0, Y9 \
	VADDPS Y9, Y8, Y0 \
	VMOVSS X0, (DI) \
	VEXTRACTPS $1, X0, (DI)(R8*2) \
	VEXTRACTF128 $1, Y0, X8 \
	VMOVSS X8, (DI)(R8*1) \
	VEXTRACTPS $1, X8, (R14) \
	ADDQ $4, DI \
	ADDQ $4, R14 \
	ADDQ R11, R10 \
	DECQ R12 \
	JNZ  pos4 \
	MOVQ p+56(FP), CX \
	SHLQ $2, CX \
	SUBQ CX, DI \
	LEAQ (DI)(R8*4), DI \
	LEAQ (SI)(BX*4), SI \
	SUBQ $4, R9 \
	JMP  grp4 \
grp1: \
	TESTQ R9, R9 \
	JZ   done \
	MOVQ k+40(FP), R10 \
	MOVQ p+56(FP), R12 \
	MOVQ DI, R14 \
pos1: \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	MOVQ SI, AX \
	MOVQ R10, DX \
	MOVQ hd+32(FP), CX \
	SHRQ $4, CX \
	JZ   tail1 \
chunk1: \
	LDK(0, Y8) \
	LDK(KO2, Y9) \
	VFMADD231PS (AX), Y8, Y0 \
	VFMADD231PS 32(AX), Y9, Y1 \
	ADDQ $64, AX \
	ADDQ $KSTEP, DX \
	DECQ CX \
	JNZ  chunk1 \
tail1: \
	MOVQ hd+32(FP), CX \
	ANDQ $15, CX \
	JZ   red1 \
	TAILK \
	VMASKMOVPS (AX), Y14, Y10 \
	VMASKMOVPS 32(AX), Y15, Y11 \
	VFMADD231PS Y10, Y8, Y0 \
	VFMADD231PS Y11, Y9, Y1 \
red1: \
	VADDPS Y1, Y0, Y0 \
	REDUCE8Y(Y0, X0, X10) \
	VMOVSS X0, (R14) \
	ADDQ $4, R14 \
	ADDQ R11, R10 \
	DECQ R12 \
	JNZ  pos1 \
	ADDQ R8, DI \
	ADDQ BX, SI \
	DECQ R9 \
	JMP  grp1 \
done: \
	VZEROUPPER \
	RET

#define LDK32(off, r) VMOVUPS off(DX), r
#define LDK16(off, r) VCVTPH2PS off(DX), r
#define TAILK32 VMASKMOVPS (DX), Y14, Y8; VMASKMOVPS 32(DX), Y15, Y9
// F16 tails are 8 lanes (hd % 8 == 0): lanes 8-15 are zero.
#define TAILK16 VCVTPH2PS (DX), Y8; VXORPS Y9, Y9, Y9



// ------------------------------------------------------------- AVX-512 scores
//
// The same with one ZMM of 16 lanes per accumulator; K1 masks the tail
// lanes (32-bit loads of q and F32 K, 16-bit loads of F16 K). A group's
// four trees run together: 128-bit blocks shuffled (VSHUFF64X2) for
// j += j+8 and j += j+4, then in-block permutes, as RED4T in asm_amd64.s.

#define MQA_DOT512_BODY(LDK, KSTEP, TAILK, KSHIFT) \
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
grp4: \
	CMPQ R9, $4 \
	JLT  grp1 \
	MOVQ k+40(FP), R10 \
	MOVQ p+56(FP), R12 \
	LEAQ (DI)(R8*2), R14 \
	ADDQ R8, R14 \
pos4: \
	VXORPS Z0, Z0, Z0 \
	VXORPS Z1, Z1, Z1 \
	VXORPS Z2, Z2, Z2 \
	VXORPS Z3, Z3, Z3 \
	MOVQ SI, AX \
	LEAQ (SI)(BX*2), R13 \
	ADDQ BX, R13 \
	MOVQ R10, DX \
	MOVQ hd+32(FP), CX \
	SHRQ $4, CX \
	JZ   tail4 \
chunk4: \
	LDK \
	VFMADD231PS (AX), Z8, Z0 \
	VFMADD231PS (AX)(BX*1), Z8, Z1 \
	VFMADD231PS (AX)(BX*2), Z8, Z2 \
	VFMADD231PS (R13), Z8, Z3 \
	ADDQ $64, AX \
	ADDQ $64, R13 \
	ADDQ $KSTEP, DX \
	DECQ CX \
	JNZ  chunk4 \
tail4: \
	KORTESTW K1, K1 \
	JZ   red4 \
	TAILK \
	VMOVUPS.Z (AX), K1, Z10 \
	VMOVUPS.Z (AX)(BX*1), K1, Z11 \
	VMOVUPS.Z (AX)(BX*2), K1, Z12 \
	VMOVUPS.Z (R13), K1, Z13 \
	VFMADD231PS Z10, Z8, Z0 \
	VFMADD231PS Z11, Z8, Z1 \
	VFMADD231PS Z12, Z8, Z2 \
	VFMADD231PS Z13, Z8, Z3 \
red4: \
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
	VMOVSS X12, (DI) \
	VEXTRACTPS $1, X12, (DI)(R8*1) \
	VEXTRACTPS $2, X12, (DI)(R8*2) \
	VEXTRACTPS $3, X12, (R14) \
	ADDQ $4, DI \
	ADDQ $4, R14 \
	ADDQ R11, R10 \
	DECQ R12 \
	JNZ  pos4 \
	MOVQ p+56(FP), CX \
	SHLQ $2, CX \
	SUBQ CX, DI \
	LEAQ (DI)(R8*4), DI \
	LEAQ (SI)(BX*4), SI \
	SUBQ $4, R9 \
	JMP  grp4 \
grp1: \
	TESTQ R9, R9 \
	JZ   done \
	MOVQ k+40(FP), R10 \
	MOVQ p+56(FP), R12 \
	MOVQ DI, R14 \
pos1: \
	VXORPS Z0, Z0, Z0 \
	MOVQ SI, AX \
	MOVQ R10, DX \
	MOVQ hd+32(FP), CX \
	SHRQ $4, CX \
	JZ   tail1 \
chunk1: \
	LDK \
	VFMADD231PS (AX), Z8, Z0 \
	ADDQ $64, AX \
	ADDQ $KSTEP, DX \
	DECQ CX \
	JNZ  chunk1 \
tail1: \
	KORTESTW K1, K1 \
	JZ   red1 \
	TAILK \
	VMOVUPS.Z (AX), K1, Z10 \
	VFMADD231PS Z10, Z8, Z0 \
red1: \
	REDUCE16Z(Z0, Y0, X0, Y10, X10) \
	VMOVSS X0, (R14) \
	ADDQ $4, R14 \
	ADDQ R11, R10 \
	DECQ R12 \
	JNZ  pos1 \
	ADDQ R8, DI \
	ADDQ BX, SI \
	DECQ R9 \
	JMP  grp1 \
done: \
	VZEROUPPER \
	RET

#define LDZ32 VMOVUPS (DX), Z8
#define LDZ16 VCVTPH2PS (DX), Z8
#define TAILZ32 VMOVUPS.Z (DX), K1, Z8
#define TAILZ16 VMOVDQU16.Z (DX), K1, Y8; VCVTPH2PS Y8, Z8



// ------------------------------------------------------------------ AVX2 axpy
//
// func mqaAxpyXAVX2(y *float32, w *float32, ws int, m, hd int, v *T, vs, p int)
// y[r*hd+i] += w[r*ws+j] * v[j*vs+i] for j = 0..p-1 in order, r < m,
// i < hd: two rows at a time share each V load (and widening), 32
// columns at a time, then 8, then (F32 only) the last 1-7 masked. When
// exactly 48 columns are left (bench-15M's heads, and the end of 80 and
// 112), one pass of 48 (two rows: 12 accumulators; one row: 6) instead of
// 32 + 8 + 8: the 8-column passes re-read the weights and, one row at a
// time, are add-latency bound. Zen 3, F16 V, 16 rows x 16 positions, min
// of 15 runs: 1.96 -> 1.66 ns a row and position (two rows), 3.36 -> 2.78
// (one row, the block's diagonal). A 64-column one-row pass gained
// nothing (the same uops as 32 + 32, which are not latency bound).
// For F16, hd % 8 == 0.
//
// Registers: DI y of row r, BX hd*4, SI w of row r, R8 ws*4, R11 vs*ES,
// R9 rows left, R10 column offset (bytes of F32), DX V moving, R13 w
// moving, CX positions left, AX scratch.

#define AX_MUL2(vr, a0, a1) \
	VMULPS vr, Y12, Y14 \
	VADDPS Y14, a0, a0 \
	VMULPS vr, Y13, Y14 \
	VADDPS Y14, a1, a1

#define AX_MUL1(vr, a0) \
	VMULPS vr, Y12, Y14 \
	VADDPS Y14, a0, a0

// VSTART(pfx): DX = v + column offset (R10 bytes of F32) in V's elements.
#define MQA_AXPY_BODY(LDV, VO1, VO2, VO3, VO4, VO5, VSHIFT, ESHIFT) \
	MOVQ y+0(FP), DI \
	MOVQ w+8(FP), SI \
	MOVQ ws+16(FP), R8 \
	SHLQ $2, R8 \
	MOVQ m+24(FP), R9 \
	MOVQ hd+32(FP), BX \
	SHLQ $2, BX \
	MOVQ vs+48(FP), R11 \
	SHLQ $ESHIFT, R11 \
row: \
	TESTQ R9, R9 \
	JZ   done \
	XORQ R10, R10 \
	CMPQ R9, $4 \
	JLT  row2 \
	CMPQ BX, $128 \
	JGE  row2 \
q8: \
	LEAQ 32(R10), AX \
	CMPQ AX, BX \
	JGT  qt \
	LEAQ (DI)(R10*1), AX \
	LEAQ (AX)(BX*2), R14 \
	VMOVUPS (AX), Y0 \
	VMOVUPS (AX)(BX*1), Y1 \
	VMOVUPS (R14), Y2 \
	VMOVUPS (R14)(BX*1), Y3 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	LEAQ (SI)(R8*2), R12 \
	ADDQ R8, R12 \
	MOVQ p+56(FP), CX \
q8p: \
	LDV(0, Y8) \
	VBROADCASTSS (R13), Y12 \
	VBROADCASTSS (R13)(R8*1), Y13 \
	VMULPS Y8, Y12, Y14 \
	VADDPS Y14, Y0, Y0 \
	VMULPS Y8, Y13, Y15 \
	VADDPS Y15, Y1, Y1 \
	VBROADCASTSS (R13)(R8*2), Y12 \
	VBROADCASTSS (R12), Y13 \
	VMULPS Y8, Y12, Y14 \
	VADDPS Y14, Y2, Y2 \
	VMULPS Y8, Y13, Y15 \
	VADDPS Y15, Y3, Y3 \
	ADDQ $4, R13 \
	ADDQ $4, R12 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  q8p \
	LEAQ (DI)(R10*1), AX \
	LEAQ (AX)(BX*2), R14 \
	VMOVUPS Y0, (AX) \
	VMOVUPS Y1, (AX)(BX*1) \
	VMOVUPS Y2, (R14) \
	VMOVUPS Y3, (R14)(BX*1) \
	ADDQ $32, R10 \
	JMP  q8 \
qt: \
	CMPQ R10, BX \
	JGE  next4 \
	MOVQ BX, AX \
	SUBQ R10, AX \
	SHRQ $2, AX \
	VMOVQ AX, X15 \
	VPBROADCASTD X15, Y15 \
	VPCMPGTD mqaIota<>+0(SB), Y15, Y15 \
	LEAQ (DI)(R10*1), AX \
	LEAQ (AX)(BX*2), R14 \
	VMASKMOVPS (AX), Y15, Y0 \
	VMASKMOVPS (AX)(BX*1), Y15, Y1 \
	VMASKMOVPS (R14), Y15, Y2 \
	VMASKMOVPS (R14)(BX*1), Y15, Y3 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	LEAQ (SI)(R8*2), R12 \
	ADDQ R8, R12 \
	MOVQ p+56(FP), CX \
qtp: \
	VMASKMOVPS (DX), Y15, Y8 \
	VBROADCASTSS (R13), Y12 \
	VBROADCASTSS (R13)(R8*1), Y13 \
	VMULPS Y8, Y12, Y14 \
	VADDPS Y14, Y0, Y0 \
	VMULPS Y8, Y13, Y14 \
	VADDPS Y14, Y1, Y1 \
	VBROADCASTSS (R13)(R8*2), Y12 \
	VBROADCASTSS (R12), Y13 \
	VMULPS Y8, Y12, Y14 \
	VADDPS Y14, Y2, Y2 \
	VMULPS Y8, Y13, Y14 \
	VADDPS Y14, Y3, Y3 \
	ADDQ $4, R13 \
	ADDQ $4, R12 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  qtp \
	LEAQ (DI)(R10*1), AX \
	LEAQ (AX)(BX*2), R14 \
	VMASKMOVPS Y0, Y15, (AX) \
	VMASKMOVPS Y1, Y15, (AX)(BX*1) \
	VMASKMOVPS Y2, Y15, (R14) \
	VMASKMOVPS Y3, Y15, (R14)(BX*1) \
next4: \
	LEAQ (DI)(BX*4), DI \
	LEAQ (SI)(R8*4), SI \
	SUBQ $4, R9 \
	JMP  row \
row2: \
	CMPQ R9, $2 \
	JLT  b48chk \
b32: \
	MOVQ BX, AX \
	SUBQ R10, AX \
	CMPQ AX, $192 \
	JEQ  b48 \
	CMPQ AX, $128 \
	JLT  b8 \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS (DI)(R10*1), Y0 \
	VMOVUPS 32(DI)(R10*1), Y1 \
	VMOVUPS 64(DI)(R10*1), Y2 \
	VMOVUPS 96(DI)(R10*1), Y3 \
	VMOVUPS (AX)(R10*1), Y4 \
	VMOVUPS 32(AX)(R10*1), Y5 \
	VMOVUPS 64(AX)(R10*1), Y6 \
	VMOVUPS 96(AX)(R10*1), Y7 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b32p: \
	VBROADCASTSS (R13), Y12 \
	VBROADCASTSS (R13)(R8*1), Y13 \
	LDV(0, Y8) \
	LDV(VO1, Y9) \
	LDV(VO2, Y10) \
	LDV(VO3, Y11) \
	AX_MUL2(Y8, Y0, Y4) \
	AX_MUL2(Y9, Y1, Y5) \
	AX_MUL2(Y10, Y2, Y6) \
	AX_MUL2(Y11, Y3, Y7) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b32p \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS Y0, (DI)(R10*1) \
	VMOVUPS Y1, 32(DI)(R10*1) \
	VMOVUPS Y2, 64(DI)(R10*1) \
	VMOVUPS Y3, 96(DI)(R10*1) \
	VMOVUPS Y4, (AX)(R10*1) \
	VMOVUPS Y5, 32(AX)(R10*1) \
	VMOVUPS Y6, 64(AX)(R10*1) \
	VMOVUPS Y7, 96(AX)(R10*1) \
	ADDQ $128, R10 \
	JMP  b32 \
b48: \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS (DI)(R10*1), Y0 \
	VMOVUPS 32(DI)(R10*1), Y1 \
	VMOVUPS 64(DI)(R10*1), Y2 \
	VMOVUPS 96(DI)(R10*1), Y3 \
	VMOVUPS 128(DI)(R10*1), Y4 \
	VMOVUPS 160(DI)(R10*1), Y5 \
	VMOVUPS (AX)(R10*1), Y6 \
	VMOVUPS 32(AX)(R10*1), Y7 \
	VMOVUPS 64(AX)(R10*1), Y8 \
	VMOVUPS 96(AX)(R10*1), Y9 \
	VMOVUPS 128(AX)(R10*1), Y10 \
	VMOVUPS 160(AX)(R10*1), Y11 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b48p: \
	VBROADCASTSS (R13), Y12 \
	VBROADCASTSS (R13)(R8*1), Y13 \
	LDV(0, Y15) \
	AX_MUL2(Y15, Y0, Y6) \
	LDV(VO1, Y15) \
	AX_MUL2(Y15, Y1, Y7) \
	LDV(VO2, Y15) \
	AX_MUL2(Y15, Y2, Y8) \
	LDV(VO3, Y15) \
	AX_MUL2(Y15, Y3, Y9) \
	LDV(VO4, Y15) \
	AX_MUL2(Y15, Y4, Y10) \
	LDV(VO5, Y15) \
	AX_MUL2(Y15, Y5, Y11) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b48p \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS Y0, (DI)(R10*1) \
	VMOVUPS Y1, 32(DI)(R10*1) \
	VMOVUPS Y2, 64(DI)(R10*1) \
	VMOVUPS Y3, 96(DI)(R10*1) \
	VMOVUPS Y4, 128(DI)(R10*1) \
	VMOVUPS Y5, 160(DI)(R10*1) \
	VMOVUPS Y6, (AX)(R10*1) \
	VMOVUPS Y7, 32(AX)(R10*1) \
	VMOVUPS Y8, 64(AX)(R10*1) \
	VMOVUPS Y9, 96(AX)(R10*1) \
	VMOVUPS Y10, 128(AX)(R10*1) \
	VMOVUPS Y11, 160(AX)(R10*1) \
	ADDQ $192, R10 \
	JMP  b32 \
b8: \
	LEAQ 32(R10), AX \
	CMPQ AX, BX \
	JGT  bt \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS (DI)(R10*1), Y0 \
	VMOVUPS (AX)(R10*1), Y4 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b8p: \
	VBROADCASTSS (R13), Y12 \
	VBROADCASTSS (R13)(R8*1), Y13 \
	LDV(0, Y8) \
	AX_MUL2(Y8, Y0, Y4) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b8p \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS Y0, (DI)(R10*1) \
	VMOVUPS Y4, (AX)(R10*1) \
	ADDQ $32, R10 \
	JMP  b8 \
bt: \
	CMPQ R10, BX \
	JGE  next2 \
	MOVQ BX, AX \
	SUBQ R10, AX \
	SHRQ $2, AX \
	VMOVQ AX, X15 \
	VPBROADCASTD X15, Y15 \
	VPCMPGTD mqaIota<>+0(SB), Y15, Y15 \
	LEAQ (DI)(BX*1), AX \
	VMASKMOVPS (DI)(R10*1), Y15, Y0 \
	VMASKMOVPS (AX)(R10*1), Y15, Y4 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
btp: \
	VBROADCASTSS (R13), Y12 \
	VBROADCASTSS (R13)(R8*1), Y13 \
	VMASKMOVPS (DX), Y15, Y8 \
	AX_MUL2(Y8, Y0, Y4) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  btp \
	LEAQ (DI)(BX*1), AX \
	VMASKMOVPS Y0, Y15, (DI)(R10*1) \
	VMASKMOVPS Y4, Y15, (AX)(R10*1) \
next2: \
	LEAQ (DI)(BX*2), DI \
	LEAQ (SI)(R8*2), SI \
	SUBQ $2, R9 \
	JMP  row \
b48chk: \
	MOVQ BX, AX \
	SUBQ R10, AX \
	CMPQ AX, $192 \
	JNE  b32s \
b48s: \
	VMOVUPS (DI)(R10*1), Y0 \
	VMOVUPS 32(DI)(R10*1), Y1 \
	VMOVUPS 64(DI)(R10*1), Y2 \
	VMOVUPS 96(DI)(R10*1), Y3 \
	VMOVUPS 128(DI)(R10*1), Y4 \
	VMOVUPS 160(DI)(R10*1), Y5 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b48sp: \
	VBROADCASTSS (R13), Y12 \
	LDV(0, Y8) \
	LDV(VO1, Y9) \
	LDV(VO2, Y10) \
	AX_MUL1(Y8, Y0) \
	AX_MUL1(Y9, Y1) \
	AX_MUL1(Y10, Y2) \
	LDV(VO3, Y8) \
	LDV(VO4, Y9) \
	LDV(VO5, Y10) \
	AX_MUL1(Y8, Y3) \
	AX_MUL1(Y9, Y4) \
	AX_MUL1(Y10, Y5) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b48sp \
	VMOVUPS Y0, (DI)(R10*1) \
	VMOVUPS Y1, 32(DI)(R10*1) \
	VMOVUPS Y2, 64(DI)(R10*1) \
	VMOVUPS Y3, 96(DI)(R10*1) \
	VMOVUPS Y4, 128(DI)(R10*1) \
	VMOVUPS Y5, 160(DI)(R10*1) \
	JMP  done \
b32s: \
	LEAQ 128(R10), AX \
	CMPQ AX, BX \
	JGT  b8s \
	VMOVUPS (DI)(R10*1), Y0 \
	VMOVUPS 32(DI)(R10*1), Y1 \
	VMOVUPS 64(DI)(R10*1), Y2 \
	VMOVUPS 96(DI)(R10*1), Y3 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b32sp: \
	VBROADCASTSS (R13), Y12 \
	LDV(0, Y8) \
	LDV(VO1, Y9) \
	LDV(VO2, Y10) \
	LDV(VO3, Y11) \
	AX_MUL1(Y8, Y0) \
	AX_MUL1(Y9, Y1) \
	AX_MUL1(Y10, Y2) \
	AX_MUL1(Y11, Y3) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b32sp \
	VMOVUPS Y0, (DI)(R10*1) \
	VMOVUPS Y1, 32(DI)(R10*1) \
	VMOVUPS Y2, 64(DI)(R10*1) \
	VMOVUPS Y3, 96(DI)(R10*1) \
	ADDQ $128, R10 \
	JMP  b32s \
b8s: \
	LEAQ 32(R10), AX \
	CMPQ AX, BX \
	JGT  bts \
	VMOVUPS (DI)(R10*1), Y0 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b8sp: \
	VBROADCASTSS (R13), Y12 \
	LDV(0, Y8) \
	AX_MUL1(Y8, Y0) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b8sp \
	VMOVUPS Y0, (DI)(R10*1) \
	ADDQ $32, R10 \
	JMP  b8s \
bts: \
	CMPQ R10, BX \
	JGE  done \
	MOVQ BX, AX \
	SUBQ R10, AX \
	SHRQ $2, AX \
	VMOVQ AX, X15 \
	VPBROADCASTD X15, Y15 \
	VPCMPGTD mqaIota<>+0(SB), Y15, Y15 \
	VMASKMOVPS (DI)(R10*1), Y15, Y0 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
btsp: \
	VBROADCASTSS (R13), Y12 \
	VMASKMOVPS (DX), Y15, Y8 \
	AX_MUL1(Y8, Y0) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  btsp \
	VMASKMOVPS Y0, Y15, (DI)(R10*1) \
done: \
	VZEROUPPER \
	RET

#define LDV32(off, r) VMOVUPS off(DX), r
#define LDV16(off, r) VCVTPH2PS off(DX), r



// --------------------------------------------------------------- AVX-512 axpy
//
// The same with ZMM: 64 columns at a time for two rows (and for one row:
// four independent add chains a position instead of one, which was
// add-latency bound: MQAPrefill m=1 hd=64 F16, 4.0-4.5 -> 3.0 cpu-ns a
// row and position; a decode token of an MHA model is one row per KV
// head), then 16 at a time with K2 masking the last partial chunk (F16 by
// 16-bit masked loads).

#define AZ_MUL2(vr, a0, a1) \
	VMULPS vr, Z12, Z14 \
	VADDPS Z14, a0, a0 \
	VMULPS vr, Z13, Z14 \
	VADDPS Z14, a1, a1

#define AZ_MUL1(vr, a0) \
	VMULPS vr, Z12, Z14 \
	VADDPS Z14, a0, a0

#define MQA_AXPY512_BODY(LDV, VO1, VO2, VO3, LDVM, VSHIFT, ESHIFT) \
	MOVQ y+0(FP), DI \
	MOVQ w+8(FP), SI \
	MOVQ ws+16(FP), R8 \
	SHLQ $2, R8 \
	MOVQ m+24(FP), R9 \
	MOVQ hd+32(FP), BX \
	SHLQ $2, BX \
	MOVQ vs+48(FP), R11 \
	SHLQ $ESHIFT, R11 \
row: \
	TESTQ R9, R9 \
	JZ   done \
	XORQ R10, R10 \
	CMPQ R9, $4 \
	JLT  row2 \
	CMPQ BX, $64 \
	JGT  row2 \
	MOVQ BX, CX \
	SHRQ $2, CX \
	MOVQ $1, AX \
	SHLQ CX, AX \
	DECQ AX \
	KMOVW AX, K2 \
	LEAQ (DI)(BX*2), R14 \
	VMOVUPS.Z (DI), K2, Z0 \
	VMOVUPS.Z (DI)(BX*1), K2, Z1 \
	VMOVUPS.Z (R14), K2, Z2 \
	VMOVUPS.Z (R14)(BX*1), K2, Z3 \
	MOVQ v+40(FP), DX \
	MOVQ SI, R13 \
	LEAQ (SI)(R8*2), R12 \
	ADDQ R8, R12 \
	MOVQ p+56(FP), CX \
q16p: \
	LDVM \
	VBROADCASTSS (R13), Z12 \
	VBROADCASTSS (R13)(R8*1), Z13 \
	VMULPS Z8, Z12, Z14 \
	VADDPS Z14, Z0, Z0 \
	VMULPS Z8, Z13, Z15 \
	VADDPS Z15, Z1, Z1 \
	VBROADCASTSS (R13)(R8*2), Z12 \
	VBROADCASTSS (R12), Z13 \
	VMULPS Z8, Z12, Z14 \
	VADDPS Z14, Z2, Z2 \
	VMULPS Z8, Z13, Z15 \
	VADDPS Z15, Z3, Z3 \
	ADDQ $4, R13 \
	ADDQ $4, R12 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  q16p \
	VMOVUPS Z0, K2, (DI) \
	VMOVUPS Z1, K2, (DI)(BX*1) \
	VMOVUPS Z2, K2, (R14) \
	VMOVUPS Z3, K2, (R14)(BX*1) \
	LEAQ (DI)(BX*4), DI \
	LEAQ (SI)(R8*4), SI \
	SUBQ $4, R9 \
	JMP  row \
row2: \
	CMPQ R9, $2 \
	JLT  b64s \
b64: \
	LEAQ 256(R10), AX \
	CMPQ AX, BX \
	JGT  b16 \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS (DI)(R10*1), Z0 \
	VMOVUPS 64(DI)(R10*1), Z1 \
	VMOVUPS 128(DI)(R10*1), Z2 \
	VMOVUPS 192(DI)(R10*1), Z3 \
	VMOVUPS (AX)(R10*1), Z4 \
	VMOVUPS 64(AX)(R10*1), Z5 \
	VMOVUPS 128(AX)(R10*1), Z6 \
	VMOVUPS 192(AX)(R10*1), Z7 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b64p: \
	VBROADCASTSS (R13), Z12 \
	VBROADCASTSS (R13)(R8*1), Z13 \
	LDV(0, Z8) \
	LDV(VO1, Z9) \
	LDV(VO2, Z10) \
	LDV(VO3, Z11) \
	AZ_MUL2(Z8, Z0, Z4) \
	AZ_MUL2(Z9, Z1, Z5) \
	AZ_MUL2(Z10, Z2, Z6) \
	AZ_MUL2(Z11, Z3, Z7) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b64p \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS Z0, (DI)(R10*1) \
	VMOVUPS Z1, 64(DI)(R10*1) \
	VMOVUPS Z2, 128(DI)(R10*1) \
	VMOVUPS Z3, 192(DI)(R10*1) \
	VMOVUPS Z4, (AX)(R10*1) \
	VMOVUPS Z5, 64(AX)(R10*1) \
	VMOVUPS Z6, 128(AX)(R10*1) \
	VMOVUPS Z7, 192(AX)(R10*1) \
	ADDQ $256, R10 \
	JMP  b64 \
b16: \
	CMPQ R10, BX \
	JGE  next2 \
	MOVQ BX, CX \
	SUBQ R10, CX \
	SHRQ $2, CX \
	CMPQ CX, $16 \
	JLE  m2 \
	MOVQ $16, CX \
m2: \
	MOVQ $1, AX \
	SHLQ CX, AX \
	DECQ AX \
	KMOVW AX, K2 \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS.Z (DI)(R10*1), K2, Z0 \
	VMOVUPS.Z (AX)(R10*1), K2, Z4 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b16p: \
	VBROADCASTSS (R13), Z12 \
	VBROADCASTSS (R13)(R8*1), Z13 \
	LDVM \
	AZ_MUL2(Z8, Z0, Z4) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b16p \
	LEAQ (DI)(BX*1), AX \
	VMOVUPS Z0, K2, (DI)(R10*1) \
	VMOVUPS Z4, K2, (AX)(R10*1) \
	ADDQ $64, R10 \
	JMP  b16 \
next2: \
	LEAQ (DI)(BX*2), DI \
	LEAQ (SI)(R8*2), SI \
	SUBQ $2, R9 \
	JMP  row \
b64s: \
	LEAQ 256(R10), AX \
	CMPQ AX, BX \
	JGT  b16s \
	VMOVUPS (DI)(R10*1), Z0 \
	VMOVUPS 64(DI)(R10*1), Z1 \
	VMOVUPS 128(DI)(R10*1), Z2 \
	VMOVUPS 192(DI)(R10*1), Z3 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b64sp: \
	VBROADCASTSS (R13), Z12 \
	LDV(0, Z8) \
	LDV(VO1, Z9) \
	LDV(VO2, Z10) \
	LDV(VO3, Z11) \
	AZ_MUL1(Z8, Z0) \
	AZ_MUL1(Z9, Z1) \
	AZ_MUL1(Z10, Z2) \
	AZ_MUL1(Z11, Z3) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b64sp \
	VMOVUPS Z0, (DI)(R10*1) \
	VMOVUPS Z1, 64(DI)(R10*1) \
	VMOVUPS Z2, 128(DI)(R10*1) \
	VMOVUPS Z3, 192(DI)(R10*1) \
	ADDQ $256, R10 \
	JMP  b64s \
b16s: \
	CMPQ R10, BX \
	JGE  done \
	MOVQ BX, CX \
	SUBQ R10, CX \
	SHRQ $2, CX \
	CMPQ CX, $16 \
	JLE  m1 \
	MOVQ $16, CX \
m1: \
	MOVQ $1, AX \
	SHLQ CX, AX \
	DECQ AX \
	KMOVW AX, K2 \
	VMOVUPS.Z (DI)(R10*1), K2, Z0 \
	MOVQ R10, DX \
	SHRQ $VSHIFT, DX \
	ADDQ v+40(FP), DX \
	MOVQ SI, R13 \
	MOVQ p+56(FP), CX \
b16sp: \
	VBROADCASTSS (R13), Z12 \
	LDVM \
	AZ_MUL1(Z8, Z0) \
	ADDQ $4, R13 \
	ADDQ R11, DX \
	DECQ CX \
	JNZ  b16sp \
	VMOVUPS Z0, K2, (DI)(R10*1) \
	ADDQ $64, R10 \
	JMP  b16s \
done: \
	VZEROUPPER \
	RET

#define LDZV32(off, r) VMOVUPS off(DX), r
#define LDZV16(off, r) VCVTPH2PS off(DX), r
#define LDZVM32 VMOVUPS.Z (DX), K2, Z8
#define LDZVM16 VMOVDQU16.Z (DX), K2, Y8; VCVTPH2PS Y8, Z8

// MEXPPOLY: expf's arithmetic on Y0 = x up to the scaling: Y1 = y (the
// polynomial), Y3 = n = round-half-away(x*log2e) as int32, for x <= 0.
// Needs Y12 = log2e, Y9 = 0.5, Y14 = the sign mask, R9 the constants
// (expConsts); clobbers Y0 (r) and Y2.
#define MEXPPOLY \
	VMULPS Y12, Y0, Y1 \
	VANDPS Y14, Y1, Y2 \
	VORPS Y9, Y2, Y2 \
	VADDPS Y2, Y1, Y1 \
	VCVTTPS2DQ Y1, Y3 \
	VCVTDQ2PS Y3, Y1 \
	VBROADCASTSS 8(R9), Y2 \
	VMULPS Y1, Y2, Y2 \
	VSUBPS Y2, Y0, Y0 \
	VBROADCASTSS 12(R9), Y2 \
	VMULPS Y1, Y2, Y2 \
	VSUBPS Y2, Y0, Y0 \
	VBROADCASTSS 16(R9), Y1 \
	VMULPS Y0, Y1, Y1 \
	VBROADCASTSS 20(R9), Y2 \
	VADDPS Y2, Y1, Y1 \
	VMULPS Y0, Y1, Y1 \
	VBROADCASTSS 24(R9), Y2 \
	VADDPS Y2, Y1, Y1 \
	VMULPS Y0, Y1, Y1 \
	VBROADCASTSS 28(R9), Y2 \
	VADDPS Y2, Y1, Y1 \
	VMULPS Y0, Y1, Y1 \
	VBROADCASTSS 32(R9), Y2 \
	VADDPS Y2, Y1, Y1 \
	VMULPS Y0, Y1, Y1 \
	VBROADCASTSS 36(R9), Y2 \
	VADDPS Y2, Y1, Y1 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y0, Y1, Y1 \
	VADDPS Y0, Y1, Y1 \
	VBROADCASTSS 40(R9), Y2 \
	VADDPS Y2, Y1, Y1

// MEXPFAST: Y0 = expf(Y0) for lanes in [-87, 0], where n is in [-126, 0]
// and 2^n a normal float (Y13 = int32 127): expf without its range cases.
#define MEXPFAST \
	MEXPPOLY \
	VPADDD Y13, Y3, Y3 \
	VPSLLD $23, Y3, Y3 \
	VMULPS Y3, Y1, Y0

// MEXPPOLY2 is MEXPPOLY on two vectors at once, interleaved: Y0 -> Y1, Y3
// and Y4 -> Y5, Y9 (temps Y2, Y6), the constants from scaleSoftmaxAVX2's
// frame. The polynomial is one long chain of dependent operations, and a
// Zen 3 could keep only about one and a half of them in flight written
// one after another (1.35 ns an element); two side by side keep twice as
// many operations ready. Same operations on the same operands (products
// and sums commuted only), so the same bits.
#define MEXPPOLY2 \
	VMULPS l2e-416(SP), Y0, Y1 \
	VMULPS l2e-416(SP), Y4, Y5 \
	VANDPS sgn-352(SP), Y1, Y2 \
	VANDPS sgn-352(SP), Y5, Y6 \
	VORPS hlf-384(SP), Y2, Y2 \
	VORPS hlf-384(SP), Y6, Y6 \
	VADDPS Y2, Y1, Y1 \
	VADDPS Y6, Y5, Y5 \
	VCVTTPS2DQ Y1, Y3 \
	VCVTTPS2DQ Y5, Y9 \
	VCVTDQ2PS Y3, Y1 \
	VCVTDQ2PS Y9, Y5 \
	VMULPS lhi-288(SP), Y1, Y2 \
	VMULPS lhi-288(SP), Y5, Y6 \
	VSUBPS Y2, Y0, Y0 \
	VSUBPS Y6, Y4, Y4 \
	VMULPS llo-256(SP), Y1, Y2 \
	VMULPS llo-256(SP), Y5, Y6 \
	VSUBPS Y2, Y0, Y0 \
	VSUBPS Y6, Y4, Y4 \
	VMULPS p16-224(SP), Y0, Y1 \
	VMULPS p16-224(SP), Y4, Y5 \
	VADDPS p20-192(SP), Y1, Y1 \
	VADDPS p20-192(SP), Y5, Y5 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y4, Y5, Y5 \
	VADDPS p24-160(SP), Y1, Y1 \
	VADDPS p24-160(SP), Y5, Y5 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y4, Y5, Y5 \
	VADDPS p28-128(SP), Y1, Y1 \
	VADDPS p28-128(SP), Y5, Y5 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y4, Y5, Y5 \
	VADDPS p32-96(SP), Y1, Y1 \
	VADDPS p32-96(SP), Y5, Y5 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y4, Y5, Y5 \
	VADDPS p36-64(SP), Y1, Y1 \
	VADDPS p36-64(SP), Y5, Y5 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y4, Y5, Y5 \
	VMULPS Y0, Y1, Y1 \
	VMULPS Y4, Y5, Y5 \
	VADDPS Y0, Y1, Y1 \
	VADDPS Y4, Y5, Y5 \
	VADDPS one-32(SP), Y1, Y1 \
	VADDPS one-32(SP), Y5, Y5

// MQA_DOT8_BODY(LDK8): scores for head dims <= 8, 8 positions at a time
// with the tree run on all 8 at once: VPERM2F128 pairs positions j and
// j+4 for j += j+4, VSHUFPS then does j += j+2 and j += j+1 across four,
// and the sums come out in position order. Lanes 8-15 of the canonical 16
// are 0*0, so its s8 = lo + 0: that add only turns a -0 lane into +0, and
// leaving it out changes nothing but the sign of a zero sum (-0 when every
// lane is -0), which the one + 0 at the end puts right. LDK8(r) loads a K
// row at (DX).
#define MQA_DOT8_BODY(LDK8, KSHIFT) \
	MOVQ out+0(FP), DI \
	MOVQ os+8(FP), R8 \
	SHLQ $2, R8 \
	MOVQ q+16(FP), SI \
	MOVQ m+24(FP), R9 \
	MOVQ hd+32(FP), BX \
	VMOVQ BX, X14 \
	VPBROADCASTD X14, Y14 \
	VPCMPGTD mqaIota<>+0(SB), Y14, Y14 \
	SHLQ $2, BX \
	MOVQ ks+48(FP), R11 \
	SHLQ $KSHIFT, R11 \
	VXORPS Y15, Y15, Y15 \
d8row: \
	VMASKMOVPS (SI), Y14, Y13 \
	MOVQ k+40(FP), DX \
	MOVQ p+56(FP), CX \
	SHRQ $3, CX \
	MOVQ DI, R14 \
d8grp: \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y0 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y1 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y2 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y3 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y4 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y5 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y6 \
	ADDQ R11, DX \
	LDK8(Y8) \
	VMULPS Y8, Y13, Y7 \
	ADDQ R11, DX \
	VPERM2F128 $0x20, Y4, Y0, Y9 \
	VPERM2F128 $0x31, Y4, Y0, Y10 \
	VADDPS Y10, Y9, Y0 \
	VPERM2F128 $0x20, Y5, Y1, Y9 \
	VPERM2F128 $0x31, Y5, Y1, Y10 \
	VADDPS Y10, Y9, Y1 \
	VPERM2F128 $0x20, Y6, Y2, Y9 \
	VPERM2F128 $0x31, Y6, Y2, Y10 \
	VADDPS Y10, Y9, Y2 \
	VPERM2F128 $0x20, Y7, Y3, Y9 \
	VPERM2F128 $0x31, Y7, Y3, Y10 \
	VADDPS Y10, Y9, Y3 \
	VSHUFPS $0x44, Y1, Y0, Y9 \
	VSHUFPS $0xee, Y1, Y0, Y10 \
	VADDPS Y10, Y9, Y4 \
	VSHUFPS $0x44, Y3, Y2, Y9 \
	VSHUFPS $0xee, Y3, Y2, Y10 \
	VADDPS Y10, Y9, Y5 \
	VSHUFPS $0x88, Y5, Y4, Y9 \
	VSHUFPS $0xdd, Y5, Y4, Y10 \
	VADDPS Y10, Y9, Y0 \
	VADDPS Y15, Y0, Y0 \
	VMOVUPS Y0, (R14) \
	ADDQ $32, R14 \
	DECQ CX \
	JNZ  d8grp \
	ADDQ R8, DI \
	ADDQ BX, SI \
	DECQ R9 \
	JNZ  d8row \
	VZEROUPPER \
	RET

#define LDK8F32(r) VMASKMOVPS (DX), Y14, r
#define LDK8F16(r) VCVTPH2PS (DX), r

// func mqaDotF32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)
TEXT ·mqaDotF32AVX2(SB), NOSPLIT, $0-64
	MQA_DOT_BODY(LDK32, 32, 64, TAILK32, 2)

// func mqaDotF16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)
TEXT ·mqaDotF16AVX2(SB), NOSPLIT, $0-64
	MQA_DOT_BODY(LDK16, 16, 32, TAILK16, 1)

// func mqaDotF32AVX512(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)
TEXT ·mqaDotF32AVX512(SB), NOSPLIT, $0-64
	MQA_DOT512_BODY(LDZ32, 64, TAILZ32, 2)

// func mqaDotF16AVX512(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)
TEXT ·mqaDotF16AVX512(SB), NOSPLIT, $0-64
	MQA_DOT512_BODY(LDZ16, 32, TAILZ16, 1)

// func mqaAxpyF32AVX2(y *float32, w *float32, ws int, m, hd int, v *float32, vs, p int)   p > 0
TEXT ·mqaAxpyF32AVX2(SB), NOSPLIT, $0-64
	MQA_AXPY_BODY(LDV32, 32, 64, 96, 128, 160, 0, 2)

// func mqaAxpyF16AVX2(y *float32, w *float32, ws int, m, hd int, v *uint16, vs, p int)   p > 0, hd % 8 == 0
// (The masked tail never runs: hd % 8 == 0.)
TEXT ·mqaAxpyF16AVX2(SB), NOSPLIT, $0-64
	MQA_AXPY_BODY(LDV16, 16, 32, 48, 64, 80, 1, 1)

// func mqaAxpyF32AVX512(y *float32, w *float32, ws int, m, hd int, v *float32, vs, p int)   p > 0
TEXT ·mqaAxpyF32AVX512(SB), NOSPLIT, $0-64
	MQA_AXPY512_BODY(LDZV32, 64, 128, 192, LDZVM32, 0, 2)

// func mqaAxpyF16AVX512(y *float32, w *float32, ws int, m, hd int, v *uint16, vs, p int)   p > 0
TEXT ·mqaAxpyF16AVX512(SB), NOSPLIT, $0-64
	MQA_AXPY512_BODY(LDZV16, 32, 64, 96, LDZVM16, 1, 1)

// func scaleSoftmaxAVX2(x *float32, n int, a float32, c *float32, st *tileStat) (done bool)   n > 0
// ScaleSoftmax (mqa.go) in three passes: x *= a with the max and the
// NaN/+Inf check; e^(x - max) (MEXPFAST on max(x - max, -50), 0 where
// x - max < -50) with the float64 sums in lanes i % 8; x *=
// float32(1/sum). Returns false after the first pass, x scaled, when the
// row holds NaN or +Inf or is all -Inf (the caller decides it in Go).
// With st non-nil (FlashTile, flash.go) the third pass is left out: the
// sum and the max go to *st and x keeps the numerators.
TEXT ·scaleSoftmaxAVX2(SB), NOSPLIT, $416-41
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS a+16(FP), Y13
	MOVQ c+24(FP), R9
	MOVQ CX, AX
	ANDQ $7, AX
	VMOVQ AX, X15
	VPBROADCASTD X15, Y15
	VPCMPGTD mqaIota<>+0(SB), Y15, Y15   // tail lanes
	MOVL $0xff800000, AX
	VMOVQ AX, X9
	VPBROADCASTD X9, Y9                  // -Inf
	VMOVAPS Y9, Y8                       // running max
	MOVL $0x7f800000, AX
	VMOVQ AX, X12
	VPBROADCASTD X12, Y12                // +Inf
	VXORPS Y10, Y10, Y10                 // lanes that saw NaN or +Inf
	MOVQ DI, SI
	MOVQ CX, DX
	SHRQ $3, DX
	JZ   ss1_tail

ss1_loop:
	VMULPS (SI), Y13, Y0
	VMOVUPS Y0, (SI)
	VCMPPS $0x05, Y12, Y0, Y1            // !(x < +Inf): NaN or +Inf
	VORPS Y1, Y10, Y10
	VMAXPS Y0, Y8, Y8
	ADDQ $32, SI
	DECQ DX
	JNZ  ss1_loop

ss1_tail:
	MOVQ CX, AX
	ANDQ $7, AX
	JZ   ss1_red
	VMASKMOVPS (SI), Y15, Y0
	VMULPS Y0, Y13, Y0
	VMASKMOVPS Y0, Y15, (SI)
	VCMPPS $0x05, Y12, Y0, Y1
	VANDPS Y15, Y1, Y1
	VORPS Y1, Y10, Y10
	VBLENDVPS Y15, Y0, Y9, Y1
	VMAXPS Y1, Y8, Y8

ss1_red:
	VMOVMSKPS Y10, AX
	TESTL AX, AX
	JNZ  ss_refuse
	VEXTRACTF128 $1, Y8, X1
	VMAXPS X1, X8, X8
	VPERMILPS $0x4e, X8, X1
	VMAXPS X1, X8, X8
	VPERMILPS $0xb1, X8, X1
	VMAXPS X1, X8, X8
	VCMPSS $0x00, X9, X8, X1             // max == -Inf: every x is -Inf
	VMOVMSKPS X1, AX
	TESTL $1, AX
	JNZ  ss_refuse
	VBROADCASTSS X8, Y8                  // max
	MOVL $0xc2480000, AX                 // attnFlush, -50
	VMOVQ AX, X7
	VBROADCASTSS X7, Y7

	VBROADCASTSS (R9), Y12               // log2e
	VBROADCASTSS 4(R9), Y9               // 0.5
	VPCMPEQD Y14, Y14, Y14
	VPSRLD $25, Y14, Y13                 // int32 127
	VPSLLD $31, Y14, Y14                 // sign mask
	VXORPD Y10, Y10, Y10                 // float64 sums, lanes 0-3
	VXORPD Y11, Y11, Y11                 // and 4-7
	MOVQ DI, SI
	// 16 elements an iteration as two interleaved streams (MEXPPOLY2),
	// the constants broadcast once into the frame for memory operands.
	VMOVUPS Y12, l2e-416(SP)
	VMOVUPS Y9, hlf-384(SP)
	VMOVUPS Y14, sgn-352(SP)
	VMOVUPS Y13, i127-320(SP)
	VBROADCASTSS 8(R9), Y0
	VMOVUPS Y0, lhi-288(SP)
	VBROADCASTSS 12(R9), Y0
	VMOVUPS Y0, llo-256(SP)
	VBROADCASTSS 16(R9), Y0
	VMOVUPS Y0, p16-224(SP)
	VBROADCASTSS 20(R9), Y0
	VMOVUPS Y0, p20-192(SP)
	VBROADCASTSS 24(R9), Y0
	VMOVUPS Y0, p24-160(SP)
	VBROADCASTSS 28(R9), Y0
	VMOVUPS Y0, p28-128(SP)
	VBROADCASTSS 32(R9), Y0
	VMOVUPS Y0, p32-96(SP)
	VBROADCASTSS 36(R9), Y0
	VMOVUPS Y0, p36-64(SP)
	VBROADCASTSS 40(R9), Y0
	VMOVUPS Y0, one-32(SP)
	MOVQ CX, DX
	SHRQ $4, DX
	JZ   ss2_one

ss2_loop2:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y4
	VSUBPS Y8, Y0, Y0
	VSUBPS Y8, Y4, Y4
	VCMPPS $0x11, Y7, Y0, Y12            // below attnFlush: 0
	VCMPPS $0x11, Y7, Y4, Y13
	VMAXPS Y7, Y0, Y0
	VMAXPS Y7, Y4, Y4
	MEXPPOLY2
	VPADDD i127-320(SP), Y3, Y3
	VPADDD i127-320(SP), Y9, Y9
	VPSLLD $23, Y3, Y3
	VPSLLD $23, Y9, Y9
	VMULPS Y3, Y1, Y0
	VMULPS Y9, Y5, Y4
	VANDNPS Y0, Y12, Y0
	VANDNPS Y4, Y13, Y4
	VMOVUPS Y0, (SI)
	VMOVUPS Y4, 32(SI)
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y1, Y10, Y10
	VADDPD Y2, Y11, Y11
	VCVTPS2PD X4, Y5
	VEXTRACTF128 $1, Y4, X6
	VCVTPS2PD X6, Y6
	VADDPD Y5, Y10, Y10                  // elements 8-15 after 0-7: lanes i % 8 in order
	VADDPD Y6, Y11, Y11
	ADDQ $64, SI
	DECQ DX
	JNZ  ss2_loop2

ss2_one:
	VMOVUPS l2e-416(SP), Y12
	VMOVUPS hlf-384(SP), Y9
	VMOVUPS sgn-352(SP), Y14
	VMOVUPS i127-320(SP), Y13
	MOVQ CX, DX
	SHRQ $3, DX
	ANDQ $1, DX
	JZ   ss2_tail

ss2_loop:
	VMOVUPS (SI), Y0
	VSUBPS Y8, Y0, Y0
	VCMPPS $0x11, Y7, Y0, Y4             // below attnFlush: 0
	VMAXPS Y7, Y0, Y0
	MEXPFAST
	VANDNPS Y0, Y4, Y0
	VMOVUPS Y0, (SI)
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y1, Y10, Y10
	VADDPD Y2, Y11, Y11
	ADDQ $32, SI
	DECQ DX
	JNZ  ss2_loop

ss2_tail:
	MOVQ CX, AX
	ANDQ $7, AX
	JZ   ss2_red
	VMASKMOVPS (SI), Y15, Y0
	VSUBPS Y8, Y0, Y0
	VCMPPS $0x11, Y7, Y0, Y4
	VMAXPS Y7, Y0, Y0
	MEXPFAST
	VANDNPS Y0, Y4, Y0
	VANDPS Y15, Y0, Y0
	VMASKMOVPS Y0, Y15, (SI)
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y1, Y10, Y10
	VADDPD Y2, Y11, Y11

ss2_red:
	VADDPD Y11, Y10, Y10                 // acc[j] += acc[j+4]
	VEXTRACTF128 $1, Y10, X1
	VADDPD X1, X10, X10                  // acc[j] += acc[j+2]
	VPERMILPD $1, X10, X1
	VADDSD X1, X10, X10                  // acc[0] + acc[1]
	MOVQ st+32(FP), AX
	TESTQ AX, AX
	JZ   ss2_norm
	VMOVSD X10, 0(AX)                    // tileStat.sum
	VMOVSS X8, 8(AX)                     // tileStat.max
	JMP  ss_done

ss2_norm:
	MOVQ $0x3ff0000000000000, AX
	VMOVQ AX, X2
	VDIVSD X10, X2, X2
	VCVTSD2SS X2, X2, X2
	VBROADCASTSS X2, Y2                  // float32(1/sum)
	MOVQ DI, SI
	MOVQ CX, DX
	SHRQ $3, DX
	JZ   ss3_tail

ss3_loop:
	VMULPS (SI), Y2, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ DX
	JNZ  ss3_loop

ss3_tail:
	MOVQ CX, AX
	ANDQ $7, AX
	JZ   ss_done
	VMASKMOVPS (SI), Y15, Y0
	VMULPS Y0, Y2, Y0
	VMASKMOVPS Y0, Y15, (SI)

ss_done:
	MOVB $1, done+40(FP)
	VZEROUPPER
	RET

ss_refuse:
	MOVB $0, done+40(FP)
	VZEROUPPER
	RET

// func mqaDot8F32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)   hd <= 8, p % 8 == 0, p > 0, m > 0
TEXT ·mqaDot8F32AVX2(SB), NOSPLIT, $0-64
	MQA_DOT8_BODY(LDK8F32, 2)

// func mqaDot8F16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)   hd == 8, p % 8 == 0, p > 0, m > 0
TEXT ·mqaDot8F16AVX2(SB), NOSPLIT, $0-64
	MQA_DOT8_BODY(LDK8F16, 1)

// --------------------------------------------------- AVX2 scores, pipelined
//
// func mqaDotP16F32AVX2(out *float32, os int, q *float32, m, hd int, k *float32, ks, p int)
// func mqaDotP16F16AVX2(out *float32, os int, q *float32, m, hd int, k *uint16, ks, p int)
// mqaDotXAVX2 for hd % 16 == 0 (no tail chunk) and m % 4 == 0, with each
// position's tree run during the next position's first chunk. Scores of
// short heads (48, 64) were latency-bound: one position's FMA chain and
// then its tree (j += j+8 .. j+1, about 18 cycles of dependent adds and
// shuffles) ran one after the other, ~37 cycles per 4 scores at hd=48 on
// a Zen 3 for ~20 cycles of instructions. Same operations on the same
// operands as mqaDotXAVX2, so the same bits.
//
// Registers: the position in flight accumulates rows 0-3 into Y1/Y10,
// Y3/Y11, Y5/Y12, Y7/Y13 (lanes 0-7/8-15); MQP_FOLD leaves the previous
// position's j += j+8 in Y0, Y2, Y4, Y6 for MQP_TREE (temps Y14, Y15),
// which stores its 4 scores at (DI), (DI)(R8*1), (DI)(R8*2), (R14). Y8/Y9
// the K chunk; the other registers as in mqaDotXAVX2.

#define MQP_ZERO \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y11, Y11, Y11 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y12, Y12, Y12 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y13, Y13, Y13

#define MQP_FMA \
	VFMADD231PS (AX), Y8, Y1 \
	VFMADD231PS 32(AX), Y9, Y10 \
	VFMADD231PS (AX)(BX*1), Y8, Y3 \
	VFMADD231PS 32(AX)(BX*1), Y9, Y11 \
	VFMADD231PS (AX)(BX*2), Y8, Y5 \
	VFMADD231PS 32(AX)(BX*2), Y9, Y12 \
	VFMADD231PS (R13), Y8, Y7 \
	VFMADD231PS 32(R13), Y9, Y13

#define MQP_FOLD \
	VADDPS Y10, Y1, Y0 \
	VADDPS Y11, Y3, Y2 \
	VADDPS Y12, Y5, Y4 \
	VADDPS Y13, Y7, Y6

#define MQP_TREE \
	VPERM2F128 $0x20, Y2, Y0, Y14 \
	VPERM2F128 $0x31, Y2, Y0, Y15 \
	VADDPS Y15, Y14, Y0 \
	VPERM2F128 $0x20, Y6, Y4, Y14 \
	VPERM2F128 $0x31, Y6, Y4, Y15 \
	VADDPS Y15, Y14, Y4 \
	VSHUFPS $0x44, Y4, Y0, Y14 \
	VSHUFPS $0xee, Y4, Y0, Y15 \
	VADDPS Y15, Y14, Y0 \
	VSHUFPS $0x88, Y0, Y0, Y14 \
	VSHUFPS $0xdd, Y0, Y0, Y15 \
	VADDPS Y15, Y14, Y0 \
	VMOVSS X0, (DI) \
	VEXTRACTPS $1, X0, (DI)(R8*2) \
	VEXTRACTF128 $1, Y0, X14 \
	VMOVSS X14, (DI)(R8*1) \
	VEXTRACTPS $1, X14, (R14) \
	ADDQ $4, DI \
	ADDQ $4, R14

// MQP_POS(LDK, KO2, KSTEP, TREE): one position's chunks (K row at R10),
// TREE (the previous position's, or nothing) issued inside the first.
#define MQP_POS(LDK, KO2, KSTEP, TREE, LCHUNK, LEND) \
	MQP_ZERO \
	MOVQ SI, AX \
	LEAQ (SI)(BX*2), R13 \
	ADDQ BX, R13 \
	MOVQ R10, DX \
	LDK(0, Y8) \
	LDK(KO2, Y9) \
	TREE \
	MQP_FMA \
	ADDQ $64, AX \
	ADDQ $64, R13 \
	ADDQ $KSTEP, DX \
	MOVQ hd+32(FP), CX \
	SHRQ $4, CX \
	DECQ CX \
	JZ   LEND \
LCHUNK: \
	LDK(0, Y8) \
	LDK(KO2, Y9) \
	MQP_FMA \
	ADDQ $64, AX \
	ADDQ $64, R13 \
	ADDQ $KSTEP, DX \
	DECQ CX \
	JNZ  LCHUNK \
LEND: \
	MQP_FOLD \
	ADDQ R11, R10

#define MQP_NOTREE

#define MQA_DOTP16_BODY(LDK, KO2, KSTEP, KSHIFT) \
	MOVQ out+0(FP), DI \
	MOVQ os+8(FP), R8 \
	SHLQ $2, R8 \
	MOVQ q+16(FP), SI \
	MOVQ m+24(FP), R9 \
	MOVQ hd+32(FP), BX \
	SHLQ $2, BX \
	MOVQ ks+48(FP), R11 \
	SHLQ $KSHIFT, R11 \
pgrp: \
	TESTQ R9, R9 \
	JZ   pdone \
	MOVQ k+40(FP), R10 \
	MOVQ p+56(FP), R12 \
	LEAQ (DI)(R8*2), R14 \
	ADDQ R8, R14 \
	MQP_POS(LDK, KO2, KSTEP, MQP_NOTREE, pchunk0, pend0) \
	DECQ R12 \
	JZ   pflush \
ppos: \
	MQP_POS(LDK, KO2, KSTEP, MQP_TREE, pchunk1, pend1) \
	DECQ R12 \
	JNZ  ppos \
pflush: \
	MQP_TREE \
	MOVQ p+56(FP), CX \
	SHLQ $2, CX \
	SUBQ CX, DI \
	LEAQ (DI)(R8*4), DI \
	LEAQ (SI)(BX*4), SI \
	SUBQ $4, R9 \
	JMP  pgrp \
pdone: \
	VZEROUPPER \
	RET

TEXT ·mqaDotP16F32AVX2(SB), NOSPLIT, $0-64
	MQA_DOTP16_BODY(LDK32, 32, 64, 2)

TEXT ·mqaDotP16F16AVX2(SB), NOSPLIT, $0-64
	MQA_DOTP16_BODY(LDK16, 16, 32, 1)
