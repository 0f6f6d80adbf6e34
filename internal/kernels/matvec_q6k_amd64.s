#include "textflag.h"

// One-token (decode) Q6_K matvec kernels: four weight rows per pass, as
// matvec_q4k_amd64.s does for Q4_K, so the per-super-block tail
// (horizontal sums, int->float, the scalar float32 chain) runs once for
// four rows and the rows' chains run side by side; the matrix is
// prefetched q6kmvPF bytes ahead. Canonical Q6_K order (generic.go
// dotQ6_KGeneric): per super-block the exact integer
// isum = sum_g sc_g * sum_i (q_i-32)*x_i, then
// acc += float32(float32(d*dx)*float32(isum)), in increasing super-block
// order; each lane of the float part is one row's scalar chain.
//
// The 6-bit values are made unsigned (0..63) for VPMADDUBSW; the -32 is
// applied once per super-block as 32*sum_g sc_g*bsum_g (Q8_K bsums).
// Products fit int16 (63*128*2), scaled pairs int32: sums are exact.

// VPERMW indices for the AVX-512 kernel: vector j (64 bytes) has words
// 8i..8i+7 = scale 4j+i (the four 16-element groups of a 64-element run).
DATA q6kmvidx<>+0(SB)/8, $0x0000000000000000
DATA q6kmvidx<>+8(SB)/8, $0x0000000000000000
DATA q6kmvidx<>+16(SB)/8, $0x0001000100010001
DATA q6kmvidx<>+24(SB)/8, $0x0001000100010001
DATA q6kmvidx<>+32(SB)/8, $0x0002000200020002
DATA q6kmvidx<>+40(SB)/8, $0x0002000200020002
DATA q6kmvidx<>+48(SB)/8, $0x0003000300030003
DATA q6kmvidx<>+56(SB)/8, $0x0003000300030003
DATA q6kmvidx<>+64(SB)/8, $0x0004000400040004
DATA q6kmvidx<>+72(SB)/8, $0x0004000400040004
DATA q6kmvidx<>+80(SB)/8, $0x0005000500050005
DATA q6kmvidx<>+88(SB)/8, $0x0005000500050005
DATA q6kmvidx<>+96(SB)/8, $0x0006000600060006
DATA q6kmvidx<>+104(SB)/8, $0x0006000600060006
DATA q6kmvidx<>+112(SB)/8, $0x0007000700070007
DATA q6kmvidx<>+120(SB)/8, $0x0007000700070007
DATA q6kmvidx<>+128(SB)/8, $0x0008000800080008
DATA q6kmvidx<>+136(SB)/8, $0x0008000800080008
DATA q6kmvidx<>+144(SB)/8, $0x0009000900090009
DATA q6kmvidx<>+152(SB)/8, $0x0009000900090009
DATA q6kmvidx<>+160(SB)/8, $0x000a000a000a000a
DATA q6kmvidx<>+168(SB)/8, $0x000a000a000a000a
DATA q6kmvidx<>+176(SB)/8, $0x000b000b000b000b
DATA q6kmvidx<>+184(SB)/8, $0x000b000b000b000b
DATA q6kmvidx<>+192(SB)/8, $0x000c000c000c000c
DATA q6kmvidx<>+200(SB)/8, $0x000c000c000c000c
DATA q6kmvidx<>+208(SB)/8, $0x000d000d000d000d
DATA q6kmvidx<>+216(SB)/8, $0x000d000d000d000d
DATA q6kmvidx<>+224(SB)/8, $0x000e000e000e000e
DATA q6kmvidx<>+232(SB)/8, $0x000e000e000e000e
DATA q6kmvidx<>+240(SB)/8, $0x000f000f000f000f
DATA q6kmvidx<>+248(SB)/8, $0x000f000f000f000f
GLOBL q6kmvidx<>(SB), RODATA|NOPTR, $256

// VPSHUFB of a broadcast dword (s_2k, s_2k+1): low lane all s_2k, high
// lane all s_2k+1 (the AVX2 kernel's per-chunk scales).
DATA q6kmvsh<>+0(SB)/8, $0x0100010001000100
DATA q6kmvsh<>+8(SB)/8, $0x0100010001000100
DATA q6kmvsh<>+16(SB)/8, $0x0302030203020302
DATA q6kmvsh<>+24(SB)/8, $0x0302030203020302
GLOBL q6kmvsh<>(SB), RODATA|NOPTR, $32

