#include "textflag.h"

// One-token (decode) Q4_K matvec kernels: four weight rows per pass, so
// the per-super-block tail (horizontal sums, int->float, the scalar
// float32 chain of the canonical order) is done for four rows in one
// set of vector instructions, and the four rows' chains run side by side
// instead of one after another. Canonical Q4_K order (generic.go
// dotQ4_KGeneric): per super-block the exact integer sums
// isum = sum_j sc_j * sum_i q_ji * x_ji and imin = sum_j m_j * bsum_j,
// then acc += float32(dd*float32(isum)) - float32(dm*float32(imin)) with
// dd = d*dx, dm = dmin*dx, in increasing super-block order. Each lane of
// the float part is one row's scalar chain, so the result is bitwise the
// generic one.

// VPERMW indices: words 0-15 pick scale 2k, words 16-31 scale 2k+1.
DATA q4kmvidx<>+0(SB)/8, $0x0000000000000000
DATA q4kmvidx<>+8(SB)/8, $0x0000000000000000
DATA q4kmvidx<>+16(SB)/8, $0x0000000000000000
DATA q4kmvidx<>+24(SB)/8, $0x0000000000000000
DATA q4kmvidx<>+32(SB)/8, $0x0001000100010001
DATA q4kmvidx<>+40(SB)/8, $0x0001000100010001
DATA q4kmvidx<>+48(SB)/8, $0x0001000100010001
DATA q4kmvidx<>+56(SB)/8, $0x0001000100010001
DATA q4kmvidx<>+64(SB)/8, $0x0002000200020002
DATA q4kmvidx<>+72(SB)/8, $0x0002000200020002
DATA q4kmvidx<>+80(SB)/8, $0x0002000200020002
DATA q4kmvidx<>+88(SB)/8, $0x0002000200020002
DATA q4kmvidx<>+96(SB)/8, $0x0003000300030003
DATA q4kmvidx<>+104(SB)/8, $0x0003000300030003
DATA q4kmvidx<>+112(SB)/8, $0x0003000300030003
DATA q4kmvidx<>+120(SB)/8, $0x0003000300030003
DATA q4kmvidx<>+128(SB)/8, $0x0004000400040004
DATA q4kmvidx<>+136(SB)/8, $0x0004000400040004
DATA q4kmvidx<>+144(SB)/8, $0x0004000400040004
DATA q4kmvidx<>+152(SB)/8, $0x0004000400040004
DATA q4kmvidx<>+160(SB)/8, $0x0005000500050005
DATA q4kmvidx<>+168(SB)/8, $0x0005000500050005
DATA q4kmvidx<>+176(SB)/8, $0x0005000500050005
DATA q4kmvidx<>+184(SB)/8, $0x0005000500050005
DATA q4kmvidx<>+192(SB)/8, $0x0006000600060006
DATA q4kmvidx<>+200(SB)/8, $0x0006000600060006
DATA q4kmvidx<>+208(SB)/8, $0x0006000600060006
DATA q4kmvidx<>+216(SB)/8, $0x0006000600060006
DATA q4kmvidx<>+224(SB)/8, $0x0007000700070007
DATA q4kmvidx<>+232(SB)/8, $0x0007000700070007
DATA q4kmvidx<>+240(SB)/8, $0x0007000700070007
DATA q4kmvidx<>+248(SB)/8, $0x0007000700070007
GLOBL q4kmvidx<>(SB), RODATA|NOPTR, $256

// Byte shuffle of four (d, dmin) fp16 pairs into d0..d3, dmin0..dmin3.
DATA q4kmvdm<>+0(SB)/8, $0x0d0c090805040100
DATA q4kmvdm<>+8(SB)/8, $0x0f0e0b0a07060302
GLOBL q4kmvdm<>(SB), RODATA|NOPTR, $16

