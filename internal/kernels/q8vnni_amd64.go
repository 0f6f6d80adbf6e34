package kernels

import (
	"os"

	"golang.org/x/sys/cpu"
)

// The AVX2 path's Q8_0 tiles (q8tile_amd64.s): VPDPBUSD on CPUs with
// AVX-VNNI (Alder Lake and later Intel, Zen 5) replaces VPABSB, VPSIGNB,
// VPMADDUBSW and VPMADDWD per (row, token, block): weights enter as w+128
// and each token's tile row (q8tile.go) carries the -128*sum(x)
// correction. CPUs without AVX-VNNI (Zen 3) run the VPMADDUBSW form on the
// same tile rows. Both give the canonical integer sums, so the same bits.

//go:noescape
func tileQ8_0x42VNNI(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nb int)

// q8PackTile repacks nGroups groups of 4 Q8_0 rows for the two tiles
// (q8tile_amd64.s): per block, in the tiles' pass order, q8PackBytes
// bytes.
//
//go:noescape
func q8PackTile(dst, w *byte, nGroups, nb, mode int)

// q8PackTile modes.
const (
	q8PackVNNI = iota // w+128
	q8PackMask        // sign mask of w, |w|
	q8PackSign        // w, |w|
)

func cpuVendorAMD() bool

// q8PackBytes is the repacked size of one block of 4 rows: the VNNI form
// stores w+128 (4 x 32 bytes), the plain ones the sign mask of w (or w) and |w| (4 x 64), both
// then the 4 scales widened, twice (32).
func q8PackBytes(vnni bool) int {
	if vnni {
		return 160
	}
	return 288
}

//go:noescape
func tileQ8_0x42AVX2(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nb int, sign bool, nPairs int, pf *byte, pfPer, pfLen int)

//go:noescape
func tileQ8_0x42AVX2C(out *float32, outStride int, wp *byte, nGroups int, xt *byte, xtStride int, nPairs int, pf *byte, pfPer, pfLen int, gStride, evenOff, oddOff, nEven, nOdd int, acc *float32, accPairStride, flags int)

// avx2Sign selects the plain tile's VPSIGNB form. The mask form signs x
// with VPXOR+VPSUBB, which Intel issues on three ports where VPSIGNB has
// the two the multiplies use: +1% (768x288) to +7% (2048x768), 64
// tokens, on a Sapphire Rapids with AVX-VNNI off (Skylake-class AVX2
// Intel has the same ports). AMD's four FP pipes all
// run VPSIGNB, so there the form with one op fewer is kept (llama.cpp's;
// not measured on an AMD CPU in this work).
var avx2Sign = cpuVendorAMD()

// hasAVXVNNI: the CPU has VEX-encoded VPDPBUSD.
var hasAVXVNNI = cpu.X86.HasAVXVNNI

// SLUICE_AVXVNNI=off keeps the AVX2 path on its plain kernels, so that
// what an AVX2-only CPU (Zen 3) runs can be measured on a newer one.
func init() {
	setAVX2VNNI(hasAVXVNNI && os.Getenv("SLUICE_AVXVNNI") != "off")
	// On a Zen 5 (AVX2 path, 1 thread pinned, bench-110M-q8_0, interleaved)
	// the plain VPSIGNB tile, with the column chunks and interleaving the
	// VNNI tile lacks, prefilled at 559-561 / 512 tok/s (pp128 / pp512)
	// against the VNNI tile's 476 / 439; the VNNI Q4_K kernel stays ahead
	// there (1,179 / 997 against 1,065 / 934). On a Sapphire Rapids the
	// VNNI Q8_0 tile ran at 91 GFLOP/s against 73 for the plain one of
	// then; Intel keeps it.
	if cpuVendorAMD() {
		avx2VNNI = false
	}
}

// setAVX2VNNI switches the AVX2 path's Q8_0 tile and the 8-row Q4_K
// kernel between the AVX-VNNI kernels and the plain AVX2 ones (tests run
// both on a VNNI machine).
func setAVX2VNNI(on bool) {
	// The Q4_0 and Q5_0 tiles run the Q8_0 ones on the same activations.
	defer setLegacyTiles()
	avx2VNNI = on
	q4KTile8x2 = q4KTile8x2AVX2
	if on {
		q4KTile8x2 = q4KTile8x2VNNI
	}
	// Both Q8_0 tile forms read the tile layout, written in assembly.
	q8_0Kernels[AVX2].prepare = func(x []float32, nTok, cols int) actBuf {
		tiled := 0
		if nTok >= 2 {
			tiled = q8TilePair
		}
		return prepareQ8_0With(x, nTok, cols, tiled, quantRowQ8_0AVX2Tile)
	}
}

// avx2VNNI: the AVX2 path's Q8_0 tile uses VPDPBUSD (setAVX2VNNI; off
// on AMD CPUs, see init).
var avx2VNNI bool

// q4KTile8x2VNNI is q4KTile8x2AVX2 with VPDPBUSD (q4kvnni_amd64.s): the
// 4 nibble products of a group go into each row's int32 lane in one step
// (instead of VPMADDUBSW + VPADDW), then one VPMULLD by the sub-block
// scale per sub-block and token. Exact integer sums: same bits.
//
//go:noescape
func q4KTile8x2VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

// q4KTile8x2 is the 8-row Q4_K kernel in use (setAVX2VNNI).
var q4KTile8x2 = q4KTile8x2AVX2

// q4KTile16x4VNNI is the AVX-512 path's Q4_K kernel for 16 rows in the
// lanes and 4 tokens, with VPDPBUSD (every AVX-512 path CPU has AVX-512
// VNNI) as q4KTile8x2VNNI. 2048x768, 64 tokens, 1 thread, best of 12
// cpuGFLOP/s: 171 with VPMADDUBSW/VPADDW int16 sums, 211 with VPDPBUSD.
//
//go:noescape
func q4KTile16x4VNNI(out *float32, outStride int, wp *byte, nGroups int, x *byte, xStride, nsb int)

//go:noescape
func q8TileRowAVX2(dst, blocks *byte, nb int)

// quantRowQ8_0AVX2Tile is the AVX2 quantizer plus, when tile is not nil,
// the tile layout (q8TileRow's bytes; in Go it was 6% of bench-15M q8_0
// prefill at 2 threads).
func quantRowQ8_0AVX2Tile(x []float32, blocks []byte, dx []float32, tile []byte) {
	quantRowQ8_0AVX2(x, blocks, dx, nil)
	if tile == nil {
		return
	}
	nb := len(dx)
	if len(tile) != (nb+1)/2*q8TilePair {
		panic("kernels: bad Q8_0 tile length")
	}
	if nb%2 == 1 {
		clear(tile[len(tile)-q8TilePair:])
	}
	q8TileRowAVX2(&tile[0], &blocks[0], nb)
}
