#include "textflag.h"

// Attention's inner loops on the AVX2 path (the AVX-512 ones are in
// asm_amd64.s): AxpyRows with y held in registers across the rows, and
// the max and float64 sum passes of Softmax.

// attnIota: int32 0..31, to build the lane masks of the first n elements.
DATA attnIota<>+0(SB)/8, $0x0000000100000000
DATA attnIota<>+8(SB)/8, $0x0000000300000002
DATA attnIota<>+16(SB)/8, $0x0000000500000004
DATA attnIota<>+24(SB)/8, $0x0000000700000006
DATA attnIota<>+32(SB)/8, $0x0000000900000008
DATA attnIota<>+40(SB)/8, $0x0000000b0000000a
DATA attnIota<>+48(SB)/8, $0x0000000d0000000c
DATA attnIota<>+56(SB)/8, $0x0000000f0000000e
DATA attnIota<>+64(SB)/8, $0x0000001100000010
DATA attnIota<>+72(SB)/8, $0x0000001300000012
DATA attnIota<>+80(SB)/8, $0x0000001500000014
DATA attnIota<>+88(SB)/8, $0x0000001700000016
DATA attnIota<>+96(SB)/8, $0x0000001900000018
DATA attnIota<>+104(SB)/8, $0x0000001b0000001a
DATA attnIota<>+112(SB)/8, $0x0000001d0000001c
DATA attnIota<>+120(SB)/8, $0x0000001f0000001e
GLOBL attnIota<>(SB), RODATA|NOPTR, $128

// AXSTEP(k) is one row for k registers of y: load x masked, multiply by
// the broadcast weight (rounded), add (rounded) -- exactly Axpy's step.
#define AXLOAD(off, m, r) VMASKMOVPS off(DX), m, r
#define AXMA(t, acc) VMULPS Y12, t, t; VADDPS t, acc, acc

// func axpyRowsAVX2(y, w, x *float32, nRows, stride, n int)   1 <= n <= 32
// y[i] += w[j] * x[j*stride+i] for j in order and i < n.
TEXT ·axpyRowsAVX2(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ nRows+24(FP), CX
	MOVQ stride+32(FP), R10
	SHLQ $2, R10
	MOVQ n+40(FP), AX
	VMOVQ AX, X0
	VPBROADCASTD X0, Y0
	VPCMPGTD attnIota<>+0(SB), Y0, Y8
	VPCMPGTD attnIota<>+32(SB), Y0, Y9
	VPCMPGTD attnIota<>+64(SB), Y0, Y10
	VPCMPGTD attnIota<>+96(SB), Y0, Y11
	VMASKMOVPS (DI), Y8, Y0
	VMASKMOVPS 32(DI), Y9, Y1
	VMASKMOVPS 64(DI), Y10, Y2
	VMASKMOVPS 96(DI), Y11, Y3
	TESTQ CX, CX
	JZ   axr2_done
	CMPQ AX, $8
	JLE  axr2_1
	CMPQ AX, $16
	JLE  axr2_2
	CMPQ AX, $24
	JLE  axr2_3

axr2_4:
	VBROADCASTSS (SI), Y12
	AXLOAD(0, Y8, Y4)
	AXLOAD(32, Y9, Y5)
	AXLOAD(64, Y10, Y6)
	AXLOAD(96, Y11, Y7)
	AXMA(Y4, Y0)
	AXMA(Y5, Y1)
	AXMA(Y6, Y2)
	AXMA(Y7, Y3)
	ADDQ $4, SI
	ADDQ R10, DX
	DECQ CX
	JNZ  axr2_4
	JMP  axr2_done

axr2_3:
	VBROADCASTSS (SI), Y12
	AXLOAD(0, Y8, Y4)
	AXLOAD(32, Y9, Y5)
	AXLOAD(64, Y10, Y6)
	AXMA(Y4, Y0)
	AXMA(Y5, Y1)
	AXMA(Y6, Y2)
	ADDQ $4, SI
	ADDQ R10, DX
	DECQ CX
	JNZ  axr2_3
	JMP  axr2_done

axr2_2:
	VBROADCASTSS (SI), Y12
	AXLOAD(0, Y8, Y4)
	AXLOAD(32, Y9, Y5)
	AXMA(Y4, Y0)
	AXMA(Y5, Y1)
	ADDQ $4, SI
	ADDQ R10, DX
	DECQ CX
	JNZ  axr2_2
	JMP  axr2_done

axr2_1:
	VBROADCASTSS (SI), Y12
	AXLOAD(0, Y8, Y4)
	AXMA(Y4, Y0)
	ADDQ $4, SI
	ADDQ R10, DX
	DECQ CX
	JNZ  axr2_1

axr2_done:
	VMASKMOVPS Y0, Y8, (DI)
	VMASKMOVPS Y1, Y9, 32(DI)
	VMASKMOVPS Y2, Y10, 64(DI)
	VMASKMOVPS Y3, Y11, 96(DI)
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) (m float32, bad bool)   n % 8 == 0, n > 0
// The maximum of x[:n] (VMAXPS: equal to Go's max on rows without NaN
// up to the sign of a zero, which e^(x-m) does not see), and whether a
// NaN or +Inf is present (the Go code then decides the row).
TEXT ·maxAVX2(SB), NOSPLIT, $0-21
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	MOVL $0xff800000, AX
	VMOVQ AX, X0
	VPBROADCASTD X0, Y8        // running max, -Inf
	MOVL $0x7f800000, AX
	VMOVQ AX, X0
	VPBROADCASTD X0, Y13       // +Inf
	VXORPS Y9, Y9, Y9          // NaN or +Inf lanes seen

max2_loop:
	VMOVUPS (SI), Y0
	VCMPPS $0x03, Y0, Y0, Y1   // unordered: NaN
	VORPS Y1, Y9, Y9
	VCMPPS $0x00, Y13, Y0, Y1  // == +Inf
	VORPS Y1, Y9, Y9
	VMAXPS Y0, Y8, Y8
	ADDQ $32, SI
	DECQ CX
	JNZ  max2_loop

	VEXTRACTF128 $1, Y8, X1
	VMAXPS X1, X8, X8
	VPERMILPS $0x4e, X8, X1
	VMAXPS X1, X8, X8
	VPERMILPS $0xb1, X8, X1
	VMAXPS X1, X8, X8
	VMOVSS X8, m+16(FP)
	VMOVMSKPS Y9, AX
	TESTL AX, AX
	SETNE bad+20(FP)
	VZEROUPPER
	RET

// func sumF64x8AVX2(x *float32, n int, acc *[8]float64)   n % 8 == 0
// acc[l] += float64(x[i]) for i ≡ l (mod 8), in increasing i.
TEXT ·sumF64x8AVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ acc+16(FP), DI
	VMOVUPD (DI), Y10
	VMOVUPD 32(DI), Y11
	SHRQ $3, CX
	JZ   sum2_done

sum2_loop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VADDPD Y0, Y10, Y10
	VADDPD Y1, Y11, Y11
	ADDQ $32, SI
	DECQ CX
	JNZ  sum2_loop

sum2_done:
	VMOVUPD Y10, (DI)
	VMOVUPD Y11, 32(DI)
	VZEROUPPER
	RET
