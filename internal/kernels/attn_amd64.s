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

// func widenRowsAVX2(dst *float32, src *uint16, rows, cols, stride int)
// rows > 0, cols a positive multiple of 8: row j of src (at j*stride
// elements) widened into dst packed (at j*cols).
TEXT ·widenRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+16(FP), R8
	MOVQ cols+24(FP), R9
	MOVQ stride+32(FP), R10
	SHLQ $1, R10          // row stride in bytes
	SHRQ $3, R9           // 8-element chunks per row

wr_row:
	MOVQ SI, BX
	MOVQ R9, CX

wr_chunk:
	VCVTPH2PS (BX), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, BX
	ADDQ      $32, DI
	DECQ      CX
	JNZ       wr_chunk
	ADDQ      R10, SI
	DECQ      R8
	JNZ       wr_row
	VZEROUPPER
	RET
