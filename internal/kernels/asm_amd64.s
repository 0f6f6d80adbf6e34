#include "textflag.h"

// Hand-written kernels reproducing the canonical reduction orders of
// generic.go bit for bit (see the package doc). Operand order is Go's:
// sources first, destination last.

// REDUCE16Z folds the 16 lanes of Z into lane 0 of X by the fixed tree
// j += j+8, j+4, j+2, j+1. T is a scratch register number family.
#define REDUCE16Z(Z, Y, X, TY, TX) \
	VEXTRACTF64X4 $1, Z, TY \
	VADDPS TY, Y, Y \
	VEXTRACTF128 $1, Y, TX \
	VADDPS TX, X, X \
	VMOVHLPS X, X, TX \
	VADDPS TX, X, X \
	VMOVSHDUP X, TX \
	VADDSS TX, X, X

// REDUCE8Y folds the 8 lanes of Y (X its low half) into lane 0 of X:
// j += j+4, j+2, j+1.
#define REDUCE8Y(Y, X, TX) \
	VEXTRACTF128 $1, Y, TX \
	VADDPS TX, X, X \
	VMOVHLPS X, X, TX \
	VADDPS TX, X, X \
	VMOVSHDUP X, TX \
	VADDSS TX, X, X

// func rowsF32AVX512(out, w, x *float32, nRows, n int)
// out[i] = dot(w[i*n:(i+1)*n], x[:n]); four rows at a time share x loads.
TEXT ·rowsF32AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ R9, R10
	SHLQ $2, R10          // row stride in bytes
	MOVQ R9, R12
	SHRQ $4, R12          // full 16-lane chunks
	MOVQ R9, CX
	ANDQ $15, CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVW AX, K1          // tail lanes

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
	VMOVUPS (DX)(R13*1), Z4
	VMULPS (SI)(R13*1), Z4, Z5
	VMULPS (BX)(R13*1), Z4, Z6
	VMULPS (R9)(R13*1), Z4, Z7
	VMULPS (R11)(R13*1), Z4, Z8
	VADDPS Z5, Z0, Z0
	VADDPS Z6, Z1, Z1
	VADDPS Z7, Z2, Z2
	VADDPS Z8, Z3, Z3
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
	VMULPS Z5, Z4, Z5
	VMULPS Z6, Z4, Z6
	VMULPS Z7, Z4, Z7
	VMULPS Z8, Z4, Z8
	VADDPS Z5, Z0, Z0
	VADDPS Z6, Z1, Z1
	VADDPS Z7, Z2, Z2
	VADDPS Z8, Z3, Z3

f32z_red4:
	REDUCE16Z(Z0, Y0, X0, Y5, X5)
	REDUCE16Z(Z1, Y1, X1, Y6, X6)
	REDUCE16Z(Z2, Y2, X2, Y7, X7)
	REDUCE16Z(Z3, Y3, X3, Y8, X8)
	VMOVSS X0, (DI)
	VMOVSS X1, 4(DI)
	VMOVSS X2, 8(DI)
	VMOVSS X3, 12(DI)
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
	VMULPS (SI)(R13*1), Z4, Z5
	VADDPS Z5, Z0, Z0
	ADDQ $64, R13
	DECQ CX
	JNZ  f32z_chunk1

f32z_tail1:
	KORTESTW K1, K1
	JZ   f32z_red1
	VMOVUPS.Z (DX)(R13*1), K1, Z4
	VMOVUPS.Z (SI)(R13*1), K1, Z5
	VMULPS Z5, Z4, Z5
	VADDPS Z5, Z0, Z0

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

