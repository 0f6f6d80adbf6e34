#include "textflag.h"

// VPDPBUSDY(D, U, S): VEX-encoded (AVX-VNNI) VPDPBUSD YD, YU, YS -- YD +=
// per int32 lane the sum of 4 products of YU's unsigned bytes by YS's
// signed bytes. Register numbers, not names: the Go assembler knows only
// the EVEX form, which AVX-VNNI CPUs without AVX-512 (Alder Lake) lack.
#define VPDPBUSDY(D, U, S) \
	BYTE $0xC4; BYTE $(0xE2 ^ ((D>>3)<<7) ^ ((S>>3)<<5)); BYTE $(((15-U)<<3) | 5); BYTE $0x50; BYTE $(0xC0 | ((D&7)<<3) | (S&7))

// Q8_0 multi-token tiles of the AVX2 path: 4 weight rows x 2 tokens, in
// two forms, AVX-VNNI (VPDPBUSD) and plain AVX2 (VPMADDUBSW + VPMADDWD, what
// a Zen 3 runs). The canonical order puts even blocks in lanes 0-7 and odd
// blocks in lanes 8-15; 8 (row, token) outputs times 16 lanes would need 16
// accumulators, so each tile makes two passes over its rows: the even
// blocks into Y0-Y7 (then saved on the stack), the odd blocks into Y0-Y7,
// then lane j (even) + lane j+8 (odd) and the 8-lane tree, exactly the
// canonical reduction. Y(2r+t) is the accumulator of (row r, token t).
//
// Operands, shared by both forms: out[t*outStride + r] for 2 tokens whose
// tile rows (q8tile.go: per block pair 192 bytes of qs, -128*lane sums, dx
// x8) are xtStride bytes apart, and 4*nGroups weight rows repacked by
// q8PackTile (per block in pass order, the 4 rows' weights then their
// widened scales (dw0..dw3) twice). One block step: d = (dw0..dw3 twice)
// x (dx0 x4, dx1 x4), the 8 products dw_r*dx_t in one multiply, stored at
// dd-32(SP) and broadcast per output; then per row the exact integer sums
// of 4 products per lane, converted, and one FMA each.
//
// Registers in the block step: Y8, Y9 the tokens' qs, Y12 the row's
// weights; AX the packed block, R10 and R11 the tokens' tile rows at the
// current block's half.

#define Q42D(DW) \
	VMOVDQU (R10), Y8 \
	VMOVDQU (R11), Y9 \
	VMOVUPS 128(R10), X14 \
	VINSERTF128 $1, 128(R11), Y14, Y14 \
	VMULPS DW(AX), Y14, Y14 \
	VMOVUPS Y14, dd-32(SP)

// Q8V42ROW: one weight row (w+128 at W(AX)) times both tokens, AVX-VNNI.
// Starting the integer sum at the token's correction -128*sum(x) (tile
// offset 64) gives the exact signed sum.
#define Q8V42ROW(W, D0, D1, A0, A1) \
	VMOVDQU W(AX), Y12 \
	VMOVDQU 64(R10), Y13 \
	VPDPBUSDY(13, 12, 8) \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D0(SP), Y14 \
	VFMADD231PS Y14, Y13, A0 \
	VMOVDQU 64(R11), Y11 \
	VPDPBUSDY(11, 12, 9) \
	VCVTDQ2PS Y11, Y11 \
	VBROADCASTSS D1(SP), Y10 \
	VFMADD231PS Y10, Y11, A1

// Q8P42ROW: the same with VPMADDUBSW: |w| (unsigned, at W+32; -128 gives
// 128) times x negated where w < 0 ((x XOR m) - m with the row's sign
// mask m at W: what VPSIGNB does, in two ops that can also run on a
// shuffle port, since VPSIGNB shares its two ports with the multiplies;
// x is never -128), int16 pairs (at most 2*128*127, no saturation)
// summed by VPMADDWD with ones (Y15) into the 8 int32 lane sums.
#define Q8P42ROW(W, D0, D1, A0, A1) \
	VMOVDQU W(AX), Y12 \
	VMOVDQU W+32(AX), Y11 \
	VPXOR Y12, Y8, Y13 \
	VPSUBB Y12, Y13, Y13 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDWD Y15, Y13, Y13 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D0(SP), Y14 \
	VFMADD231PS Y14, Y13, A0 \
	VPXOR Y12, Y9, Y13 \
	VPSUBB Y12, Y13, Y13 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDWD Y15, Y13, Y13 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D1(SP), Y10 \
	VFMADD231PS Y10, Y13, A1

