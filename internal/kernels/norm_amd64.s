#include "textflag.h"

// func sumSquaresAVX2(x *float32, n int, acc *[8]float64)   n % 8 == 0
// acc[j] += float64(x[i]*x[i]) for i ≡ j (mod 8), in increasing i: the
// square is rounded to float32 (VMULPS), then widened exactly.
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	MOVQ acc+16(FP), DI
	VMOVUPD (DI), Y10
	VMOVUPD 32(DI), Y11
	SHRQ $3, CX
	JZ   ssq_done

ssq_loop:
	VMOVUPS (SI), Y0
	VMULPS Y0, Y0, Y0
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y1, Y10, Y10
	VADDPD Y2, Y11, Y11
	ADDQ $32, SI
	DECQ CX
	JNZ  ssq_loop

ssq_done:
	VMOVUPD Y10, (DI)
	VMOVUPD Y11, 32(DI)
	VZEROUPPER
	RET

// func scaleMulAVX2(y, x *float32, n int, s float32, w *float32)   n % 8 == 0
// y[i] = (x[i]*s)*w[i], two rounded products.
TEXT ·scaleMulAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS s+24(FP), Y3
	MOVQ w+32(FP), DX
	SHRQ $3, CX
	JZ   smul_done

smul_loop:
	VMULPS (SI), Y3, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  smul_loop

smul_done:
	VZEROUPPER
	RET

// func rotatePairsAVX2(x, c, s *float32, n int)   n % 8 == 0
// x = x*c + swap(x)*s, swap exchanging the elements of each pair; two
// rounded products, then the rounded sum (no FMA).
TEXT ·rotatePairsAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), DI
	MOVQ c+8(FP), SI
	MOVQ s+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   rot_done

rot_loop:
	VMOVUPS (DI), Y0
	VPERMILPS $0xB1, Y0, Y1
	VMULPS (SI), Y0, Y0
	VMULPS (DX), Y1, Y1
	VADDPS Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	DECQ CX
	JNZ  rot_loop

rot_done:
	VZEROUPPER
	RET