DATA q6kc30<>+0(SB)/8, $0x3030303030303030
DATA q6kc30<>+8(SB)/8, $0x3030303030303030
DATA q6kc30<>+16(SB)/8, $0x3030303030303030
DATA q6kc30<>+24(SB)/8, $0x3030303030303030
GLOBL q6kc30<>(SB), RODATA|NOPTR, $32

// q6kmvPF is how far ahead of the rows in use the kernels prefetch.
#define q6kmvPF 8192

// Q6KMVHALF decodes half H of the Q6_K block at P (ql at QL, 64 bytes;
// qh at QH, 32 bytes) into Z6 (elements 128H..128H+63, unsigned) and Z5
// (128H+64..128H+127). Z28 holds 0x0f bytes, Z27 0x33 bytes. Clobbers
// Z4, Z7, Y6.
//
// Bytes 0-31 of the low run take qh bits 0-1, bytes 32-63 bits 2-3; of
// the high run bits 4-5 and 6-7: with Q = [qh, qh>>2] & 0x33, the low run
// is ql&15 | (Q<<4)&0xf0 and the high run (ql>>4)&15 | Q&0xf0, each one
// bit select (VPTERNLOGD 0xd8: C ? B : A) under the 0x0f mask.
#define Q6KMVHALF(QL, QH) \
	VMOVDQU64 QL, Z4 \
	VMOVDQU QH, Y5 \
	VPSRLW $2, Y5, Y6 \
	VINSERTI64X4 $1, Y6, Z5, Z5 \
	VPANDD Z27, Z5, Z5 \
	VPSLLW $4, Z5, Z6 \
	VPTERNLOGD $0xd8, Z28, Z4, Z6 \
	VPSRLW $4, Z4, Z7 \
	VPTERNLOGD $0xd8, Z28, Z7, Z5

// Q6KMVROW adds one row's super-block at P against the Q8_K block at BX:
// the isum lanes (8 int32) to AY (AZ the same register, set here).
#define Q6KMVROW(P, AZ, AY) \
	VPMOVSXBW 192(P), Y3 \
	VPERMW Z3, Z24, Z20 \
	VPERMW Z3, Z25, Z21 \
	VPERMW Z3, Z26, Z22 \
	VPERMW Z3, Z23, Z19 \
	Q6KMVHALF(0(P), 128(P)) \
	VPMADDUBSW 4(BX), Z6, Z6 \
	VPMADDUBSW 68(BX), Z5, Z5 \
	VPMADDWD Z20, Z6, AZ \
	VPDPWSSD Z5, Z21, AZ \
	Q6KMVHALF(64(P), 160(P)) \
	VPMADDUBSW 132(BX), Z6, Z6 \
	VPMADDUBSW 196(BX), Z5, Z5 \
	VPDPWSSD Z6, Z22, AZ \
	VPDPWSSD Z5, Z19, AZ \
	VEXTRACTI64X4 $1, AZ, Y16 \
	VPADDD Y16, AY, AY \
	VPMADDWD 260(BX), Y3, Y17 \
	VPSLLD $5, Y17, Y17 \
	VPSUBD Y17, AY, AY

// Q6KMVTAIL folds the four rows' isum lanes (Y8-Y11) of the super-block
// at SI, R11, R12, R13 (Q8_K block at BX) and adds the four float terms
// to X (one row per lane). Clobbers X0, X1, Y8-Y10.
#define Q6KMVTAIL(X) \
	VPHADDD Y9, Y8, Y8 \
	VPHADDD Y11, Y10, Y10 \
	VPHADDD Y10, Y8, Y8 \
	VEXTRACTI128 $1, Y8, X9 \
	VPADDD X9, X8, X8 \
	VCVTDQ2PS X8, X8 \
	MOVWLZX 208(SI), AX \
	VMOVD AX, X0 \
	VPINSRW $1, 208(R11), X0, X0 \
	VPINSRW $2, 208(R12), X0, X0 \
	VPINSRW $3, 208(R13), X0, X0 \
	VCVTPH2PS X0, X0 \
	VBROADCASTSS (BX), X1 \
	VMULPS X1, X0, X0 \
	VMULPS X8, X0, X0 \
	VADDPS X0, X, X

