#include "textflag.h"

// Q8_K activation quantizer on the SIMD paths (q8k_amd64.go).

DATA q8kperm<>+0(SB)/8, $0x0000000400000000
DATA q8kperm<>+8(SB)/8, $0x0000000500000001
DATA q8kperm<>+16(SB)/8, $0x0000000600000002
DATA q8kperm<>+24(SB)/8, $0x0000000700000003
GLOBL q8kperm<>(SB), RODATA|NOPTR, $32

DATA q8kc<>+0(SB)/4, $0x7fffffff  // abs mask
DATA q8kc<>+4(SB)/4, $0x7f7fffff  // largest finite float32
DATA q8kc<>+8(SB)/4, $127
DATA q8kc<>+12(SB)/4, $0xc2fe0000  // -127.0
DATA q8kc<>+16(SB)/4, $0x3f800000  // 1.0
GLOBL q8kc<>(SB), RODATA|NOPTR, $20

// func quantQ8_KAVX2(x *float32, nsb int, dst *byte) bool
// quant.QuantizeRowQ8_K for nsb super-blocks of 256: mx is the first
// element of largest magnitude, iscale = -127/mx, q = min(127,
// round-half-even(float32(iscale*x))) (VCVTPS2DQ under the default
// rounding is nearestInt for |v| <= 2^22), bsums the int16 sums of 16 q,
// d = 1/iscale; an all-zero super-block is written as zeros. Returns
// false at the first super-block holding a NaN or an infinity (the blocks
// before it are written; the caller redoes the row in Go).
TEXT ·quantQ8_KAVX2(SB), NOSPLIT, $0-25
	MOVQ x+0(FP), SI
	MOVQ nsb+8(FP), CX
	MOVQ dst+16(FP), DI
	VBROADCASTSS q8kc<>+0(SB), Y15
	VBROADCASTSS q8kc<>+4(SB), Y14
	VMOVDQU q8kperm<>(SB), Y13
	VPBROADCASTD q8kc<>+8(SB), Y12

q8k_sb:
	TESTQ CX, CX
	JZ   q8k_ok
	VXORPS Y8, Y8, Y8          // amax
	VXORPS Y9, Y9, Y9          // non-finite lanes
	XORQ AX, AX

q8k_max:
	VANDPS (SI)(AX*1), Y15, Y0
	VCMPPS $0x06, Y14, Y0, Y1  // |x| !<= FLT_MAX: NaN or infinite
	VORPS Y1, Y9, Y9
	VMAXPS Y8, Y0, Y8
	ADDQ $32, AX
	CMPQ AX, $1024
	JLT  q8k_max
	VMOVMSKPS Y9, AX
	TESTL AX, AX
	JNZ  q8k_bail
	VEXTRACTF128 $1, Y8, X0
	VMAXPS X0, X8, X8
	VMOVHLPS X8, X8, X0
	VMAXPS X0, X8, X8
	VMOVSHDUP X8, X0
	VMAXSS X0, X8, X8
	VXORPS X0, X0, X0
	VUCOMISS X0, X8
	JE   q8k_zero
	VBROADCASTSS X8, Y8
	XORQ AX, AX

q8k_find:
	VANDPS (SI)(AX*1), Y15, Y0
	VCMPPS $0x00, Y8, Y0, Y1
	VMOVMSKPS Y1, BX
	TESTL BX, BX
	JNZ  q8k_found
	ADDQ $32, AX
	JMP  q8k_find

q8k_found:
	BSFL BX, BX
	LEAQ (AX)(BX*4), AX
	VMOVSS (SI)(AX*1), X1      // mx
	VMOVSS q8kc<>+12(SB), X2
	VDIVSS X1, X2, X2          // iscale = -127/mx
	VMOVSS q8kc<>+16(SB), X3
	VDIVSS X2, X3, X3          // d = 1/iscale
	VMOVSS X3, (DI)
	VBROADCASTSS X2, Y11
	XORQ AX, AX
	MOVQ DI, BX
	LEAQ 260(DI), R8

q8k_q:
	VMULPS (SI)(AX*1), Y11, Y0
	VMULPS 32(SI)(AX*1), Y11, Y1
	VMULPS 64(SI)(AX*1), Y11, Y2
	VMULPS 96(SI)(AX*1), Y11, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPMINSD Y12, Y0, Y0
	VPMINSD Y12, Y1, Y1
	VPMINSD Y12, Y2, Y2
	VPMINSD Y12, Y3, Y3
	VPADDD Y1, Y0, Y4          // 16 q of the first group, in 8 lanes
	VPADDD Y3, Y2, Y5          // and of the second
	VPHADDD Y5, Y4, Y4
	VPHADDD Y4, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDD X5, X4, X4          // (g0, g1, g0, g1)
	VPACKSSDW X4, X4, X4
	VMOVD X4, (R8)
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, 4(BX)
	ADDQ $128, AX
	ADDQ $32, BX
	ADDQ $4, R8
	CMPQ AX, $1024
	JLT  q8k_q
	JMP  q8k_next

q8k_zero:
	VXORPS Y0, Y0, Y0
	VMOVDQU Y0, (DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, 256(DI)
	MOVL $0, 288(DI)

q8k_next:
	ADDQ $1024, SI
	ADDQ $292, DI
	DECQ CX
	JMP  q8k_sb

q8k_ok:
	MOVB $1, ret+24(FP)
	VZEROUPPER
	RET

q8k_bail:
	MOVB $0, ret+24(FP)
	VZEROUPPER
	RET
