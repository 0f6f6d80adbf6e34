#include "textflag.h"

// func prefetchLines(p unsafe.Pointer, n int)   n > 0
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	LEAQ (AX)(CX*1), DX
	ANDQ $-64, AX

pf_loop:
	PREFETCHT1 (AX)
	ADDQ $64, AX
	CMPQ AX, DX
	JB   pf_loop
	RET
