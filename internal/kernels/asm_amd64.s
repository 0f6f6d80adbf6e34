#include "textflag.h"

// Hand-written kernels reproducing the canonical reduction orders of
// generic.go bit for bit (see the package doc). Operand order is Go's:
// sources first, destination last.

#include "reduce_amd64.h"

// RED4T reduces the accumulators A, B, C, D (4 consecutive outputs) by
// the canonical 16-lane tree (j += j+8, j+4, j+2, j+1), four at a time
// through shuffles, and stores the 4 results at M. T0-T3 are scratch (TX2
// is T2's low 128 bits); K3 must be 0x1111.
#define RED4T(A, B, C, D, M, T0, T1, T2, T3, TX2) \
	VSHUFF64X2 $0x44, B, A, T0 \
	VSHUFF64X2 $0xEE, B, A, T1 \
	VADDPS T1, T0, T0 \
	VSHUFF64X2 $0x44, D, C, T2 \
	VSHUFF64X2 $0xEE, D, C, T3 \
	VADDPS T3, T2, T2 \
	VSHUFF64X2 $0x88, T2, T0, T1 \
	VSHUFF64X2 $0xDD, T2, T0, T3 \
	VADDPS T3, T1, T1 \
	VPERMILPS $0x4E, T1, T2 \
	VADDPS T2, T1, T1 \
	VPERMILPS $0xB1, T1, T2 \
	VADDPS T2, T1, T1 \
	VCOMPRESSPS T1, K3, T2 \
	VMOVUPS TX2, M

#define RED4(A, B, C, D, M) RED4T(A, B, C, D, M, Z0, Z1, Z2, Z3, X2)