// Q8S42ROW: Q8P42ROW with VPSIGNB (x signed by w, with w at W and |w| at
// W+32): one op instead of two, on CPUs whose sign op does not compete
// with the multiplies (q8_0TilesAVX2 chooses).
#define Q8S42ROW(W, D0, D1, A0, A1) \
	VMOVDQU W(AX), Y12 \
	VMOVDQU W+32(AX), Y11 \
	VPSIGNB Y12, Y8, Y13 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDWD Y15, Y13, Y13 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D0(SP), Y14 \
	VFMADD231PS Y14, Y13, A0 \
	VPSIGNB Y12, Y9, Y13 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDWD Y15, Y13, Y13 \
	VCVTDQ2PS Y13, Y13 \
	VBROADCASTSS D1(SP), Y10 \
	VFMADD231PS Y10, Y13, A1

// Q8T42ROW: Q8S42ROW with the scale products made in registers: the
// row's dw broadcast from the packed block (at DW) times each token's dx,
// stored x8 in its tile row (offset 128). Same products, so the same
// bits; it replaces Q42D's stack round trip, whose 256-bit store read back
// as 32-bit broadcasts at 8 offsets stalls store forwarding on Zen 3.
//
// The two tokens' chains are interleaved (the products land in the weight
// registers once the signs and multiplies have read them): two independent
// dependency chains side by side instead of one after the other, +2-4% on
// a Zen 3 (16 rows x 64 tokens, 288 to 2048 columns, in cache).
#define Q8T42ROW(W, DW, A0, A1) \
	VMOVDQU W(AX), Y12 \
	VMOVDQU W+32(AX), Y11 \
	VBROADCASTSS DW(AX), Y14 \
	VPSIGNB Y12, Y8, Y13 \
	VPSIGNB Y12, Y9, Y10 \
	VPMADDUBSW Y13, Y11, Y13 \
	VPMADDUBSW Y10, Y11, Y10 \
	VMULPS 128(R10), Y14, Y12 \
	VMULPS 128(R11), Y14, Y11 \
	VPMADDWD Y15, Y13, Y13 \
	VPMADDWD Y15, Y10, Y10 \
	VCVTDQ2PS Y13, Y13 \
	VCVTDQ2PS Y10, Y10 \
	VFMADD231PS Y12, Y13, A0 \
	VFMADD231PS Y11, Y10, A1

#define Q42STEP(E) \
	ADDQ $E, AX \
	ADDQ $192, R10 \
	ADDQ $192, R11

#define Q42ZERO \
	VXORPS Y0, Y0, Y0 \
	VXORPS Y1, Y1, Y1 \
	VXORPS Y2, Y2, Y2 \
	VXORPS Y3, Y3, Y3 \
	VXORPS Y4, Y4, Y4 \
	VXORPS Y5, Y5, Y5 \
	VXORPS Y6, Y6, Y6 \
	VXORPS Y7, Y7, Y7

#define Q42SAVE \
	VMOVUPS Y0, ev-288(SP) \
	VMOVUPS Y1, ev-256(SP) \
	VMOVUPS Y2, ev-224(SP) \
	VMOVUPS Y3, ev-192(SP) \
	VMOVUPS Y4, ev-160(SP) \
	VMOVUPS Y5, ev-128(SP) \
	VMOVUPS Y6, ev-96(SP) \
	VMOVUPS Y7, ev-64(SP)