// Q6KMVPF prefetches the 4*210 bytes the group's rows advance per
// super-block, q6kmvPF ahead (the matrix is one contiguous run of rows;
// prefetches past its end do not fault), into L2 (PREFETCHT1): a T0
// prefetch holds one of the core's few L1 miss buffers until its line
// arrives (docs/kernels.md). Zen 4, BenchmarkMatMulCold q6_K tok1 t1
// (TinyLlama's shapes, per CPU-second, alternated): AVX-512 9.2-11.4 ->
// 10.2-15.7 GB/s, AVX2 10.6-18.9 -> 12.6-21.5 GB/s; without any prefetch
// 4-9 GB/s (the four adjacent rows are too short a stream each for the
// hardware prefetchers).
#define Q6KMVPF \
	PREFETCHT1 0(R8) \
	PREFETCHT1 64(R8) \
	PREFETCHT1 128(R8) \
	PREFETCHT1 192(R8) \
	PREFETCHT1 256(R8) \
	PREFETCHT1 320(R8) \
	PREFETCHT1 384(R8) \
	PREFETCHT1 448(R8) \
	PREFETCHT1 512(R8) \
	PREFETCHT1 576(R8) \
	PREFETCHT1 640(R8) \
	PREFETCHT1 704(R8) \
	PREFETCHT1 768(R8) \
	PREFETCHT1 832(R8) \
	ADDQ $840, R8