// func rowsF32AVX512(out, w, x *float32, nRows, n, stride int)
// out[i] = dot(w[i*stride:i*stride+n], x[:n]); four rows at a time share x
// loads.
TEXT ·rowsF32AVX512(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ stride+40(FP), R10
	SHLQ $2, R10          // row stride in bytes
	MOVQ R9, R12
	SHRQ $4, R12          // full 16-lane chunks
	MOVQ R9, CX
	ANDQ $15, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1          // tail lanes
	MOVL $0x1111, AX
	KMOVW AX, K3

f32z_loop4:
	CMPQ R8, $4
	JLT  f32z_loop1
	LEAQ (SI)(R10*1), BX
	LEAQ (BX)(R10*1), R9
	LEAQ (R9)(R10*1), R11
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f32z_tail4

f32z_chunk4:
	LEAQ (R11)(R13*1), AX   // prefetch the next group's 4 rows
	PREFETCHT0 (AX)(R10*1)
	PREFETCHT0 (AX)(R10*2)
	PREFETCHT0 (AX)(R10*4)
	LEAQ (AX)(R10*2), AX
	PREFETCHT0 (AX)(R10*1)
	VMOVUPS (DX)(R13*1), Z4
	VFMADD231PS (SI)(R13*1), Z4, Z0
	VFMADD231PS (BX)(R13*1), Z4, Z1
	VFMADD231PS (R9)(R13*1), Z4, Z2
	VFMADD231PS (R11)(R13*1), Z4, Z3
	ADDQ $64, R13
	DECQ CX
	JNZ  f32z_chunk4

f32z_tail4:
	KORTESTW K1, K1
	JZ   f32z_red4
	VMOVUPS.Z (DX)(R13*1), K1, Z4
	VMOVUPS.Z (SI)(R13*1), K1, Z5
	VMOVUPS.Z (BX)(R13*1), K1, Z6
	VMOVUPS.Z (R9)(R13*1), K1, Z7
	VMOVUPS.Z (R11)(R13*1), K1, Z8
	VFMADD231PS Z5, Z4, Z0
	VFMADD231PS Z6, Z4, Z1
	VFMADD231PS Z7, Z4, Z2
	VFMADD231PS Z8, Z4, Z3

f32z_red4:
	RED4T(Z0, Z1, Z2, Z3, (DI), Z5, Z6, Z7, Z8, X7)
	ADDQ $16, DI
	LEAQ (R11)(R10*1), SI
	SUBQ $4, R8
	JMP  f32z_loop4

f32z_loop1:
	TESTQ R8, R8
	JZ   f32z_done
	VXORPS Z0, Z0, Z0
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f32z_tail1

f32z_chunk1:
	VMOVUPS (DX)(R13*1), Z4
	VFMADD231PS (SI)(R13*1), Z4, Z0
	ADDQ $64, R13
	DECQ CX
	JNZ  f32z_chunk1

f32z_tail1:
	KORTESTW K1, K1
	JZ   f32z_red1
	VMOVUPS.Z (DX)(R13*1), K1, Z4
	VMOVUPS.Z (SI)(R13*1), K1, Z5
	VFMADD231PS Z5, Z4, Z0

f32z_red1:
	REDUCE16Z(Z0, Y0, X0, Y5, X5)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R10, SI
	DECQ R8
	JMP  f32z_loop1

f32z_done:
	VZEROUPPER
	RET

// maskTab: 16 x -1 then 16 x 0; loading 8 int32 at (16-k+off) gives a
// VMASKMOVPS mask of the lanes below k.
DATA maskTab<>+0(SB)/8, $0xffffffffffffffff
DATA maskTab<>+8(SB)/8, $0xffffffffffffffff
DATA maskTab<>+16(SB)/8, $0xffffffffffffffff
DATA maskTab<>+24(SB)/8, $0xffffffffffffffff
DATA maskTab<>+32(SB)/8, $0xffffffffffffffff
DATA maskTab<>+40(SB)/8, $0xffffffffffffffff
DATA maskTab<>+48(SB)/8, $0xffffffffffffffff
DATA maskTab<>+56(SB)/8, $0xffffffffffffffff
DATA maskTab<>+64(SB)/8, $0
DATA maskTab<>+72(SB)/8, $0
DATA maskTab<>+80(SB)/8, $0
DATA maskTab<>+88(SB)/8, $0
DATA maskTab<>+96(SB)/8, $0
DATA maskTab<>+104(SB)/8, $0
DATA maskTab<>+112(SB)/8, $0
DATA maskTab<>+120(SB)/8, $0
GLOBL maskTab<>(SB), RODATA|NOPTR, $128

// func rowsF32AVX2(out, w, x *float32, nRows, n, stride int)
// Lanes 0-7 of the canonical 16 live in one register, 8-15 in another.
// Two rows at a time share x loads.
TEXT ·rowsF32AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ stride+40(FP), R10
	SHLQ $2, R10
	MOVQ R9, R12
	SHRQ $4, R12
	MOVQ R9, R11
	ANDQ $15, R11         // tail count
	MOVQ $16, CX
	SUBQ R11, CX
	LEAQ maskTab<>(SB), AX
	VMOVDQU (AX)(CX*4), Y14
	VMOVDQU 32(AX)(CX*4), Y15

f32y_loop2:
	CMPQ R8, $2
	JLT  f32y_loop1
	LEAQ (SI)(R10*1), BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f32y_tail2

f32y_chunk2:
	VMOVUPS (DX)(R13*1), Y4
	VMOVUPS 32(DX)(R13*1), Y5
	VFMADD231PS (SI)(R13*1), Y4, Y0
	VFMADD231PS 32(SI)(R13*1), Y5, Y1
	VFMADD231PS (BX)(R13*1), Y4, Y2
	VFMADD231PS 32(BX)(R13*1), Y5, Y3
	ADDQ $64, R13
	DECQ CX
	JNZ  f32y_chunk2

f32y_tail2:
	TESTQ R11, R11
	JZ   f32y_red2
	VMASKMOVPS (DX)(R13*1), Y14, Y4
	VMASKMOVPS 32(DX)(R13*1), Y15, Y5
	VMASKMOVPS (SI)(R13*1), Y14, Y6
	VMASKMOVPS 32(SI)(R13*1), Y15, Y7
	VMASKMOVPS (BX)(R13*1), Y14, Y8
	VMASKMOVPS 32(BX)(R13*1), Y15, Y9
	VFMADD231PS Y6, Y4, Y0
	VFMADD231PS Y7, Y5, Y1
	VFMADD231PS Y8, Y4, Y2
	VFMADD231PS Y9, Y5, Y3

f32y_red2:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	REDUCE8Y(Y0, X0, X6)
	REDUCE8Y(Y2, X2, X7)
	VMOVSS X0, (DI)
	VMOVSS X2, 4(DI)
	ADDQ $8, DI
	LEAQ (BX)(R10*1), SI
	SUBQ $2, R8
	JMP  f32y_loop2

f32y_loop1:
	TESTQ R8, R8
	JZ   f32y_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f32y_tail1

f32y_chunk1:
	VMOVUPS (DX)(R13*1), Y4
	VMOVUPS 32(DX)(R13*1), Y5
	VFMADD231PS (SI)(R13*1), Y4, Y0
	VFMADD231PS 32(SI)(R13*1), Y5, Y1
	ADDQ $64, R13
	DECQ CX
	JNZ  f32y_chunk1

f32y_tail1:
	TESTQ R11, R11
	JZ   f32y_red1
	VMASKMOVPS (DX)(R13*1), Y14, Y4
	VMASKMOVPS 32(DX)(R13*1), Y15, Y5
	VMASKMOVPS (SI)(R13*1), Y14, Y6
	VMASKMOVPS 32(SI)(R13*1), Y15, Y7
	VFMADD231PS Y6, Y4, Y0
	VFMADD231PS Y7, Y5, Y1

f32y_red1:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R10, SI
	DECQ R8
	JMP  f32y_loop1

f32y_done:
	VZEROUPPER
	RET

// func rowsF16AVX512(out *float32, w, x *byte, nRows, n int)
// F16 weights times F16 activations; products are exact in float32, so
// FMA equals the canonical multiply-then-add.
TEXT ·rowsF16AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ R9, R10
	SHLQ $1, R10          // row stride in bytes
	MOVQ R9, R12
	SHRQ $4, R12
	MOVQ R9, CX
	ANDQ $15, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	MOVL $0x1111, AX
	KMOVW AX, K3

f16z_loop4:
	CMPQ R8, $4
	JLT  f16z_loop1
	LEAQ (SI)(R10*1), BX
	LEAQ (BX)(R10*1), R9
	LEAQ (R9)(R10*1), R11
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f16z_tail4

f16z_chunk4:
	LEAQ (R11)(R13*1), AX   // prefetch the next group's 4 rows
	PREFETCHT0 (AX)(R10*1)
	PREFETCHT0 (AX)(R10*2)
	PREFETCHT0 (AX)(R10*4)
	LEAQ (AX)(R10*2), AX
	PREFETCHT0 (AX)(R10*1)
	VCVTPH2PS (DX)(R13*1), Z4
	VCVTPH2PS (SI)(R13*1), Z5
	VCVTPH2PS (BX)(R13*1), Z6
	VCVTPH2PS (R9)(R13*1), Z7
	VCVTPH2PS (R11)(R13*1), Z8
	VFMADD231PS Z5, Z4, Z0
	VFMADD231PS Z6, Z4, Z1
	VFMADD231PS Z7, Z4, Z2
	VFMADD231PS Z8, Z4, Z3
	ADDQ $32, R13
	DECQ CX
	JNZ  f16z_chunk4

f16z_tail4:
	KORTESTW K1, K1
	JZ   f16z_red4
	VMOVDQU16.Z (DX)(R13*1), K1, Y4
	VMOVDQU16.Z (SI)(R13*1), K1, Y5
	VMOVDQU16.Z (BX)(R13*1), K1, Y6
	VMOVDQU16.Z (R9)(R13*1), K1, Y7
	VMOVDQU16.Z (R11)(R13*1), K1, Y8
	VCVTPH2PS Y4, Z4
	VCVTPH2PS Y5, Z5
	VCVTPH2PS Y6, Z6
	VCVTPH2PS Y7, Z7
	VCVTPH2PS Y8, Z8
	VFMADD231PS Z5, Z4, Z0
	VFMADD231PS Z6, Z4, Z1
	VFMADD231PS Z7, Z4, Z2
	VFMADD231PS Z8, Z4, Z3

f16z_red4:
	RED4T(Z0, Z1, Z2, Z3, (DI), Z5, Z6, Z7, Z8, X7)
	ADDQ $16, DI
	LEAQ (R11)(R10*1), SI
	SUBQ $4, R8
	JMP  f16z_loop4

f16z_loop1:
	TESTQ R8, R8
	JZ   f16z_done
	VXORPS Z0, Z0, Z0
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f16z_tail1

f16z_chunk1:
	VCVTPH2PS (DX)(R13*1), Z4
	VCVTPH2PS (SI)(R13*1), Z5
	VFMADD231PS Z5, Z4, Z0
	ADDQ $32, R13
	DECQ CX
	JNZ  f16z_chunk1

f16z_tail1:
	KORTESTW K1, K1
	JZ   f16z_red1
	VMOVDQU16.Z (DX)(R13*1), K1, Y4
	VMOVDQU16.Z (SI)(R13*1), K1, Y5
	VCVTPH2PS Y4, Z4
	VCVTPH2PS Y5, Z5
	VFMADD231PS Z5, Z4, Z0

f16z_red1:
	REDUCE16Z(Z0, Y0, X0, Y5, X5)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R10, SI
	DECQ R8
	JMP  f16z_loop1

f16z_done:
	VZEROUPPER
	RET

// func rowsF16AVX2(out *float32, w, x *byte, nRows, n int)
// n must be a multiple of 16 (the Go wrapper falls back otherwise).
TEXT ·rowsF16AVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ R9, R10
	SHLQ $1, R10
	MOVQ R9, R12
	SHRQ $4, R12

f16y_loop2:
	CMPQ R8, $2
	JLT  f16y_loop1
	LEAQ (SI)(R10*1), BX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f16y_red2

f16y_chunk2:
	VCVTPH2PS (DX)(R13*1), Y4
	VCVTPH2PS 16(DX)(R13*1), Y5
	VCVTPH2PS (SI)(R13*1), Y6
	VCVTPH2PS 16(SI)(R13*1), Y7
	VCVTPH2PS (BX)(R13*1), Y8
	VCVTPH2PS 16(BX)(R13*1), Y9
	VFMADD231PS Y6, Y4, Y0
	VFMADD231PS Y7, Y5, Y1
	VFMADD231PS Y8, Y4, Y2
	VFMADD231PS Y9, Y5, Y3
	ADDQ $32, R13
	DECQ CX
	JNZ  f16y_chunk2

f16y_red2:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	REDUCE8Y(Y0, X0, X6)
	REDUCE8Y(Y2, X2, X7)
	VMOVSS X0, (DI)
	VMOVSS X2, 4(DI)
	ADDQ $8, DI
	LEAQ (BX)(R10*1), SI
	SUBQ $2, R8
	JMP  f16y_loop2

f16y_loop1:
	TESTQ R8, R8
	JZ   f16y_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f16y_red1

f16y_chunk1:
	VCVTPH2PS (DX)(R13*1), Y4
	VCVTPH2PS 16(DX)(R13*1), Y5
	VCVTPH2PS (SI)(R13*1), Y6
	VCVTPH2PS 16(SI)(R13*1), Y7
	VFMADD231PS Y6, Y4, Y0
	VFMADD231PS Y7, Y5, Y1
	ADDQ $32, R13
	DECQ CX
	JNZ  f16y_chunk1

f16y_red1:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R10, SI
	DECQ R8
	JMP  f16y_loop1

f16y_done:
	VZEROUPPER
	RET

DATA ones16<>+0(SB)/8, $0x0001000100010001
DATA ones16<>+8(SB)/8, $0x0001000100010001
DATA ones16<>+16(SB)/8, $0x0001000100010001
DATA ones16<>+24(SB)/8, $0x0001000100010001
GLOBL ones16<>(SB), RODATA|NOPTR, $32

// Q8_0 kernels. Canonical order (generic.go dotQ8_0Generic): block b's 8
// int32 lane sums (4 products each) go to float lanes 8*(b&1)+l: the even
// and odd accumulators below. Activation scales come widened in dx.

// Q8Y2 adds one block to ACC on AVX2: W/WD the block's qs/scale, X/XD the
// activation's, DXM its widened scale. |w| (unsigned, so a weight of -128
// is exact) times sign-adjusted x with VPMADDUBSW (no saturation: |x| <=
// 127 from our quantizer, |w| <= 128), pairs summed by VPMADDWD into the 8
// lanes.
#define Q8Y2(W, WD, X, DXM, ACC) \
	VMOVDQU W, Y2 \
	VMOVDQU X, Y3 \
	VPSIGNB Y2, Y3, Y3 \
	VPABSB Y2, Y2 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPMADDWD Y15, Y3, Y3 \
	VCVTDQ2PS Y3, Y3 \
	VPBROADCASTW WD, X4 \
	VCVTPH2PS X4, Y4 \
	VBROADCASTSS DXM, Y5 \
	VMULPS Y5, Y4, Y4 \
	VFMADD231PS Y4, Y3, ACC

// func rowsQ8_0AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)
TEXT ·rowsQ8_0AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nRows+32(FP), R8
	MOVQ nb+40(FP), R9
	VMOVDQU ones16<>(SB), Y15

q8y_row:
	TESTQ R8, R8
	JZ   q8y_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R11, R12
	MOVQ R9, R10

q8y_pair:
	CMPQ R10, $2
	JLT  q8y_single
	Q8Y2(2(SI), (SI), 2(BX), (R12), Y0)
	Q8Y2(36(SI), 34(SI), 36(BX), 4(R12), Y1)
	ADDQ $68, SI
	ADDQ $68, BX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q8y_pair

q8y_single:
	TESTQ R10, R10
	JZ   q8y_red
	Q8Y2(2(SI), (SI), 2(BX), (R12), Y0)
	ADDQ $34, SI

q8y_red:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q8y_row

q8y_done:
	VZEROUPPER
	RET

// Q8Z1 adds one weight block (qs at W, scale at WD) to ACC on AVX-512,
// against the activation block prepared in Y1 (x) and Y3 (dx x8): |w|
// unsigned (exact for -128) times x*sign(w) through VNNI's VPDPBUSD.
#define Q8Z1(W, WD, ACC) \
	VMOVDQU W, Y8 \
	VPSIGNB Y8, Y1, Y11 \
	VPABSB Y8, Y8 \
	VPXOR Y9, Y9, Y9 \
	VPDPBUSD Y11, Y8, Y9 \
	VCVTDQ2PS Y9, Y9 \
	VPBROADCASTW WD, X10 \
	VCVTPH2PS X10, Y10 \
	VMULPS Y3, Y10, Y10 \
	VFMADD231PS Y10, Y9, ACC

// Q8XLOAD prepares activation block X (scale widened at DXM).
#define Q8XLOAD(X, DXM) \
	VMOVDQU X, Y1 \
	VBROADCASTSS DXM, Y3

// func rowsQ8_0AVX512(out *float32, w, x *byte, dx *float32, nRows, nb int)
// Four rows at a time share each activation block; VNNI's VPDPBUSD makes
// the 4-byte lane sums in one step.
TEXT ·rowsQ8_0AVX512(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nRows+32(FP), R8
	MOVQ nb+40(FP), R9
	MOVQ R9, R13
	IMULQ $34, R13        // row bytes

q8z_loop4:
	CMPQ R8, $4
	JLT  q8z_loop1
	LEAQ (SI)(R13*2), BX
	ADDQ R13, BX          // row 3
	VPXORD Y16, Y16, Y16
	VPXORD Y17, Y17, Y17
	VPXORD Y18, Y18, Y18
	VPXORD Y19, Y19, Y19
	VPXORD Y20, Y20, Y20
	VPXORD Y21, Y21, Y21
	VPXORD Y22, Y22, Y22
	VPXORD Y23, Y23, Y23
	MOVQ DX, CX
	MOVQ R11, R12
	MOVQ R9, R10

q8z_pair4:
	CMPQ R10, $2
	JLT  q8z_single4
	LEAQ (SI)(R13*8), AX
	PREFETCHT0 (AX)
	PREFETCHT0 (AX)(R13*1)
	PREFETCHT0 (AX)(R13*2)
	PREFETCHT0 (BX)(R13*8)
	Q8XLOAD(2(CX), (R12))
	Q8Z1(2(SI), (SI), Y16)
	Q8Z1(2(SI)(R13*1), (SI)(R13*1), Y17)
	Q8Z1(2(SI)(R13*2), (SI)(R13*2), Y18)
	Q8Z1(2(BX), (BX), Y19)
	Q8XLOAD(36(CX), 4(R12))
	Q8Z1(36(SI), 34(SI), Y20)
	Q8Z1(36(SI)(R13*1), 34(SI)(R13*1), Y21)
	Q8Z1(36(SI)(R13*2), 34(SI)(R13*2), Y22)
	Q8Z1(36(BX), 34(BX), Y23)
	ADDQ $68, SI
	ADDQ $68, BX
	ADDQ $68, CX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q8z_pair4

q8z_single4:
	TESTQ R10, R10
	JZ   q8z_red4
	Q8XLOAD(2(CX), (R12))
	Q8Z1(2(SI), (SI), Y16)
	Q8Z1(2(SI)(R13*1), (SI)(R13*1), Y17)
	Q8Z1(2(SI)(R13*2), (SI)(R13*2), Y18)
	Q8Z1(2(BX), (BX), Y19)
	ADDQ $34, BX

q8z_red4:
	VADDPS Y20, Y16, Y0
	VADDPS Y21, Y17, Y1
	VADDPS Y22, Y18, Y2
	VADDPS Y23, Y19, Y3
	REDUCE8Y(Y0, X0, X6)
	REDUCE8Y(Y1, X1, X7)
	REDUCE8Y(Y2, X2, X8)
	REDUCE8Y(Y3, X3, X9)
	VMOVSS X0, (DI)
	VMOVSS X1, 4(DI)
	VMOVSS X2, 8(DI)
	VMOVSS X3, 12(DI)
	ADDQ $16, DI
	MOVQ BX, SI           // BX ended at row 3's end: the next group
	SUBQ $4, R8
	JMP  q8z_loop4

q8z_loop1:
	TESTQ R8, R8
	JZ   q8z_done
	VPXORD Y16, Y16, Y16
	VPXORD Y20, Y20, Y20
	MOVQ DX, CX
	MOVQ R11, R12
	MOVQ R9, R10

q8z_pair1:
	CMPQ R10, $2
	JLT  q8z_single1
	Q8XLOAD(2(CX), (R12))
	Q8Z1(2(SI), (SI), Y16)
	Q8XLOAD(36(CX), 4(R12))
	Q8Z1(36(SI), 34(SI), Y20)
	ADDQ $68, SI
	ADDQ $68, CX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q8z_pair1

q8z_single1:
	TESTQ R10, R10
	JZ   q8z_red1
	Q8XLOAD(2(CX), (R12))
	Q8Z1(2(SI), (SI), Y16)
	ADDQ $34, SI

q8z_red1:
	VADDPS Y20, Y16, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q8z_loop1

q8z_done:
	VZEROUPPER
	RET

// func axpyAVX2(y *float32, a float32, x *float32, n int)   n % 8 == 0
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   axpy_done

axpy_loop:
	VMULPS (SI), Y0, Y1
	VADDPS (DI), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  axpy_loop

axpy_done:
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, a float32, n int)   n % 8 == 0
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   scale_done

scale_loop:
	VMULPS (DI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  scale_loop

scale_done:
	VZEROUPPER
	RET

DATA q8consts<>+0(SB)/4, $0x42fe0000   // 127.0
DATA q8consts<>+4(SB)/4, $0x7fffffff   // abs mask
DATA q8consts<>+8(SB)/4, $0x01010101   // u8 ones
GLOBL q8consts<>(SB), RODATA|NOPTR, $12

// func quantQ8_0AVX512(x *float32, nb int, blocks *byte, dx *float32, tile *byte)
// Quantizes nb blocks of 32 floats to Q8_0 bit for bit as
// quant.QuantizeRowQ8_0 (d = amax/127 as f16 RNE; q = RNE(x * (127/amax)),
// 0 when amax is 0), writes the widened scales to dx and, when tile is not
// nil, the tile layout of q8tile.go (the caller zeroes a lone last pair).
TEXT ·quantQ8_0AVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ blocks+16(FP), DI
	MOVQ dx+24(FP), R8
	MOVQ tile+32(FP), R9
	VBROADCASTSS q8consts<>+4(SB), Z15   // abs mask
	VMOVSS q8consts<>+0(SB), X14          // 127
	VPBROADCASTD q8consts<>+8(SB), Y13   // u8 ones
	VPXORD Y12, Y12, Y12                 // zero
	XORQ R10, R10                         // tile byte offset of block pair b/2
	MOVL $0x5555, R11                     // its lanes in the pair (even blocks)
	XORQ BX, BX                           // 32 * (b%2)

q8q_block:
	TESTQ CX, CX
	JZ   q8q_done
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VANDPS Z15, Z0, Z2
	VANDPS Z15, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VMOVHLPS X2, X2, X3
	VMAXPS X3, X2, X2
	VMOVSHDUP X2, X3
	VMAXSS X3, X2, X2                     // amax
	VDIVSS X14, X2, X4                    // d = amax/127
	VCVTPS2PH $0, X4, X5
	VPEXTRW $0, X5, AX
	MOVW AX, (DI)
	VCVTPH2PS X5, X6
	VMOVSS X6, (R8)
	VDIVSS X2, X14, X7                    // id = 127/amax
	VXORPS X8, X8, X8
	VCMPSS $4, X8, X2, X8                 // amax != 0
	VANDPS X8, X7, X7
	VBROADCASTSS X7, Z7
	VMULPS Z7, Z0, Z0
	VMULPS Z7, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMOVDB Z0, X0
	VPMOVDB Z1, X1
	VMOVDQU X0, 2(DI)
	VMOVDQU X1, 18(DI)
	TESTQ R9, R9
	JZ   q8q_next
	// Tile layout (q8TileRowZ): block 2p+h's group l at 4-byte group 2l+h
	// of the pair's 64 bytes of qs and of its 64 bytes of corrections.
	KMOVW R11, K4
	VINSERTI128 $1, X1, Y0, Y9
	VPEXPANDD Z9, K4, Z16
	VMOVDQU32 Z16, K4, (R9)(R10*1)
	VPXORD Y10, Y10, Y10
	VPDPBUSD Y9, Y13, Y10                 // lane sums of 4 qs
	VPSLLD $7, Y10, Y10
	VPSUBD Y10, Y12, Y10                  // -128 * sum
	VPEXPANDD Z10, K4, Z17
	VMOVDQU32 Z17, K4, 64(R9)(R10*1)
	VCVTDQ2PS Y10, Y18                    // the same as float32, at 128+32h
	LEAQ (R9)(R10*1), AX
	VMOVUPS Y18, 128(AX)(BX*1)

q8q_next:
	ADDQ $128, SI
	ADDQ $34, DI
	ADDQ $4, R8
	// the next pair's tile bytes after an odd block
	XORL $0xffff, R11
	XORQ $32, BX
	CMPL R11, $0x5555
	JNE  q8q_even
	ADDQ $192, R10

q8q_even:
	DECQ CX
	JMP  q8q_block

q8q_done:
	VZEROUPPER
	RET

// FT loads the 4 tokens' current chunk (4 registers) and does the 16 FMAs
// of the 4x4 F32 tile with the rows' chunk in Z0-Z3. Accumulator of
// (row r, token t) is Z(16+4t+r).
#define F32T16 \
	VFMADD231PS Z0, Z4, Z16 \
	VFMADD231PS Z1, Z4, Z17 \
	VFMADD231PS Z2, Z4, Z18 \
	VFMADD231PS Z3, Z4, Z19 \
	VFMADD231PS Z0, Z5, Z20 \
	VFMADD231PS Z1, Z5, Z21 \
	VFMADD231PS Z2, Z5, Z22 \
	VFMADD231PS Z3, Z5, Z23 \
	VFMADD231PS Z0, Z6, Z24 \
	VFMADD231PS Z1, Z6, Z25 \
	VFMADD231PS Z2, Z6, Z26 \
	VFMADD231PS Z3, Z6, Z27 \
	VFMADD231PS Z0, Z7, Z28 \
	VFMADD231PS Z1, Z7, Z29 \
	VFMADD231PS Z2, Z7, Z30 \
	VFMADD231PS Z3, Z7, Z31

// func tileF32AVX512(out *float32, outStride int, w *float32, nGroups int, x *float32, n int)
// out[t*outStride + r] = dot(row r, token t) for 4 tokens (x, n apart) and
// 4*nGroups rows, in the canonical F32 order (16 lanes, FMA, masked tail).
TEXT ·tileF32AVX512(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R8
	SHLQ $2, R8
	MOVQ w+16(FP), SI
	MOVQ nGroups+24(FP), R9
	MOVQ n+40(FP), R10
	MOVQ R10, R12
	SHRQ $4, R12          // full chunks
	MOVQ R10, CX
	ANDQ $15, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1          // tail lanes
	SHLQ $2, R10          // row and token stride in bytes

f32t_group:
	TESTQ R9, R9
	JZ   f32t_done
	LEAQ (SI)(R10*2), BX
	ADDQ R10, BX          // row 3
	MOVQ x+32(FP), DX
	LEAQ (DX)(R10*2), R11
	ADDQ R10, R11         // token 3
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
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f32t_tail

f32t_chunk:
	VMOVUPS (SI), Z0
	VMOVUPS (SI)(R10*1), Z1
	VMOVUPS (SI)(R10*2), Z2
	VMOVUPS (BX), Z3
	VMOVUPS (DX), Z4
	VMOVUPS (DX)(R10*1), Z5
	VMOVUPS (DX)(R10*2), Z6
	VMOVUPS (R11), Z7
	F32T16
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, DX
	ADDQ $64, R11
	DECQ CX
	JNZ  f32t_chunk

f32t_tail:
	KORTESTW K1, K1
	JZ   f32t_red
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (SI)(R10*1), K1, Z1
	VMOVUPS.Z (SI)(R10*2), K1, Z2
	VMOVUPS.Z (BX), K1, Z3
	VMOVUPS.Z (DX), K1, Z4
	VMOVUPS.Z (DX)(R10*1), K1, Z5
	VMOVUPS.Z (DX)(R10*2), K1, Z6
	VMOVUPS.Z (R11), K1, Z7
	F32T16

f32t_red:
	MOVL $0x1111, AX
	KMOVW AX, K3
	MOVQ DI, AX
	RED4(Z16, Z17, Z18, Z19, (AX))
	ADDQ R8, AX
	RED4(Z20, Z21, Z22, Z23, (AX))
	ADDQ R8, AX
	RED4(Z24, Z25, Z26, Z27, (AX))
	ADDQ R8, AX
	RED4(Z28, Z29, Z30, Z31, (AX))
	ADDQ $16, DI
	MOVQ R12, AX
	SHLQ $6, AX
	SUBQ AX, SI           // back to this group's row 0
	LEAQ (SI)(R10*4), SI  // next group
	DECQ R9
	JMP  f32t_group

f32t_done:
	VZEROUPPER
	RET

DATA nib4<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA nib4<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL nib4<>(SB), RODATA|NOPTR, $32

// Q4KSUB adds sub-blocks 2k (low nibbles) and 2k+1 (high nibbles) of the
// 32 qs bytes at Q, against Q8_K qs at XA and XB, scaled by the int16
// scales at SA and SB, to the int32 lanes of Y8. Products fit int16
// (15*127*2), scaled pairs fit int32.
#define Q4KSUB(Q, XA, XB, SA, SB) \
	VMOVDQU Q, Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	VPMADDUBSW XA, Y4, Y6 \
	VPBROADCASTW SA, Y7 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y8, Y8 \
	VPMADDUBSW XB, Y5, Y6 \
	VPBROADCASTW SB, Y7 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y8, Y8

// HSUMD folds the 8 int32 lanes of Y (X its low half) into lane 0 of X.
#define HSUMD(Y, X, T) \
	VEXTRACTI128 $1, Y, T \
	VPADDD T, X, X \
	VPSHUFD $0x4e, X, T \
	VPADDD T, X, X \
	VPSHUFD $0xb1, X, T \
	VPADDD T, X, X

// Q4KSCALES unpacks the 6-bit scales and mins of the Q4_K block at SI:
// the 8 scales as int16 to sc-16(SP), the 8 mins as int16 pairs (m_j, m_j)
// in Y2, ready for VPMADDWD with the Q8_K bsums. A, C, E, F, G are scratch
// general registers (A: scale bytes, C: min bytes); clobbers X0, X3.
#define Q4KSCALES(A, C, E, F, G) \
	MOVL 4(SI), A \
	MOVL 8(SI), C \
	MOVL 12(SI), E \
	MOVL E, F \
	SHRL $4, F \
	ANDL $0x0f0f0f0f, F \
	MOVL C, G \
	SHRL $6, G \
	ANDL $0x03030303, G \
	SHLL $4, G \
	ORL  G, F \
	ANDL $0x3f3f3f3f, C \
	ANDL $0x0f0f0f0f, E \
	MOVL A, G \
	SHRL $6, G \
	ANDL $0x03030303, G \
	SHLL $4, G \
	ORL  G, E \
	ANDL $0x3f3f3f3f, A \
	SHLQ $32, E \
	ORQ  E, A \
	SHLQ $32, F \
	ORQ  F, C \
	VMOVQ A, X0 \
	VPMOVZXBW X0, X0 \
	VMOVDQU X0, sc-16(SP) \
	VMOVQ C, X3 \
	VPMOVZXBW X3, X3 \
	VPUNPCKLWD X3, X3, X2 \
	VPUNPCKHWD X3, X3, X0 \
	VINSERTI128 $1, X0, Y2, Y2

// func rowsQ4_KAVX2(out *float32, w, x *byte, nRows, nsb int)
// Canonical Q4_K order (generic.go dotQ4_KGeneric): exact integer sums per
// super-block, then acc += (d*dx)*isum - (dmin*dx)*imin in scalar float32.
TEXT ·rowsQ4_KAVX2(SB), NOSPLIT, $16-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ nsb+32(FP), R9
	VMOVDQU nib4<>(SB), Y15

q4k_row:
	TESTQ R8, R8
	JZ   q4k_done
	VXORPS X13, X13, X13
	MOVQ DX, BX
	MOVQ R9, R10

q4k_sb:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	Q4KSCALES(AX, CX, R11, R12, R13)
	VPMADDWD 260(BX), Y2, Y2  // m_j * (bsum 2j + bsum 2j+1)
	VPXOR Y8, Y8, Y8
	Q4KSUB(16(SI), 4(BX), 36(BX), sc-16(SP), sc-14(SP))
	Q4KSUB(48(SI), 68(BX), 100(BX), sc-12(SP), sc-10(SP))
	Q4KSUB(80(SI), 132(BX), 164(BX), sc-8(SP), sc-6(SP))
	Q4KSUB(112(SI), 196(BX), 228(BX), sc-4(SP), sc-2(SP))
	HSUMD(Y8, X8, X9)
	HSUMD(Y2, X2, X9)
	VCVTDQ2PS X8, X8
	VCVTDQ2PS X2, X2
	VMOVD (SI), X10
	VCVTPH2PS X10, X10        // d, dmin
	VBROADCASTSS (BX), X11    // dx
	VMULPS X11, X10, X10      // d*dx, dmin*dx
	VMULSS X10, X8, X8
	VMOVSHDUP X10, X12
	VMULSS X12, X2, X2
	VSUBSS X2, X8, X8
	VADDSS X8, X13, X13
	ADDQ $144, SI
	ADDQ $292, BX
	DECQ R10
	JNZ  q4k_sb

	VMOVSS X13, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q4k_row

q4k_done:
	VZEROUPPER
	RET

DATA c30<>+0(SB)/8, $0x3030303030303030
DATA c30<>+8(SB)/8, $0x3030303030303030
DATA c30<>+16(SB)/8, $0x3030303030303030
DATA c30<>+24(SB)/8, $0x3030303030303030
GLOBL c30<>(SB), RODATA|NOPTR, $32

// Q6KCH adds one 32-element chunk: U holds its unsigned 6-bit values,
// X8M the Q8_K qs, SA/SB the int16 scales of its two 16-element groups.
// Products fit int16 (63*127*2); the -32 offset is applied once per
// super-block through bsums.
#define Q6KCH(U, X8M, SA, SB) \
	VPMADDUBSW X8M, U, Y6 \
	VPBROADCASTW SA, X7 \
	VPBROADCASTW SB, X12 \
	VINSERTI128 $1, X12, Y7, Y7 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y8, Y8

// Q6KHALF adds the 128 elements of half H (ql at QL, qh at QH, Q8_K qs at
// X8, scales from slot S0).
#define Q6KHALF(QL, QL32, QH, X8A, X8B, X8C, X8D, S0, S1, S2, S3, S4, S5, S6, S7) \
	VMOVDQU QL, Y0 \
	VMOVDQU QL32, Y1 \
	VMOVDQU QH, Y2 \
	VPAND Y15, Y0, Y3 \
	VPSLLW $4, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH(Y3, X8A, S0, S1) \
	VPAND Y15, Y1, Y3 \
	VPSLLW $2, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH(Y3, X8B, S2, S3) \
	VPSRLW $4, Y0, Y3 \
	VPAND Y15, Y3, Y3 \
	VPAND Y14, Y2, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH(Y3, X8C, S4, S5) \
	VPSRLW $4, Y1, Y3 \
	VPAND Y15, Y3, Y3 \
	VPSRLW $2, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH(Y3, X8D, S6, S7)

// func rowsQ6_KAVX2(out *float32, w, x *byte, nRows, nsb int)
// Canonical Q6_K order (generic.go dotQ6_KGeneric): exact integer
// isum = Σ_g sc_g Σ (q-32)*q8 per super-block, then acc += (d*dx)*isum.
TEXT ·rowsQ6_KAVX2(SB), NOSPLIT, $32-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ nsb+32(FP), R9
	VMOVDQU nib4<>(SB), Y15
	VMOVDQU c30<>(SB), Y14

q6k_row:
	TESTQ R8, R8
	JZ   q6k_done
	VXORPS X13, X13, X13
	MOVQ DX, BX
	MOVQ R9, R10

q6k_sb:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	PREFETCHT0 1216(SI)
	VPMOVSXBW 192(SI), Y9
	VMOVDQU Y9, sc-32(SP)
	VPMADDWD 260(BX), Y9, Y10   // sc_g * bsum_g, pairs
	VPXOR Y8, Y8, Y8
	Q6KHALF((SI), 32(SI), 128(SI), 4(BX), 36(BX), 68(BX), 100(BX), sc-32(SP), sc-30(SP), sc-28(SP), sc-26(SP), sc-24(SP), sc-22(SP), sc-20(SP), sc-18(SP))
	Q6KHALF(64(SI), 96(SI), 160(SI), 132(BX), 164(BX), 196(BX), 228(BX), sc-16(SP), sc-14(SP), sc-12(SP), sc-10(SP), sc-8(SP), sc-6(SP), sc-4(SP), sc-2(SP))
	VPSLLD $5, Y10, Y10
	VPSUBD Y10, Y8, Y8          // the -32 offset: Σ sc_g * 32 * bsum_g
	HSUMD(Y8, X8, X9)
	VCVTDQ2PS X8, X8
	MOVWLZX 208(SI), AX
	VMOVD AX, X10
	VCVTPH2PS X10, X10
	VMULSS (BX), X10, X10       // d*dx
	VMULSS X10, X8, X8
	VADDSS X8, X13, X13
	ADDQ $210, SI
	ADDQ $292, BX
	DECQ R10
	JNZ  q6k_sb

	VMOVSS X13, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q6k_row

q6k_done:
	VZEROUPPER
	RET

// EXPZ computes Z0 = expf(Z0) for 16 lanes as act.go's expf, operation for
// operation (no FMA; n rounded half away from zero by adding 0.5 with z's
// sign, then truncating). Constants at (R9): see expConsts; Z23 holds the
// sign mask (EXPINIT). Clobbers Z1-Z7, K3-K7.
#define EXPZ \
	VCMPPS $3, Z0, Z0, K3 \
	VCMPPS.BCST $0x1e, 44(R9), Z0, K4 \
	VCMPPS.BCST $0x11, 48(R9), Z0, K5 \
	VMULPS.BCST (R9), Z0, Z1 \
	VPANDD Z23, Z1, Z2 \
	VPORD.BCST 4(R9), Z2, Z2 \
	VADDPS Z2, Z1, Z1 \
	VCVTTPS2DQ Z1, Z4 \
	VCVTDQ2PS Z4, Z1 \
	VMULPS.BCST 8(R9), Z1, Z2 \
	VSUBPS Z2, Z0, Z2 \
	VMULPS.BCST 12(R9), Z1, Z3 \
	VSUBPS Z3, Z2, Z2 \
	VBROADCASTSS 16(R9), Z3 \
	VMULPS Z2, Z3, Z3 \
	VADDPS.BCST 20(R9), Z3, Z3 \
	VMULPS Z2, Z3, Z3 \
	VADDPS.BCST 24(R9), Z3, Z3 \
	VMULPS Z2, Z3, Z3 \
	VADDPS.BCST 28(R9), Z3, Z3 \
	VMULPS Z2, Z3, Z3 \
	VADDPS.BCST 32(R9), Z3, Z3 \
	VMULPS Z2, Z3, Z3 \
	VADDPS.BCST 36(R9), Z3, Z3 \
	VMULPS Z2, Z3, Z3 \
	VMULPS Z2, Z3, Z3 \
	VADDPS Z2, Z3, Z3 \
	VADDPS.BCST 40(R9), Z3, Z3 \
	VPCMPD $1, Z30, Z4, K6 \
	VPCMPD $6, Z31, Z4, K7 \
	VPADDD Z29, Z4, Z5 \
	VPSLLD $23, Z5, Z6 \
	VPADDD Z28, Z5, Z7 \
	VPSLLD $23, Z7, K6, Z6 \
	VBROADCASTSS 56(R9), K7, Z6 \
	VBROADCASTSS 40(R9), Z7 \
	VMOVDQA32 Z27, K6, Z7 \
	VPSUBD Z26, Z5, Z5 \
	VPSLLD $23, Z5, K7, Z7 \
	VMULPS Z6, Z3, Z3 \
	VMULPS Z7, Z3, Z3 \
	VMOVAPS Z0, K3, Z3 \
	VBROADCASTSS 52(R9), K4, Z3 \
	VPXORD Z3, Z3, K5, Z3 \
	VMOVAPS Z3, Z0

// EXPINIT loads the integer constants EXPZ needs.
#define EXPINIT \
	MOVL $0x80000000, AX \
	VPBROADCASTD AX, Z23 \
	MOVL $-126, AX \
	VPBROADCASTD AX, Z30 \
	MOVL $127, AX \
	VPBROADCASTD AX, Z31 \
	VPBROADCASTD AX, Z29 \
	MOVL $126, AX \
	VPBROADCASTD AX, Z28 \
	MOVL $0x00800000, AX \
	VPBROADCASTD AX, Z27 \
	MOVL $1, AX \
	VPBROADCASTD AX, Z26

// func siluMulAVX512(gp, u *float32, n int, c *float32)
TEXT ·siluMulAVX512(SB), NOSPLIT, $0-32
	MOVQ gp+0(FP), DI
	MOVQ u+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R9
	EXPINIT
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z25

silu_loop:
	TESTQ CX, CX
	JZ   silu_done
	MOVQ $16, R10
	CMPQ CX, $16
	CMOVQLT CX, R10
	MOVQ $1, AX
	SHLXQ R10, AX, AX
	DECQ AX
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z8
	VMOVUPS.Z (SI), K1, Z9
	VPXORD Z25, Z8, Z0        // -g
	EXPZ
	VADDPS.BCST 40(R9), Z0, Z0   // 1 + e
	VDIVPS Z0, Z8, Z8            // g / (1 + e)
	VMULPS Z9, Z8, Z8
	VMOVUPS Z8, K1, (DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ R10, CX
	JMP  silu_loop

silu_done:
	VZEROUPPER
	RET

// func expSubAVX512(x *float32, n int, m float32, c *float32)
TEXT ·expSubAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Z24
	MOVQ c+24(FP), R9
	EXPINIT

exps_loop:
	TESTQ CX, CX
	JZ   exps_done
	MOVQ $16, R10
	CMPQ CX, $16
	CMOVQLT CX, R10
	MOVQ $1, AX
	SHLXQ R10, AX, AX
	DECQ AX
	KMOVW AX, K1
	VMOVUPS.Z (DI), K1, Z0
	VSUBPS Z24, Z0, Z0
	EXPZ
	VMOVUPS Z0, K1, (DI)
	ADDQ $64, DI
	SUBQ R10, CX
	JMP  exps_loop

exps_done:
	VZEROUPPER
	RET

// SMTAIL sets K1 to the lanes of the block at AX that exist (R8 = n)
// and jumps to done when none does. Clobbers BX, CX, DX.
#define SMTAIL(done) \
	MOVQ R8, DX \
	SUBQ AX, DX \
	JLE  done \
	MOVL $0xffff, BX \
	CMPQ DX, $16 \
	JGE  5(PC) \
	MOVQ DX, CX \
	MOVL $1, BX \
	SHLL CX, BX \
	DECL BX \
	KMOVW BX, K1

// func softmaxAVX512(x *float32, n int, c *float32) bool
//
// softmaxGo's arithmetic: max, expf(x - max) (EXPZ), the sum in float64
// over 8 lanes (element i into lane i%8, in order; then lanes j+4, j+2,
// j+1 folded in), inv = float32(1/sum), x *= inv. It returns false,
// leaving x untouched, when x holds a NaN or +Inf (Go's max propagates
// NaN, VMAXPS does not, so the Go path decides those rows).
TEXT ·softmaxAVX512(SB), NOSPLIT, $0-25
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), R8
	MOVQ c+16(FP), R9
	EXPINIT
	MOVL $0xff800000, DX
	VPBROADCASTD DX, Z9        // -Inf
	MOVL $0x7f800000, DX
	VPBROADCASTD DX, Z13       // +Inf
	VMOVAPS Z9, Z8             // running max
	KXORW K6, K6, K6           // NaN or +Inf seen
	XORQ AX, AX

sm_max:
	SMTAIL(sm_max_done)
	VMOVAPS Z9, Z0
	VMOVUPS (SI)(AX*4), K1, Z0
	VCMPPS $0x03, Z0, Z0, K2
	KORW K2, K6, K6
	VCMPPS $0x00, Z13, Z0, K2
	KORW K2, K6, K6
	VMAXPS Z0, Z8, Z8
	ADDQ $16, AX
	JMP  sm_max

sm_max_done:
	KORTESTW K6, K6
	JNZ  sm_bail
	VEXTRACTF64X4 $1, Z8, Y9
	VMAXPS Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VMAXPS X9, X8, X8
	VPERMILPS $0x4e, X8, X9
	VMAXPS X9, X8, X8
	VPERMILPS $0xb1, X8, X9
	VMAXPS X9, X8, X8
	VBROADCASTSS X8, Z8        // m

	VXORPD Z10, Z10, Z10       // 8 float64 lanes
	XORQ AX, AX

sm_exp:
	SMTAIL(sm_exp_done)
	VMOVUPS.Z (SI)(AX*4), K1, Z0
	VSUBPS Z8, Z0, Z0
	EXPZ
	VMOVAPS.Z Z0, K1, Z0       // absent lanes add +0
	VMOVUPS Z0, K1, (SI)(AX*4)
	VCVTPS2PD Y0, Z11
	VEXTRACTF64X4 $1, Z0, Y12
	VCVTPS2PD Y12, Z12
	VADDPD Z11, Z10, Z10
	VADDPD Z12, Z10, Z10
	ADDQ $16, AX
	JMP  sm_exp

sm_exp_done:
	VEXTRACTF64X4 $1, Z10, Y11
	VADDPD Y11, Y10, Y10
	VEXTRACTF128 $1, Y10, X11
	VADDPD X11, X10, X10
	VPERMILPD $1, X10, X11
	VADDSD X11, X10, X10       // sum
	MOVQ $0x3ff0000000000000, DX
	VMOVQ DX, X11
	VDIVSD X10, X11, X11       // 1/sum
	VCVTSD2SS X11, X11, X11
	VBROADCASTSS X11, Z11
	XORQ AX, AX

sm_scale:
	SMTAIL(sm_scale_done)
	VMOVUPS.Z (SI)(AX*4), K1, Z0
	VMULPS Z11, Z0, Z0
	VMOVUPS Z0, K1, (SI)(AX*4)
	ADDQ $16, AX
	JMP  sm_scale

sm_scale_done:
	MOVB $1, ret+24(FP)
	VZEROUPPER
	RET

sm_bail:
	MOVB $0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyRowsAVX512(y, w, x *float32, nRows, stride int, mask uint64)
// For up to 64 elements of y (lanes set in mask, 16 per register): y +=
// w[j] * x[j*stride:] for j in order, each step a rounded product then a
// rounded sum, exactly Axpy's. y stays in registers across the rows.
TEXT ·axpyRowsAVX512(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), CX
	MOVQ stride+32(FP), R10
	SHLQ $2, R10
	MOVQ mask+40(FP), AX
	KMOVW AX, K1
	SHRQ $16, AX
	KMOVW AX, K2
	SHRQ $16, AX
	KMOVW AX, K3
	SHRQ $16, AX
	KMOVW AX, K4
	VMOVUPS.Z (DI), K1, Z0
	VMOVUPS.Z 64(DI), K2, Z1
	VMOVUPS.Z 128(DI), K3, Z2
	VMOVUPS.Z 192(DI), K4, Z3

axr_row:
	TESTQ CX, CX
	JZ   axr_done
	VBROADCASTSS (SI), Z8
	VMOVUPS.Z (DX), K1, Z4
	VMOVUPS.Z 64(DX), K2, Z5
	VMOVUPS.Z 128(DX), K3, Z6
	VMOVUPS.Z 192(DX), K4, Z7
	VMULPS Z8, Z4, Z4
	VMULPS Z8, Z5, Z5
	VMULPS Z8, Z6, Z6
	VMULPS Z8, Z7, Z7
	VADDPS Z4, Z0, Z0
	VADDPS Z5, Z1, Z1
	VADDPS Z6, Z2, Z2
	VADDPS Z7, Z3, Z3
	ADDQ $4, SI
	ADDQ R10, DX
	DECQ CX
	JMP  axr_row

axr_done:
	VMOVUPS Z0, K1, (DI)
	VMOVUPS Z1, K2, 64(DI)
	VMOVUPS Z2, K3, 128(DI)
	VMOVUPS Z3, K4, 192(DI)
	VZEROUPPER
	RET

// func tileF16AVX512(out *float32, outStride int, w *byte, nGroups int, x *byte, n int)
// As tileF32AVX512 over F16 weights and F16-rounded activations (widened
// on load; their products are exact, so FMA is the canonical step).
TEXT ·tileF16AVX512(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R8
	SHLQ $2, R8
	MOVQ w+16(FP), SI
	MOVQ nGroups+24(FP), R9
	MOVQ n+40(FP), R10
	MOVQ R10, R12
	SHRQ $4, R12          // full chunks
	MOVQ R10, CX
	ANDQ $15, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1          // tail lanes
	SHLQ $1, R10          // row and token stride in bytes

f16t_group:
	TESTQ R9, R9
	JZ   f16t_done
	LEAQ (SI)(R10*2), BX
	ADDQ R10, BX          // row 3
	MOVQ x+32(FP), DX
	LEAQ (DX)(R10*2), R11
	ADDQ R10, R11         // token 3
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
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   f16t_tail

f16t_chunk:
	VCVTPH2PS (SI), Z0
	VCVTPH2PS (SI)(R10*1), Z1
	VCVTPH2PS (SI)(R10*2), Z2
	VCVTPH2PS (BX), Z3
	VCVTPH2PS (DX), Z4
	VCVTPH2PS (DX)(R10*1), Z5
	VCVTPH2PS (DX)(R10*2), Z6
	VCVTPH2PS (R11), Z7
	F32T16
	ADDQ $32, SI
	ADDQ $32, BX
	ADDQ $32, DX
	ADDQ $32, R11
	DECQ CX
	JNZ  f16t_chunk

f16t_tail:
	KORTESTW K1, K1
	JZ   f16t_red
	VMOVDQU16.Z (SI), K1, Y0
	VCVTPH2PS Y0, Z0
	VMOVDQU16.Z (SI)(R10*1), K1, Y1
	VCVTPH2PS Y1, Z1
	VMOVDQU16.Z (SI)(R10*2), K1, Y2
	VCVTPH2PS Y2, Z2
	VMOVDQU16.Z (BX), K1, Y3
	VCVTPH2PS Y3, Z3
	VMOVDQU16.Z (DX), K1, Y4
	VCVTPH2PS Y4, Z4
	VMOVDQU16.Z (DX)(R10*1), K1, Y5
	VCVTPH2PS Y5, Z5
	VMOVDQU16.Z (DX)(R10*2), K1, Y6
	VCVTPH2PS Y6, Z6
	VMOVDQU16.Z (R11), K1, Y7
	VCVTPH2PS Y7, Z7
	F32T16

f16t_red:
	MOVL $0x1111, AX
	KMOVW AX, K3
	MOVQ DI, AX
	RED4(Z16, Z17, Z18, Z19, (AX))
	ADDQ R8, AX
	RED4(Z20, Z21, Z22, Z23, (AX))
	ADDQ R8, AX
	RED4(Z24, Z25, Z26, Z27, (AX))
	ADDQ R8, AX
	RED4(Z28, Z29, Z30, Z31, (AX))
	ADDQ $16, DI
	MOVQ R12, AX
	SHLQ $5, AX
	SUBQ AX, SI           // back to this group's row 0
	LEAQ (SI)(R10*4), SI  // next group
	DECQ R9
	JMP  f16t_group

f16t_done:
	VZEROUPPER
	RET

// func rowsBF16AVX512(out *float32, w, x *byte, nRows, n int)
// BF16 weights times BF16 activations, widened by shifting into the top
// half. Products can overflow or underflow float32 here (BF16 has
// float32's range), so they are rounded before the add, never fused.
TEXT ·rowsBF16AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ R9, R10
	SHLQ $1, R10          // row stride in bytes
	MOVQ R9, R12
	SHRQ $4, R12
	MOVQ R9, CX
	ANDQ $15, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1
	MOVL $0x1111, AX
	KMOVW AX, K3

bf16z_loop4:
	CMPQ R8, $4
	JLT  bf16z_loop1
	LEAQ (SI)(R10*1), BX
	LEAQ (BX)(R10*1), R9
	LEAQ (R9)(R10*1), R11
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   bf16z_tail4

bf16z_chunk4:
	LEAQ (R11)(R13*1), AX   // prefetch the next group's 4 rows
	PREFETCHT0 (AX)(R10*1)
	PREFETCHT0 (AX)(R10*2)
	PREFETCHT0 (AX)(R10*4)
	LEAQ (AX)(R10*2), AX
	PREFETCHT0 (AX)(R10*1)
	VPMOVZXWD (DX)(R13*1), Z4
	VPSLLD $16, Z4, Z4
	VPMOVZXWD (SI)(R13*1), Z5
	VPSLLD $16, Z5, Z5
	VPMOVZXWD (BX)(R13*1), Z6
	VPSLLD $16, Z6, Z6
	VPMOVZXWD (R9)(R13*1), Z7
	VPSLLD $16, Z7, Z7
	VPMOVZXWD (R11)(R13*1), Z8
	VPSLLD $16, Z8, Z8
	VMULPS Z5, Z4, Z5
	VADDPS Z5, Z0, Z0
	VMULPS Z6, Z4, Z6
	VADDPS Z6, Z1, Z1
	VMULPS Z7, Z4, Z7
	VADDPS Z7, Z2, Z2
	VMULPS Z8, Z4, Z8
	VADDPS Z8, Z3, Z3
	ADDQ $32, R13
	DECQ CX
	JNZ  bf16z_chunk4

bf16z_tail4:
	KORTESTW K1, K1
	JZ   bf16z_red4
	VMOVDQU16.Z (DX)(R13*1), K1, Y4
	VMOVDQU16.Z (SI)(R13*1), K1, Y5
	VMOVDQU16.Z (BX)(R13*1), K1, Y6
	VMOVDQU16.Z (R9)(R13*1), K1, Y7
	VMOVDQU16.Z (R11)(R13*1), K1, Y8
	VPMOVZXWD Y4, Z4
	VPSLLD $16, Z4, Z4
	VPMOVZXWD Y5, Z5
	VPSLLD $16, Z5, Z5
	VPMOVZXWD Y6, Z6
	VPSLLD $16, Z6, Z6
	VPMOVZXWD Y7, Z7
	VPSLLD $16, Z7, Z7
	VPMOVZXWD Y8, Z8
	VPSLLD $16, Z8, Z8
	VMULPS Z5, Z4, Z5
	VADDPS Z5, Z0, Z0
	VMULPS Z6, Z4, Z6
	VADDPS Z6, Z1, Z1
	VMULPS Z7, Z4, Z7
	VADDPS Z7, Z2, Z2
	VMULPS Z8, Z4, Z8
	VADDPS Z8, Z3, Z3

bf16z_red4:
	RED4T(Z0, Z1, Z2, Z3, (DI), Z5, Z6, Z7, Z8, X7)
	ADDQ $16, DI
	LEAQ (R11)(R10*1), SI
	SUBQ $4, R8
	JMP  bf16z_loop4

bf16z_loop1:
	TESTQ R8, R8
	JZ   bf16z_done
	VXORPS Z0, Z0, Z0
	XORQ R13, R13
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   bf16z_tail1

bf16z_chunk1:
	VPMOVZXWD (DX)(R13*1), Z4
	VPSLLD $16, Z4, Z4
	VPMOVZXWD (SI)(R13*1), Z5
	VPSLLD $16, Z5, Z5
	VMULPS Z5, Z4, Z5
	VADDPS Z5, Z0, Z0
	ADDQ $32, R13
	DECQ CX
	JNZ  bf16z_chunk1

bf16z_tail1:
	KORTESTW K1, K1
	JZ   bf16z_red1
	VMOVDQU16.Z (DX)(R13*1), K1, Y4
	VMOVDQU16.Z (SI)(R13*1), K1, Y5
	VPMOVZXWD Y4, Z4
	VPSLLD $16, Z4, Z4
	VPMOVZXWD Y5, Z5
	VPSLLD $16, Z5, Z5
	VMULPS Z5, Z4, Z5
	VADDPS Z5, Z0, Z0

bf16z_red1:
	REDUCE16Z(Z0, Y0, X0, Y5, X5)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R10, SI
	DECQ R8
	JMP  bf16z_loop1

bf16z_done:
	VZEROUPPER
	RET

// VPERMW indices: words 0-15 pick scale 2k, words 16-31 scale 2k+1.
DATA q4kidx<>+0(SB)/8, $0x0000000000000000
DATA q4kidx<>+8(SB)/8, $0x0000000000000000
DATA q4kidx<>+16(SB)/8, $0x0000000000000000
DATA q4kidx<>+24(SB)/8, $0x0000000000000000
DATA q4kidx<>+32(SB)/8, $0x0001000100010001
DATA q4kidx<>+40(SB)/8, $0x0001000100010001
DATA q4kidx<>+48(SB)/8, $0x0001000100010001
DATA q4kidx<>+56(SB)/8, $0x0001000100010001
DATA q4kidx<>+64(SB)/8, $0x0002000200020002
DATA q4kidx<>+72(SB)/8, $0x0002000200020002
DATA q4kidx<>+80(SB)/8, $0x0002000200020002
DATA q4kidx<>+88(SB)/8, $0x0002000200020002
DATA q4kidx<>+96(SB)/8, $0x0003000300030003
DATA q4kidx<>+104(SB)/8, $0x0003000300030003
DATA q4kidx<>+112(SB)/8, $0x0003000300030003
DATA q4kidx<>+120(SB)/8, $0x0003000300030003
DATA q4kidx<>+128(SB)/8, $0x0004000400040004
DATA q4kidx<>+136(SB)/8, $0x0004000400040004
DATA q4kidx<>+144(SB)/8, $0x0004000400040004
DATA q4kidx<>+152(SB)/8, $0x0004000400040004
DATA q4kidx<>+160(SB)/8, $0x0005000500050005
DATA q4kidx<>+168(SB)/8, $0x0005000500050005
DATA q4kidx<>+176(SB)/8, $0x0005000500050005
DATA q4kidx<>+184(SB)/8, $0x0005000500050005
DATA q4kidx<>+192(SB)/8, $0x0006000600060006
DATA q4kidx<>+200(SB)/8, $0x0006000600060006
DATA q4kidx<>+208(SB)/8, $0x0006000600060006
DATA q4kidx<>+216(SB)/8, $0x0006000600060006
DATA q4kidx<>+224(SB)/8, $0x0007000700070007
DATA q4kidx<>+232(SB)/8, $0x0007000700070007
DATA q4kidx<>+240(SB)/8, $0x0007000700070007
DATA q4kidx<>+248(SB)/8, $0x0007000700070007
GLOBL q4kidx<>(SB), RODATA|NOPTR, $256

// Q4KNIB makes Z of the 32 qs bytes at Q: low nibbles (sub-block 2k) in
// bytes 0-31, high nibbles (sub-block 2k+1) in 32-63, the element order of
// the 64 Q8_K qs they multiply.
#define Q4KNIB(Q, Y, Z) \
	VMOVDQU Q, Y4 \
	VPSRLW $4, Y4, Y5 \
	VINSERTI64X4 $1, Y5, Z4, Z4 \
	VPANDD Z15, Z4, Z

// func rowsQ4_KAVX512(out *float32, outStride int, w, x *byte, xStride, nRows, nsb, nT int)
// Canonical Q4_K order (dotQ4_KGeneric) for nRows rows and nT (1-4)
// tokens (Q8_K rows xStride bytes apart; out[t*outStride + r]). A
// super-block's nibbles, scales and mins are unpacked once per row and
// reused by every token: VPMADDUBSW on 64 elements at a time, VNNI's
// VPDPWSSD applying the sub-block scales.
TEXT ·rowsQ4_KAVX512(SB), NOSPLIT, $16-64
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R8
	SHLQ $2, R8
	MOVQ w+16(FP), SI
	MOVQ x+24(FP), DX
	MOVQ xStride+32(FP), R11
	MOVQ nRows+40(FP), R9
	MOVL $0x0f, AX
	VPBROADCASTB AX, Z15
	VMOVDQU64 q4kidx<>+0(SB), Z24
	VMOVDQU64 q4kidx<>+64(SB), Z25
	VMOVDQU64 q4kidx<>+128(SB), Z26
	VMOVDQU64 q4kidx<>+192(SB), Z27

q4kz_row:
	TESTQ R9, R9
	JZ   q4kz_done
	VXORPS X0, X0, X0
	VMOVUPS X0, acc-16(SP)
	MOVQ DX, BX
	MOVQ nsb+48(FP), R13

q4kz_sb:
	MOVL 4(SI), AX
	MOVL 8(SI), CX
	MOVL 12(SI), R10
	MOVL R10, R12
	SHRL $4, R12
	ANDL $0x0f0f0f0f, R12
	MOVL CX, R14
	SHRL $6, R14
	ANDL $0x03030303, R14
	SHLL $4, R14
	ORL  R14, R12
	ANDL $0x3f3f3f3f, CX
	ANDL $0x0f0f0f0f, R10
	MOVL AX, R14
	SHRL $6, R14
	ANDL $0x03030303, R14
	SHLL $4, R14
	ORL  R14, R10
	ANDL $0x3f3f3f3f, AX
	SHLQ $32, R10
	ORQ  R10, AX
	SHLQ $32, R12
	ORQ  R12, CX
	VMOVQ AX, X0
	VPMOVZXBW X0, X3          // 8 int16 scales (upper lanes zero)
	VMOVQ CX, X1
	VPMOVZXBW X1, X1
	VPUNPCKLWD X1, X1, X2
	VPUNPCKHWD X1, X1, X1
	VINSERTI128 $1, X1, Y2, Y2 // mins, each twice: pairs with bsums
	Q4KNIB(16(SI), Y16, Z16)
	Q4KNIB(48(SI), Y17, Z17)
	Q4KNIB(80(SI), Y18, Z18)
	Q4KNIB(112(SI), Y19, Z19)
	VPERMW Z3, Z24, Z20
	VPERMW Z3, Z25, Z21
	VPERMW Z3, Z26, Z22
	VPERMW Z3, Z27, Z23
	VMOVD (SI), X10
	VCVTPH2PS X10, X10        // d, dmin
	MOVQ BX, CX
	MOVQ nT+56(FP), AX
	LEAQ acc-16(SP), R12

q4kz_tok:
	VPXORD Z8, Z8, Z8
	VPMADDUBSW 4(CX), Z16, Z6
	VPDPWSSD Z6, Z20, Z8
	VPMADDUBSW 68(CX), Z17, Z6
	VPDPWSSD Z6, Z21, Z8
	VPMADDUBSW 132(CX), Z18, Z6
	VPDPWSSD Z6, Z22, Z8
	VPMADDUBSW 196(CX), Z19, Z6
	VPDPWSSD Z6, Z23, Z8
	VEXTRACTI64X4 $1, Z8, Y9
	VPADDD Y9, Y8, Y8
	HSUMD(Y8, X8, X9)
	VPMADDWD 260(CX), Y2, Y9  // m_j * (bsum 2j + bsum 2j+1)
	HSUMD(Y9, X9, X7)
	VCVTDQ2PS X8, X8
	VCVTDQ2PS X9, X9
	VBROADCASTSS (CX), X11
	VMULPS X11, X10, X11      // d*dx, dmin*dx
	VMULSS X11, X8, X8
	VMOVSHDUP X11, X11
	VMULSS X11, X9, X9
	VSUBSS X9, X8, X8
	VADDSS (R12), X8, X8
	VMOVSS X8, (R12)
	ADDQ $4, R12
	ADDQ R11, CX
	DECQ AX
	JNZ  q4kz_tok

	ADDQ $144, SI
	ADDQ $292, BX
	DECQ R13
	JNZ  q4kz_sb

	MOVQ nT+56(FP), AX
	LEAQ acc-16(SP), R12
	MOVQ DI, CX

q4kz_store:
	VMOVSS (R12), X0
	VMOVSS X0, (CX)
	ADDQ $4, R12
	ADDQ R8, CX
	DECQ AX
	JNZ  q4kz_store

	ADDQ $4, DI
	DECQ R9
	JMP  q4kz_row

q4kz_done:
	VZEROUPPER
	RET

// Q4KSUB4 is Q4KSUB for 4 tokens (Q8_K rows at BX, BX+R11, BX+2*R11,
// BX+R13): sub-blocks 2k and 2k+1 of the 32 qs bytes at Q are unpacked and
// their scales (at SA, SB) broadcast once, then multiplied against each
// token's qs at offsets A and B into Y8-Y11. Same exact integer sums as
// Q4KSUB. Clobbers Y0, Y3-Y7.
#define Q4KSUB4(Q, A, B, SA, SB) \
	VMOVDQU Q, Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	Q4KMUL4(A, B, SA, SB)

// Q4KMUL4 is Q4KSUB4 after the unpacking: the values of sub-blocks 2k
// and 2k+1 in Y4 and Y5 (unsigned, <= 31), scaled and multiplied
// against the 4 tokens into Y8-Y11 (also Q5KSUB4's). Clobbers Y0,
// Y3, Y6, Y7.
#define Q4KMUL4(A, B, SA, SB) \
	VPBROADCASTW SA, Y6 \
	VPBROADCASTW SB, Y7 \
	VPMADDUBSW A(BX), Y4, Y3 \
	VPMADDWD Y6, Y3, Y3 \
	VPADDD Y3, Y8, Y8 \
	VPMADDUBSW B(BX), Y5, Y0 \
	VPMADDWD Y7, Y0, Y0 \
	VPADDD Y0, Y8, Y8 \
	VPMADDUBSW A(BX)(R11*1), Y4, Y3 \
	VPMADDWD Y6, Y3, Y3 \
	VPADDD Y3, Y9, Y9 \
	VPMADDUBSW B(BX)(R11*1), Y5, Y0 \
	VPMADDWD Y7, Y0, Y0 \
	VPADDD Y0, Y9, Y9 \
	VPMADDUBSW A(BX)(R11*2), Y4, Y3 \
	VPMADDWD Y6, Y3, Y3 \
	VPADDD Y3, Y10, Y10 \
	VPMADDUBSW B(BX)(R11*2), Y5, Y0 \
	VPMADDWD Y7, Y0, Y0 \
	VPADDD Y0, Y10, Y10 \
	VPMADDUBSW A(BX)(R13*1), Y4, Y3 \
	VPMADDWD Y6, Y3, Y3 \
	VPADDD Y3, Y11, Y11 \
	VPMADDUBSW B(BX)(R13*1), Y5, Y0 \
	VPMADDWD Y7, Y0, Y0 \
	VPADDD Y0, Y11, Y11

// Q4KFIN4 ends one super-block for one token: BSUM and DX address the
// token's Q8_K bsums and scale, Y/X its integer sums, F its float32
// accumulator; X4 holds (d, dmin) widened. Exactly rowsQ4_KAVX2's
// acc += (d*dx)*isum - (dmin*dx)*imin. Clobbers X0, X3, X5, X6.
#define Q4KFIN4(BSUM, DX, Y, X, F) \
	VPMADDWD BSUM, Y2, Y0 \
	HSUMD(Y, X, X3) \
	HSUMD(Y0, X0, X3) \
	VCVTDQ2PS X, X \
	VCVTDQ2PS X0, X0 \
	VBROADCASTSS DX, X5 \
	VMULPS X5, X4, X5 \
	VMULSS X5, X, X \
	VMOVSHDUP X5, X6 \
	VMULSS X6, X0, X0 \
	VSUBSS X0, X, X \
	VADDSS X, F, F

// func rowsQ4_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)
// rowsQ4_KAVX2 for 4 tokens at once (Q8_K rows xStride bytes apart;
// out[t*outStride + r]): each super-block's scales and nibbles are
// unpacked once per 4 tokens. Float accumulators: X12, X13, X14, X1.
TEXT ·rowsQ4_KAVX2x4(SB), NOSPLIT, $24-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ x+24(FP), DX
	MOVQ xStride+32(FP), R11
	LEAQ (R11)(R11*2), R13
	MOVQ nRows+40(FP), R8
	MOVQ R8, rc-24(SP)
	VMOVDQU nib4<>(SB), Y15

q4k4_row:
	CMPQ rc-24(SP), $0
	JEQ  q4k4_done
	VXORPS X12, X12, X12
	VXORPS X13, X13, X13
	VXORPS X14, X14, X14
	VXORPS X1, X1, X1
	MOVQ DX, BX
	MOVQ nsb+48(FP), R14

q4k4_sb:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	Q4KSCALES(AX, CX, R10, R12, R8)
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	Q4KSUB4(16(SI), 4, 36, sc-16(SP), sc-14(SP))
	Q4KSUB4(48(SI), 68, 100, sc-12(SP), sc-10(SP))
	Q4KSUB4(80(SI), 132, 164, sc-8(SP), sc-6(SP))
	Q4KSUB4(112(SI), 196, 228, sc-4(SP), sc-2(SP))
	VMOVD (SI), X4
	VCVTPH2PS X4, X4          // d, dmin
	Q4KFIN4(260(BX), (BX), Y8, X8, X12)
	Q4KFIN4(260(BX)(R11*1), (BX)(R11*1), Y9, X9, X13)
	Q4KFIN4(260(BX)(R11*2), (BX)(R11*2), Y10, X10, X14)
	Q4KFIN4(260(BX)(R13*1), (BX)(R13*1), Y11, X11, X1)
	ADDQ $144, SI
	ADDQ $292, BX
	DECQ R14
	JNZ  q4k4_sb

	VMOVSS X12, (DI)
	VMOVSS X13, (DI)(R9*1)
	VMOVSS X14, (DI)(R9*2)
	LEAQ (R9)(R9*2), R8
	VMOVSS X1, (DI)(R8*1)
	ADDQ $4, DI
	DECQ rc-24(SP)
	JMP  q4k4_row

q4k4_done:
	VZEROUPPER
	RET

// FT43 is one step of the 4-row x 3-token float tile on AVX2: 8 lanes
// (one half of the canonical 16) of rows AX, AX+R10, AX+2*R10, AX+R12 and
// tokens BX, BX+R10, BX+2*R10, loaded (and widened) by LD, into Y(3r+t)
// with one FMA each, then AX and BX advance by STEP (one 16-lane chunk).
#define FT43(LD, STEP) \
	LD (BX), Y12 \
	LD (BX)(R10*1), Y13 \
	LD (BX)(R10*2), Y14 \
	LD (AX), Y15 \
	VFMADD231PS Y15, Y12, Y0 \
	VFMADD231PS Y15, Y13, Y1 \
	VFMADD231PS Y15, Y14, Y2 \
	LD (AX)(R10*1), Y15 \
	VFMADD231PS Y15, Y12, Y3 \
	VFMADD231PS Y15, Y13, Y4 \
	VFMADD231PS Y15, Y14, Y5 \
	LD (AX)(R10*2), Y15 \
	VFMADD231PS Y15, Y12, Y6 \
	VFMADD231PS Y15, Y13, Y7 \
	VFMADD231PS Y15, Y14, Y8 \
	LD (AX)(R12*1), Y15 \
	VFMADD231PS Y15, Y12, Y9 \
	VFMADD231PS Y15, Y13, Y10 \
	VFMADD231PS Y15, Y14, Y11 \
	ADDQ $STEP, AX \
	ADDQ $STEP, BX

#define FTZERO \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7 \
	VXORPS Y8, Y8, Y8 \
	VXORPS Y9, Y9, Y9 \
	VXORPS Y10, Y10, Y10 \
	VXORPS Y11, Y11, Y11

#define FTSAVE \
	VMOVUPS Y0, (R14) \
	VMOVUPS Y1, 32(R14) \
	VMOVUPS Y2, 64(R14) \
	VMOVUPS Y3, 96(R14) \
	VMOVUPS Y4, 128(R14) \
	VMOVUPS Y5, 160(R14) \
	VMOVUPS Y6, 192(R14) \
	VMOVUPS Y7, 224(R14) \
	VMOVUPS Y8, 256(R14) \
	VMOVUPS Y9, 288(R14) \
	VMOVUPS Y10, 320(R14) \
	VMOVUPS Y11, 352(R14)

// FTFIN1 adds lanes 0-7 (saved at LO) to lanes 8-15 (Y) - the canonical
// j += j+8 - folds the rest by REDUCE8Y and stores lane 0 at OUT.
#define FTFIN1(Y, X, LO, OUT) \
	VADDPS LO, Y, Y \
	REDUCE8Y(Y, X, X12) \
	VMOVSS X, OUT

#define FTFIN \
	FTFIN1(Y0, X0, (R14), (DI)) \
	FTFIN1(Y1, X1, 32(R14), (DI)(R9*1)) \
	FTFIN1(Y2, X2, 64(R14), (DI)(R9*2)) \
	FTFIN1(Y3, X3, 96(R14), 4(DI)) \
	FTFIN1(Y4, X4, 128(R14), 4(DI)(R9*1)) \
	FTFIN1(Y5, X5, 160(R14), 4(DI)(R9*2)) \
	FTFIN1(Y6, X6, 192(R14), 8(DI)) \
	FTFIN1(Y7, X7, 224(R14), 8(DI)(R9*1)) \
	FTFIN1(Y8, X8, 256(R14), 8(DI)(R9*2)) \
	FTFIN1(Y9, X9, 288(R14), 12(DI)) \
	FTFIN1(Y10, X10, 320(R14), 12(DI)(R9*1)) \
	FTFIN1(Y11, X11, 352(R14), 12(DI)(R9*2))

// FTARGS derives the registers shared by tileF32AVX2 and tileF16AVX2
// from R10 = n; ES is the element size shift (2: float32, 1: binary16).
// (The arguments are loaded in each function: go vet checks them there.)
#define FTARGS(ES) \
	MOVQ R10, R11 \
	SHRQ $4, R11 \
	SHLQ $ES, R10 \
	LEAQ (R10)(R10*2), R12 \
	LEAQ lo-384(SP), R14

// func tileF32AVX2(out *float32, outStride int, w *float32, nGroups int, x *float32, n int)
// out[t*outStride + r] = dot(row r, token t) for 3 tokens (x, n apart) and
// 4*nGroups rows (n apart), n a multiple of 16, in the canonical F32 order:
// lanes 0-7 are accumulated over the whole row first (kept on the stack),
// then lanes 8-15, so 12 accumulators fit the 16 registers.
TEXT ·tileF32AVX2(SB), NOSPLIT, $384-48
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ nGroups+24(FP), R8
	MOVQ x+32(FP), DX
	MOVQ n+40(FP), R10
	FTARGS(2)

ft32_group:
	TESTQ R8, R8
	JZ   ft32_done
	FTZERO
	MOVQ SI, AX
	MOVQ DX, BX
	MOVQ R11, CX

ft32_lo:
	FT43(VMOVUPS, 64)
	DECQ CX
	JNZ  ft32_lo
	FTSAVE
	FTZERO
	LEAQ 32(SI), AX
	LEAQ 32(DX), BX
	MOVQ R11, CX

ft32_hi:
	FT43(VMOVUPS, 64)
	DECQ CX
	JNZ  ft32_hi
	FTFIN
	ADDQ $16, DI
	LEAQ (SI)(R10*4), SI
	DECQ R8
	JMP  ft32_group

ft32_done:
	VZEROUPPER
	RET

// func tileF16AVX2(out *float32, outStride int, w *byte, nGroups int, x *byte, n int)
// tileF32AVX2 over binary16 weights and activations, widened on load
// (their products are exact in float32, so FMA is the canonical step).
TEXT ·tileF16AVX2(SB), NOSPLIT, $384-48
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ nGroups+24(FP), R8
	MOVQ x+32(FP), DX
	MOVQ n+40(FP), R10
	FTARGS(1)

ft16_group:
	TESTQ R8, R8
	JZ   ft16_done
	FTZERO
	MOVQ SI, AX
	MOVQ DX, BX
	MOVQ R11, CX

ft16_lo:
	FT43(VCVTPH2PS, 32)
	DECQ CX
	JNZ  ft16_lo
	FTSAVE
	FTZERO
	LEAQ 16(SI), AX
	LEAQ 16(DX), BX
	MOVQ R11, CX

ft16_hi:
	FT43(VCVTPH2PS, 32)
	DECQ CX
	JNZ  ft16_hi
	FTFIN
	ADDQ $16, DI
	LEAQ (SI)(R10*4), SI
	DECQ R8
	JMP  ft16_group

ft16_done:
	VZEROUPPER
	RET

// Q4K8G adds one 4-element group of a sub-block pair for 8 rows and 2
// tokens: the rows' 4 packed bytes at W(SI) (low nibbles: sub-block 2k,
// high: 2k+1) times the tokens' 4 q8 at XL and XH broadcast to every row,
// pairs summed by VPMADDUBSW into the int16 sums Y8, Y9 (token 0) and Y10,
// Y11 (token 1). Clobbers Y0-Y5.
#define Q4K8G(W, XL, XH) \
	VMOVDQU W(SI), Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y7, Y0, Y0 \
	VPAND Y7, Y1, Y1 \
	VPBROADCASTD XL(BX), Y2 \
	VPMADDUBSW Y2, Y0, Y3 \
	VPADDW Y3, Y8, Y8 \
	VPBROADCASTD XH(BX), Y2 \
	VPMADDUBSW Y2, Y1, Y3 \
	VPADDW Y3, Y9, Y9 \
	VPBROADCASTD XL(BX)(DX*1), Y4 \
	VPMADDUBSW Y4, Y0, Y5 \
	VPADDW Y5, Y10, Y10 \
	VPBROADCASTD XH(BX)(DX*1), Y4 \
	VPMADDUBSW Y4, Y1, Y5 \
	VPADDW Y5, Y11, Y11

// Q4K8SC scales the int16 sums of sub-blocks 2k and 2k+1 by the rows'
// (sc, sc) pairs at S0(SI), S1(SI) into the isums Y12 (token 0), Y13.
#define Q4K8SC(S0, S1) \
	VPMADDWD S0(SI), Y8, Y8 \
	VPADDD Y8, Y12, Y12 \
	VPMADDWD S1(SI), Y9, Y9 \
	VPADDD Y9, Y12, Y12 \
	VPMADDWD S0(SI), Y10, Y10 \
	VPADDD Y10, Y13, Y13 \
	VPMADDWD S1(SI), Y11, Y11 \
	VPADDD Y11, Y13, Y13 \
	VPXOR Y8, Y8, Y8 \
	VPXOR Y9, Y9, Y9 \
	VPXOR Y10, Y10, Y10 \
	VPXOR Y11, Y11, Y11

// Q4K8SUB is sub-block pair k: 8 groups then the scales. K64 = 64k,
// W0 = 256k (packed bytes), S0 = 1024+64k.
#define Q4K8SUB(W0, K64, S0) \
	Q4K8G(W0, 4+K64, 36+K64) \
	Q4K8G(W0+32, 8+K64, 40+K64) \
	Q4K8G(W0+64, 12+K64, 44+K64) \
	Q4K8G(W0+96, 16+K64, 48+K64) \
	Q4K8G(W0+128, 20+K64, 52+K64) \
	Q4K8G(W0+160, 24+K64, 56+K64) \
	Q4K8G(W0+192, 28+K64, 60+K64) \
	Q4K8G(W0+224, 32+K64, 64+K64) \
	Q4K8SC(S0, S0+32)

// Q4K8MIN adds m_j * (bsum 2j + bsum 2j+1) (the pair at B of each token)
// for the rows' (m_j, m_j) pairs at M(SI) into the imins Y8, Y9.
#define Q4K8MIN(B, M) \
	VPBROADCASTD B(BX), Y2 \
	VPMADDWD M(SI), Y2, Y2 \
	VPADDD Y2, Y8, Y8 \
	VPBROADCASTD B(BX)(DX*1), Y4 \
	VPMADDWD M(SI), Y4, Y4 \
	VPADDD Y4, Y9, Y9

// Q4K8FIN is the canonical float step for one token, lane-wise: ISUM and
// IMIN (int32) to float32, acc F += (d*dx)*isum - (dmin*dx)*imin with dx
// at DXM. Clobbers Y2-Y4.
#define Q4K8FIN(DXM, ISUM, IMIN, F) \
	VCVTDQ2PS ISUM, ISUM \
	VCVTDQ2PS IMIN, IMIN \
	VBROADCASTSS DXM, Y2 \
	VMULPS 1536(SI), Y2, Y3 \
	VMULPS 1568(SI), Y2, Y4 \
	VMULPS Y3, ISUM, ISUM \
	VMULPS Y4, IMIN, IMIN \
	VSUBPS IMIN, ISUM, ISUM \
	VADDPS ISUM, F, F

// func q4KTile8x2AVX2(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)
// Canonical Q4_K order (dotQ4_KGeneric) with 8 rows in the 8 lanes, for 2
// tokens (Q8_K rows at x and x+xStride) and nGroups groups of 8 rows
// packed by q4KPackRows (q4k8_amd64.go). Per super-block: exact int16 sums over
// each 32-element sub-block (|sum| <= 16*15*128), exact isum and imin in
// int32, then the scalar float steps of the canonical order, lane-wise.
// One store per token and group: out[t*outStride + 8g + r].
TEXT ·q4KTile8x2AVX2(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ wp+16(FP), SI
	MOVQ nGroups+24(FP), R8
	MOVQ x+32(FP), AX
	MOVQ xStride+40(FP), DX
	MOVQ nsb+48(FP), R10
	VMOVDQU nib4<>(SB), Y7

q4k8_group:
	TESTQ R8, R8
	JZ   q4k8_done
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	MOVQ AX, BX
	MOVQ R10, CX

q4k8_sb:
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
	Q4K8SUB(0, 0, 1024)
	Q4K8SUB(256, 64, 1088)
	Q4K8SUB(512, 128, 1152)
	Q4K8SUB(768, 192, 1216)
	Q4K8MIN(260, 1280)
	Q4K8MIN(264, 1312)
	Q4K8MIN(268, 1344)
	Q4K8MIN(272, 1376)
	Q4K8MIN(276, 1408)
	Q4K8MIN(280, 1440)
	Q4K8MIN(284, 1472)
	Q4K8MIN(288, 1504)
	Q4K8FIN((BX), Y12, Y8, Y14)
	Q4K8FIN((BX)(DX*1), Y13, Y9, Y15)
	ADDQ $1600, SI
	ADDQ $292, BX
	DECQ CX
	JNZ  q4k8_sb

	VMOVUPS Y14, (DI)
	VMOVUPS Y15, (DI)(R9*1)
	ADDQ $32, DI
	DECQ R8
	JMP  q4k8_group

q4k8_done:
	VZEROUPPER
	RET

// Q6KCH4 is Q6KCH for 4 tokens (Q8_K rows at BX, BX+R11, BX+2*R11,
// BX+R13; qs of this chunk at offset X): the chunk's unsigned 6-bit values
// U and its two scales (SA, SB) are shared, the exact int32 sums go to
// Y8-Y11. Clobbers Y5-Y7.
#define Q6KCH4(U, X, SA, SB) \
	VPBROADCASTW SA, X7 \
	VPBROADCASTW SB, X6 \
	VINSERTI128 $1, X6, Y7, Y7 \
	VPMADDUBSW X(BX), U, Y6 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y8, Y8 \
	VPMADDUBSW X(BX)(R11*1), U, Y5 \
	VPMADDWD Y7, Y5, Y5 \
	VPADDD Y5, Y9, Y9 \
	VPMADDUBSW X(BX)(R11*2), U, Y6 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y10, Y10 \
	VPMADDUBSW X(BX)(R13*1), U, Y5 \
	VPMADDWD Y7, Y5, Y5 \
	VPADDD Y5, Y11, Y11

// Q6KHALF4 is Q6KHALF for 4 tokens (XA-XD: offsets of the four 32-byte
// chunks of Q8_K qs). Clobbers Y0-Y7.
#define Q6KHALF4(QL, QL32, QH, XA, XB, XC, XD, S0, S1, S2, S3, S4, S5, S6, S7) \
	VMOVDQU QL, Y0 \
	VMOVDQU QL32, Y1 \
	VMOVDQU QH, Y2 \
	VPAND Y15, Y0, Y3 \
	VPSLLW $4, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH4(Y3, XA, S0, S1) \
	VPAND Y15, Y1, Y3 \
	VPSLLW $2, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH4(Y3, XB, S2, S3) \
	VPSRLW $4, Y0, Y3 \
	VPAND Y15, Y3, Y3 \
	VPAND Y14, Y2, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH4(Y3, XC, S4, S5) \
	VPSRLW $4, Y1, Y3 \
	VPAND Y15, Y3, Y3 \
	VPSRLW $2, Y2, Y4 \
	VPAND Y14, Y4, Y4 \
	VPOR Y4, Y3, Y3 \
	Q6KCH4(Y3, XD, S6, S7)

// Q6KFIN4 ends a super-block for one token (Q8_K row at XR): the -32
// offset through the bsums, the horizontal sum of Y (X its low half),
// then F += (d*dx)*isum with d widened in X12 and F the token's float32
// accumulator on the stack: rowsQ6_KAVX2's steps. XB addresses the row's
// bsums (XR+260). Clobbers X4-X6.
#define Q6KFIN4(XR, XB, Y, X, F) \
	VMOVDQU XB, Y4 \
	VPMADDWD sc-32(SP), Y4, Y4 \
	VPSLLD $5, Y4, Y4 \
	VPSUBD Y4, Y, Y \
	HSUMD(Y, X, X6) \
	VCVTDQ2PS X, X \
	VMULSS XR, X12, X5 \
	VMULSS X5, X, X \
	VADDSS F, X, X \
	VMOVSS X, F

// func rowsQ6_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)
// rowsQ6_KAVX2 for 4 tokens at once (Q8_K rows xStride bytes apart;
// out[t*outStride + r]): each super-block's 6-bit values and scales are
// unpacked once per 4 tokens.
TEXT ·rowsQ6_KAVX2x4(SB), NOSPLIT, $48-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ x+24(FP), DX
	MOVQ xStride+32(FP), R11
	LEAQ (R11)(R11*2), R13
	MOVQ nRows+40(FP), R8
	VMOVDQU nib4<>(SB), Y15
	VMOVDQU c30<>(SB), Y14

q6k4_row:
	TESTQ R8, R8
	JZ   q6k4_done
	VXORPS X4, X4, X4
	VMOVSS X4, f0-48(SP)
	VMOVSS X4, f1-44(SP)
	VMOVSS X4, f2-40(SP)
	VMOVSS X4, f3-36(SP)
	MOVQ DX, BX
	MOVQ nsb+48(FP), R14

q6k4_sb:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	PREFETCHT0 1216(SI)
	VPMOVSXBW 192(SI), Y4
	VMOVDQU Y4, sc-32(SP)
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	Q6KHALF4((SI), 32(SI), 128(SI), 4, 36, 68, 100, sc-32(SP), sc-30(SP), sc-28(SP), sc-26(SP), sc-24(SP), sc-22(SP), sc-20(SP), sc-18(SP))
	Q6KHALF4(64(SI), 96(SI), 160(SI), 132, 164, 196, 228, sc-16(SP), sc-14(SP), sc-12(SP), sc-10(SP), sc-8(SP), sc-6(SP), sc-4(SP), sc-2(SP))
	MOVWLZX 208(SI), AX
	VMOVD AX, X12
	VCVTPH2PS X12, X12
	Q6KFIN4((BX), 260(BX), Y8, X8, f0-48(SP))
	Q6KFIN4((BX)(R11*1), 260(BX)(R11*1), Y9, X9, f1-44(SP))
	Q6KFIN4((BX)(R11*2), 260(BX)(R11*2), Y10, X10, f2-40(SP))
	Q6KFIN4((BX)(R13*1), 260(BX)(R13*1), Y11, X11, f3-36(SP))
	ADDQ $210, SI
	ADDQ $292, BX
	DECQ R14
	JNZ  q6k4_sb

	VMOVSS f0-48(SP), X4
	VMOVSS X4, (DI)
	VMOVSS f1-44(SP), X4
	VMOVSS X4, (DI)(R9*1)
	VMOVSS f2-40(SP), X4
	VMOVSS X4, (DI)(R9*2)
	LEAQ (R9)(R9*2), AX
	VMOVSS f3-36(SP), X4
	VMOVSS X4, (DI)(AX*1)
	ADDQ $4, DI
	DECQ R8
	JMP  q6k4_row

q6k4_done:
	VZEROUPPER
	RET

// Legacy types on AVX2 (Q4_0, Q5_0 against Q8_0; Q4_1, Q5_1 against Q8_1):
// the canonical order of legacy.go (Q8_0's even/odd 16 lanes, one FMA per
// 4-element sum, then for Q4_1/Q5_1 float32(m*s) added to lane 0 of the
// block's half). Weights are decoded to one byte per element in element
// order in Y2, then multiplied as Q8Y2 does. Constants: Y15 ones16, Y14
// nibble mask, Y13 8s, Y12 qh byte index, Y11 bit masks, Y10 0x10s, Y9 16s.
DATA legIdx<>+0(SB)/8, $0x0000000000000000
DATA legIdx<>+8(SB)/8, $0x0101010101010101
DATA legIdx<>+16(SB)/8, $0x0202020202020202
DATA legIdx<>+24(SB)/8, $0x0303030303030303
GLOBL legIdx<>(SB), RODATA|NOPTR, $32
DATA legBits<>+0(SB)/8, $0x8040201008040201
DATA legBits<>+8(SB)/8, $0x8040201008040201
DATA legBits<>+16(SB)/8, $0x8040201008040201
DATA legBits<>+24(SB)/8, $0x8040201008040201
GLOBL legBits<>(SB), RODATA|NOPTR, $32
DATA legC<>+0(SB)/8, $0x0808080808080808
DATA legC<>+8(SB)/8, $0x0808080808080808
DATA legC<>+16(SB)/8, $0x0808080808080808
DATA legC<>+24(SB)/8, $0x0808080808080808
DATA legC<>+32(SB)/8, $0x1010101010101010
DATA legC<>+40(SB)/8, $0x1010101010101010
DATA legC<>+48(SB)/8, $0x1010101010101010
DATA legC<>+56(SB)/8, $0x1010101010101010
GLOBL legC<>(SB), RODATA|NOPTR, $64

#define LEGINIT \
	VMOVDQU ones16<>(SB), Y15 \
	VMOVDQU nib4<>(SB), Y14 \
	VMOVDQU legC<>(SB), Y13 \
	VMOVDQU legIdx<>(SB), Y12 \
	VMOVDQU legBits<>(SB), Y11 \
	VMOVDQU legC<>+32(SB), Y10 \
	VMOVDQU legC<>+32(SB), Y9

// LEGNIB puts the 32 nibbles of the 16 qs bytes at QS in Y2, element
// order (low nibbles are elements 0-15, high 16-31). Clobbers X3.
#define LEGNIB(QS) \
	VMOVDQU QS, X2 \
	VPSRLW $4, X2, X3 \
	VINSERTI128 $1, X3, Y2, Y2 \
	VPAND Y14, Y2, Y2

// LEGQH ORs bit 4 of each element from the 32-bit qh at QH into Y2.
// Clobbers Y3.
#define LEGQH(QH) \
	VPBROADCASTD QH, Y3 \
	VPSHUFB Y12, Y3, Y3 \
	VPAND Y11, Y3, Y3 \
	VPCMPEQB Y11, Y3, Y3 \
	VPAND Y10, Y3, Y3 \
	VPOR Y3, Y2, Y2

// LEGSIGNED adds signed weights Y2 times the Q8_0 qs at XQ, scaled by
// d = dw (f16 at WD) * dx (float32 at DXM), to ACC. Clobbers Y2-Y5.
#define LEGSIGNED(XQ, WD, DXM, ACC) \
	VMOVDQU XQ, Y3 \
	VPSIGNB Y2, Y3, Y3 \
	VPABSB Y2, Y2 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPMADDWD Y15, Y3, Y3 \
	VCVTDQ2PS Y3, Y3 \
	VPBROADCASTW WD, X4 \
	VCVTPH2PS X4, Y4 \
	VBROADCASTSS DXM, Y5 \
	VMULPS Y5, Y4, Y4 \
	VFMADD231PS Y4, Y3, ACC

// LEGUNSIGNED adds unsigned weights Y2 (offset m at W+2) times the Q8_1
// block at X (d, s, qs) to ACC: the 8 fused steps with d = dw*dx, then
// float32(m*s) into lane 0. Clobbers Y2-Y7, AX.
#define LEGUNSIGNED(W, X, ACC) \
	VPMADDUBSW 4(X), Y2, Y3 \
	VPMADDWD Y15, Y3, Y3 \
	VCVTDQ2PS Y3, Y3 \
	VPBROADCASTW (W), X4 \
	VCVTPH2PS X4, Y4 \
	VPBROADCASTW (X), X5 \
	VCVTPH2PS X5, Y5 \
	VMULPS Y5, Y4, Y4 \
	VFMADD231PS Y4, Y3, ACC \
	MOVWLZX 2(W), AX \
	VMOVD AX, X6 \
	VCVTPH2PS X6, X6 \
	MOVWLZX 2(X), AX \
	VMOVD AX, X7 \
	VCVTPH2PS X7, X7 \
	VMULSS X7, X6, X6 \
	VADDPS Y6, ACC, ACC

// Q40BLK adds one Q4_0 block (at W) against the activation block at X.
#define Q40BLK(W, X, DXM, ACC) \
	LEGNIB(2(W)) \
	VPSUBB Y13, Y2, Y2 \
	LEGSIGNED(2(X), (W), DXM, ACC)

// func rowsQ4_0AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)
// dx: the Q8_0 activations' widened scales (unused for Q8_1 types).
TEXT ·rowsQ4_0AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nRows+32(FP), R8
	MOVQ nb+40(FP), R9
	LEGINIT

q40_row:
	TESTQ R8, R8
	JZ   q40_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R11, R12
	MOVQ R9, R10

q40_pair:
	CMPQ R10, $2
	JLT  q40_single
	Q40BLK(SI, BX, (R12), Y0)
	LEAQ 18(SI), R13
	LEAQ 34(BX), R14
	Q40BLK(R13, R14, 4(R12), Y1)
	ADDQ $36, SI
	ADDQ $68, BX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q40_pair

q40_single:
	TESTQ R10, R10
	JZ   q40_red
	Q40BLK(SI, BX, (R12), Y0)
	ADDQ $18, SI

q40_red:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q40_row

q40_done:
	VZEROUPPER
	RET

// Q50BLK adds one Q5_0 block (at W) against the activation block at X.
#define Q50BLK(W, X, DXM, ACC) \
	LEGNIB(6(W)) \
	LEGQH(2(W)) \
	VPSUBB Y9, Y2, Y2 \
	LEGSIGNED(2(X), (W), DXM, ACC)

// func rowsQ5_0AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)
// dx: the Q8_0 activations' widened scales (unused for Q8_1 types).
TEXT ·rowsQ5_0AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nRows+32(FP), R8
	MOVQ nb+40(FP), R9
	LEGINIT

q50_row:
	TESTQ R8, R8
	JZ   q50_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R11, R12
	MOVQ R9, R10

q50_pair:
	CMPQ R10, $2
	JLT  q50_single
	Q50BLK(SI, BX, (R12), Y0)
	LEAQ 22(SI), R13
	LEAQ 34(BX), R14
	Q50BLK(R13, R14, 4(R12), Y1)
	ADDQ $44, SI
	ADDQ $68, BX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q50_pair

q50_single:
	TESTQ R10, R10
	JZ   q50_red
	Q50BLK(SI, BX, (R12), Y0)
	ADDQ $22, SI

q50_red:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q50_row

q50_done:
	VZEROUPPER
	RET

// Q41BLK adds one Q4_1 block (at W) against the activation block at X.
#define Q41BLK(W, X, DXM, ACC) \
	LEGNIB(4(W)) \
	LEGUNSIGNED(W, X, ACC)

// func rowsQ4_1AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)
// dx: the Q8_0 activations' widened scales (unused for Q8_1 types).
TEXT ·rowsQ4_1AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nRows+32(FP), R8
	MOVQ nb+40(FP), R9
	LEGINIT

q41_row:
	TESTQ R8, R8
	JZ   q41_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R11, R12
	MOVQ R9, R10

q41_pair:
	CMPQ R10, $2
	JLT  q41_single
	Q41BLK(SI, BX, (R12), Y0)
	LEAQ 20(SI), R13
	LEAQ 36(BX), R14
	Q41BLK(R13, R14, 4(R12), Y1)
	ADDQ $40, SI
	ADDQ $72, BX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q41_pair

q41_single:
	TESTQ R10, R10
	JZ   q41_red
	Q41BLK(SI, BX, (R12), Y0)
	ADDQ $20, SI

q41_red:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q41_row

q41_done:
	VZEROUPPER
	RET

// Q51BLK adds one Q5_1 block (at W) against the activation block at X.
#define Q51BLK(W, X, DXM, ACC) \
	LEGNIB(8(W)) \
	LEGQH(4(W)) \
	LEGUNSIGNED(W, X, ACC)

// func rowsQ5_1AVX2(out *float32, w, x *byte, dx *float32, nRows, nb int)
// dx: the Q8_0 activations' widened scales (unused for Q8_1 types).
TEXT ·rowsQ5_1AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nRows+32(FP), R8
	MOVQ nb+40(FP), R9
	LEGINIT

q51_row:
	TESTQ R8, R8
	JZ   q51_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R11, R12
	MOVQ R9, R10

q51_pair:
	CMPQ R10, $2
	JLT  q51_single
	Q51BLK(SI, BX, (R12), Y0)
	LEAQ 24(SI), R13
	LEAQ 36(BX), R14
	Q51BLK(R13, R14, 4(R12), Y1)
	ADDQ $48, SI
	ADDQ $72, BX
	ADDQ $8, R12
	SUBQ $2, R10
	JMP  q51_pair

q51_single:
	TESTQ R10, R10
	JZ   q51_red
	Q51BLK(SI, BX, (R12), Y0)
	ADDQ $24, SI

q51_red:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q51_row

q51_done:
	VZEROUPPER
	RET

// LEG4INIT loads the constants of the 4-token legacy kernels (LEGNIB's
// and LEGQH's, as LEGINIT).
#define LEG4INIT \
	VMOVDQU ones16<>(SB), Y15 \
	VMOVDQU nib4<>(SB), Y14 \
	VMOVDQU legIdx<>(SB), Y12 \
	VMOVDQU legBits<>(SB), Y11 \
	VMOVDQU legC<>+32(SB), Y10

// LEG4TOK is LEGUNSIGNED for one token with its scales pre-widened:
// unsigned weights Y2, dw in Y4, mw in X7; the token's Q8_1 qs at Q, its
// d and s (float32) at DXM and SXM. Clobbers Y3, Y5, X6.
#define LEG4TOK(Q, DXM, SXM, ACC) \
	VPMADDUBSW Q, Y2, Y3 \
	VPMADDWD Y15, Y3, Y3 \
	VCVTDQ2PS Y3, Y3 \
	VBROADCASTSS DXM, Y5 \
	VMULPS Y5, Y4, Y5 \
	VFMADD231PS Y5, Y3, ACC \
	VMULSS SXM, X7, X6 \
	VADDPS Y6, ACC, ACC

// LEG4RED: lanes 0-7 (even blocks, saved at E) + lanes 8-15 (Y), then
// REDUCE8Y, lane 0 to OUT.
#define LEG4RED(Y, X, E, OUT) \
	VADDPS E, Y, Y \
	REDUCE8Y(Y, X, X6) \
	VMOVSS X, OUT

// func rowsQ4_1AVX2x4(out *float32, outStride int, w, x *byte, dx *float32, xStride, nRows, nb int)
// Q4_1 against 4 tokens' Q8_1 rows (xStride bytes apart; widened
// (d, s) per block in dx, 8*nb bytes per token): each weight block is
// unpacked, and its scale and offset widened, once for 4 tokens. The
// even blocks are summed first (lanes 0-7 of the canonical 16), then the
// odd ones (lanes 8-15): per lane the same steps in the same order as
// the one-token kernel. out[t*outStride + r].
TEXT ·rowsQ4_1AVX2x4(SB), NOSPLIT, $128-64
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ xStride+40(FP), R11
	LEAQ (R11)(R11*2), R13
	MOVQ nb+56(FP), R14
	SHLQ $3, R14              // dx stride
	LEAQ (R14)(R14*2), R15
	MOVQ nRows+48(FP), R8
	LEG4INIT

q414_row:
	TESTQ R8, R8
	JZ   q414_done
	MOVQ $0, R10              // parity

q414_par:
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y13, Y13, Y13
	VXORPS Y1, Y1, Y1
	MOVQ R10, AX
	IMULQ $36, AX
	MOVQ x+24(FP), BX
	ADDQ AX, BX
	MOVQ R10, AX
	SHLQ $3, AX
	MOVQ dx+32(FP), R12
	ADDQ AX, R12
	MOVQ R10, AX
	IMULQ $20, AX
	LEAQ (SI)(AX*1), DX
	MOVQ nb+56(FP), CX
	SUBQ R10, CX
	INCQ CX
	SHRQ $1, CX               // blocks of this parity
	TESTQ CX, CX
	JZ   q414_pend

q414_blk:
	LEGNIB(4(DX))
	VPBROADCASTW (DX), X4
	VCVTPH2PS X4, Y4          // dw
	MOVWLZX 2(DX), AX
	VMOVD AX, X7
	VCVTPH2PS X7, X7          // mw
	LEG4TOK(4(BX), (R12), 4(R12), Y8)
	LEG4TOK(4(BX)(R11*1), (R12)(R14*1), 4(R12)(R14*1), Y9)
	LEG4TOK(4(BX)(R11*2), (R12)(R14*2), 4(R12)(R14*2), Y13)
	LEG4TOK(4(BX)(R13*1), (R12)(R15*1), 4(R12)(R15*1), Y1)
	ADDQ $40, DX
	ADDQ $72, BX
	ADDQ $16, R12
	DECQ CX
	JNZ  q414_blk

q414_pend:
	TESTQ R10, R10
	JNZ  q414_red
	VMOVUPS Y8, e0-128(SP)
	VMOVUPS Y9, e1-96(SP)
	VMOVUPS Y13, e2-64(SP)
	VMOVUPS Y1, e3-32(SP)
	MOVQ $1, R10
	JMP  q414_par

q414_red:
	LEG4RED(Y8, X8, e0-128(SP), (DI))
	LEG4RED(Y9, X9, e1-96(SP), (DI)(R9*1))
	LEG4RED(Y13, X13, e2-64(SP), (DI)(R9*2))
	LEAQ (R9)(R9*2), AX
	LEG4RED(Y1, X1, e3-32(SP), (DI)(AX*1))
	ADDQ $4, DI
	MOVQ nb+56(FP), AX
	IMULQ $20, AX
	ADDQ AX, SI
	DECQ R8
	JMP  q414_row

q414_done:
	VZEROUPPER
	RET

// func rowsQ5_1AVX2x4(out *float32, outStride int, w, x *byte, dx *float32, xStride, nRows, nb int)
// Q5_1 against 4 tokens' Q8_1 rows (xStride bytes apart; widened
// (d, s) per block in dx, 8*nb bytes per token): each weight block is
// unpacked, and its scale and offset widened, once for 4 tokens. The
// even blocks are summed first (lanes 0-7 of the canonical 16), then the
// odd ones (lanes 8-15): per lane the same steps in the same order as
// the one-token kernel. out[t*outStride + r].
TEXT ·rowsQ5_1AVX2x4(SB), NOSPLIT, $128-64
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ xStride+40(FP), R11
	LEAQ (R11)(R11*2), R13
	MOVQ nb+56(FP), R14
	SHLQ $3, R14              // dx stride
	LEAQ (R14)(R14*2), R15
	MOVQ nRows+48(FP), R8
	LEG4INIT

q514_row:
	TESTQ R8, R8
	JZ   q514_done
	MOVQ $0, R10              // parity

q514_par:
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y13, Y13, Y13
	VXORPS Y1, Y1, Y1
	MOVQ R10, AX
	IMULQ $36, AX
	MOVQ x+24(FP), BX
	ADDQ AX, BX
	MOVQ R10, AX
	SHLQ $3, AX
	MOVQ dx+32(FP), R12
	ADDQ AX, R12
	MOVQ R10, AX
	IMULQ $24, AX
	LEAQ (SI)(AX*1), DX
	MOVQ nb+56(FP), CX
	SUBQ R10, CX
	INCQ CX
	SHRQ $1, CX               // blocks of this parity
	TESTQ CX, CX
	JZ   q514_pend

q514_blk:
	LEGNIB(8(DX))
	LEGQH(4(DX))
	VPBROADCASTW (DX), X4
	VCVTPH2PS X4, Y4          // dw
	MOVWLZX 2(DX), AX
	VMOVD AX, X7
	VCVTPH2PS X7, X7          // mw
	LEG4TOK(4(BX), (R12), 4(R12), Y8)
	LEG4TOK(4(BX)(R11*1), (R12)(R14*1), 4(R12)(R14*1), Y9)
	LEG4TOK(4(BX)(R11*2), (R12)(R14*2), 4(R12)(R14*2), Y13)
	LEG4TOK(4(BX)(R13*1), (R12)(R15*1), 4(R12)(R15*1), Y1)
	ADDQ $48, DX
	ADDQ $72, BX
	ADDQ $16, R12
	DECQ CX
	JNZ  q514_blk

q514_pend:
	TESTQ R10, R10
	JNZ  q514_red
	VMOVUPS Y8, e0-128(SP)
	VMOVUPS Y9, e1-96(SP)
	VMOVUPS Y13, e2-64(SP)
	VMOVUPS Y1, e3-32(SP)
	MOVQ $1, R10
	JMP  q514_par

q514_red:
	LEG4RED(Y8, X8, e0-128(SP), (DI))
	LEG4RED(Y9, X9, e1-96(SP), (DI)(R9*1))
	LEG4RED(Y13, X13, e2-64(SP), (DI)(R9*2))
	LEAQ (R9)(R9*2), AX
	LEG4RED(Y1, X1, e3-32(SP), (DI)(AX*1))
	ADDQ $4, DI
	MOVQ nb+56(FP), AX
	IMULQ $24, AX
	ADDQ AX, SI
	DECQ R8
	JMP  q514_row

q514_done:
	VZEROUPPER
	RET

// LEG4X4RED reduces the four rows' even (Y8-Y11) and odd (Y12-Y15)
// lanes by the canonical tree (j += j+8, then REDUCE8Y) and stores the
// four results at DI, advancing it.
#define LEG4X4RED \
	VADDPS Y12, Y8, Y0 \
	VADDPS Y13, Y9, Y1 \
	VADDPS Y14, Y10, Y2 \
	VADDPS Y15, Y11, Y3 \
	REDUCE8Y(Y0, X0, X4) \
	REDUCE8Y(Y1, X1, X4) \
	REDUCE8Y(Y2, X2, X4) \
	REDUCE8Y(Y3, X3, X4) \
	VMOVSS X0, (DI) \
	VMOVSS X1, 4(DI) \
	VMOVSS X2, 8(DI) \
	VMOVSS X3, 12(DI) \
	ADDQ $16, DI

// func rowsQ4_1AVX2x4r(out *float32, w, x *byte, dx *float32, nGroups, nb int)
// rowsQ4_1AVX2 four rows at a time, as rowsQ8_0AVX2x4: each activation
// block, its widened scale and s are loaded once for the four rows, and
// the rows two groups ahead are prefetched. Even blocks go to Y8-Y11, odd
// ones to Y12-Y15 (the canonical lanes 0-7 and 8-15). dx holds every
// block's (d, s) widened (prepareQ8_1).
// The prefetches (here and in the Q5_1 kernels below) are PREFETCHT1, as
// in q50_amd64.s (why there): cold weights, 1 thread pinned, Zen 4,
// interleaved x2, CPU-time GFLOP/s at 3456x1152 / 32000x1152 / 2048x2048:
// Q4_1 27-32 -> 34-38 on both paths, Q5_1 AVX-512 23-29 -> 29-33, Q5_1
// AVX2 unchanged (25-28, bound by its operations).
TEXT ·rowsQ4_1AVX2x4r(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nGroups+32(FP), R8
	MOVQ nb+40(FP), R9
	MOVQ R9, R13
	IMULQ $20, R13      // row bytes
	VMOVDQU ones8<>(SB), Y6

l4q41_group:
	TESTQ R8, R8
	JZ   l4q41_done
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

l4q41_pair:
	CMPQ R10, $2
	JLT  l4q41_single
	LEAQ (SI)(R13*8), AX
	PREFETCHT1 (AX)
	PREFETCHT1 (AX)(R13*1)
	PREFETCHT1 (AX)(R13*2)
	PREFETCHT1 (BX)(R13*8)
	VMOVDQU 4(CX), Y0
	VBROADCASTSS 0(R12), Y1
	VMOVDQU 4(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y8
	MOVWLZX 2(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y8, Y8
	VMOVDQU 4(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y9
	MOVWLZX 2(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y9, Y9
	VMOVDQU 4(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y10
	MOVWLZX 2(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y10, Y10
	VMOVDQU 4(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y11
	MOVWLZX 2(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y11, Y11
	VMOVDQU 40(CX), Y0
	VBROADCASTSS 8(R12), Y1
	VMOVDQU 24(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 20(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y12
	MOVWLZX 22(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y12, Y12
	VMOVDQU 24(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 20(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y13
	MOVWLZX 22(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y13, Y13
	VMOVDQU 24(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 20(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y14
	MOVWLZX 22(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y14, Y14
	VMOVDQU 24(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 20(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y15
	MOVWLZX 22(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y15, Y15
	ADDQ $40, SI
	ADDQ $40, BX
	ADDQ $72, CX
	ADDQ $16, R12
	SUBQ $2, R10
	JMP  l4q41_pair

l4q41_single:
	TESTQ R10, R10
	JZ   l4q41_red
	VMOVDQU 4(CX), Y0
	VBROADCASTSS 0(R12), Y1
	VMOVDQU 4(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y8
	MOVWLZX 2(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y8, Y8
	VMOVDQU 4(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y9
	MOVWLZX 2(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y9, Y9
	VMOVDQU 4(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y10
	MOVWLZX 2(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y10, Y10
	VMOVDQU 4(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y11
	MOVWLZX 2(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y11, Y11
	ADDQ $20, BX

l4q41_red:
	LEG4X4RED
	MOVQ BX, SI           // BX ended at row 3's end: the next group
	DECQ R8
	JMP  l4q41_group

l4q41_done:
	VZEROUPPER
	RET

// func rowsQ5_1AVX2x4r(out *float32, w, x *byte, dx *float32, nGroups, nb int)
// rowsQ5_1AVX2 four rows at a time, as rowsQ8_0AVX2x4: each activation
// block, its widened scale and s are loaded once for the four rows, and
// the rows two groups ahead are prefetched. Even blocks go to Y8-Y11, odd
// ones to Y12-Y15 (the canonical lanes 0-7 and 8-15). dx holds every
// block's (d, s) widened (prepareQ8_1).
TEXT ·rowsQ5_1AVX2x4r(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nGroups+32(FP), R8
	MOVQ nb+40(FP), R9
	MOVQ R9, R13
	IMULQ $24, R13      // row bytes
	VMOVDQU ones8<>(SB), Y6

l4q51_group:
	TESTQ R8, R8
	JZ   l4q51_done
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

l4q51_pair:
	CMPQ R10, $2
	JLT  l4q51_single
	LEAQ (SI)(R13*8), AX
	PREFETCHT1 (AX)
	PREFETCHT1 (AX)(R13*1)
	PREFETCHT1 (AX)(R13*2)
	PREFETCHT1 (BX)(R13*8)
	VMOVDQU 4(CX), Y0
	VBROADCASTSS 0(R12), Y1
	VMOVDQU 8(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(SI), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y8
	MOVWLZX 2(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y8, Y8
	VMOVDQU 8(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(SI)(R13*1), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y9
	MOVWLZX 2(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y9, Y9
	VMOVDQU 8(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(SI)(R13*2), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y10
	MOVWLZX 2(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y10, Y10
	VMOVDQU 8(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(BX), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y11
	MOVWLZX 2(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y11, Y11
	VMOVDQU 40(CX), Y0
	VBROADCASTSS 8(R12), Y1
	VMOVDQU 32(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 28(SI), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y12
	MOVWLZX 26(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y12, Y12
	VMOVDQU 32(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 28(SI)(R13*1), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y13
	MOVWLZX 26(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y13, Y13
	VMOVDQU 32(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 28(SI)(R13*2), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y14
	MOVWLZX 26(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y14, Y14
	VMOVDQU 32(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 28(BX), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y15
	MOVWLZX 26(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y15, Y15
	ADDQ $48, SI
	ADDQ $48, BX
	ADDQ $72, CX
	ADDQ $16, R12
	SUBQ $2, R10
	JMP  l4q51_pair

l4q51_single:
	TESTQ R10, R10
	JZ   l4q51_red
	VMOVDQU 4(CX), Y0
	VBROADCASTSS 0(R12), Y1
	VMOVDQU 8(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(SI), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y8
	MOVWLZX 2(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y8, Y8
	VMOVDQU 8(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(SI)(R13*1), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y9
	MOVWLZX 2(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y9, Y9
	VMOVDQU 8(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(SI)(R13*2), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y10
	MOVWLZX 2(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y10, Y10
	VMOVDQU 8(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	VPBROADCASTD 4(BX), Y4
	VPSHUFB legIdx<>(SB), Y4, Y4
	VPAND legBits<>(SB), Y4, Y4
	VPCMPEQB legBits<>(SB), Y4, Y4
	VPAND legC<>+32(SB), Y4, Y4
	VPOR Y4, Y3, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y11
	MOVWLZX 2(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y11, Y11
	ADDQ $24, BX

l4q51_red:
	LEG4X4RED
	MOVQ BX, SI           // BX ended at row 3's end: the next group
	DECQ R8
	JMP  l4q51_group

l4q51_done:
	VZEROUPPER
	RET

// func rowsQ5_1AVX512x4r(out *float32, w, x *byte, dx *float32, nGroups, nb int)
// rowsQ5_1AVX2x4r with AVX-512's mask registers: bit 4 of each element
// is one masked byte add of 16 under the block's 32 qh bits (KMOVD), instead
// of five AVX2 instructions. rowsQ5_1AVX2 four rows at a time: each activation
// block, its widened scale and s are loaded once for the four rows, and
// the rows two groups ahead are prefetched. Even blocks go to Y8-Y11, odd
// ones to Y12-Y15 (the canonical lanes 0-7 and 8-15). dx holds every
// block's (d, s) widened (prepareQ8_1).
TEXT ·rowsQ5_1AVX512x4r(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ dx+24(FP), R11
	MOVQ nGroups+32(FP), R8
	MOVQ nb+40(FP), R9
	MOVQ R9, R13
	IMULQ $24, R13      // row bytes
	VMOVDQU ones8<>(SB), Y6

l4zq51_group:
	TESTQ R8, R8
	JZ   l4zq51_done
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

l4zq51_pair:
	CMPQ R10, $2
	JLT  l4zq51_single
	LEAQ (SI)(R13*8), AX
	PREFETCHT1 (AX)
	PREFETCHT1 (AX)(R13*1)
	PREFETCHT1 (AX)(R13*2)
	PREFETCHT1 (BX)(R13*8)
	VMOVDQU 4(CX), Y0
	VBROADCASTSS 0(R12), Y1
	VMOVDQU 8(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(SI), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y8
	MOVWLZX 2(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y8, Y8
	VMOVDQU 8(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(SI)(R13*1), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y9
	MOVWLZX 2(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y9, Y9
	VMOVDQU 8(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(SI)(R13*2), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y10
	MOVWLZX 2(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y10, Y10
	VMOVDQU 8(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(BX), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y11
	MOVWLZX 2(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y11, Y11
	VMOVDQU 40(CX), Y0
	VBROADCASTSS 8(R12), Y1
	VMOVDQU 32(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 28(SI), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y12
	MOVWLZX 26(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y12, Y12
	VMOVDQU 32(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 28(SI)(R13*1), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y13
	MOVWLZX 26(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y13, Y13
	VMOVDQU 32(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 28(SI)(R13*2), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y14
	MOVWLZX 26(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y14, Y14
	VMOVDQU 32(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 28(BX), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 24(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y15
	MOVWLZX 26(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 12(R12), X5, X5
	VADDPS Y5, Y15, Y15
	ADDQ $48, SI
	ADDQ $48, BX
	ADDQ $72, CX
	ADDQ $16, R12
	SUBQ $2, R10
	JMP  l4zq51_pair

l4zq51_single:
	TESTQ R10, R10
	JZ   l4zq51_red
	VMOVDQU 4(CX), Y0
	VBROADCASTSS 0(R12), Y1
	VMOVDQU 8(SI), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(SI), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y8
	MOVWLZX 2(SI), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y8, Y8
	VMOVDQU 8(SI)(R13*1), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(SI)(R13*1), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*1), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y9
	MOVWLZX 2(SI)(R13*1), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y9, Y9
	VMOVDQU 8(SI)(R13*2), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(SI)(R13*2), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(SI)(R13*2), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y10
	MOVWLZX 2(SI)(R13*2), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y10, Y10
	VMOVDQU 8(BX), X3
	VPSRLW $4, X3, X4
	VINSERTI128 $1, X4, Y3, Y3
	VPAND nib4<>(SB), Y3, Y3
	KMOVD 4(BX), K1
	VPADDB legC<>+32(SB), Y3, K1, Y3
	VPMADDUBSW Y0, Y3, Y3
	VPMADDWD ones16<>(SB), Y3, Y3
	VCVTDQ2PS Y3, Y3
	VPBROADCASTW 0(BX), X4
	VCVTPH2PS X4, Y4
	VMULPS Y1, Y4, Y4
	VFMADD231PS Y4, Y3, Y11
	MOVWLZX 2(BX), AX
	VMOVD AX, X5
	VCVTPH2PS X5, X5
	VMULSS 4(R12), X5, X5
	VADDPS Y5, Y11, Y11
	ADDQ $24, BX

l4zq51_red:
	LEG4X4RED
	MOVQ BX, SI           // BX ended at row 3's end: the next group
	DECQ R8
	JMP  l4zq51_group

l4zq51_done:
	VZEROUPPER
	RET




DATA ones8<>+0(SB)/8, $0x0101010101010101
DATA ones8<>+8(SB)/8, $0x0101010101010101
DATA ones8<>+16(SB)/8, $0x0101010101010101
DATA ones8<>+24(SB)/8, $0x0101010101010101
GLOBL ones8<>(SB), RODATA|NOPTR, $32

// Q5KSUB is Q4KSUB for Q5_K: the nibbles of sub-blocks 2k and 2k+1 get
// bit 4 from the low bit of each qh byte in Y3, which is shifted right
// once per sub-block (word shifts: the bits that cross into a byte land
// in bit 7, never bit 0). Values <= 31: products fit int16 (31*128*2).
#define Q5KSUB(Q, XA, XB, SA, SB) \
	VMOVDQU Q, Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	VPAND Y14, Y3, Y6 \
	VPSLLW $4, Y6, Y6 \
	VPOR Y6, Y4, Y4 \
	VPSRLW $1, Y3, Y3 \
	VPAND Y14, Y3, Y6 \
	VPSLLW $4, Y6, Y6 \
	VPOR Y6, Y5, Y5 \
	VPSRLW $1, Y3, Y3 \
	VPMADDUBSW XA, Y4, Y6 \
	VPBROADCASTW SA, Y7 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y8, Y8 \
	VPMADDUBSW XB, Y5, Y6 \
	VPBROADCASTW SB, Y7 \
	VPMADDWD Y7, Y6, Y6 \
	VPADDD Y6, Y8, Y8

// func rowsQ5_KAVX2(out *float32, w, x *byte, nRows, nsb int)
// Canonical Q5_K order (generic.go dotQ5_KGeneric), rowsQ4_KAVX2's steps.
TEXT ·rowsQ5_KAVX2(SB), NOSPLIT, $16-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ nsb+32(FP), R9
	VMOVDQU nib4<>(SB), Y15
	VMOVDQU ones8<>(SB), Y14

q5k_row:
	TESTQ R8, R8
	JZ   q5k_done
	VXORPS X13, X13, X13
	MOVQ DX, BX
	MOVQ R9, R10

q5k_sb:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	Q4KSCALES(AX, CX, R11, R12, R13)
	VPMADDWD 260(BX), Y2, Y2  // m_j * (bsum 2j + bsum 2j+1)
	VMOVDQU 16(SI), Y3        // qh
	VPXOR Y8, Y8, Y8
	Q5KSUB(48(SI), 4(BX), 36(BX), sc-16(SP), sc-14(SP))
	Q5KSUB(80(SI), 68(BX), 100(BX), sc-12(SP), sc-10(SP))
	Q5KSUB(112(SI), 132(BX), 164(BX), sc-8(SP), sc-6(SP))
	Q5KSUB(144(SI), 196(BX), 228(BX), sc-4(SP), sc-2(SP))
	HSUMD(Y8, X8, X9)
	HSUMD(Y2, X2, X9)
	VCVTDQ2PS X8, X8
	VCVTDQ2PS X2, X2
	VMOVD (SI), X10
	VCVTPH2PS X10, X10        // d, dmin
	VBROADCASTSS (BX), X11    // dx
	VMULPS X11, X10, X10      // d*dx, dmin*dx
	VMULSS X10, X8, X8
	VMOVSHDUP X10, X12
	VMULSS X12, X2, X2
	VSUBSS X2, X8, X8
	VADDSS X8, X13, X13
	ADDQ $176, SI
	ADDQ $292, BX
	DECQ R10
	JNZ  q5k_sb

	VMOVSS X13, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q5k_row

q5k_done:
	VZEROUPPER
	RET

// Q5KSUB4 is Q4KSUB4 for Q5_K (Q5KSUB's unpacking: bit 4 of sub-blocks
// 2k and 2k+1 from the low bit of the qh bytes in Y12, shifted right once
// per sub-block; Y13 holds 0x01 bytes). Clobbers Y0, Y3-Y7, Y14.
#define Q5KSUB4(Q, A, B, SA, SB) \
	VMOVDQU Q, Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	VPAND Y13, Y12, Y14 \
	VPSLLW $4, Y14, Y14 \
	VPOR Y14, Y4, Y4 \
	VPSRLW $1, Y12, Y12 \
	VPAND Y13, Y12, Y14 \
	VPSLLW $4, Y14, Y14 \
	VPOR Y14, Y5, Y5 \
	VPSRLW $1, Y12, Y12 \
	Q4KMUL4(A, B, SA, SB)

// Q5KFIN4 is Q4KFIN4 with the token's float32 accumulator on the stack
// at F. Clobbers X0, X1, X3, X5, X6.
#define Q5KFIN4(BSUM, DX, Y, X, F) \
	VMOVSS F, X1 \
	Q4KFIN4(BSUM, DX, Y, X, X1) \
	VMOVSS X1, F

// func rowsQ5_KAVX2x4(out *float32, outStride int, w, x *byte, xStride, nRows, nsb int)
// rowsQ5_KAVX2 for 4 tokens at once, as rowsQ4_KAVX2x4: each
// super-block's scales and 5-bit values are unpacked once per 4 tokens.
TEXT ·rowsQ5_KAVX2x4(SB), NOSPLIT, $40-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ w+16(FP), SI
	MOVQ x+24(FP), DX
	MOVQ xStride+32(FP), R11
	LEAQ (R11)(R11*2), R13
	MOVQ nRows+40(FP), R8
	MOVQ R8, rc-24(SP)
	VMOVDQU nib4<>(SB), Y15
	VMOVDQU ones8<>(SB), Y13

q5k4_row:
	CMPQ rc-24(SP), $0
	JEQ  q5k4_done
	VXORPS X0, X0, X0
	VMOVUPS X0, f-40(SP)
	MOVQ DX, BX
	MOVQ nsb+48(FP), R14

q5k4_sb:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	Q4KSCALES(AX, CX, R10, R12, R8)
	VMOVDQU 16(SI), Y12       // qh
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	Q5KSUB4(48(SI), 4, 36, sc-16(SP), sc-14(SP))
	Q5KSUB4(80(SI), 68, 100, sc-12(SP), sc-10(SP))
	Q5KSUB4(112(SI), 132, 164, sc-8(SP), sc-6(SP))
	Q5KSUB4(144(SI), 196, 228, sc-4(SP), sc-2(SP))
	VMOVD (SI), X4
	VCVTPH2PS X4, X4          // d, dmin
	Q5KFIN4(260(BX), (BX), Y8, X8, f-40(SP))
	Q5KFIN4(260(BX)(R11*1), (BX)(R11*1), Y9, X9, f-36(SP))
	Q5KFIN4(260(BX)(R11*2), (BX)(R11*2), Y10, X10, f-32(SP))
	Q5KFIN4(260(BX)(R13*1), (BX)(R13*1), Y11, X11, f-28(SP))
	ADDQ $176, SI
	ADDQ $292, BX
	DECQ R14
	JNZ  q5k4_sb

	VMOVSS f-40(SP), X0
	VMOVSS X0, (DI)
	VMOVSS f-36(SP), X0
	VMOVSS X0, (DI)(R9*1)
	VMOVSS f-32(SP), X0
	VMOVSS X0, (DI)(R9*2)
	LEAQ (R9)(R9*2), R8
	VMOVSS f-28(SP), X0
	VMOVSS X0, (DI)(R8*1)
	ADDQ $4, DI
	DECQ rc-24(SP)
	JMP  q5k4_row

q5k4_done:
	VZEROUPPER
	RET

// expI: integer vectors for EXPY: sign mask, -126, 127, 126, 2^-126's
// bits, 1 (8 lanes each).
DATA expI<>+0(SB)/8, $0x8000000080000000
DATA expI<>+8(SB)/8, $0x8000000080000000
DATA expI<>+16(SB)/8, $0x8000000080000000
DATA expI<>+24(SB)/8, $0x8000000080000000
DATA expI<>+32(SB)/8, $0xffffff82ffffff82
DATA expI<>+40(SB)/8, $0xffffff82ffffff82
DATA expI<>+48(SB)/8, $0xffffff82ffffff82
DATA expI<>+56(SB)/8, $0xffffff82ffffff82
DATA expI<>+64(SB)/8, $0x0000007f0000007f
DATA expI<>+72(SB)/8, $0x0000007f0000007f
DATA expI<>+80(SB)/8, $0x0000007f0000007f
DATA expI<>+88(SB)/8, $0x0000007f0000007f
DATA expI<>+96(SB)/8, $0x0000007e0000007e
DATA expI<>+104(SB)/8, $0x0000007e0000007e
DATA expI<>+112(SB)/8, $0x0000007e0000007e
DATA expI<>+120(SB)/8, $0x0000007e0000007e
DATA expI<>+128(SB)/8, $0x0080000000800000
DATA expI<>+136(SB)/8, $0x0080000000800000
DATA expI<>+144(SB)/8, $0x0080000000800000
DATA expI<>+152(SB)/8, $0x0080000000800000
DATA expI<>+160(SB)/8, $0x0000000100000001
DATA expI<>+168(SB)/8, $0x0000000100000001
DATA expI<>+176(SB)/8, $0x0000000100000001
DATA expI<>+184(SB)/8, $0x0000000100000001
GLOBL expI<>(SB), RODATA|NOPTR, $192

// EXPY is EXPZ on AVX2: Y0 = expf(Y0) for 8 lanes, act.go's expf operation
// for operation, the mask registers replaced by compare results and
// VBLENDVPS. Float constants at (R9) (expConsts). Clobbers Y1-Y7, Y10-Y12.
#define EXPY \
	VCMPPS $3, Y0, Y0, Y10 \
	VBROADCASTSS 44(R9), Y1 \
	VCMPPS $0x1e, Y1, Y0, Y11 \
	VBROADCASTSS 48(R9), Y1 \
	VCMPPS $0x11, Y1, Y0, Y12 \
	VBROADCASTSS (R9), Y1 \
	VMULPS Y0, Y1, Y1 \
	VANDPS expI<>+0(SB), Y1, Y2 \
	VBROADCASTSS 4(R9), Y3 \
	VORPS Y3, Y2, Y2 \
	VADDPS Y2, Y1, Y1 \
	VCVTTPS2DQ Y1, Y4 \
	VCVTDQ2PS Y4, Y1 \
	VBROADCASTSS 8(R9), Y2 \
	VMULPS Y1, Y2, Y2 \
	VSUBPS Y2, Y0, Y2 \
	VBROADCASTSS 12(R9), Y3 \
	VMULPS Y1, Y3, Y3 \
	VSUBPS Y3, Y2, Y2 \
	VBROADCASTSS 16(R9), Y3 \
	VMULPS Y2, Y3, Y3 \
	VBROADCASTSS 20(R9), Y5 \
	VADDPS Y5, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VBROADCASTSS 24(R9), Y5 \
	VADDPS Y5, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VBROADCASTSS 28(R9), Y5 \
	VADDPS Y5, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VBROADCASTSS 32(R9), Y5 \
	VADDPS Y5, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VBROADCASTSS 36(R9), Y5 \
	VADDPS Y5, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VADDPS Y2, Y3, Y3 \
	VBROADCASTSS 40(R9), Y5 \
	VADDPS Y5, Y3, Y3 \
	VPADDD expI<>+64(SB), Y4, Y5 \
	VPSLLD $23, Y5, Y6 \
	VPADDD expI<>+96(SB), Y5, Y7 \
	VPSLLD $23, Y7, Y7 \
	VMOVDQU expI<>+32(SB), Y1 \
	VPCMPGTD Y4, Y1, Y1 \
	VBLENDVPS Y1, Y7, Y6, Y6 \
	VPCMPGTD expI<>+64(SB), Y4, Y7 \
	VBROADCASTSS 56(R9), Y2 \
	VBLENDVPS Y7, Y2, Y6, Y6 \
	VBROADCASTSS 40(R9), Y2 \
	VBLENDVPS Y1, expI<>+128(SB), Y2, Y2 \
	VPSUBD expI<>+160(SB), Y5, Y5 \
	VPSLLD $23, Y5, Y5 \
	VBLENDVPS Y7, Y5, Y2, Y2 \
	VMULPS Y6, Y3, Y3 \
	VMULPS Y2, Y3, Y3 \
	VBLENDVPS Y10, Y0, Y3, Y3 \
	VBROADCASTSS 52(R9), Y1 \
	VBLENDVPS Y11, Y1, Y3, Y3 \
	VANDNPS Y3, Y12, Y0

// EXPY2 is EXPY on two vectors at once, interleaved: Y0 -> Y0 (temps
// Y1-Y7) and Y8 -> Y8 (Y9-Y15), the float constants from siluMulAVX2's
// frame (expConsts broadcast once: k<offset>), the range masks computed
// at the end, where they are used, instead of first (so that each stream
// needs 8 registers, not 11). Like the softmax's exp (MEXPPOLY2), one
// EXPY is a long chain of dependent operations, which one stream alone
// left mostly waiting on latency; same operations on the same operands
// (products commuted only), so the same bits.
#define EXPY2 \
	VMULPS k0-480(SP), Y0, Y1 \
	VMULPS k0-480(SP), Y8, Y9 \
	VANDPS expI<>+0(SB), Y1, Y2 \
	VANDPS expI<>+0(SB), Y9, Y10 \
	VORPS k4-448(SP), Y2, Y2 \
	VORPS k4-448(SP), Y10, Y10 \
	VADDPS Y2, Y1, Y1 \
	VADDPS Y10, Y9, Y9 \
	VCVTTPS2DQ Y1, Y4 \
	VCVTTPS2DQ Y9, Y12 \
	VCVTDQ2PS Y4, Y1 \
	VCVTDQ2PS Y12, Y9 \
	VMULPS k8-416(SP), Y1, Y2 \
	VMULPS k8-416(SP), Y9, Y10 \
	VSUBPS Y2, Y0, Y2 \
	VSUBPS Y10, Y8, Y10 \
	VMULPS k12-384(SP), Y1, Y3 \
	VMULPS k12-384(SP), Y9, Y11 \
	VSUBPS Y3, Y2, Y2 \
	VSUBPS Y11, Y10, Y10 \
	VMULPS k16-352(SP), Y2, Y3 \
	VMULPS k16-352(SP), Y10, Y11 \
	VADDPS k20-320(SP), Y3, Y3 \
	VADDPS k20-320(SP), Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VADDPS k24-288(SP), Y3, Y3 \
	VADDPS k24-288(SP), Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VADDPS k28-256(SP), Y3, Y3 \
	VADDPS k28-256(SP), Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VADDPS k32-224(SP), Y3, Y3 \
	VADDPS k32-224(SP), Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VADDPS k36-192(SP), Y3, Y3 \
	VADDPS k36-192(SP), Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VADDPS Y2, Y3, Y3 \
	VADDPS Y10, Y11, Y11 \
	VADDPS k40-160(SP), Y3, Y3 \
	VADDPS k40-160(SP), Y11, Y11 \
	VPADDD expI<>+64(SB), Y4, Y5 \
	VPADDD expI<>+64(SB), Y12, Y13 \
	VPSLLD $23, Y5, Y6 \
	VPSLLD $23, Y13, Y14 \
	VPADDD expI<>+96(SB), Y5, Y7 \
	VPADDD expI<>+96(SB), Y13, Y15 \
	VPSLLD $23, Y7, Y7 \
	VPSLLD $23, Y15, Y15 \
	VMOVDQU expI<>+32(SB), Y1 \
	VMOVDQU expI<>+32(SB), Y9 \
	VPCMPGTD Y4, Y1, Y1 \
	VPCMPGTD Y12, Y9, Y9 \
	VBLENDVPS Y1, Y7, Y6, Y6 \
	VBLENDVPS Y9, Y15, Y14, Y14 \
	VPCMPGTD expI<>+64(SB), Y4, Y7 \
	VPCMPGTD expI<>+64(SB), Y12, Y15 \
	VBLENDVPS Y7, k56-32(SP), Y6, Y6 \
	VBLENDVPS Y15, k56-32(SP), Y14, Y14 \
	VMOVUPS k40-160(SP), Y2 \
	VMOVUPS k40-160(SP), Y10 \
	VBLENDVPS Y1, expI<>+128(SB), Y2, Y2 \
	VBLENDVPS Y9, expI<>+128(SB), Y10, Y10 \
	VPSUBD expI<>+160(SB), Y5, Y5 \
	VPSUBD expI<>+160(SB), Y13, Y13 \
	VPSLLD $23, Y5, Y5 \
	VPSLLD $23, Y13, Y13 \
	VBLENDVPS Y7, Y5, Y2, Y2 \
	VBLENDVPS Y15, Y13, Y10, Y10 \
	VMULPS Y6, Y3, Y3 \
	VMULPS Y14, Y11, Y11 \
	VMULPS Y2, Y3, Y3 \
	VMULPS Y10, Y11, Y11 \
	VCMPPS $3, Y0, Y0, Y1 \
	VCMPPS $3, Y8, Y8, Y9 \
	VMOVUPS k44-128(SP), Y2 \
	VMOVUPS k44-128(SP), Y10 \
	VCMPPS $0x1e, Y2, Y0, Y2 \
	VCMPPS $0x1e, Y10, Y8, Y10 \
	VMOVUPS k48-96(SP), Y4 \
	VMOVUPS k48-96(SP), Y12 \
	VCMPPS $0x11, Y4, Y0, Y4 \
	VCMPPS $0x11, Y12, Y8, Y12 \
	VBLENDVPS Y1, Y0, Y3, Y3 \
	VBLENDVPS Y9, Y8, Y11, Y11 \
	VBLENDVPS Y2, k52-64(SP), Y3, Y3 \
	VBLENDVPS Y10, k52-64(SP), Y11, Y11 \
	VANDNPS Y3, Y4, Y0 \
	VANDNPS Y11, Y12, Y8
// func siluMulAVX2(gp, u *float32, n int, c *float32)   n % 8 == 0
// 16 elements an iteration through EXPY2, a last 8 through EXPY.
TEXT ·siluMulAVX2(SB), NOSPLIT, $480-32
	MOVQ gp+0(FP), DI
	MOVQ u+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), R9
	SHRQ $3, CX
	JZ   silu2_done
	VBROADCASTSS 0(R9), Y0
	VMOVUPS Y0, k0-480(SP)
	VBROADCASTSS 4(R9), Y0
	VMOVUPS Y0, k4-448(SP)
	VBROADCASTSS 8(R9), Y0
	VMOVUPS Y0, k8-416(SP)
	VBROADCASTSS 12(R9), Y0
	VMOVUPS Y0, k12-384(SP)
	VBROADCASTSS 16(R9), Y0
	VMOVUPS Y0, k16-352(SP)
	VBROADCASTSS 20(R9), Y0
	VMOVUPS Y0, k20-320(SP)
	VBROADCASTSS 24(R9), Y0
	VMOVUPS Y0, k24-288(SP)
	VBROADCASTSS 28(R9), Y0
	VMOVUPS Y0, k28-256(SP)
	VBROADCASTSS 32(R9), Y0
	VMOVUPS Y0, k32-224(SP)
	VBROADCASTSS 36(R9), Y0
	VMOVUPS Y0, k36-192(SP)
	VBROADCASTSS 40(R9), Y0
	VMOVUPS Y0, k40-160(SP)
	VBROADCASTSS 44(R9), Y0
	VMOVUPS Y0, k44-128(SP)
	VBROADCASTSS 48(R9), Y0
	VMOVUPS Y0, k48-96(SP)
	VBROADCASTSS 52(R9), Y0
	VMOVUPS Y0, k52-64(SP)
	VBROADCASTSS 56(R9), Y0
	VMOVUPS Y0, k56-32(SP)

silu2x_loop:
	CMPQ CX, $2
	JLT  silu2_loop
	VMOVUPS (DI), Y0
	VXORPS expI<>+0(SB), Y0, Y0   // -g
	VMOVUPS 32(DI), Y8
	VXORPS expI<>+0(SB), Y8, Y8
	EXPY2
	VADDPS k40-160(SP), Y0, Y0    // 1 + e
	VADDPS k40-160(SP), Y8, Y8
	VMOVUPS (DI), Y1
	VDIVPS Y0, Y1, Y1             // g / (1 + e)
	VMULPS (SI), Y1, Y1
	VMOVUPS Y1, (DI)
	VMOVUPS 32(DI), Y9
	VDIVPS Y8, Y9, Y9
	VMULPS 32(SI), Y9, Y9
	VMOVUPS Y9, 32(DI)
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $2, CX
	JMP  silu2x_loop

silu2_loop:
	TESTQ CX, CX
	JZ   silu2_done
	VMOVUPS (DI), Y8
	VMOVUPS (SI), Y9
	VXORPS expI<>+0(SB), Y8, Y0   // -g
	EXPY
	VBROADCASTSS 40(R9), Y1
	VADDPS Y1, Y0, Y0             // 1 + e
	VDIVPS Y0, Y8, Y8             // g / (1 + e)
	VMULPS Y9, Y8, Y8
	VMOVUPS Y8, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	DECQ CX
	JMP  silu2_loop

silu2_done:
	VZEROUPPER
	RET

// func expSubAVX2(x *float32, n int, m float32, c *float32)   n % 8 == 0
TEXT ·expSubAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y13
	MOVQ c+24(FP), R9
	SHRQ $3, CX
	JZ   exps2_done

exps2_loop:
	VMOVUPS (DI), Y0
	VSUBPS Y13, Y0, Y0
	EXPY
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	DECQ CX
	JNZ  exps2_loop

exps2_done:
	VZEROUPPER
	RET

DATA q8perm<>+0(SB)/8, $0x0000000400000000
DATA q8perm<>+8(SB)/8, $0x0000000500000001
DATA q8perm<>+16(SB)/8, $0x0000000600000002
DATA q8perm<>+24(SB)/8, $0x0000000700000003
GLOBL q8perm<>(SB), RODATA|NOPTR, $32

// func quantQ8_0AVX2(x *float32, nb int, blocks *byte, dx *float32)
// quantQ8_0AVX512 without the tile layout, on AVX2: the int32 results are
// packed to bytes by VPACKSSDW/VPACKSSWB (|q| <= 127: no saturation) and
// put back in element order by VPERMD.
TEXT ·quantQ8_0AVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ blocks+16(FP), DI
	MOVQ dx+24(FP), R8
	VBROADCASTSS q8consts<>+4(SB), Y15   // abs mask
	VMOVSS q8consts<>+0(SB), X14          // 127
	VMOVDQU q8perm<>(SB), Y13

q8q2_block:
	TESTQ CX, CX
	JZ   q8q2_done
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VANDPS Y15, Y2, Y6
	VANDPS Y15, Y3, Y7
	VMAXPS Y5, Y4, Y4
	VMAXPS Y7, Y6, Y6
	VMAXPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VMOVHLPS X4, X4, X5
	VMAXPS X5, X4, X4
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4                     // amax
	VDIVSS X14, X4, X8                    // d = amax/127
	VCVTPS2PH $0, X8, X9
	VPEXTRW $0, X9, AX
	MOVW AX, (DI)
	VCVTPH2PS X9, X10
	VMOVSS X10, (R8)
	VDIVSS X4, X14, X11                   // id = 127/amax
	VXORPS X12, X12, X12
	VCMPSS $4, X12, X4, X12               // amax != 0
	VANDPS X12, X11, X11
	VBROADCASTSS X11, Y11
	VMULPS Y11, Y0, Y0
	VMULPS Y11, Y1, Y1
	VMULPS Y11, Y2, Y2
	VMULPS Y11, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, 2(DI)
	ADDQ $128, SI
	ADDQ $34, DI
	ADDQ $4, R8
	DECQ CX
	JMP  q8q2_block

q8q2_done:
	VZEROUPPER
	RET

// Q4K16G, Q4K16SC, Q4K16SUB, Q4K16MIN and Q4K16FIN are Q4K8G ... Q4K8FIN
// on AVX-512 for 16 rows (the layout of q4KPack with 16 rows: every field
// twice as wide).
#define Q4K16G(W, XL, XH) \
	VMOVDQU64 W(SI), Z0 \
	VPSRLW $4, Z0, Z1 \
	VPANDD Z7, Z0, Z0 \
	VPANDD Z7, Z1, Z1 \
	VPBROADCASTD XL(BX), Z2 \
	VPMADDUBSW Z2, Z0, Z3 \
	VPADDW Z3, Z8, Z8 \
	VPBROADCASTD XH(BX), Z2 \
	VPMADDUBSW Z2, Z1, Z3 \
	VPADDW Z3, Z9, Z9 \
	VPBROADCASTD XL(BX)(DX*1), Z4 \
	VPMADDUBSW Z4, Z0, Z5 \
	VPADDW Z5, Z10, Z10 \
	VPBROADCASTD XH(BX)(DX*1), Z4 \
	VPMADDUBSW Z4, Z1, Z5 \
	VPADDW Z5, Z11, Z11

#define Q4K16SC(S0, S1) \
	VPMADDWD S0(SI), Z8, Z8 \
	VPADDD Z8, Z12, Z12 \
	VPMADDWD S1(SI), Z9, Z9 \
	VPADDD Z9, Z12, Z12 \
	VPMADDWD S0(SI), Z10, Z10 \
	VPADDD Z10, Z13, Z13 \
	VPMADDWD S1(SI), Z11, Z11 \
	VPADDD Z11, Z13, Z13 \
	VPXORD Z8, Z8, Z8 \
	VPXORD Z9, Z9, Z9 \
	VPXORD Z10, Z10, Z10 \
	VPXORD Z11, Z11, Z11

// W0 = 512k (packed bytes), K64 = 64k, S0 = 2048+128k.
#define Q4K16SUB(W0, K64, S0) \
	Q4K16G(W0, 4+K64, 36+K64) \
	Q4K16G(W0+64, 8+K64, 40+K64) \
	Q4K16G(W0+128, 12+K64, 44+K64) \
	Q4K16G(W0+192, 16+K64, 48+K64) \
	Q4K16G(W0+256, 20+K64, 52+K64) \
	Q4K16G(W0+320, 24+K64, 56+K64) \
	Q4K16G(W0+384, 28+K64, 60+K64) \
	Q4K16G(W0+448, 32+K64, 64+K64) \
	Q4K16SC(S0, S0+64)

#define Q4K16MIN(B, M) \
	VPBROADCASTD B(BX), Z2 \
	VPMADDWD M(SI), Z2, Z2 \
	VPADDD Z2, Z8, Z8 \
	VPBROADCASTD B(BX)(DX*1), Z4 \
	VPMADDWD M(SI), Z4, Z4 \
	VPADDD Z4, Z9, Z9

#define Q4K16FIN(DXM, ISUM, IMIN, F) \
	VCVTDQ2PS ISUM, ISUM \
	VCVTDQ2PS IMIN, IMIN \
	VBROADCASTSS DXM, Z2 \
	VMULPS 3072(SI), Z2, Z3 \
	VMULPS 3136(SI), Z2, Z4 \
	VMULPS Z3, ISUM, ISUM \
	VMULPS Z4, IMIN, IMIN \
	VSUBPS IMIN, ISUM, ISUM \
	VADDPS ISUM, F, F

// func q4KTile16x2AVX512(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)
// q4KTile8x2AVX2 with 16 rows in the 16 lanes of a ZMM register.
TEXT ·q4KTile16x2AVX512(SB), NOSPLIT, $0-56
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ wp+16(FP), SI
	MOVQ nGroups+24(FP), R8
	MOVQ x+32(FP), AX
	MOVQ xStride+40(FP), DX
	MOVQ nsb+48(FP), R10
	VPBROADCASTD nib4<>(SB), Z7

q4k16_group:
	TESTQ R8, R8
	JZ   q4k16_done
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	MOVQ AX, BX
	MOVQ R10, CX

q4k16_sb:
	PREFETCHT0 3200(SI)
	PREFETCHT0 3264(SI)
	PREFETCHT0 3328(SI)
	PREFETCHT0 3392(SI)
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	Q4K16SUB(0, 0, 2048)
	Q4K16SUB(512, 64, 2176)
	Q4K16SUB(1024, 128, 2304)
	Q4K16SUB(1536, 192, 2432)
	Q4K16MIN(260, 2560)
	Q4K16MIN(264, 2624)
	Q4K16MIN(268, 2688)
	Q4K16MIN(272, 2752)
	Q4K16MIN(276, 2816)
	Q4K16MIN(280, 2880)
	Q4K16MIN(284, 2944)
	Q4K16MIN(288, 3008)
	Q4K16FIN((BX), Z12, Z8, Z14)
	Q4K16FIN((BX)(DX*1), Z13, Z9, Z15)
	ADDQ $3200, SI
	ADDQ $292, BX
	DECQ CX
	JNZ  q4k16_sb

	VMOVUPS Z14, (DI)
	VMOVUPS Z15, (DI)(R9*1)
	ADDQ $64, DI
	DECQ R8
	JMP  q4k16_group

q4k16_done:
	VZEROUPPER
	RET

// BF16Y widens 8 BF16 values at M into the float32 lanes of Y.
#define BF16Y(M, Y) \
	VPMOVZXWD M, Y \
	VPSLLD $16, Y, Y

// func rowsBF16AVX2(out *float32, w, x *byte, nRows, n int)
// The canonical BF16 order (dotBF16Generic: products rounded, then added;
// never fused) on AVX2, lanes 0-7 in Y0 and 8-15 in Y1. n must be a
// multiple of 16 (the Go wrapper falls back otherwise).
TEXT ·rowsBF16AVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R12
	SHRQ $4, R12

bf16y_row:
	TESTQ R8, R8
	JZ   bf16y_done
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R12, CX
	TESTQ CX, CX
	JZ   bf16y_red

bf16y_chunk:
	BF16Y((BX), Y4)
	BF16Y(16(BX), Y5)
	BF16Y((SI), Y6)
	BF16Y(16(SI), Y7)
	VMULPS Y6, Y4, Y4
	VMULPS Y7, Y5, Y5
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	ADDQ $32, SI
	ADDQ $32, BX
	DECQ CX
	JNZ  bf16y_chunk

bf16y_red:
	VADDPS Y1, Y0, Y0
	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  bf16y_row

bf16y_done:
	VZEROUPPER
	RET

// Q6_K with 8 rows in the lanes (layout of q6KPack8, q6k8_amd64.go) for 4
// tokens: per 4-element group of a quarter, Q6KHALF's decode of the rows'
// interleaved ql/qh bytes (lane-wise), VPMADDUBSW against each token's 4
// q8 broadcast, int16 sums over 2 groups (<= 2*2*63*128), VPMADDWD by the
// (sc, sc) pairs into the exact isum; the -32 offset through the bsums;
// then dotQ6_KGeneric's float steps lane-wise. Tokens' Q8_K rows at BX,
// BX+DX, BX+2*DX, BX+R11.

// Q6K8U decodes the rows' 6-bit values of one group into Y2: low part
// from the ql bytes at QL shifted right by QLS, high 2 bits from the qh
// bytes at QH shifted by QHOP QHS. Clobbers Y0, Y1.
#define Q6K8U(QL, QLS, QH, QHOP, QHS) \
	VMOVDQU QL(SI), Y0 \
	VPSRLW $QLS, Y0, Y0 \
	VPAND Y15, Y0, Y2 \
	VMOVDQU QH(SI), Y1 \
	QHOP $QHS, Y1, Y1 \
	VPAND Y14, Y1, Y1 \
	VPOR Y1, Y2, Y2

// Q6K8T multiplies Y2 by the 4 tokens' 4 q8 at X into the int16 sums
// Y8-Y11. Clobbers Y3.
#define Q6K8T(X) \
	VPBROADCASTD X(BX), Y3 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPADDW Y3, Y8, Y8 \
	VPBROADCASTD X(BX)(DX*1), Y3 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPADDW Y3, Y9, Y9 \
	VPBROADCASTD X(BX)(DX*2), Y3 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPADDW Y3, Y10, Y10 \
	VPBROADCASTD X(BX)(R11*1), Y3 \
	VPMADDUBSW Y3, Y2, Y3 \
	VPADDW Y3, Y11, Y11

// Q6K8F scales the int16 sums by the (sc, sc) pairs at S into the isums
// Y12, Y13, Y6, Y7 and clears them.
#define Q6K8F(S) \
	VPMADDWD S(SI), Y8, Y8 \
	VPADDD Y8, Y12, Y12 \
	VPMADDWD S(SI), Y9, Y9 \
	VPADDD Y9, Y13, Y13 \
	VPMADDWD S(SI), Y10, Y10 \
	VPADDD Y10, Y6, Y6 \
	VPMADDWD S(SI), Y11, Y11 \
	VPADDD Y11, Y7, Y7 \
	VPXOR Y8, Y8, Y8 \
	VPXOR Y9, Y9, Y9 \
	VPXOR Y10, Y10, Y10 \
	VPXOR Y11, Y11, Y11

// Q6K8B adds sc_2m*bsum_2m + sc_2m+1*bsum_2m+1 (bsum pair at B, scale
// pairs at S) for the 4 tokens into Y8-Y11.
#define Q6K8B(B, S) \
	VPBROADCASTD B(BX), Y3 \
	VPMADDWD S(SI), Y3, Y3 \
	VPADDD Y3, Y8, Y8 \
	VPBROADCASTD B(BX)(DX*1), Y3 \
	VPMADDWD S(SI), Y3, Y3 \
	VPADDD Y3, Y9, Y9 \
	VPBROADCASTD B(BX)(DX*2), Y3 \
	VPMADDWD S(SI), Y3, Y3 \
	VPADDD Y3, Y10, Y10 \
	VPBROADCASTD B(BX)(R11*1), Y3 \
	VPMADDWD S(SI), Y3, Y3 \
	VPADDD Y3, Y11, Y11

// Q6K8FIN: F += float32(d*dx) * float32(ISUM - 32*BS), lane-wise; F is
// the token's accumulator on the stack. Clobbers Y3.
#define Q6K8FIN(DXM, ISUM, BS, F) \
	VPSLLD $5, BS, BS \
	VPSUBD BS, ISUM, ISUM \
	VCVTDQ2PS ISUM, ISUM \
	VBROADCASTSS DXM, Y3 \
	VMULPS 2304(SI), Y3, Y3 \
	VMULPS Y3, ISUM, ISUM \
	VADDPS F, ISUM, ISUM \
	VMOVUPS ISUM, F

// func q6KTile8x4AVX2(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)
// Canonical Q6_K order for 4 tokens (Q8_K rows xStride bytes apart) and
// nGroups groups of 8 packed rows: out[t*outStride + 8g + r].
TEXT ·q6KTile8x4AVX2(SB), NOSPLIT, $128-56
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
	VMOVDQU nib4<>(SB), Y15
	VMOVDQU c30<>(SB), Y14

q6k8_group:
	TESTQ R8, R8
	JZ   q6k8_done
	VXORPS Y3, Y3, Y3
	VMOVUPS Y3, f0-128(SP)
	VMOVUPS Y3, f1-96(SP)
	VMOVUPS Y3, f2-64(SP)
	VMOVUPS Y3, f3-32(SP)
	MOVQ AX, BX
	MOVQ R10, CX

q6k8_sb:
	PREFETCHT0 2336(SI)
	PREFETCHT0 2400(SI)
	PREFETCHT0 2464(SI)
	PREFETCHT0 2528(SI)
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	VPXOR Y11, Y11, Y11
	VPXOR Y12, Y12, Y12
	VPXOR Y13, Y13, Y13
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	Q6K8U(0, 0, 1024, VPSLLW, 4)
	Q6K8T(4)
	Q6K8U(32, 0, 1056, VPSLLW, 4)
	Q6K8T(8)
	Q6K8F(1536)
	Q6K8U(64, 0, 1088, VPSLLW, 4)
	Q6K8T(12)
	Q6K8U(96, 0, 1120, VPSLLW, 4)
	Q6K8T(16)
	Q6K8F(1536)
	Q6K8U(128, 0, 1152, VPSLLW, 4)
	Q6K8T(20)
	Q6K8U(160, 0, 1184, VPSLLW, 4)
	Q6K8T(24)
	Q6K8F(1568)
	Q6K8U(192, 0, 1216, VPSLLW, 4)
	Q6K8T(28)
	Q6K8U(224, 0, 1248, VPSLLW, 4)
	Q6K8T(32)
	Q6K8F(1568)
	Q6K8U(512, 0, 1024, VPSLLW, 2)
	Q6K8T(36)
	Q6K8U(544, 0, 1056, VPSLLW, 2)
	Q6K8T(40)
	Q6K8F(1600)
	Q6K8U(576, 0, 1088, VPSLLW, 2)
	Q6K8T(44)
	Q6K8U(608, 0, 1120, VPSLLW, 2)
	Q6K8T(48)
	Q6K8F(1600)
	Q6K8U(640, 0, 1152, VPSLLW, 2)
	Q6K8T(52)
	Q6K8U(672, 0, 1184, VPSLLW, 2)
	Q6K8T(56)
	Q6K8F(1632)
	Q6K8U(704, 0, 1216, VPSLLW, 2)
	Q6K8T(60)
	Q6K8U(736, 0, 1248, VPSLLW, 2)
	Q6K8T(64)
	Q6K8F(1632)
	Q6K8U(0, 4, 1024, VPSRLW, 0)
	Q6K8T(68)
	Q6K8U(32, 4, 1056, VPSRLW, 0)
	Q6K8T(72)
	Q6K8F(1664)
	Q6K8U(64, 4, 1088, VPSRLW, 0)
	Q6K8T(76)
	Q6K8U(96, 4, 1120, VPSRLW, 0)
	Q6K8T(80)
	Q6K8F(1664)
	Q6K8U(128, 4, 1152, VPSRLW, 0)
	Q6K8T(84)
	Q6K8U(160, 4, 1184, VPSRLW, 0)
	Q6K8T(88)
	Q6K8F(1696)
	Q6K8U(192, 4, 1216, VPSRLW, 0)
	Q6K8T(92)
	Q6K8U(224, 4, 1248, VPSRLW, 0)
	Q6K8T(96)
	Q6K8F(1696)
	Q6K8U(512, 4, 1024, VPSRLW, 2)
	Q6K8T(100)
	Q6K8U(544, 4, 1056, VPSRLW, 2)
	Q6K8T(104)
	Q6K8F(1728)
	Q6K8U(576, 4, 1088, VPSRLW, 2)
	Q6K8T(108)
	Q6K8U(608, 4, 1120, VPSRLW, 2)
	Q6K8T(112)
	Q6K8F(1728)
	Q6K8U(640, 4, 1152, VPSRLW, 2)
	Q6K8T(116)
	Q6K8U(672, 4, 1184, VPSRLW, 2)
	Q6K8T(120)
	Q6K8F(1760)
	Q6K8U(704, 4, 1216, VPSRLW, 2)
	Q6K8T(124)
	Q6K8U(736, 4, 1248, VPSRLW, 2)
	Q6K8T(128)
	Q6K8F(1760)
	Q6K8U(256, 0, 1280, VPSLLW, 4)
	Q6K8T(132)
	Q6K8U(288, 0, 1312, VPSLLW, 4)
	Q6K8T(136)
	Q6K8F(1792)
	Q6K8U(320, 0, 1344, VPSLLW, 4)
	Q6K8T(140)
	Q6K8U(352, 0, 1376, VPSLLW, 4)
	Q6K8T(144)
	Q6K8F(1792)
	Q6K8U(384, 0, 1408, VPSLLW, 4)
	Q6K8T(148)
	Q6K8U(416, 0, 1440, VPSLLW, 4)
	Q6K8T(152)
	Q6K8F(1824)
	Q6K8U(448, 0, 1472, VPSLLW, 4)
	Q6K8T(156)
	Q6K8U(480, 0, 1504, VPSLLW, 4)
	Q6K8T(160)
	Q6K8F(1824)
	Q6K8U(768, 0, 1280, VPSLLW, 2)
	Q6K8T(164)
	Q6K8U(800, 0, 1312, VPSLLW, 2)
	Q6K8T(168)
	Q6K8F(1856)
	Q6K8U(832, 0, 1344, VPSLLW, 2)
	Q6K8T(172)
	Q6K8U(864, 0, 1376, VPSLLW, 2)
	Q6K8T(176)
	Q6K8F(1856)
	Q6K8U(896, 0, 1408, VPSLLW, 2)
	Q6K8T(180)
	Q6K8U(928, 0, 1440, VPSLLW, 2)
	Q6K8T(184)
	Q6K8F(1888)
	Q6K8U(960, 0, 1472, VPSLLW, 2)
	Q6K8T(188)
	Q6K8U(992, 0, 1504, VPSLLW, 2)
	Q6K8T(192)
	Q6K8F(1888)
	Q6K8U(256, 4, 1280, VPSRLW, 0)
	Q6K8T(196)
	Q6K8U(288, 4, 1312, VPSRLW, 0)
	Q6K8T(200)
	Q6K8F(1920)
	Q6K8U(320, 4, 1344, VPSRLW, 0)
	Q6K8T(204)
	Q6K8U(352, 4, 1376, VPSRLW, 0)
	Q6K8T(208)
	Q6K8F(1920)
	Q6K8U(384, 4, 1408, VPSRLW, 0)
	Q6K8T(212)
	Q6K8U(416, 4, 1440, VPSRLW, 0)
	Q6K8T(216)
	Q6K8F(1952)
	Q6K8U(448, 4, 1472, VPSRLW, 0)
	Q6K8T(220)
	Q6K8U(480, 4, 1504, VPSRLW, 0)
	Q6K8T(224)
	Q6K8F(1952)
	Q6K8U(768, 4, 1280, VPSRLW, 2)
	Q6K8T(228)
	Q6K8U(800, 4, 1312, VPSRLW, 2)
	Q6K8T(232)
	Q6K8F(1984)
	Q6K8U(832, 4, 1344, VPSRLW, 2)
	Q6K8T(236)
	Q6K8U(864, 4, 1376, VPSRLW, 2)
	Q6K8T(240)
	Q6K8F(1984)
	Q6K8U(896, 4, 1408, VPSRLW, 2)
	Q6K8T(244)
	Q6K8U(928, 4, 1440, VPSRLW, 2)
	Q6K8T(248)
	Q6K8F(2016)
	Q6K8U(960, 4, 1472, VPSRLW, 2)
	Q6K8T(252)
	Q6K8U(992, 4, 1504, VPSRLW, 2)
	Q6K8T(256)
	Q6K8F(2016)
	Q6K8B(260, 2048)
	Q6K8B(264, 2080)
	Q6K8B(268, 2112)
	Q6K8B(272, 2144)
	Q6K8B(276, 2176)
	Q6K8B(280, 2208)
	Q6K8B(284, 2240)
	Q6K8B(288, 2272)
	Q6K8FIN((BX), Y12, Y8, f0-128(SP))
	Q6K8FIN((BX)(DX*1), Y13, Y9, f1-96(SP))
	Q6K8FIN((BX)(DX*2), Y6, Y10, f2-64(SP))
	Q6K8FIN((BX)(R11*1), Y7, Y11, f3-32(SP))
	ADDQ $2336, SI
	ADDQ $292, BX
	DECQ CX
	JNZ  q6k8_sb

	VMOVUPS f0-128(SP), Y3
	VMOVUPS Y3, (DI)
	VMOVUPS f1-96(SP), Y3
	VMOVUPS Y3, (DI)(R9*1)
	VMOVUPS f2-64(SP), Y3
	VMOVUPS Y3, (DI)(R9*2)
	VMOVUPS f3-32(SP), Y3
	VMOVUPS Y3, (DI)(R12*1)
	ADDQ $32, DI
	DECQ R8
	JMP  q6k8_group

q6k8_done:
	VZEROUPPER
	RET
