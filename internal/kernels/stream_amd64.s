#include "textflag.h"

// func readXOR4AVX512(p *byte, n int) uint64
// readXORAVX2 as four streams (the quarters of the n bytes, n a multiple
// of 256, read side by side 64 bytes each a step, with ZMM loads and a
// prefetch 1 KiB ahead in each). On a Sapphire Rapids VM this reads a
// 620 MB buffer 10-15% faster than the one stream with a 4 KiB prefetch
// (which read slower than a dot product over the same bytes, so the
// decode bandwidth fraction came out too high); the bandwidth reference
// is the fastest reader found. Tried: no prefetch, NTA/T2/T0 at 1-16 KiB,
// ZMM loads, 4 and 8 streams (README, "Decode").
TEXT ·readXOR4AVX512(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	SHRQ $2, CX
	TESTQ CX, CX
	JZ   rx4z_done
	LEAQ (SI)(CX*1), R8
	LEAQ (R8)(CX*1), R9
	LEAQ (R9)(CX*1), R10

rx4z_loop:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1024(R8)
	PREFETCHT0 1024(R9)
	PREFETCHT0 1024(R10)
	VPXORQ 0(SI), Z0, Z0
	VPXORQ 0(R8), Z1, Z1
	VPXORQ 0(R9), Z2, Z2
	VPXORQ 0(R10), Z3, Z3
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, R9
	ADDQ $64, R10
	SUBQ $64, CX
	JNZ  rx4z_loop

rx4z_done:
	VPXORQ Z1, Z0, Z0
	VPXORQ Z3, Z2, Z2
	VPXORQ Z2, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPXOR Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	VPSRLDQ $8, X0, X1
	VPXOR X1, X0, X0
	VMOVQ X0, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET

// func readXOR4AVX2(p *byte, n int) uint64
// readXOR4AVX512 with YMM loads (two a stream and step).
TEXT ·readXOR4AVX2(SB), NOSPLIT, $0-24
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	SHRQ $2, CX
	TESTQ CX, CX
	JZ   rx4y_done
	LEAQ (SI)(CX*1), R8
	LEAQ (R8)(CX*1), R9
	LEAQ (R9)(CX*1), R10

rx4y_loop:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1024(R8)
	PREFETCHT0 1024(R9)
	PREFETCHT0 1024(R10)
	VPXOR 0(SI), Y0, Y0
	VPXOR 32(SI), Y1, Y1
	VPXOR 0(R8), Y2, Y2
	VPXOR 32(R8), Y3, Y3
	VPXOR 0(R9), Y0, Y0
	VPXOR 32(R9), Y1, Y1
	VPXOR 0(R10), Y2, Y2
	VPXOR 32(R10), Y3, Y3
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $64, R9
	ADDQ $64, R10
	SUBQ $64, CX
	JNZ  rx4y_loop

rx4y_done:
	VPXOR Y1, Y0, Y0
	VPXOR Y3, Y2, Y2
	VPXOR Y2, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPXOR X1, X0, X0
	VPSRLDQ $8, X0, X1
	VPXOR X1, X0, X0
	VMOVQ X0, AX
	MOVQ AX, ret+16(FP)
	VZEROUPPER
	RET

// func prefetchL2(p *byte, n int)
// PREFETCHT1 of every 64-byte line of [p, p+n): brings weights a tile
// kernel reads next into L2 while it still computes on the current ones.
TEXT ·prefetchL2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	ADDQ SI, CX

pfl2_loop:
	CMPQ SI, CX
	JAE  pfl2_done
	PREFETCHT1 (SI)
	ADDQ $64, SI
	JMP  pfl2_loop

pfl2_done:
	RET
