#include "textflag.h"

// AVX-512 versions of expf, softmax and SwiGLU (expf.go). Every lane
// performs the same float32 operations, in the same order, as the Go code:
// separate multiply and add/subtract (no FMA), truncating conversion,
// exponent bits for 2^n, the same split scaling for subnormal results.
// Results are therefore bitwise those of the Go path. Blocks with a lane
// above 88 or NaN are left to Go, which handles overflow.

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
	MOVL $127, DX; VPBROADCASTD DX, Z18; \
	MOVL $0xc2cff1b4, DX; VPBROADCASTD DX, Z17; \
	MOVL $-126, DX; VPBROADCASTD DX, Z16; \
	MOVL $0x00800000, DX; VPBROADCASTD DX, Z15; \
	MOVL $253, DX; VPBROADCASTD DX, Z14

// EXPF: Z0 = expf(Z0) for lanes <= 88 that are not NaN, exactly as the
// Go expf: below lo the result is 0; when n < -126 the scaling is split in
// two so subnormal results round as in Go. Clobbers Z1-Z7, K4, K5.
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
	VPCMPD $1, Z16, Z3, K4; \
	VPADDD Z18, Z3, Z5; \
	VPSLLD $23, Z5, Z5; \
	VPADDD Z14, Z3, Z6; \
	VPSLLD $23, Z6, Z6; \
	VMULPS Z5, Z7, Z1; \
	VMULPS Z6, Z7, Z2; \
	VMULPS Z15, Z2, Z2; \
	VMOVAPS Z2, K4, Z1; \
	VCMPPS $0x11, Z17, Z0, K5; \
	VPXORD Z2, Z2, Z2; \
	VMOVAPS Z2, K5, Z1; \
	VMOVAPS Z1, Z0

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
	VCMPPS $0x03, Z0, Z0, K1  // NaN
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
	VCMPPS $0x03, Z0, Z0, K1
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

// TAILMASK sets K1 to the lanes of the block at AX that exist (R8 = len)
// and jumps to done when none does. Clobbers BX, CX, DX.
#define TAILMASK(done) \
	MOVQ R8, DX; \
	SUBQ AX, DX; \
	JLE  done; \
	MOVL $0xffff, BX; \
	CMPQ DX, $16; \
	JGE  5(PC); \
	MOVQ DX, CX; \
	MOVL $1, BX; \
	SHLL CX, BX; \
	DECL BX; \
	KMOVW BX, K1

// func softmaxAVX512(x []float32) bool
//
// The Go softmax's arithmetic: max, expf(x - max), the sum in float64 over
// 8 lanes (element i into lane i%8, in order; then lanes j+4, j+2, j+1
// folded in), inv = float32(1/sum), x *= inv. It returns false, leaving x
// untouched, when x holds a NaN or +Inf (the Go path then decides).
TEXT ·softmaxAVX512(SB), NOSPLIT, $0-25
	MOVQ x_base+0(FP), SI
	MOVQ x_len+8(FP), R8
	LOADCONSTS
	MOVL $0xff800000, DX
	VPBROADCASTD DX, Z9        // -Inf
	MOVL $0x7f800000, DX
	VPBROADCASTD DX, Z13       // +Inf
	VMOVAPS Z9, Z8             // running max
	KXORW K6, K6, K6           // NaN or +Inf seen
	XORQ AX, AX

smMax:
	TAILMASK(smMaxDone)
	VMOVAPS Z9, Z0
	VMOVUPS (SI)(AX*4), K1, Z0
	VCMPPS $0x03, Z0, Z0, K2
	KORW K2, K6, K6
	VCMPPS $0x00, Z13, Z0, K2
	KORW K2, K6, K6
	VMAXPS Z0, Z8, Z8
	ADDQ $16, AX
	JMP  smMax

smMaxDone:
	KORTESTW K6, K6
	JNZ  smBail
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

smExp:
	TAILMASK(smExpDone)
	VMOVUPS.Z (SI)(AX*4), K1, Z0
	VSUBPS Z8, Z0, Z0
	EXPF
	VMOVAPS.Z Z0, K1, Z0       // absent lanes add +0
	VMOVUPS Z0, K1, (SI)(AX*4)
	VCVTPS2PD Y0, Z11
	VEXTRACTF64X4 $1, Z0, Y12
	VCVTPS2PD Y12, Z12
	VADDPD Z11, Z10, Z10
	VADDPD Z12, Z10, Z10
	ADDQ $16, AX
	JMP  smExp

smExpDone:
	VEXTRACTF64X4 $1, Z10, Y11
	VADDPD Y11, Y10, Y10
	VEXTRACTF128 $1, Y10, X11
	VADDPD X11, X10, X10
	VPERMILPD $1, X10, X11
	VADDSD X11, X10, X10       // sum
	MOVQ $0x3ff0000000000000, DX
	MOVQ DX, X11
	VDIVSD X10, X11, X11       // 1/sum
	VCVTSD2SS X11, X11, X11
	VBROADCASTSS X11, Z11
	XORQ AX, AX

smScale:
	TAILMASK(smScaleDone)
	VMOVUPS.Z (SI)(AX*4), K1, Z0
	VMULPS Z11, Z0, Z0
	VMOVUPS Z0, K1, (SI)(AX*4)
	ADDQ $16, AX
	JMP  smScale

smScaleDone:
	MOVB $1, ret+24(FP)
	VZEROUPPER
	RET

smBail:
	MOVB $0, ret+24(FP)
	VZEROUPPER
	RET