// Q42FIN finishes the 8 outputs with the canonical tree, all at once:
// lane j (odd blocks, in Y0-Y7) + lane j (even blocks, saved) - the
// canonical j += j+8, commutative - then j += j+4 for two accumulators
// per register (VPERM2F128 pairs their halves), j += j+2 and j += j+1 for
// four (VSHUFPS pairs the lanes). Each addition has the operands of the
// canonical tree, so the bits are the same; the result is (rows 0-3 of
// token 0 | rows 0-3 of token 1), stored as two 4-float rows.
#define Q42FIN \
	VADDPS ev-288(SP), Y0, Y0 \
	VADDPS ev-256(SP), Y1, Y1 \
	VADDPS ev-224(SP), Y2, Y2 \
	VADDPS ev-192(SP), Y3, Y3 \
	VADDPS ev-160(SP), Y4, Y4 \
	VADDPS ev-128(SP), Y5, Y5 \
	VADDPS ev-96(SP), Y6, Y6 \
	VADDPS ev-64(SP), Y7, Y7 \
	Q42TREE

// Q42TREE is Q42FIN after the j += j+8 step.
#define Q42TREE \
	VPERM2F128 $0x20, Y1, Y0, Y8 \
	VPERM2F128 $0x31, Y1, Y0, Y9 \
	VADDPS Y9, Y8, Y0 \
	VPERM2F128 $0x20, Y3, Y2, Y8 \
	VPERM2F128 $0x31, Y3, Y2, Y9 \
	VADDPS Y9, Y8, Y1 \
	VPERM2F128 $0x20, Y5, Y4, Y8 \
	VPERM2F128 $0x31, Y5, Y4, Y9 \
	VADDPS Y9, Y8, Y2 \
	VPERM2F128 $0x20, Y7, Y6, Y8 \
	VPERM2F128 $0x31, Y7, Y6, Y9 \
	VADDPS Y9, Y8, Y3 \
	VSHUFPS $0x44, Y1, Y0, Y8 \
	VSHUFPS $0xEE, Y1, Y0, Y9 \
	VADDPS Y9, Y8, Y0 \
	VSHUFPS $0x44, Y3, Y2, Y8 \
	VSHUFPS $0xEE, Y3, Y2, Y9 \
	VADDPS Y9, Y8, Y1 \
	VSHUFPS $0x88, Y1, Y0, Y8 \
	VSHUFPS $0xDD, Y1, Y0, Y9 \
	VADDPS Y9, Y8, Y0 \
	VMOVUPS X0, (DI) \
	VEXTRACTF128 $1, Y0, (DI)(R9*1)

// Q42TOK points R10/R11 at the tokens' tile rows plus HALF (0: even
// blocks, 32: odd) and R13 at nb.
#define Q42TOK(HALF) \
	MOVQ xt+32(FP), R10 \
	ADDQ $HALF, R10 \
	MOVQ xtStride+40(FP), R11 \
	ADDQ R10, R11 \
	MOVQ nb+48(FP), R13

#define Q42ARGS \
	MOVQ out+0(FP), DI \
	MOVQ outStride+8(FP), R9 \
	SHLQ $2, R9 \
	MOVQ wp+16(FP), AX \
	MOVQ nGroups+24(FP), R8

// func tileQ8_0x42VNNI(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nb int)
TEXT ·tileQ8_0x42VNNI(SB), NOSPLIT, $288-56
	Q42ARGS

q8v42_group:
	TESTQ R8, R8
	JZ   q8v42_done
	Q42ZERO
	Q42TOK(0)
	INCQ R13
	SHRQ $1, R13          // even blocks: ceil(nb/2) >= 1

q8v42_even:
	Q42D(128)
	Q8V42ROW(0, dd-32, dd-16, Y0, Y1)
	Q8V42ROW(32, dd-28, dd-12, Y2, Y3)
	Q8V42ROW(64, dd-24, dd-8, Y4, Y5)
	Q8V42ROW(96, dd-20, dd-4, Y6, Y7)
	Q42STEP(160)
	DECQ R13
	JNZ  q8v42_even
	Q42SAVE
	Q42ZERO
	Q42TOK(32)
	SHRQ $1, R13          // odd blocks: floor(nb/2)
	JZ   q8v42_fin

