#include "textflag.h"

// func dequantQ8RowsAVX2(dst *float32, src *byte, rows, nb, stride int)
// Per block: the binary16 scale widened by VCVTPH2PS (as FP16ToFP32Row)
// and broadcast, the 32 int8s sign-extended and converted (exact), one
// VMULPS each (exact: the product fits a float32).
TEXT ·dequantQ8RowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ rows+16(FP), R8
	MOVQ stride+32(FP), R10

dq_row:
	MOVQ SI, BX
	MOVQ nb+24(FP), CX

dq_block:
	MOVWLZX      (BX), AX
	VMOVD        AX, X1
	VCVTPH2PS    X1, X1
	VBROADCASTSS X1, Y1
	VPMOVSXBD    2(BX), Y2
	VPMOVSXBD    10(BX), Y3
	VPMOVSXBD    18(BX), Y4
	VPMOVSXBD    26(BX), Y5
	VCVTDQ2PS    Y2, Y2
	VCVTDQ2PS    Y3, Y3
	VCVTDQ2PS    Y4, Y4
	VCVTDQ2PS    Y5, Y5
	VMULPS       Y1, Y2, Y2
	VMULPS       Y1, Y3, Y3
	VMULPS       Y1, Y4, Y4
	VMULPS       Y1, Y5, Y5
	VMOVUPS      Y2, (DI)
	VMOVUPS      Y3, 32(DI)
	VMOVUPS      Y4, 64(DI)
	VMOVUPS      Y5, 96(DI)
	ADDQ         $34, BX
	ADDQ         $128, DI
	DECQ         CX
	JNZ          dq_block
	ADDQ         R10, SI
	DECQ         R8
	JNZ          dq_row
	VZEROUPPER
	RET