// VPSHUFB indices (rowsQ4_KAVX512x4s): for the four products of a row
// (sub-blocks 0|2, 1|3, 4|6, 5|7 in the two 256-bit halves), the bytes
// of the first one's scale word in 128-bit lanes 0-1 and of the
// second one's in lanes 2-3, picking from a register whose every lane
// holds the row's 8 scale words.
DATA q4kmvshb<>+0(SB)/8, $0x0100010001000100
DATA q4kmvshb<>+8(SB)/8, $0x0100010001000100
DATA q4kmvshb<>+16(SB)/8, $0x0100010001000100
DATA q4kmvshb<>+24(SB)/8, $0x0100010001000100
DATA q4kmvshb<>+32(SB)/8, $0x0504050405040504
DATA q4kmvshb<>+40(SB)/8, $0x0504050405040504
DATA q4kmvshb<>+48(SB)/8, $0x0504050405040504
DATA q4kmvshb<>+56(SB)/8, $0x0504050405040504
DATA q4kmvshb<>+64(SB)/8, $0x0302030203020302
DATA q4kmvshb<>+72(SB)/8, $0x0302030203020302
DATA q4kmvshb<>+80(SB)/8, $0x0302030203020302
DATA q4kmvshb<>+88(SB)/8, $0x0302030203020302
DATA q4kmvshb<>+96(SB)/8, $0x0706070607060706
DATA q4kmvshb<>+104(SB)/8, $0x0706070607060706
DATA q4kmvshb<>+112(SB)/8, $0x0706070607060706
DATA q4kmvshb<>+120(SB)/8, $0x0706070607060706
DATA q4kmvshb<>+128(SB)/8, $0x0908090809080908
DATA q4kmvshb<>+136(SB)/8, $0x0908090809080908
DATA q4kmvshb<>+144(SB)/8, $0x0908090809080908
DATA q4kmvshb<>+152(SB)/8, $0x0908090809080908
DATA q4kmvshb<>+160(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kmvshb<>+168(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kmvshb<>+176(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kmvshb<>+184(SB)/8, $0x0d0c0d0c0d0c0d0c
DATA q4kmvshb<>+192(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kmvshb<>+200(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kmvshb<>+208(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kmvshb<>+216(SB)/8, $0x0b0a0b0a0b0a0b0a
DATA q4kmvshb<>+224(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kmvshb<>+232(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kmvshb<>+240(SB)/8, $0x0f0e0f0e0f0e0f0e
DATA q4kmvshb<>+248(SB)/8, $0x0f0e0f0e0f0e0f0e
GLOBL q4kmvshb<>(SB), RODATA|NOPTR, $256

// Constants of rowsQ4_KAVX512x4s.

// q4kmvsrld: VPSRLVD counts per 128-bit lane (0, 4, 0, 4): the scale
// bytes' third dword C shifted to give C and C>>4.
DATA q4kmvsrld<>+0(SB)/8, $0x0000000400000000
DATA q4kmvsrld<>+8(SB)/8, $0x0000000400000000
GLOBL q4kmvsrld<>(SB), RODATA|NOPTR, $16

// q4kmvlane0: VPERMD indices of dwords 0 and 2 of each 128-bit lane.
DATA q4kmvlane0<>+0(SB)/8, $0x0000000400000000
DATA q4kmvlane0<>+8(SB)/8, $0x0000000c00000008
DATA q4kmvlane0<>+16(SB)/8, $0x0000000600000002
DATA q4kmvlane0<>+24(SB)/8, $0x0000000e0000000a
GLOBL q4kmvlane0<>(SB), RODATA|NOPTR, $32

// Q4KMVROWS adds one row's super-block at P against the Q8_K block in
// Z0-Z3 (sub-blocks 0|2, 1|3, 4|6, 5|7): the row's scales (int16 words,
// 128-bit lane L of Z12) picked per product, the qs bytes read 64 at a
// time (two 32-byte groups: low nibbles sub-blocks 2k and 2k+2, high
// nibbles 2k+1 and 2k+3), products to the 16 int32 lanes AZ.
#define Q4KMVROWS(P, L, AZ) \
	VSHUFI32X4 $L, Z12, Z12, Z19 \
	VPSHUFB Z24, Z19, Z20 \
	VPSHUFB Z25, Z19, Z21 \
	VPSHUFB Z26, Z19, Z22 \
	VPSHUFB Z18, Z19, Z23 \
	VMOVDQU64 16(P), Z4 \
	VMOVDQU64 80(P), Z6 \
	VPSRLW $4, Z4, Z5 \
	VPSRLW $4, Z6, Z7 \
	VPANDD Z28, Z4, Z4 \
	VPANDD Z28, Z5, Z5 \
	VPANDD Z28, Z6, Z6 \
	VPANDD Z28, Z7, Z7 \
	VPMADDUBSW Z0, Z4, Z4 \
	VPMADDUBSW Z1, Z5, Z5 \
	VPMADDUBSW Z2, Z6, Z6 \
	VPMADDUBSW Z3, Z7, Z7 \
	VPMADDWD Z20, Z4, AZ \
	VPDPWSSD Z5, Z21, AZ \
	VPDPWSSD Z6, Z22, AZ \
	VPDPWSSD Z7, Z23, AZ

// func rowsQ4_KAVX512x4s(out *float32, w, x *byte, nGroups, nsb int)
// out[r] for the 4*nGroups rows of nsb Q4_K super-blocks each at w
// (stored back to back) against one Q8_K activation row. Pass i computes
// rows i, nGroups+i, 2*nGroups+i and 3*nGroups+i: four streams that each
// read a quarter of the matrix front to back (adjacent rows read 10-15%
// slower from DRAM; no software prefetch: see matvec_amd64.go). The four
// rows' 6-bit scales and mins are unpacked together in vector registers
// (one 128-bit lane a row) and the mins' products with the Q8_K block
// sums done for the four rows in one VPMADDWD.
TEXT ·rowsQ4_KAVX512x4s(SB), NOSPLIT, $0-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+24(FP), R9
	MOVL $0x0f, AX
	VPBROADCASTB AX, Z28
	MOVL $0x30, AX
	VPBROADCASTB AX, Z16
	MOVL $0x3f, AX
	VPBROADCASTB AX, Z17
	VMOVDQU64 q4kmvshb<>+0(SB), Z24
	VMOVDQU64 q4kmvshb<>+64(SB), Z25
	VMOVDQU64 q4kmvshb<>+128(SB), Z26
	VMOVDQU64 q4kmvshb<>+192(SB), Z18
	VBROADCASTI32X4 q4kmvsrld<>(SB), Z30
	VMOVDQU64 q4kmvlane0<>(SB), Y15
	VMOVDQU64 q4kmvdm<>(SB), X31

	// The four rows of a pass are one from each quarter of the rows, so
	// that each is read front to back as one long stream.
	MOVQ nsb+32(FP), AX
	IMULQ $144, AX            // row bytes
	IMULQ R9, AX              // a quarter of the rows
	LEAQ (SI)(AX*1), R11
	LEAQ (SI)(AX*2), R12
	LEAQ (R12)(AX*1), R13
	MOVQ R9, R15
	SHLQ $2, R15              // out bytes between the quarters
	LEAQ (R15)(R15*2), R14

q4kmvs_group:
	TESTQ R9, R9
	JZ   q4kmvs_done
	MOVQ x+16(FP), BX
	MOVQ nsb+32(FP), R10
	VPXORD X29, X29, X29

q4kmvs_sb:
	// Scales and mins of the four rows, row r in 128-bit lane r: dwords
	// A = s[0:4], B = s[4:8], C = s[8:12] (and 4 qs bytes, unused).
	// sc0-3 = A&63, m0-3 = B&63, sc4-7 = C&15 | (A>>6)<<4,
	// m4-7 = C>>4 | (B>>6)<<4 (q4KScaleMin), bytewise.
	VMOVDQU 4(SI), X0
	VINSERTI32X4 $1, 4(R11), Y0, Y0
	VINSERTI32X4 $2, 4(R12), Z0, Z0
	VINSERTI32X4 $3, 4(R13), Z0, Z0
	VPSRLD $2, Z0, Z1
	VPANDD Z16, Z1, Z1        // (A>>6)<<4, (B>>6)<<4 in dwords 0, 1
	VPSHUFD $0xaa, Z0, Z2
	VPSRLVD Z30, Z2, Z2       // C, C>>4 in dwords 0, 1
	VPTERNLOGD $0xec, Z28, Z1, Z2 // Z2 = Z2&15 | Z1: sc4-7, m4-7
	VPANDD Z17, Z0, Z0        // sc0-3, m0-3
	VPUNPCKLDQ Z2, Z0, Z0     // sc0-7, m0-7 (bytes)
	VPXORD Z1, Z1, Z1
	VPUNPCKLBW Z1, Z0, Z12    // sc0-7 as words, row r in lane r
	VPUNPCKHBW Z1, Z0, Z13    // m0-7 as words
	// Q8_K block sums of the 8 sub-blocks, in every lane.
	VMOVDQU 260(BX), Y14
	VEXTRACTI128 $1, Y14, X1
	VPHADDW X1, X14, X14
	VSHUFI32X4 $0, Z14, Z14, Z14
	VPMADDWD Z14, Z13, Z13    // imin partial sums, row r in lane r
	// The Q8_K qs paired as the rows' nibbles are (sub-blocks 0|2, 1|3,
	// 4|6, 5|7), once for the four rows.
	VMOVDQU 4(BX), Y0
	VINSERTI64X4 $1, 68(BX), Z0, Z0
	VMOVDQU 36(BX), Y1
	VINSERTI64X4 $1, 100(BX), Z1, Z1
	VMOVDQU 132(BX), Y2
	VINSERTI64X4 $1, 196(BX), Z2, Z2
	VMOVDQU 164(BX), Y3
	VINSERTI64X4 $1, 228(BX), Z3, Z3
	Q4KMVROWS(SI, 0x00, Z8)
	Q4KMVROWS(R11, 0x55, Z9)
	Q4KMVROWS(R12, 0xaa, Z10)
	Q4KMVROWS(R13, 0xff, Z11)
	// Fold the four rows' isum lanes (Z8-Z11) and imin lanes (Z13, row r
	// in 128-bit lane r) into Y8 = isum0..3, imin0..3 (exact integer
	// sums): 128-bit lanes summed pairwise across rows 0, 1 and 2, 3 so
	// that lane r holds row r's four isum partials, then isum and imin
	// partials summed side by side.
	VSHUFI32X4 $0x44, Z9, Z8, Z0
	VSHUFI32X4 $0xee, Z9, Z8, Z1
	VPADDD Z1, Z0, Z0         // row 0 in lanes 0, 1; row 1 in 2, 3
	VSHUFI32X4 $0x44, Z11, Z10, Z2
	VSHUFI32X4 $0xee, Z11, Z10, Z3
	VPADDD Z3, Z2, Z2         // rows 2, 3
	VSHUFI32X4 $0x88, Z2, Z0, Z1
	VSHUFI32X4 $0xdd, Z2, Z0, Z3
	VPADDD Z3, Z1, Z1         // row r's isum partials in lane r
	VPUNPCKLQDQ Z13, Z1, Z2
	VPUNPCKHQDQ Z13, Z1, Z3
	VPADDD Z3, Z2, Z2
	VPSHUFD $0xb1, Z2, Z3
	VPADDD Z3, Z2, Z2         // lane r: isum_r, isum_r, imin_r, imin_r
	VPERMD Z2, Z15, Z8
	VCVTDQ2PS Y8, Y8          // isum0..3, imin0..3
	// d0..3, dmin0..3 times dx.
	VMOVD (SI), X0
	VPINSRD $1, (R11), X0, X0
	VPINSRD $2, (R12), X0, X0
	VPINSRD $3, (R13), X0, X0
	VPSHUFB X31, X0, X0
	VCVTPH2PS X0, Y0
	VBROADCASTSS (BX), Y1
	VMULPS Y1, Y0, Y0         // dd0..3, dm0..3
	VMULPS Y8, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VSUBPS X1, X0, X0
	VADDPS X0, X29, X29
	ADDQ $144, SI
	ADDQ $144, R11
	ADDQ $144, R12
	ADDQ $144, R13
	ADDQ $292, BX
	DECQ R10
	JNZ  q4kmvs_sb

	VMOVSS X29, (DI)
	VEXTRACTPS $1, X29, (DI)(R15*1)
	VEXTRACTPS $2, X29, (DI)(R15*2)
	VEXTRACTPS $3, X29, (DI)(R14*1)
	ADDQ $4, DI               // each row ended where its next one starts
	DECQ R9
	JMP  q4kmvs_group

q4kmvs_done:
	VZEROUPPER
	RET

// 32-byte constants of rowsQ4_KAVX2x4s: 0x30 bytes, 0x3f bytes, the
// VPSRLVD counts (0, 0, 4, 4) of each 128-bit lane, and two VPSHUFB
// controls that spread bytes 0-3 (4-7) of each lane into the (b, b) word
// pairs of four dwords.
DATA q4kmv2c<>+0(SB)/8, $0x3030303030303030
DATA q4kmv2c<>+8(SB)/8, $0x3030303030303030
DATA q4kmv2c<>+16(SB)/8, $0x3030303030303030
DATA q4kmv2c<>+24(SB)/8, $0x3030303030303030
DATA q4kmv2c<>+32(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA q4kmv2c<>+40(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA q4kmv2c<>+48(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA q4kmv2c<>+56(SB)/8, $0x3f3f3f3f3f3f3f3f
DATA q4kmv2c<>+64(SB)/8, $0x0000000000000000
DATA q4kmv2c<>+72(SB)/8, $0x0000000400000004
DATA q4kmv2c<>+80(SB)/8, $0x0000000000000000
DATA q4kmv2c<>+88(SB)/8, $0x0000000400000004
DATA q4kmv2c<>+96(SB)/8, $0x8001800180008000
DATA q4kmv2c<>+104(SB)/8, $0x8003800380028002
DATA q4kmv2c<>+112(SB)/8, $0x8001800180008000
DATA q4kmv2c<>+120(SB)/8, $0x8003800380028002
DATA q4kmv2c<>+128(SB)/8, $0x8005800580048004
DATA q4kmv2c<>+136(SB)/8, $0x8007800780068006
DATA q4kmv2c<>+144(SB)/8, $0x8005800580048004
DATA q4kmv2c<>+152(SB)/8, $0x8007800780068006
GLOBL q4kmv2c<>(SB), RODATA|NOPTR, $160

// Byte shuffle of four (d, dmin) fp16 pairs into d0, d1, dmin0, dmin1,
// d2, d3, dmin2, dmin3 (rowsQ4_KAVX2x4s's float lanes).
DATA q4kmv2dm<>+0(SB)/8, $0x0706030205040100
DATA q4kmv2dm<>+8(SB)/8, $0x0f0e0b0a0d0c0908
GLOBL q4kmv2dm<>(SB), RODATA|NOPTR, $16

// Q4KMV2PROD: one row's products for chunk W (32 qs bytes: low nibbles
// sub-block 2c, high nibbles 2c+1) against the chunk's activations in
// Y6, Y7 (int16 pair sums in T0, T1: at most 2*15*128, no saturation),
// and the sub-blocks' (sc, sc) word pairs broadcast from SA, SB into Y2,
// Y3. Q4KMV2NEXT adds them, scaled, to the row's int32 lanes ACC;
// Q4KMV2FIRST starts ACC with them. Y15 holds 0x0f bytes.
#define Q4KMV2PROD(W, SA, SB, T0, T1) \
	VMOVDQU W, T0 \
	VPSRLW $4, T0, T1 \
	VPAND Y15, T0, T0 \
	VPAND Y15, T1, T1 \
	VPMADDUBSW Y6, T0, T0 \
	VPMADDUBSW Y7, T1, T1 \
	VPBROADCASTD SA, Y2 \
	VPBROADCASTD SB, Y3

#define Q4KMV2NEXT(W, SA, SB, ACC, T0, T1) \
	Q4KMV2PROD(W, SA, SB, T0, T1) \
	VPMADDWD Y2, T0, T0 \
	VPMADDWD Y3, T1, T1 \
	VPADDD T0, ACC, ACC \
	VPADDD T1, ACC, ACC

#define Q4KMV2FIRST(W, SA, SB, ACC, T0, T1) \
	Q4KMV2PROD(W, SA, SB, T0, T1) \
	VPMADDWD Y2, T0, ACC \
	VPMADDWD Y3, T1, T1 \
	VPADDD T1, ACC, ACC

// func rowsQ4_KAVX2x4s(out *float32, w, x *byte, nGroups, nsb int)
// rowsQ4_KAVX512x4s on AVX2 (the same rows a pass and streams): the four
// rows' 12 scale bytes transposed (dwords A, B of rows 0, 1 in 128-bit
// lane 0, of rows 2, 3 in lane 1) so that one set of operations unpacks
// the four rows' scales and mins, the scales stored once as
// (sc_j, sc_j) word pairs (four VPSHUFB) so that each sub-block's scale
// vector is a VPBROADCASTD from memory (a load alone, where VPBROADCASTW
// needs port 5 too), the mins' products with the block sums in two
// VPMADDWD, laid out (rows 0 0 1 1 | 2 2 3 3) as the isum partials are
// after two VPHADDD and a lane fold, so that one more VPHADDD gives isum
// and imin of the four rows side by side and the float part runs on
// (dd, dm) pairs; no software prefetch (matvec_amd64.go). That layout
// took the per-super-block work outside the products from about 66 to
// about 52 vector operations: Zen 4, AVX2 forced, rows in L2
// (BenchmarkMatMul q4_K 768x2048 tok1 t1, per CPU-second, alternated)
// 26.2-26.3 -> 26.7-28.6 GB/s. (On this machine removing the
// instructions outside the products altogether gives 43 GB/s, removing
// shifts or scale multiplies from the products nothing: the loop is
// bound by its count of vector operations, not by one port.) The
// products go chunk by chunk
// (32 qs bytes: sub-blocks 2c, 2c+1) with the four rows side by side:
// the chunk's two activation vectors are read once for the four rows
// instead of as a memory operand of each row's VPMADDUBSW (8 loads a
// super-block instead of 32), and each row's four chains are interleaved
// with the other rows'. Zen 3, rows in L2 (64x2048, 16x5632): 87-92 ->
// 78-82 cycles per four-row super-block, +12%. Measured the same or
// slower: two rows' ops alternated instruction by instruction; the
// nibbles as VPAND/VPANDN memory operands (one instruction fewer a
// chunk); a tail without VPHADDD (unpacks, VPERM2I128, VPBLENDD: more
// instructions, though VPHADDD issues once per 2 cycles); the next
// super-block's scale unpack, or the previous one's float part, moved a
// loop iteration away (through stack slots).
TEXT ·rowsQ4_KAVX2x4s(SB), NOSPLIT, $128-40
	MOVQ out+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+24(FP), R9
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15

	// The four rows of a pass are one from each quarter of the rows, so
	// that each is read front to back as one long stream.
	MOVQ nsb+32(FP), AX
	IMULQ $144, AX            // row bytes
	IMULQ R9, AX              // a quarter of the rows
	LEAQ (SI)(AX*1), R11
	LEAQ (SI)(AX*2), R12
	LEAQ (R12)(AX*1), R13
	MOVQ R9, R15
	SHLQ $2, R15              // out bytes between the quarters
	LEAQ (R15)(R15*2), R14

q4kmv2s_group:
	TESTQ R9, R9
	JZ   q4kmv2s_done
	MOVQ x+16(FP), BX
	MOVQ nsb+32(FP), R10
	VXORPS Y14, Y14, Y14

q4kmv2s_sb:
	// Scales and mins of the four rows (dwords A = s[0:4], B = s[4:8],
	// C = s[8:12] of each), transposed so that rows 0, 1 share 128-bit
	// lane 0 and rows 2, 3 lane 1: lo = (A0 A1 B0 B1)&63 = sc0-3 and m0-3
	// of the lane's two rows, hi = sc4-7 and m4-7 (q4KScaleMin's
	// formulas, bytewise; see rowsQ4_KAVX512x4s).
	VMOVDQU 4(SI), X0
	VINSERTI128 $1, 4(R12), Y0, Y0  // A0 B0 C0 . | A2 B2 C2 .
	VMOVDQU 4(R11), X3
	VINSERTI128 $1, 4(R13), Y3, Y3  // A1 B1 C1 . | A3 B3 C3 .
	VPUNPCKLDQ Y3, Y0, Y1     // A0 A1 B0 B1 | A2 A3 B2 B3
	VPUNPCKHDQ Y3, Y0, Y2     // C0 C1 . . | C2 C3 . .
	VPSHUFD $0x44, Y2, Y2     // C0 C1 C0 C1 | C2 C3 C2 C3
	VPSRLVD q4kmv2c<>+64(SB), Y2, Y2 // C, C, C>>4, C>>4
	VPAND Y15, Y2, Y2
	VPSRLD $2, Y1, Y3
	VPAND q4kmv2c<>+0(SB), Y3, Y3 // (A>>6)<<4, (B>>6)<<4 bytewise
	VPOR Y3, Y2, Y2           // hi: sc4-7 r0, r1, m4-7 r0, r1 | r2, r3
	VPAND q4kmv2c<>+32(SB), Y1, Y1 // lo: sc0-3 r0, r1, m0-3 r0, r1 | r2, r3
	// The scales as (sc_j, sc_j) word pairs, row r's j = 0..3 (4..7) at
	// sc-128 (sc-64) + 16r for r = 0, 1 and sc-112 (sc-48) + 16(r-2)
	// for r = 2, 3; see the per-chunk operands below.
	VPSHUFB q4kmv2c<>+96(SB), Y1, Y3
	VMOVDQU Y3, sc-128(SP)    // j 0-3: row 0 | row 2
	VPSHUFB q4kmv2c<>+128(SB), Y1, Y3
	VMOVDQU Y3, sc-96(SP)     // j 0-3: row 1 | row 3
	VPSHUFB q4kmv2c<>+96(SB), Y2, Y3
	VMOVDQU Y3, sc-64(SP)     // j 4-7: row 0 | row 2
	VPSHUFB q4kmv2c<>+128(SB), Y2, Y3
	VMOVDQU Y3, sc-32(SP)     // j 4-7: row 1 | row 3
	// The mins' products with the Q8_K sums of the 8 sub-blocks:
	// Y12 = partial imin of rows 0 0 1 1 | 2 2 3 3.
	VPXOR Y7, Y7, Y7
	VPUNPCKHBW Y7, Y1, Y12    // m0-3 words: row 0, row 1 | row 2, row 3
	VPUNPCKHBW Y7, Y2, Y13    // m4-7
	VMOVDQU 260(BX), Y3
	VEXTRACTI128 $1, Y3, X4
	VPHADDW X4, X3, X3        // sums b0..b7 of the 8 sub-blocks
	VPERMQ $0x00, Y3, Y4      // b0-3 in every quarter
	VPERMQ $0x55, Y3, Y3      // b4-7
	VPMADDWD Y4, Y12, Y12
	VPMADDWD Y3, Y13, Y13
	VPADDD Y13, Y12, Y12
	// Chunk c (qs bytes 32c..32c+31: sub-blocks 2c, 2c+1) of the four
	// rows side by side, against its activations read once.
	VMOVDQU 4(BX), Y6
	VMOVDQU 36(BX), Y7
	Q4KMV2FIRST(16(SI), sc-128(SP), sc-124(SP), Y8, Y0, Y1)
	Q4KMV2FIRST(16(R11), sc-96(SP), sc-92(SP), Y9, Y4, Y5)
	Q4KMV2FIRST(16(R12), sc-112(SP), sc-108(SP), Y10, Y0, Y1)
	Q4KMV2FIRST(16(R13), sc-80(SP), sc-76(SP), Y11, Y4, Y5)
	VMOVDQU 68(BX), Y6
	VMOVDQU 100(BX), Y7
	Q4KMV2NEXT(48(SI), sc-120(SP), sc-116(SP), Y8, Y0, Y1)
	Q4KMV2NEXT(48(R11), sc-88(SP), sc-84(SP), Y9, Y4, Y5)
	Q4KMV2NEXT(48(R12), sc-104(SP), sc-100(SP), Y10, Y0, Y1)
	Q4KMV2NEXT(48(R13), sc-72(SP), sc-68(SP), Y11, Y4, Y5)
	VMOVDQU 132(BX), Y6
	VMOVDQU 164(BX), Y7
	Q4KMV2NEXT(80(SI), sc-64(SP), sc-60(SP), Y8, Y0, Y1)
	Q4KMV2NEXT(80(R11), sc-32(SP), sc-28(SP), Y9, Y4, Y5)
	Q4KMV2NEXT(80(R12), sc-48(SP), sc-44(SP), Y10, Y0, Y1)
	Q4KMV2NEXT(80(R13), sc-16(SP), sc-12(SP), Y11, Y4, Y5)
	VMOVDQU 196(BX), Y6
	VMOVDQU 228(BX), Y7
	Q4KMV2NEXT(112(SI), sc-56(SP), sc-52(SP), Y8, Y0, Y1)
	Q4KMV2NEXT(112(R11), sc-24(SP), sc-20(SP), Y9, Y4, Y5)
	Q4KMV2NEXT(112(R12), sc-40(SP), sc-36(SP), Y10, Y0, Y1)
	Q4KMV2NEXT(112(R13), sc-8(SP), sc-4(SP), Y11, Y4, Y5)
	// isum and imin of the four rows (exact integer sums) as
	// isum0 isum1 imin0 imin1 | isum2 isum3 imin2 imin3.
	VPHADDD Y9, Y8, Y8        // rows 0 0 1 1 | 0 0 1 1
	VPHADDD Y11, Y10, Y10     // rows 2 2 3 3 | 2 2 3 3
	VPERM2I128 $0x20, Y10, Y8, Y9
	VPERM2I128 $0x31, Y10, Y8, Y11
	VPADDD Y11, Y9, Y9        // rows 0 0 1 1 | 2 2 3 3
	VPHADDD Y12, Y9, Y9
	VCVTDQ2PS Y9, Y9
	VMOVD (SI), X0
	VPINSRD $1, (R11), X0, X0
	VPINSRD $2, (R12), X0, X0
	VPINSRD $3, (R13), X0, X0
	VPSHUFB q4kmv2dm<>(SB), X0, X0
	VCVTPH2PS X0, Y0          // d0 d1 dmin0 dmin1 | d2 d3 dmin2 dmin3
	VBROADCASTSS (BX), Y2
	VMULPS Y2, Y0, Y0         // dd, dm
	VMULPS Y9, Y0, Y0         // dd*isum, dm*imin
	VPERMILPS $0x4e, Y0, Y1
	VSUBPS Y1, Y0, Y0         // row r's term in lanes 0, 1 | 4, 5
	VADDPS Y0, Y14, Y14
	ADDQ $144, SI
	ADDQ $144, R11
	ADDQ $144, R12
	ADDQ $144, R13
	ADDQ $292, BX
	DECQ R10
	JNZ  q4kmv2s_sb

	VMOVSS X14, (DI)
	VEXTRACTPS $1, X14, (DI)(R15*1)
	VEXTRACTF128 $1, Y14, X0
	VMOVSS X0, (DI)(R15*2)
	VEXTRACTPS $1, X0, (DI)(R14*1)
	ADDQ $4, DI               // each row ended where its next one starts
	DECQ R9
	JMP  q4kmv2s_group

q4kmv2s_done:
	VZEROUPPER
	RET