q8v42_odd:
	Q42D(128)
	Q8V42ROW(0, dd-32, dd-16, Y0, Y1)
	Q8V42ROW(32, dd-28, dd-12, Y2, Y3)
	Q8V42ROW(64, dd-24, dd-8, Y4, Y5)
	Q8V42ROW(96, dd-20, dd-4, Y6, Y7)
	Q42STEP(160)
	DECQ R13
	JNZ  q8v42_odd

q8v42_fin:
	Q42FIN
	ADDQ $16, DI
	DECQ R8
	JMP  q8v42_group

q8v42_done:
	VZEROUPPER
	RET

// Q42LOAD starts Y0-Y7 at the 8 accumulators at OFF(DX) (a chunk before
// this one left them there).
#define Q42LOAD(OFF) \
	VMOVUPS OFF(DX), Y0 \
	VMOVUPS OFF+32(DX), Y1 \
	VMOVUPS OFF+64(DX), Y2 \
	VMOVUPS OFF+96(DX), Y3 \
	VMOVUPS OFF+128(DX), Y4 \
	VMOVUPS OFF+160(DX), Y5 \
	VMOVUPS OFF+192(DX), Y6 \
	VMOVUPS OFF+224(DX), Y7

// Q42KEEP stores Y0-Y7 at OFF(DX).
#define Q42KEEP(OFF) \
	VMOVUPS Y0, OFF(DX) \
	VMOVUPS Y1, OFF+32(DX) \
	VMOVUPS Y2, OFF+64(DX) \
	VMOVUPS Y3, OFF+96(DX) \
	VMOVUPS Y4, OFF+128(DX) \
	VMOVUPS Y5, OFF+160(DX) \
	VMOVUPS Y6, OFF+192(DX) \
	VMOVUPS Y7, OFF+224(DX)

// Q42TOKS is Q42TOK from the token pair's tile rows at SI.
#define Q42TOKS(HALF) \
	MOVQ SI, R10 \
	ADDQ $HALF, R10 \
	MOVQ xtStride+40(FP), R11 \
	ADDQ R10, R11 \
	MOVQ nb+48(FP), R13

// func tileQ8_0x42AVX2(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nb int, sign bool, nPairs int, pf *byte, pfPer, pfLen int)
// sign: the rows were packed with w (VPSIGNB form), not the sign mask.
// nPairs token pairs (tile rows 2*xtStride bytes apart, outputs
// 2*outStride floats apart) in one call: at 9 blocks a row (bench-15M) a
// pair's work is ~300 ns, and a Go call, its slice arithmetic and the
// prefetch step per pair cost a few percent of it. Before each pair,
// PREFETCHT1 of the next pfPer bytes at pf (of pfLen): rowPrefetch's
// spread of the next row tile over the token loop.
TEXT ·tileQ8_0x42AVX2(SB), NOSPLIT, $288-96
	MOVL $0x00010001, R10
	VMOVQ R10, X15
	VPBROADCASTD X15, Y15
	MOVQ out+0(FP), BX
	MOVQ xt+32(FP), SI
	MOVQ nPairs+64(FP), R12
	MOVQ pf+72(FP), CX
	MOVQ pfLen+88(FP), R14

q8p42_pair:
	TESTQ R12, R12
	JZ   q8p42_done
	MOVQ pfPer+80(FP), DX
	CMPQ DX, R14
	CMOVQGT R14, DX
	SUBQ DX, R14
	ADDQ CX, DX               // end of this pair's prefetch

q8p42_pf:
	CMPQ CX, DX
	JAE  q8p42_pfdone
	PREFETCHT1 (CX)
	ADDQ $64, CX
	JMP  q8p42_pf

q8p42_pfdone:
	MOVQ DX, CX
	MOVQ BX, DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ wp+16(FP), AX
	MOVQ nGroups+24(FP), R8