// func rowsQ6_KAVX512x4(out *float32, w, x *byte, nGroups, nsb int)
// out[r] for 4*nGroups rows of nsb Q6_K super-blocks each (stored back to
// back) against one Q8_K activation row.
TEXT ·rowsQ6_KAVX512x4(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+24(FP), R9
	LEAQ q6kmvPF(SI), R8
	MOVL $0x0f, AX
	VPBROADCASTB AX, Z28
	MOVL $0x33, AX
	VPBROADCASTB AX, Z27
	VMOVDQU64 q6kmvidx<>+0(SB), Z24
	VMOVDQU64 q6kmvidx<>+64(SB), Z25
	VMOVDQU64 q6kmvidx<>+128(SB), Z26
	VMOVDQU64 q6kmvidx<>+192(SB), Z23

q6kmv_group:
	TESTQ R9, R9
	JZ   q6kmv_done
	MOVQ nsb+32(FP), AX
	IMULQ $210, AX
	LEAQ (SI)(AX*1), R11
	LEAQ (SI)(AX*2), R12
	LEAQ (R12)(AX*1), R13
	MOVQ x+16(FP), BX
	MOVQ nsb+32(FP), R10
	VPXORD X29, X29, X29

q6kmv_sb:
	Q6KMVPF
	Q6KMVROW(SI, Z8, Y8)
	Q6KMVROW(R11, Z9, Y9)
	Q6KMVROW(R12, Z10, Y10)
	Q6KMVROW(R13, Z11, Y11)
	Q6KMVTAIL(X29)
	ADDQ $210, SI
	ADDQ $210, R11
	ADDQ $210, R12
	ADDQ $210, R13
	ADDQ $292, BX
	DECQ R10
	JNZ  q6kmv_sb

	VMOVUPS X29, (DI)
	ADDQ $16, DI
	MOVQ R13, SI              // row 3 ended where the next group starts
	DECQ R9
	JMP  q6kmv_group

q6kmv_done:
	VZEROUPPER
	RET

// Q6KMV2CH adds one 32-element chunk to AY: U holds its unsigned 6-bit
// values, X8M the Q8_K qs, SC the dword (s_2k, s_2k+1) of its two
// groups' int16 scales; Y13 holds q6kmvsh. Clobbers U, Y6.
#define Q6KMV2CH(U, X8M, SC, AY) \
	VPMADDUBSW X8M, U, U \
	VPBROADCASTD SC, Y6 \
	VPSHUFB Y13, Y6, Y6 \
	VPMADDWD Y6, U, U \
	VPADDD U, AY, AY

// Q6KMV2HALF adds half H of a row's super-block (ql at QL and QL32, qh at
// QH; Q8_K qs of its four chunks at X8A..X8D, their scales at SA..SD) to
// AY. Y15 holds 0x0f bytes, Y14 0x30 bytes. Clobbers Y0-Y2, Y4-Y6.
#define Q6KMV2HALF(QL, QL32, QH, X8A, X8B, X8C, X8D, SA, SB, SC, SD, AY) \
	VMOVDQU QL, Y0 \
	VMOVDQU QL32, Y1 \
	VMOVDQU QH, Y2 \
	VPAND Y15, Y0, Y4 \
	VPSLLW $4, Y2, Y5 \
	VPAND Y14, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	Q6KMV2CH(Y4, X8A, SA, AY) \
	VPAND Y15, Y1, Y4 \
	VPSLLW $2, Y2, Y5 \
	VPAND Y14, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	Q6KMV2CH(Y4, X8B, SB, AY) \
	VPSRLW $4, Y0, Y4 \
	VPAND Y15, Y4, Y4 \
	VPAND Y14, Y2, Y5 \
	VPOR Y5, Y4, Y4 \
	Q6KMV2CH(Y4, X8C, SC, AY) \
	VPSRLW $4, Y1, Y4 \
	VPAND Y15, Y4, Y4 \
	VPSRLW $2, Y2, Y5 \
	VPAND Y14, Y5, Y5 \
	VPOR Y5, Y4, Y4 \
	Q6KMV2CH(Y4, X8D, SD, AY)

// Q6KMV2ROW is Q6KMVROW on AVX2: the row's isum lanes to AY.
#define Q6KMV2ROW(P, AY) \
	VPMOVSXBW 192(P), Y3 \
	VMOVDQU Y3, sc-32(SP) \
	VPMADDWD 260(BX), Y3, Y12 \
	VPSLLD $5, Y12, Y12 \
	VPXOR AY, AY, AY \
	Q6KMV2HALF(0(P), 32(P), 128(P), 4(BX), 36(BX), 68(BX), 100(BX), sc-32(SP), sc-28(SP), sc-24(SP), sc-20(SP), AY) \
	Q6KMV2HALF(64(P), 96(P), 160(P), 132(BX), 164(BX), 196(BX), 228(BX), sc-16(SP), sc-12(SP), sc-8(SP), sc-4(SP), AY) \
	VPSUBD Y12, AY, AY

// func rowsQ6_KAVX2x4r(out *float32, w, x *byte, nGroups, nsb int)
// rowsQ6_KAVX512x4 on AVX2 (VPMADDUBSW, VPMADDWD by broadcast scales).
TEXT ·rowsQ6_KAVX2x4r(SB), NOSPLIT, $32-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+24(FP), R9
	LEAQ q6kmvPF(SI), R8
	VMOVDQU q5knib<>(SB), Y15
	VMOVDQU q6kc30<>(SB), Y14
	VMOVDQU q6kmvsh<>(SB), Y13

q6kmv2_group:
	TESTQ R9, R9
	JZ   q6kmv2_done
	MOVQ nsb+32(FP), AX
	IMULQ $210, AX
	LEAQ (SI)(AX*1), R11
	LEAQ (SI)(AX*2), R12
	LEAQ (R12)(AX*1), R13
	MOVQ x+16(FP), BX
	MOVQ nsb+32(FP), R10
	VXORPS X7, X7, X7

q6kmv2_sb:
	Q6KMVPF
	Q6KMV2ROW(SI, Y8)
	Q6KMV2ROW(R11, Y9)
	Q6KMV2ROW(R12, Y10)
	Q6KMV2ROW(R13, Y11)
	Q6KMVTAIL(X7)
	ADDQ $210, SI
	ADDQ $210, R11
	ADDQ $210, R12
	ADDQ $210, R13
	ADDQ $292, BX
	DECQ R10
	JNZ  q6kmv2_sb

	VMOVUPS X7, (DI)
	ADDQ $16, DI
	MOVQ R13, SI
	DECQ R9
	JMP  q6kmv2_group

q6kmv2_done:
	VZEROUPPER
	RET

// One-token (decode) Q5_K matvec kernels: matvec_q4k_amd64.s's four-row
// kernels with Q5_K's fifth bit (bit j of qh[i] is bit 4 of element i of
// sub-block j). Canonical Q5_K order (generic.go dotQ5_KGeneric): per
// super-block the exact integer sums isum = sum_j sc_j * sum_i q_ji*x_ji
// and imin = sum_j m_j * bsum_j, then
// acc += float32(dd*float32(isum)) - float32(dm*float32(imin)), dd = d*dx,
// dm = dmin*dx, in increasing super-block order; one row per lane of the
// float part. Values <= 31: VPMADDUBSW pairs fit int16 (31*128*2).

// VPERMW indices: vector k has words 0-15 = scale 2k, 16-31 = scale 2k+1.
DATA q5kmvidx<>+0(SB)/8, $0x0000000000000000
DATA q5kmvidx<>+8(SB)/8, $0x0000000000000000
DATA q5kmvidx<>+16(SB)/8, $0x0000000000000000
DATA q5kmvidx<>+24(SB)/8, $0x0000000000000000
DATA q5kmvidx<>+32(SB)/8, $0x0001000100010001
DATA q5kmvidx<>+40(SB)/8, $0x0001000100010001
DATA q5kmvidx<>+48(SB)/8, $0x0001000100010001
DATA q5kmvidx<>+56(SB)/8, $0x0001000100010001
DATA q5kmvidx<>+64(SB)/8, $0x0002000200020002
DATA q5kmvidx<>+72(SB)/8, $0x0002000200020002
DATA q5kmvidx<>+80(SB)/8, $0x0002000200020002
DATA q5kmvidx<>+88(SB)/8, $0x0002000200020002
DATA q5kmvidx<>+96(SB)/8, $0x0003000300030003
DATA q5kmvidx<>+104(SB)/8, $0x0003000300030003
DATA q5kmvidx<>+112(SB)/8, $0x0003000300030003
DATA q5kmvidx<>+120(SB)/8, $0x0003000300030003
DATA q5kmvidx<>+128(SB)/8, $0x0004000400040004
DATA q5kmvidx<>+136(SB)/8, $0x0004000400040004
DATA q5kmvidx<>+144(SB)/8, $0x0004000400040004
DATA q5kmvidx<>+152(SB)/8, $0x0004000400040004
DATA q5kmvidx<>+160(SB)/8, $0x0005000500050005
DATA q5kmvidx<>+168(SB)/8, $0x0005000500050005
DATA q5kmvidx<>+176(SB)/8, $0x0005000500050005
DATA q5kmvidx<>+184(SB)/8, $0x0005000500050005
DATA q5kmvidx<>+192(SB)/8, $0x0006000600060006
DATA q5kmvidx<>+200(SB)/8, $0x0006000600060006
DATA q5kmvidx<>+208(SB)/8, $0x0006000600060006
DATA q5kmvidx<>+216(SB)/8, $0x0006000600060006
DATA q5kmvidx<>+224(SB)/8, $0x0007000700070007
DATA q5kmvidx<>+232(SB)/8, $0x0007000700070007
DATA q5kmvidx<>+240(SB)/8, $0x0007000700070007
DATA q5kmvidx<>+248(SB)/8, $0x0007000700070007
GLOBL q5kmvidx<>(SB), RODATA|NOPTR, $256

// Byte shuffle of four (d, dmin) fp16 pairs into d0..d3, dmin0..dmin3.
DATA q5kmvdm<>+0(SB)/8, $0x0d0c090805040100
DATA q5kmvdm<>+8(SB)/8, $0x0f0e0b0a07060302
GLOBL q5kmvdm<>(SB), RODATA|NOPTR, $16

DATA q5knib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q5knib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q5knib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q5knib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q5knib<>(SB), RODATA|NOPTR, $32

DATA q5kb4<>+0(SB)/8, $0x1010101010101010
DATA q5kb4<>+8(SB)/8, $0x1010101010101010
DATA q5kb4<>+16(SB)/8, $0x1010101010101010
DATA q5kb4<>+24(SB)/8, $0x1010101010101010
GLOBL q5kb4<>(SB), RODATA|NOPTR, $32

// Q5KMVSC is matvec_q4k_amd64.s's Q4KMVSC (macros do not cross assembly
// files): the 8 scales of the block at P as int16 in X3, the 8 mins as
// int16 pairs (m_j, m_j) in Y2. Scratch: AX, CX, DX, R14, R15, X0.
#define Q5KMVSC(P) \
	MOVL 4(P), AX \
	MOVL 8(P), CX \
	MOVL 12(P), DX \
	MOVL DX, R14 \
	SHRL $4, R14 \
	ANDL $0x0f0f0f0f, R14 \
	MOVL CX, R15 \
	SHRL $6, R15 \
	ANDL $0x03030303, R15 \
	SHLL $4, R15 \
	ORL  R15, R14 \
	ANDL $0x3f3f3f3f, CX \
	ANDL $0x0f0f0f0f, DX \
	MOVL AX, R15 \
	SHRL $6, R15 \
	ANDL $0x03030303, R15 \
	SHLL $4, R15 \
	ORL  R15, DX \
	ANDL $0x3f3f3f3f, AX \
	SHLQ $32, DX \
	ORQ  DX, AX \
	SHLQ $32, R14 \
	ORQ  R14, CX \
	VMOVQ AX, X0 \
	VPMOVZXBW X0, X3 \
	VMOVQ CX, X0 \
	VPMOVZXBW X0, X0 \
	VPUNPCKLWD X0, X0, X2 \
	VPUNPCKHWD X0, X0, X0 \
	VINSERTI128 $1, X0, Y2, Y2

// Q5KMVNIB makes Z5 of sub-blocks 2k (bytes 0-31) and 2k+1 (32-63): the
// nibbles of the 32 qs bytes at Q with bit 4 from H (bit 4 of each byte
// of H, any other bits). Z28 holds 0x0f bytes, Z30 0x10 bytes; clobbers
// Y6. VPTERNLOGD 0xf8: A | (B & C).
#define Q5KMVNIB(Q, H) \
	VMOVDQU Q, Y5 \
	VPSRLW $4, Y5, Y6 \
	VINSERTI64X4 $1, Y6, Z5, Z5 \
	VPANDD Z28, Z5, Z5 \
	VPTERNLOGD $0xf8, Z30, H, Z5

// Q5KMVROW adds one row's super-block at P against the Q8_K block at BX:
// the isum lanes (8 int32) to AY (AZ the same register), the imin lanes
// to MY. Z4 = [qh, qh>>1]: sub-block 2k's bit is bit 2k of its bytes.
#define Q5KMVROW(P, AZ, AY, MY) \
	Q5KMVSC(P) \
	VPMADDWD 260(BX), Y2, MY \
	VPERMW Z3, Z24, Z20 \
	VPERMW Z3, Z25, Z21 \
	VPERMW Z3, Z26, Z22 \
	VPERMW Z3, Z27, Z23 \
	VMOVDQU 16(P), Y4 \
	VPSRLW $1, Y4, Y7 \
	VINSERTI64X4 $1, Y7, Z4, Z4 \
	VPSLLW $4, Z4, Z7 \
	Q5KMVNIB(48(P), Z7) \
	VPMADDUBSW 4(BX), Z5, Z5 \
	VPMADDWD Z20, Z5, AZ \
	VPSLLW $2, Z4, Z7 \
	Q5KMVNIB(80(P), Z7) \
	VPMADDUBSW 68(BX), Z5, Z5 \
	VPDPWSSD Z5, Z21, AZ \
	Q5KMVNIB(112(P), Z4) \
	VPMADDUBSW 132(BX), Z5, Z5 \
	VPDPWSSD Z5, Z22, AZ \
	VPSRLW $2, Z4, Z7 \
	Q5KMVNIB(144(P), Z7) \
	VPMADDUBSW 196(BX), Z5, Z5 \
	VPDPWSSD Z5, Z23, AZ \
	VEXTRACTI64X4 $1, AZ, Y16 \
	VPADDD Y16, AY, AY

// Q5KMVTAIL folds the four rows' isum (Y8-Y11) and imin (Y12-Y15) lanes
// of the super-blocks at SI, R11, R12, R13 and adds the four rows' float
// terms to X (Q4_K's tail). DM holds q5kmvdm. Clobbers X0-X2, Y8-Y14.
#define Q5KMVTAIL(X, DM) \
	VPHADDD Y9, Y8, Y8 \
	VPHADDD Y11, Y10, Y10 \
	VPHADDD Y10, Y8, Y8 \
	VPHADDD Y13, Y12, Y12 \
	VPHADDD Y15, Y14, Y14 \
	VPHADDD Y14, Y12, Y12 \
	VEXTRACTI128 $1, Y8, X9 \
	VPADDD X9, X8, X8 \
	VEXTRACTI128 $1, Y12, X13 \
	VPADDD X13, X12, X12 \
	VINSERTI128 $1, X12, Y8, Y8 \
	VCVTDQ2PS Y8, Y8 \
	VMOVD (SI), X0 \
	VPINSRD $1, (R11), X0, X0 \
	VPINSRD $2, (R12), X0, X0 \
	VPINSRD $3, (R13), X0, X0 \
	VPSHUFB DM, X0, X0 \
	VCVTPH2PS X0, Y0 \
	VBROADCASTSS (BX), Y1 \
	VMULPS Y1, Y0, Y0 \
	VMULPS Y8, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VSUBPS X1, X0, X0 \
	VADDPS X0, X, X

// Q5KMVPF prefetches the 4*176 bytes the group's rows advance per
// super-block, q6kmvPF ahead.
#define Q5KMVPF \
	PREFETCHT0 0(R8) \
	PREFETCHT0 64(R8) \
	PREFETCHT0 128(R8) \
	PREFETCHT0 192(R8) \
	PREFETCHT0 256(R8) \
	PREFETCHT0 320(R8) \
	PREFETCHT0 384(R8) \
	PREFETCHT0 448(R8) \
	PREFETCHT0 512(R8) \
	PREFETCHT0 576(R8) \
	PREFETCHT0 640(R8) \
	ADDQ $704, R8

// func rowsQ5_KAVX512x4(out *float32, w, x *byte, nGroups, nsb int)
// out[r] for 4*nGroups rows of nsb Q5_K super-blocks each (stored back to
// back) against one Q8_K activation row.
TEXT ·rowsQ5_KAVX512x4(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+24(FP), R9
	LEAQ q6kmvPF(SI), R8
	MOVL $0x0f, AX
	VPBROADCASTB AX, Z28
	MOVL $0x10, AX
	VPBROADCASTB AX, Z30
	VMOVDQU64 q5kmvidx<>+0(SB), Z24
	VMOVDQU64 q5kmvidx<>+64(SB), Z25
	VMOVDQU64 q5kmvidx<>+128(SB), Z26
	VMOVDQU64 q5kmvidx<>+192(SB), Z27
	VMOVDQU64 q5kmvdm<>(SB), X31

q5kmv_group:
	TESTQ R9, R9
	JZ   q5kmv_done
	MOVQ nsb+32(FP), AX
	IMULQ $176, AX
	LEAQ (SI)(AX*1), R11
	LEAQ (SI)(AX*2), R12
	LEAQ (R12)(AX*1), R13
	MOVQ x+16(FP), BX
	MOVQ nsb+32(FP), R10
	VPXORD X29, X29, X29

q5kmv_sb:
	Q5KMVPF
	Q5KMVROW(SI, Z8, Y8, Y12)
	Q5KMVROW(R11, Z9, Y9, Y13)
	Q5KMVROW(R12, Z10, Y10, Y14)
	Q5KMVROW(R13, Z11, Y11, Y15)
	Q5KMVTAIL(X29, X31)
	ADDQ $176, SI
	ADDQ $176, R11
	ADDQ $176, R12
	ADDQ $176, R13
	ADDQ $292, BX
	DECQ R10
	JNZ  q5kmv_sb

	VMOVUPS X29, (DI)
	ADDQ $16, DI
	MOVQ R13, SI
	DECQ R9
	JMP  q5kmv_group

q5kmv_done:
	VZEROUPPER
	RET

// Q5KMV2SUB adds sub-blocks 2k (low nibbles) and 2k+1 (high nibbles) of
// the 32 qs bytes at Q, bit 4 from the qh bytes in Y2 shifted into place
// by OL $AL (sub-block 2k) and OH $AH (2k+1) (word shifts of at most 4:
// bit 4 of each byte comes from the same byte), against the Q8_K qs at XA
// and XB, scaled by the int16 scales at S0 and S1, to AY. Y15 holds 0x0f
// bytes; clobbers Y3-Y7.
#define Q5KMV2SUB(Q, OL, AL, OH, AH, XA, XB, S0, S1, AY) \
	VMOVDQU Q, Y4 \
	VPSRLW $4, Y4, Y5 \
	VPAND Y15, Y4, Y4 \
	VPAND Y15, Y5, Y5 \
	OL $AL, Y2, Y3 \
	VPAND q5kb4<>(SB), Y3, Y3 \
	VPOR Y3, Y4, Y4 \
	OH $AH, Y2, Y3 \
	VPAND q5kb4<>(SB), Y3, Y3 \
	VPOR Y3, Y5, Y5 \
	VPMADDUBSW XA, Y4, Y4 \
	VPBROADCASTW S0, Y6 \
	VPMADDWD Y6, Y4, Y4 \
	VPADDD Y4, AY, AY \
	VPMADDUBSW XB, Y5, Y5 \
	VPBROADCASTW S1, Y7 \
	VPMADDWD Y7, Y5, Y5 \
	VPADDD Y5, AY, AY

// Q5KMV2ROW is Q5KMVROW on AVX2: isum lanes to AY, imin lanes to MY.
#define Q5KMV2ROW(P, AY, MY) \
	Q5KMVSC(P) \
	VMOVDQU X3, sc-16(SP) \
	VPMADDWD 260(BX), Y2, MY \
	VMOVDQU 16(P), Y2 \
	VPXOR AY, AY, AY \
	Q5KMV2SUB(48(P), VPSLLW, 4, VPSLLW, 3, 4(BX), 36(BX), sc-16(SP), sc-14(SP), AY) \
	Q5KMV2SUB(80(P), VPSLLW, 2, VPSLLW, 1, 68(BX), 100(BX), sc-12(SP), sc-10(SP), AY) \
	Q5KMV2SUB(112(P), VPSLLW, 0, VPSRLW, 1, 132(BX), 164(BX), sc-8(SP), sc-6(SP), AY) \
	Q5KMV2SUB(144(P), VPSRLW, 2, VPSRLW, 3, 196(BX), 228(BX), sc-4(SP), sc-2(SP), AY)

// func rowsQ5_KAVX2x4r(out *float32, w, x *byte, nGroups, nsb int)
// rowsQ5_KAVX512x4 on AVX2 (VPMADDUBSW, VPMADDWD by broadcast scales).
TEXT ·rowsQ5_KAVX2x4r(SB), NOSPLIT, $32-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+24(FP), R9
	LEAQ q6kmvPF(SI), R8
	VMOVDQU q5knib<>(SB), Y15

q5kmv2_group:
	TESTQ R9, R9
	JZ   q5kmv2_done
	MOVQ nsb+32(FP), AX
	IMULQ $176, AX
	LEAQ (SI)(AX*1), R11
	LEAQ (SI)(AX*2), R12
	LEAQ (R12)(AX*1), R13
	MOVQ x+16(FP), BX
	MOVQ nsb+32(FP), R10
	VXORPS X0, X0, X0
	VMOVUPS X0, acc-32(SP)

q5kmv2_sb:
	Q5KMVPF
	Q5KMV2ROW(SI, Y8, Y12)
	Q5KMV2ROW(R11, Y9, Y13)
	Q5KMV2ROW(R12, Y10, Y14)
	Q5KMV2ROW(R13, Y11, Y1)
	VMOVDQU Y1, Y15           // Q5KMVTAIL folds Y12-Y15
	VMOVUPS acc-32(SP), X7
	Q5KMVTAIL(X7, q5kmvdm<>(SB))
	VMOVUPS X7, acc-32(SP)
	VMOVDQU q5knib<>(SB), Y15
	ADDQ $176, SI
	ADDQ $176, R11
	ADDQ $176, R12
	ADDQ $176, R13
	ADDQ $292, BX
	DECQ R10
	JNZ  q5kmv2_sb

	VMOVUPS acc-32(SP), X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	MOVQ R13, SI
	DECQ R9
	JMP  q5kmv2_group

q5kmv2_done:
	VZEROUPPER
	RET
