#include "textflag.h"

// func cvtF32F16AVX2(dst *uint16, src *float32, n int)   n % 8 == 0
// Rounding mode 0 of vcvtps2ph: to nearest even, as ggml's F16C path.
TEXT ·cvtF32F16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   c32_done

c32_loop:
	VMOVUPS   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       c32_loop

c32_done:
	VZEROUPPER
	RET

// func cvtF16F32AVX2(dst *float32, src *uint16, n int)   n % 8 == 0
TEXT ·cvtF16F32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   c16_tail

c16_loop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       c16_loop

c16_tail:
	MOVQ n+16(FP), CX
	TESTQ $8, CX
	JZ   c16_done
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)

c16_done:
	VZEROUPPER
	RET