q8p42_group:
	TESTQ R8, R8
	JZ   q8p42_next
	Q42ZERO
	Q42TOKS(0)
	INCQ R13
	SHRQ $1, R13
	CMPB sign+56(FP), $0
	JNE  q8s42_even

q8p42_even:
	Q42D(256)
	Q8P42ROW(0, dd-32, dd-16, Y0, Y1)
	Q8P42ROW(64, dd-28, dd-12, Y2, Y3)
	Q8P42ROW(128, dd-24, dd-8, Y4, Y5)
	Q8P42ROW(192, dd-20, dd-4, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8p42_even
	JMP  q8p42_mid

q8s42_even:
	VMOVDQU (R10), Y8
	VMOVDQU (R11), Y9
	Q8T42ROW(0, 256, Y0, Y1)
	Q8T42ROW(64, 260, Y2, Y3)
	Q8T42ROW(128, 264, Y4, Y5)
	Q8T42ROW(192, 268, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8s42_even

q8p42_mid:
	Q42SAVE
	Q42ZERO
	Q42TOKS(32)
	SHRQ $1, R13
	JZ   q8p42_fin
	CMPB sign+56(FP), $0
	JNE  q8s42_odd

q8p42_odd:
	Q42D(256)
	Q8P42ROW(0, dd-32, dd-16, Y0, Y1)
	Q8P42ROW(64, dd-28, dd-12, Y2, Y3)
	Q8P42ROW(128, dd-24, dd-8, Y4, Y5)
	Q8P42ROW(192, dd-20, dd-4, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8p42_odd
	JMP  q8p42_fin

q8s42_odd:
	VMOVDQU (R10), Y8
	VMOVDQU (R11), Y9
	Q8T42ROW(0, 256, Y0, Y1)
	Q8T42ROW(64, 260, Y2, Y3)
	Q8T42ROW(128, 264, Y4, Y5)
	Q8T42ROW(192, 268, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8s42_odd

q8p42_fin:
	Q42FIN
	ADDQ $16, DI
	DECQ R8
	JMP  q8p42_group

q8p42_next:
	LEAQ (BX)(R9*2), BX       // two output rows on
	MOVQ xtStride+40(FP), DX
	LEAQ (SI)(DX*2), SI       // two tile rows on
	DECQ R12
	JMP  q8p42_pair

q8p42_done:
	VZEROUPPER
	RET

// func tileQ8_0x42AVX2C(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nPairs int, pf *byte, pfPer, pfLen int, gStride, evenOff, oddOff, nEven, nOdd int, acc *float32, accPairStride, flags int)
// tileQ8_0x42AVX2 in column chunks (q8TilesPlain), for rows of many
// blocks; a kernel apart because its bookkeeping per group and pair (the
// accumulators through memory, the offsets from the frame) made the
// 288-column shapes 10% slower. One call runs a chunk of the rows' blocks:
// per group (gStride bytes apart in wp) nEven even blocks from
// evenOff and nOdd odd ones from oddOff, the tokens' tile rows at xt
// already at the chunk's first block pair. Each (pair, group) keeps its 16
// accumulators (even lanes, then odd) in 512 bytes of acc, the pairs
// accPairStride bytes apart. flags: 1, the rows were packed with w
// (VPSIGNB form), not the sign mask; 2, the accumulators start from acc
// (a later chunk), else from zero; 4, the chunk is the last: the outputs
// are finished and stored, else the accumulators go back to acc.
// Storing and reloading a float changes no bit, so every lane sums its
// blocks in the same order whatever the chunks.
TEXT ·tileQ8_0x42AVX2C(SB), NOSPLIT, $304-144
	MOVL $0x00010001, R10
	VMOVQ R10, X15
	VPBROADCASTD X15, Y15
	MOVQ out+0(FP), BX
	MOVQ xt+32(FP), SI
	MOVQ nPairs+48(FP), R12
	MOVQ pf+56(FP), CX
	MOVQ pfLen+72(FP), R14
	MOVQ acc+120(FP), DX
	MOVQ DX, accp-296(SP)

q8c42_pair:
	TESTQ R12, R12
	JZ   q8c42_done
	MOVQ pfPer+64(FP), DX
	CMPQ DX, R14
	CMOVQGT R14, DX
	SUBQ DX, R14
	ADDQ CX, DX               // end of this pair's prefetch

q8c42_pf:
	CMPQ CX, DX
	JAE  q8c42_pfdone
	PREFETCHT1 (CX)
	ADDQ $64, CX
	JMP  q8c42_pf

q8c42_pfdone:
	MOVQ DX, CX
	MOVQ BX, DI
	MOVQ outStride+8(FP), R9
	SHLQ $2, R9
	MOVQ wp+16(FP), AX
	MOVQ AX, gbase-304(SP)
	MOVQ accp-296(SP), DX
	MOVQ nGroups+24(FP), R8

q8c42_group:
	TESTQ R8, R8
	JZ   q8c42_next
	MOVQ gbase-304(SP), AX
	ADDQ evenOff+88(FP), AX
	Q42ZERO
	TESTQ $2, flags+136(FP)
	JZ   q8c42_e0
	Q42LOAD(0)

q8c42_e0:
	MOVQ SI, R10
	MOVQ xtStride+40(FP), R11
	ADDQ R10, R11
	MOVQ nEven+104(FP), R13
	TESTQ R13, R13
	JZ   q8c42_mid
	TESTQ $1, flags+136(FP)
	JNZ  q8d42_even

q8c42_even:
	Q42D(256)
	Q8P42ROW(0, dd-32, dd-16, Y0, Y1)
	Q8P42ROW(64, dd-28, dd-12, Y2, Y3)
	Q8P42ROW(128, dd-24, dd-8, Y4, Y5)
	Q8P42ROW(192, dd-20, dd-4, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8c42_even
	JMP  q8c42_mid

q8d42_even:
	VMOVDQU (R10), Y8
	VMOVDQU (R11), Y9
	Q8T42ROW(0, 256, Y0, Y1)
	Q8T42ROW(64, 260, Y2, Y3)
	Q8T42ROW(128, 264, Y4, Y5)
	Q8T42ROW(192, 268, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8d42_even

q8c42_mid:
	Q42KEEP(0)
	MOVQ gbase-304(SP), AX
	ADDQ oddOff+96(FP), AX
	Q42ZERO
	TESTQ $2, flags+136(FP)
	JZ   q8c42_o0
	Q42LOAD(256)

q8c42_o0:
	MOVQ SI, R10
	ADDQ $32, R10
	MOVQ xtStride+40(FP), R11
	ADDQ R10, R11
	MOVQ nOdd+112(FP), R13
	TESTQ R13, R13
	JZ   q8c42_fin
	TESTQ $1, flags+136(FP)
	JNZ  q8d42_odd

q8c42_odd:
	Q42D(256)
	Q8P42ROW(0, dd-32, dd-16, Y0, Y1)
	Q8P42ROW(64, dd-28, dd-12, Y2, Y3)
	Q8P42ROW(128, dd-24, dd-8, Y4, Y5)
	Q8P42ROW(192, dd-20, dd-4, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8c42_odd
	JMP  q8c42_fin

q8d42_odd:
	VMOVDQU (R10), Y8
	VMOVDQU (R11), Y9
	Q8T42ROW(0, 256, Y0, Y1)
	Q8T42ROW(64, 260, Y2, Y3)
	Q8T42ROW(128, 264, Y4, Y5)
	Q8T42ROW(192, 268, Y6, Y7)
	Q42STEP(288)
	DECQ R13
	JNZ  q8d42_odd

q8c42_fin:
	TESTQ $4, flags+136(FP)
	JNZ  q8c42_out
	Q42KEEP(256)
	JMP  q8c42_gnext

q8c42_out:
	VADDPS 0(DX), Y0, Y0
	VADDPS 32(DX), Y1, Y1
	VADDPS 64(DX), Y2, Y2
	VADDPS 96(DX), Y3, Y3
	VADDPS 128(DX), Y4, Y4
	VADDPS 160(DX), Y5, Y5
	VADDPS 192(DX), Y6, Y6
	VADDPS 224(DX), Y7, Y7
	Q42TREE

q8c42_gnext:
	ADDQ $16, DI
	ADDQ $512, DX
	MOVQ gStride+80(FP), AX
	ADDQ AX, gbase-304(SP)
	DECQ R8
	JMP  q8c42_group

q8c42_next:
	LEAQ (BX)(R9*2), BX       // two output rows on
	MOVQ xtStride+40(FP), DX
	LEAQ (SI)(DX*2), SI       // two tile rows on
	MOVQ accPairStride+128(FP), DX
	ADDQ DX, accp-296(SP)
	DECQ R12
	JMP  q8c42_pair

q8c42_done:
	VZEROUPPER
	RET

// func q8TileRowAVX2(dst, blocks *byte, nb int)
// q8TileRow in assembly: per block b, in its pair's 192 bytes at half
// h = b%2, the qs (32 B at 32h), -128 times the sums of each 4 qs (8 int32
// at 64+32h) and dx widened x8 (at 128+32h). The caller clears the unused
// half of a lone last block.
TEXT ·q8TileRowAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ blocks+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVL $0x01010101, AX
	VMOVQ AX, X15
	VPBROADCASTD X15, Y15      // u8 ones
	MOVL $0x00010001, AX
	VMOVQ AX, X14
	VPBROADCASTD X14, Y14      // i16 ones
	XORQ DX, DX                // half offset: 0 or 32

q8tr_blk:
	TESTQ CX, CX
	JZ   q8tr_done
	VMOVDQU 2(SI), Y0
	VMOVDQU Y0, (DI)(DX*1)
	VPMADDUBSW Y0, Y15, Y1
	VPMADDWD Y14, Y1, Y1
	VPSLLD $7, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPSUBD Y1, Y2, Y1
	VMOVDQU Y1, 64(DI)(DX*1)
	MOVWLZX (SI), AX
	VMOVQ AX, X3
	VCVTPH2PS X3, X3
	VBROADCASTSS X3, Y3
	VMOVUPS Y3, 128(DI)(DX*1)
	ADDQ $34, SI
	XORQ $32, DX
	JNZ  q8tr_next
	ADDQ $192, DI

q8tr_next:
	DECQ CX
	JMP  q8tr_blk

q8tr_done:
	VZEROUPPER
	RET

// Q42DW writes the widened scales of the block at offset R11 of the 4
// rows AX, BX, CX, DX as (dw0, dw1, dw2, dw3) twice at OFF(DI).
#define Q42DW(OFF) \
	MOVWLZX (AX)(R11*1), R12 \
	MOVWLZX (BX)(R11*1), R13 \
	SHLQ $16, R13 \
	ORQ  R13, R12 \
	MOVWLZX (CX)(R11*1), R13 \
	SHLQ $32, R13 \
	ORQ  R13, R12 \
	MOVWLZX (DX)(R11*1), R13 \
	SHLQ $48, R13 \
	ORQ  R13, R12 \
	VMOVQ R12, X0 \
	VCVTPH2PS X0, X0 \
	VINSERTF128 $1, X0, Y0, Y0 \
	VMOVUPS Y0, OFF(DI)

// Q42PKV: the block's weights of row ROW, XOR 0x80 (w+128, VPDPBUSD's
// unsigned operand), at OFF(DI).
#define Q42PKV(ROW, OFF) \
	VPXOR 2(ROW)(R11*1), Y15, Y1 \
	VMOVDQU Y1, OFF(DI)

// Q42PKS: for the block of row ROW, w at OFF(DI) and |w| at OFF+32(DI).
#define Q42PKS(ROW, OFF) \
	VMOVDQU 2(ROW)(R11*1), Y1 \
	VPABSB Y1, Y2 \
	VMOVDQU Y1, OFF(DI) \
	VMOVDQU Y2, OFF+32(DI)

#define Q42PKS4 \
	Q42PKS(AX, 0) \
	Q42PKS(BX, 64) \
	Q42PKS(CX, 128) \
	Q42PKS(DX, 192) \
	Q42DW(256) \
	ADDQ $288, DI

// Q42PKP: for the block of row ROW, the sign mask m (0xFF where w < 0,
// else 0) at OFF(DI) and |w| (-128 gives 128 unsigned) at OFF+32(DI).
// Y14 is zero.
#define Q42PKP(ROW, OFF) \
	VMOVDQU 2(ROW)(R11*1), Y1 \
	VPCMPGTB Y1, Y14, Y2 \
	VPABSB Y1, Y1 \
	VMOVDQU Y2, OFF(DI) \
	VMOVDQU Y1, OFF+32(DI)

#define Q42PKV4 \
	Q42PKV(AX, 0) \
	Q42PKV(BX, 32) \
	Q42PKV(CX, 64) \
	Q42PKV(DX, 96) \
	Q42DW(128) \
	ADDQ $160, DI

#define Q42PKP4 \
	Q42PKP(AX, 0) \
	Q42PKP(BX, 64) \
	Q42PKP(CX, 128) \
	Q42PKP(DX, 192) \
	Q42DW(256) \
	ADDQ $288, DI

// func q8PackTile(dst, w *byte, nGroups, nb, mode int)
// Repacks nGroups groups of 4 Q8_0 rows for the tiles above, per block in
// pass order (per group the even blocks, then the odd ones). Mode 0, for
// tileQ8_0x42VNNI, 160 bytes per block: the 4 rows' w+128, then their
// scales widened, (dw0..dw3) twice; mode 1 (tileQ8_0x42AVX2, mask form)
// 288: per row the sign mask of w and |w| (64 bytes), then the scales;
// mode 2 (VPSIGNB form) the same with w for the mask.
TEXT ·q8PackTile(SB), NOSPLIT, $8-40
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nGroups+16(FP), R8
	MOVQ nb+24(FP), R9
	IMUL3Q $34, R9, R10
	MOVL $0x80808080, AX
	VMOVQ AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y14, Y14, Y14

q8pk_group:
	TESTQ R8, R8
	JZ   q8pk_done
	MOVQ SI, AX
	LEAQ (SI)(R10*1), BX
	LEAQ (SI)(R10*2), CX
	LEAQ (BX)(R10*2), DX
	XORQ R11, R11         // the block's byte offset in its row
	MOVQ R9, R14
	INCQ R14
	SHRQ $1, R14          // even blocks: ceil(nb/2) >= 1
	MOVQ $0, odd-8(SP)

q8pk_blk:
	// The weights come from memory once per call (the tiles then reuse
	// the packed copy): fetch 8 blocks ahead in each of the 4 rows.
	PREFETCHT0 544(AX)(R11*1)
	PREFETCHT0 544(BX)(R11*1)
	PREFETCHT0 544(CX)(R11*1)
	PREFETCHT0 544(DX)(R11*1)
	CMPQ mode+32(FP), $1
	JE   q8pk_mask
	JA   q8pk_sign
	Q42PKV4
	JMP  q8pk_step

q8pk_mask:
	Q42PKP4
	JMP  q8pk_step

q8pk_sign:
	Q42PKS4

q8pk_step:
	ADDQ $68, R11
	DECQ R14
	JNZ  q8pk_blk
	CMPQ odd-8(SP), $0
	JNE  q8pk_next
	MOVQ $1, odd-8(SP)
	MOVQ $34, R11
	MOVQ R9, R14
	SHRQ $1, R14          // odd blocks
	JNZ  q8pk_blk

q8pk_next:
	LEAQ (SI)(R10*4), SI
	DECQ R8
	JMP  q8pk_group

q8pk_done:
	VZEROUPPER
	RET

// func cpuVendorAMD() bool
// CPUID leaf 0: the vendor string starts "Auth" (AuthenticAMD).
TEXT ·cpuVendorAMD(SB), NOSPLIT, $0-1
	XORL AX, AX
	XORL CX, CX
	CPUID
	CMPL BX, $0x68747541
	SETEQ ret+0(FP)
	RET