// func rowsF32AVX2(out, w, x *float32, nRows, n int)
// Lanes 0-7 of the canonical 16 live in one register, 8-15 in another.
// Two rows at a time share x loads.
TEXT ·rowsF32AVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ n+32(FP), R9
	MOVQ R9, R10
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
	VMULPS (SI)(R13*1), Y4, Y6
	VMULPS 32(SI)(R13*1), Y5, Y7
	VMULPS (BX)(R13*1), Y4, Y8
	VMULPS 32(BX)(R13*1), Y5, Y9
	VADDPS Y6, Y0, Y0
	VADDPS Y7, Y1, Y1
	VADDPS Y8, Y2, Y2
	VADDPS Y9, Y3, Y3
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
	VMULPS Y6, Y4, Y6
	VMULPS Y7, Y5, Y7
	VMULPS Y8, Y4, Y8
	VMULPS Y9, Y5, Y9
	VADDPS Y6, Y0, Y0
	VADDPS Y7, Y1, Y1
	VADDPS Y8, Y2, Y2
	VADDPS Y9, Y3, Y3

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
	VMULPS (SI)(R13*1), Y4, Y6
	VMULPS 32(SI)(R13*1), Y5, Y7
	VADDPS Y6, Y0, Y0
	VADDPS Y7, Y1, Y1
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
	VMULPS Y6, Y4, Y6
	VMULPS Y7, Y5, Y7
	VADDPS Y6, Y0, Y0
	VADDPS Y7, Y1, Y1

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
	REDUCE16Z(Z0, Y0, X0, Y5, X5)
	REDUCE16Z(Z1, Y1, X1, Y6, X6)
	REDUCE16Z(Z2, Y2, X2, Y7, X7)
	REDUCE16Z(Z3, Y3, X3, Y8, X8)
	VMOVSS X0, (DI)
	VMOVSS X1, 4(DI)
	VMOVSS X2, 8(DI)
	VMOVSS X3, 12(DI)
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

// Q8_0 block scale: X4 = broadcast(fp16(w.d) * fp16(x.d)) for the block at
// W and Xa. Clobbers AX, CX, X5.
#define Q8SCALE(W, Xa) \
	MOVWLZX W, AX \
	MOVWLZX Xa, CX \
	VMOVD AX, X4 \
	VPINSRW $1, CX, X4, X4 \
	VCVTPH2PS X4, X4 \
	VMOVSHDUP X4, X5 \
	VMULSS X5, X4, X4 \
	VBROADCASTSS X4, Y4

// func rowsQ8_0AVX2(out *float32, w, x *byte, nRows, nb int)
// Per block: |x| times sign-adjusted w with VPMADDUBSW (no saturation:
// |x| <= 127, |w| <= 127), pairs summed by VPMADDWD into the 8 int32 lanes
// of the canonical order, then lane += float(s) * d.
TEXT ·rowsQ8_0AVX2(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ nb+32(FP), R9
	VMOVDQU ones16<>(SB), Y15

q8y_row:
	TESTQ R8, R8
	JZ   q8y_done
	VXORPS Y0, Y0, Y0
	MOVQ DX, BX
	MOVQ R9, R10

q8y_block:
	VMOVDQU 2(SI), Y1
	VMOVDQU 2(BX), Y2
	VPSIGNB Y2, Y1, Y1
	VPABSB Y2, Y2
	VPMADDUBSW Y1, Y2, Y3
	VPMADDWD Y15, Y3, Y3
	VCVTDQ2PS Y3, Y3
	Q8SCALE((SI), (BX))
	VMULPS Y4, Y3, Y3
	VADDPS Y3, Y0, Y0
	ADDQ $34, SI
	ADDQ $34, BX
	DECQ R10
	JNZ  q8y_block

	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q8y_row

q8y_done:
	VZEROUPPER
	RET

// func rowsQ8_0AVX512(out *float32, w, x *byte, nRows, nb int)
// As rowsQ8_0AVX2 with VNNI's VPDPBUSD doing the 4-byte sums in one step.
TEXT ·rowsQ8_0AVX512(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), R8
	MOVQ nb+32(FP), R9

q8z_row:
	TESTQ R8, R8
	JZ   q8z_done
	VXORPS Y0, Y0, Y0
	MOVQ DX, BX
	MOVQ R9, R10

q8z_block:
	VMOVDQU 2(SI), Y1
	VMOVDQU 2(BX), Y2
	VPSIGNB Y2, Y1, Y1
	VPABSB Y2, Y2
	VPXORD Y3, Y3, Y3
	VPDPBUSD Y1, Y2, Y3
	VCVTDQ2PS Y3, Y3
	Q8SCALE((SI), (BX))
	VMULPS Y4, Y3, Y3
	VADDPS Y3, Y0, Y0
	ADDQ $34, SI
	ADDQ $34, BX
	DECQ R10
	JNZ  q8z_block

	REDUCE8Y(Y0, X0, X6)
	VMOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  q8z_row

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
