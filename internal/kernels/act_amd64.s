#include "textflag.h"

// GELU(tanh) times up, as geluMulGo (act_gelu.go): round g to binary16
// (VCVTPS2PH, round to nearest even), look the value up in the table,
// x where x >= 10, 0 where x <= -10 (after the multiply, so 0 whatever u
// holds), NaN through the table. Every lane depends on its own element only.

// func geluMulAVX2(g, u *float32, n int, t *[65536]float32), n % 8 == 0
TEXT ·geluMulAVX2(SB), NOSPLIT, $0-32
	MOVQ gp+0(FP), DI
	MOVQ u+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ t+24(FP), R8
	MOVL $0xC1200000, AX // -10
	MOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x41200000, AX // 10
	MOVD AX, X15
	VPBROADCASTD X15, Y15

gelu2_loop:
	CMPQ CX, $8
	JLT  gelu2_done
	VMOVUPS (DI), Y0
	VCVTPS2PH $0, Y0, X2
	VPMOVZXWD X2, Y2
	VPCMPEQD Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VGATHERDPS Y3, (R8)(Y2*4), Y4
	VCMPPS $0x1D, Y15, Y0, Y5 // x >= 10
	VBLENDVPS Y5, Y0, Y4, Y4
	VMULPS (SI), Y4, Y4
	VCMPPS $0x16, Y14, Y0, Y6 // !(x <= -10)
	VANDPS Y6, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  gelu2_loop

gelu2_done:
	VZEROUPPER
	RET
