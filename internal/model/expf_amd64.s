#include "textflag.h"

// AVX-512 versions of expf and SwiGLU (expf.go). Every lane performs the
// same float32 operations, in the same order, as the Go code: separate
// multiply and add/subtract (no FMA), truncating conversion, exponent bits
// for 2^n. Results are therefore bitwise those of the Go path. Blocks with
// a lane outside [-87, 88] (or NaN) are left to Go, which handles
// overflow, underflow and subnormal scaling.

#define LOADCONSTS \
	MOVL $0x3fb8aa3b, DX; VPBROADCASTD DX, Z20; \
	MOVL $0x3f318000, DX; VPBROADCASTD DX, Z21; \
	MOVL $0xb95e8083, DX; VPBROADCASTD DX, Z22; \
	MOVL $0x39506967, DX; VPBROADCASTD DX, Z23; \
	MOVL $0x3ab743ce, DX; VPBROADCASTD DX, Z24; \
	MOVL $0x3c088908, DX; VPBROADCASTD DX, Z25; \
	MOVL $0x3d2aa9c1, DX; VPBROADCASTD DX, Z26; \
	MOVL $0x3e2aaaaa, DX; VPBROADCASTD DX, Z27; \
	MOVL $0x3f000000, DX; VPBROADCASTD DX, Z28; \
	MOVL $0x3f800000, DX; VPBROADCASTD DX, Z29; \
	MOVL $0xc2ae0000, DX; VPBROADCASTD DX, Z30; \
	MOVL $0x42b00000, DX; VPBROADCASTD DX, Z31; \
	MOVL $0x80000000, DX; VPBROADCASTD DX, Z19; \
	MOVL $127, DX; VPBROADCASTD DX, Z18

// EXPF: Z0 = expf(Z0) for lanes in [-87, 88]. Clobbers Z1-Z7.
#define EXPF \
	VMULPS Z20, Z0, Z1; \
	VPANDD Z19, Z1, Z2; \
	VPORD Z28, Z2, Z2; \
	VADDPS Z2, Z1, Z2; \
	VCVTTPS2DQ Z2, Z3; \
	VCVTDQ2PS Z3, Z4; \
	VMULPS Z21, Z4, Z5; \
	VSUBPS Z5, Z0, Z6; \
	VMULPS Z22, Z4, Z5; \
	VSUBPS Z5, Z6, Z6; \
	VMOVAPS Z23, Z7; \
	VMULPS Z6, Z7, Z7; VADDPS Z24, Z7, Z7; \
	VMULPS Z6, Z7, Z7; VADDPS Z25, Z7, Z7; \
	VMULPS Z6, Z7, Z7; VADDPS Z26, Z7, Z7; \
	VMULPS Z6, Z7, Z7; VADDPS Z27, Z7, Z7; \
	VMULPS Z6, Z7, Z7; VADDPS Z28, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VMULPS Z6, Z7, Z7; \
	VADDPS Z6, Z7, Z7; \
	VADDPS Z29, Z7, Z7; \
	VPADDD Z18, Z3, Z3; \
	VPSLLD $23, Z3, Z3; \
	VMULPS Z3, Z7, Z0

// func expBlocksAVX512(x []float32) int
TEXT ·expBlocksAVX512(SB), NOSPLIT, $0-32
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), CX
	XORQ AX, AX
	LOADCONSTS

expLoop:
	MOVQ CX, DX
	SUBQ AX, DX
	CMPQ DX, $16
	JLT  expDone
	VMOVUPS (SI)(AX*4), Z0
	VCMPPS $0x19, Z30, Z0, K1 // !(x >= -87), true for NaN
	VCMPPS $0x1e, Z31, Z0, K2 // x > 88
	KORW K1, K2, K3
	KORTESTW K3, K3
	JNZ  expDone
	EXPF
	VMOVUPS Z0, (SI)(AX*4)
	ADDQ $16, AX
	JMP  expLoop

expDone:
	MOVQ AX, ret+24(FP)
	VZEROUPPER
	RET

// func swigluBlocksAVX512(g, u []float32) int
TEXT ·swigluBlocksAVX512(SB), NOSPLIT, $0-56
	MOVQ g_base+0(FP), SI
	MOVQ g_len+8(FP), CX
	MOVQ u_base+24(FP), DI
	XORQ AX, AX
	LOADCONSTS

sgLoop:
	MOVQ CX, DX
	SUBQ AX, DX
	CMPQ DX, $16
	JLT  sgDone
	VMOVUPS (SI)(AX*4), Z8     // x
	VXORPS Z19, Z8, Z0         // -x
	VCMPPS $0x19, Z30, Z0, K1
	VCMPPS $0x1e, Z31, Z0, K2
	KORW K1, K2, K3
	KORTESTW K3, K3
	JNZ  sgDone
	EXPF                       // Z0 = e^-x
	VADDPS Z0, Z29, Z0         // 1 + e^-x
	VDIVPS Z0, Z8, Z8          // x / (1 + e^-x)
	VMOVUPS (DI)(AX*4), Z9
	VMULPS Z9, Z8, Z8          // * u
	VMOVUPS Z8, (SI)(AX*4)
	ADDQ $16, AX
	JMP  sgLoop

sgDone:
	MOVQ AX, ret+48(FP)
	VZEROUPPER
	RET
