// Package kernels holds sluice's compute kernels: matrix-vector and
// matrix-matrix products over GGML-typed weights, and the small float32
// vector operations of the forward pass.
//
// # Batch invariance
//
// Every output element is computed with one fixed reduction order that does
// not depend on the number of tokens in the call, the thread count, or which
// rows share a work chunk: work is split across rows and tokens, never inside
// one dot product. The order is also the same on every code path (Generic,
// AVX2, AVX512), so results are bitwise identical across paths and machines.
// The canonical orders, which the assembly reproduces exactly:
//
//   - F32: 16 lanes; lane j accumulates a[i]*b[i] for i ≡ j (mod 16) in
//     increasing i with a fused multiply-add (one rounding; the generic path
//     emulates it exactly, see fma32). Lanes past the end add 0*0. Then a
//     fixed tree: lane j += lane j+8, j+4, j+2, j+1.
//   - F16, BF16: as F32 over the widened values. Activations are rounded to
//     F16 (BF16) first, as ggml does. F16 products (11-bit mantissas, small
//     range) are exact in float32, so FMA equals multiply-then-add; BF16
//     products are rounded before the add (float32's range: they can
//     overflow).
//     Measured on tiny-qwen2-random-gpt2vocab (F16 weights, teacher-forced
//     against llama.cpp, internal/model TestTinyQwen2TeacherForced): worst
//     top-5 logit difference 2.1e-5..6.1e-4 per prompt with F16-rounded
//     activations, 3.9e-3..5.5e-3 with F32 activations; hence F16.
//   - Q8_0, Q4_0, Q5_0: the activation row is quantized to Q8_0 once per
//     token (quant.QuantizeRowQ8_0, ggml's x86 rounding). Per 32-element
//     block b and l in 0..7, the integer sum s of the 4 products of elements
//     4l..4l+3 is exact; lane 8*(b%2)+l = fma(float32(s), dw_b*dx_b, lane),
//     so even and odd blocks fill separate halves of 16 lanes. Then the F32
//     tree. Weights of -128 (never written by ggml, legal in the format) are
//     exact on every path. Q4_1 and Q5_1 take Q8_1 activations (legacy.go).
//   - Q4_K, Q5_K, Q6_K: the activation row is quantized to Q8_K
//     (quant.QuantizeRowQ8_K). Per 256-element super-block the scaled
//     integer sums are exact; one float32 term per super-block is added to a
//     single accumulator in increasing order.
//   - Attention (mqa.go): a score is the F32 dot above of a query row and
//     a K row (binary16 rows widened exactly first); the softmax of a score
//     row is ScaleSoftmax's (expf; numerators of x - max below -50 are 0,
//     so no weight is subnormal; float64 sums over 8 lanes in a fixed
//     order); each output element adds the rounded products of its weights
//     and V rows in position order. None depends on how the caller splits
//     the rows, positions or pages between calls, so prefill equals decode.
//
// Integer sums are exact whatever order SIMD lanes use, which is what lets
// the quantized kernels vectorize freely inside a block.
//
// # Paths and coverage
//
// The path is chosen at start-up from the CPU (golang.org/x/sys/cpu):
// AVX512 needs AVX-512 F/BW/VL/VNNI, AVX2 needs AVX2+FMA (F16C assumed).
// SLUICE_KERNELS=generic|avx2|avx512 (read once at start) or SetPath
// override it, so the AVX2 path can be tested and measured on an AVX-512
// machine; tests run every available path and require bitwise equality
// with Generic. "tile" is a register-blocked kernel over several rows and
// tokens (multi-token calls); the rest of a call goes through matvec.
//
//	type        acts  AVX2 asm                                 AVX512 asm
//	F32         F32   matvec, 4x3 tile (cols%16 == 0)          matvec, 4x4 tile
//	F16         F16   matvec, 4x3 tile (cols%16 == 0)          matvec, 4x4 tile
//	Q8_0        Q8_0  matvec (4 rows), 4x2 tile (even and     matvec (4 rows, 2 blocks a ZMM),
//	                  odd blocks as two passes, rows          4x4 VNNI tile (block pairs
//	                  repacked; AVX-VNNI form where present;  interleaved, q8z_amd64.s); 16 rows
//	                  VPSIGNB form: 8 rows in the lanes x 1   in the lanes x 1 token for rows up
//	                  token up to 24 blocks, q8r8_amd64.s),   to 24 blocks (q8t16_amd64.s); quantizer
//	                  quantizer
//	Q4_K        Q8_K  matvec (4 rows), 4 tokens; 8 rows x 2    VNNI matvec (4 rows), 4-token VNNI
//	                  tokens (repacked, 8+ tokens; AVX-VNNI    kernel; 16 rows x 4 tokens VNNI
//	                  form)                                    (8+ tokens)
//	Q6_K        Q8_K  matvec (4 rows), 4 tokens; 8 rows x 4    VNNI matvec (4 rows), 4 tokens
//	                  tokens (repacked, 8+ tokens)             (AVX2); 16 rows x 4 tokens VNNI
//	                                                           (repacked, 8+ tokens)
//	Q5_K        Q8_K  matvec (4 rows), 4 tokens; 8 rows x 2    VNNI matvec (4 rows), 4 tokens
//	                  tokens (repacked, 8+ tokens)             (AVX2); 16 rows x 4 tokens VNNI
//	                                                           (repacked, 8+ tokens)
//	Q4_0, Q5_0  Q8_0  matvec (4 rows, q50_amd64.s);           matvec 2 blocks a ZMM (Q5_0: qh by mask
//	                  tiles: row tile as Q8_0, then the Q8_0   registers, VNNI), with the Q8_0 4x4
//	                  tile (legacytile_amd64.go)               tile
//	Q4_1, Q5_1  Q8_1  matvec (4 rows), 4 tokens                as AVX2 (Q5_1 matvec: qh by mask
//	                                                           registers)
//	BF16        BF16  matvec (cols%16 == 0)                    matvec (no FMA: products may overflow)
//
// Q4_K, Q5_K and Q6_K activations are quantized to Q8_K in assembly on
// both SIMD paths. Dot, DotRows, Axpy, AxpyRows, Scale, SiLUMul, ExpSub,
// Softmax, MQADot, MQAAxpy, ScaleSoftmax, SumSquares and ScaleMul
// (RMSNorm) have assembly on the SIMD
// paths. The assembly is written by
// hand (Go assembler, asm_amd64.s) rather than generated with avo: it was
// quicker to get right and to tune here; the canonical orders above are the
// specification any rewrite must keep. No legacy-SSE instruction may
// touch an X register in the assembly (MOVQ AX, X0: write VMOVQ): while
// the upper halves are dirty, one costs ~400 ns on the Sapphire Rapids
// KVM guests we measure on (1 ns in VEX form), which made the Q8_0 tile
// layout 35x slower than the quantizer. AVX-VNNI's VEX-encoded VPDPBUSD
// (Alder Lake and later Intel, Zen 5) is used on the AVX2 path only when
// CPUID reports it; AVX2-only CPUs such as Zen 3 run the VPMADDUBSW
// kernels, which SLUICE_AVXVNNI=off also selects (to measure them on a
// newer CPU). Tests run the AVX2 path both ways.
//
// # Measuring
//
//	go test -run X -bench 'MatMul/q8_0/32000x288/tok1/t1' ./internal/kernels
//
// reports weight GB/s, GFLOP/s, cpuGFLOP/s (process CPU time, steadier on a
// shared machine) and bw_ratio (weight bytes read per second over a raw copy
// of the same bytes in the same run). Pin single-thread runs with
// taskset -c 1.
package kernels

import (
	"fmt"
	"sync"

	"sluice/internal/quant"
)

// Matrix is a weight tensor in ggml layout: Rows rows of Cols elements, each
// row stored as Cols/BlockSize consecutive blocks of Type.
type Matrix struct {
	Type       quant.Type
	Rows, Cols int
	Data       []byte
}

// ErrorCode is a stable machine-readable error class.
type ErrorCode string

const (
	// ErrUnsupportedType: the kernels have no dot product for this type.
	ErrUnsupportedType ErrorCode = "kernels_unsupported_type"
	// ErrShape: a matrix's data size or column count does not fit its type.
	ErrShape ErrorCode = "kernels_bad_shape"
)

// Error is the error type of this package.
type Error struct {
	Code ErrorCode
	Msg  string
}

func (e *Error) Error() string { return "kernels: " + e.Msg }

// Supported reports whether MatMul accepts weights of type t.
func Supported(t quant.Type) bool {
	_, _, ok := layout(t)
	return ok
}

// layout is the block size and bytes of the types MatMul supports, without
// package quant's map lookups (MatMul checks every call).
func layout(t quant.Type) (bs, bb int, ok bool) {
	switch t {
	case quant.F32:
		return 1, 4, true
	case quant.F16, quant.BF16:
		return 1, 2, true
	case quant.Q8_0:
		return 32, 34, true
	case quant.Q4_0:
		return 32, 18, true
	case quant.Q4_1:
		return 32, 20, true
	case quant.Q5_0:
		return 32, 22, true
	case quant.Q5_1:
		return 32, 24, true
	case quant.Q4_K:
		return 256, 144, true
	case quant.Q5_K:
		return 256, 176, true
	case quant.Q6_K:
		return 256, 210, true
	}
	return 0, 0, false
}

// Check reports whether m can be used with MatMul: a supported type, Cols a
// whole number of blocks, and Data exactly Rows rows long. Model loaders call
// it once so that MatMul's panics stay programming errors.
func (m *Matrix) Check() error {
	bs, bb, ok := layout(m.Type)
	if !ok {
		return &Error{ErrUnsupportedType, fmt.Sprintf("no matmul kernel for tensor type %s", m.Type)}
	}
	if m.Rows < 0 || m.Cols <= 0 || m.Cols > 1<<30 || m.Rows > 1<<40/m.Cols {
		return &Error{ErrShape, fmt.Sprintf("matrix shape %dx%d is invalid", m.Rows, m.Cols)}
	}
	if m.Cols%bs != 0 {
		return &Error{ErrShape, fmt.Sprintf("%s stores elements in blocks of %d; a row of %d elements is not a whole number of blocks", m.Type, bs, m.Cols)}
	}
	if rb := m.Cols / bs * bb; len(m.Data) != rb*m.Rows {
		return &Error{ErrShape, fmt.Sprintf("%s matrix %dx%d needs %d bytes, has %d", m.Type, m.Rows, m.Cols, rb*m.Rows, len(m.Data))}
	}
	return nil
}

// minParallelMACs is the smallest product MatMul spreads over the pool
// (about 2-3 µs of single-thread work at the SIMD kernels' speed).
const minParallelMACs = 1 << 17

// rowTile is how many weight rows one inner step sweeps over all tokens:
// small enough that the tile stays in L1/L2 while every token reuses it.
const rowTile = 16

// MatMul computes out[t*w.Rows + r] = dot(row r of w, x[t*w.Cols:(t+1)*w.Cols])
// for t in [0, nTok). Work is split across rows only, so every element has
// the canonical reduction order of its type (see the package doc) whatever
// nTok and the thread count. par may be nil (one thread). It panics when the
// shapes do not fit (call Matrix.Check when loading).
func MatMul(par *Parallel, out []float32, w *Matrix, x []float32, nTok int) {
	if nTok <= 0 || w.Rows == 0 {
		return
	}
	if len(out) < nTok*w.Rows || len(x) < nTok*w.Cols {
		panic(fmt.Sprintf("kernels.MatMul: %dx%d matrix, %d tokens: out has %d, x has %d elements", w.Rows, w.Cols, nTok, len(out), len(x)))
	}
	if err := w.Check(); err != nil {
		panic(err.Error())
	}
	k := kernelFor(w.Type)
	act := k.prepare(x[:nTok*w.Cols], nTok, w.Cols)
	chunk := tokenChunk(act, nTok, w.Cols)
	for t0 := 0; t0 < nTok; t0 += chunk {
		n := min(chunk, nTok-t0)
		job := mmJob{k: k, out: out[t0*w.Rows:], w: w, act: act.tokens(t0, n, nTok, w.Cols), nTok: n, rowBytes: len(w.Data) / w.Rows}
		// Waking the pool costs ~1-3 µs; smaller products run on the
		// caller (and allocate nothing).
		if w.Rows*w.Cols*n < minParallelMACs || par.Threads() == 1 {
			job.run(0, w.Rows)
			continue
		}
		jp := mmJobs.Get().(*mmJob)
		fn := jp.tiles
		*jp = job
		// Batch invariance (DESIGN.md "Determinism"): splitting only at
		// row boundaries keeps each dot product whole on one goroutine.
		par.ForGrain(ceilDiv(w.Rows, rowTile), tileGrain(par, ceilDiv(w.Rows, rowTile), w.Cols, n), fn)
		*jp = mmJob{tiles: fn} // holds no output, weights or activations while pooled
		mmJobs.Put(jp)
	}
	act.release()
}

// mmJobs and multiJobs hold the jobs MatMul and MatMulMany hand to the
// pool's workers, each with its loop function bound once (tiles, loop).
// A job a worker reads lives on the heap, and a method value made per
// call is a heap closure too: allocated per product and per step they
// were a sixth of a serving process's allocations (the crowding bench,
// colocated, beside batch.pages' 27%), so its GC cycles came that much
// more often, each stopping every goroutine and taking cores from the
// handlers. ForGrain returns once every chunk has run and clears its
// reference to the function, so a job is free for the next call then.
var (
	mmJobs    = sync.Pool{New: func() any { j := new(mmJob); j.tiles = j.runTiles; return j }}
	multiJobs = sync.Pool{New: func() any { j := new(multiJob); j.loop = j.run; return j }}
)

// tokenChunkBytes bounds the converted activations one pass over a
// matrix's row tiles streams: every row tile reads all of its tokens' rows,
// so once they outgrow what the caches keep, each tile streams them from
// memory again. TinyLlama's FF down (2048 x 5632, Q8_0) at 512 tokens has
// 8.6 MB of tile rows and ran at 29-32 GFLOP/s on a Zen 3, against 50 at
// 128 tokens (2.2 MB); in chunks within 2 MiB it ran at 52 (1 MiB: 46,
// 4 MiB: 51). Each chunk reads and repacks the weights again, so the
// chunks are as few as the bound allows and of equal size: 2 MiB chunks
// of up to 112 tokens made 128 tokens of that matrix a chunk of 112 and
// one of 16, a second repack for an eighth of the work. With the plain
// AVX2 Q8_0 tile's column chunks (q8ChunkBlocks) and these 4 MiB balanced
// chunks the same matrix ran at 66-67 GFLOP/s at 128 tokens and 66-68 at
// 512, against 57-64 and 60-64 before (in one process, interleaved, min
// of 30, Zen 3, 1 thread); Q4_K unchanged. Past the bound MatMul runs the
// tokens in chunks, each a full pass over the rows. Tokens are
// independent, so the chunks change no bit (batch invariance).
var tokenChunkBytes = 4 << 20

// tokenChunk is how many tokens one pass takes: all of them unless their
// converted rows exceed tokenChunkBytes, then the fewest chunks within it,
// of equal size rounded up to a multiple of 16 (whole multi-token tiles).
func tokenChunk(a actBuf, nTok, cols int) int {
	per := a.tokenBytes(nTok, cols)
	if per == 0 || nTok*per <= tokenChunkBytes {
		return nTok
	}
	most := max(16, tokenChunkBytes/per/16*16)
	n := ceilDiv(nTok, most)
	return min(most, ceilDiv(ceilDiv(nTok, n), 16)*16)
}

// minTileClaim is the least work (multiply-adds) of one row tile that is
// worth claiming alone (a claim is an atomic on a line both cores write).
const minTileClaim = 1 << 16

// tileGrain is how many row tiles of cols columns times nTok tokens the
// pool's chunks of a matmul loop hold: one when a tile is worth a claim
// (prefill: the faster core takes more, and the loop ends with at most
// one tile's imbalance instead of an eighth of the loop's), else For's
// few chunks per thread. One token (decode) always takes the few chunks:
// run gives a one-token chunk to the matvec in one call, whose four row
// streams need long runs of rows to prefetch ahead. In claims of one tile
// (16 rows: streams of 4) TinyLlama's FF down (2048 x 5632 Q4_K) decoded
// at 25 GB/s on 2 threads against 23 on one (Zen 5, weights from
// memory); in 8 chunks, at 47.
func tileGrain(par *Parallel, tiles, cols, nTok int) int {
	if nTok > 1 && rowTile*cols*nTok >= minTileClaim {
		return 1
	}
	chunks := min(tiles, chunksPerThread*par.Threads())
	return ceilDiv(tiles, chunks)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// runTiles computes the row tiles [lo, hi). The pool splits MatMul in
// whole tiles so that no chunk boundary leaves a few rows to the slower
// per-row kernel of a multi-token call.
func (j *mmJob) runTiles(lo, hi int) {
	j.run(lo*rowTile, min(hi*rowTile, j.w.Rows))
}

// mmJob is one MatMul call; run computes its rows [lo, hi) for every token.
type mmJob struct {
	k              *typeKernel
	out            []float32
	w              *Matrix
	act            actBuf
	nTok, rowBytes int
	// tiles is runTiles bound to this job, set once (mmJobs).
	tiles func(lo, hi int)
}

func (j *mmJob) run(lo, hi int) {
	k, w, out, nTok, rowBytes := j.k, j.w, j.out, j.nTok, j.rowBytes
	tile := rowTile
	if nTok == 1 {
		tile = hi - lo // nothing to reuse across tokens: one kernel call
	}
	for r0 := lo; r0 < hi; r0 += tile {
		r1 := min(r0+tile, hi)
		wt := w.Data[r0*rowBytes : r1*rowBytes]
		t := 0
		if k.tiles != nil {
			t = k.tiles(out[r0:], w.Rows, wt, r1-r0, j.act, nTok)
			if nt := (r1 - r0) / tileRows * tileRows; nt < r1-r0 {
				for tk := 0; tk < t; tk++ {
					k.rows(out[tk*w.Rows+r0+nt:tk*w.Rows+r1], wt[nt*rowBytes:], j.act, tk)
				}
			}
		}
		for ; t < nTok; t++ {
			k.rows(out[t*w.Rows+r0:t*w.Rows+r1], wt, j.act, t)
		}
	}
}

// actBuf is one call's activations converted to what the weight type's dot
// product consumes (F16 halves, Q8_0 or Q8_K blocks), one row per token.
type actBuf struct {
	f32    []float32 // F32 weights: the caller's x, not copied
	bytes  []byte    // converted rows, stride bytes each
	stride int       // bytes per token row in bytes
	dx     []float32 // Q8_0: every block's scale widened, nb per token; Q8_1: (d, s), 2*nb
	nb     int       // blocks per token row
	tile   []byte    // Q8_0 on AVX512 with nTok >= tileTok: tiled layout (q8tile.go)
	tstr   int       // bytes per token in tile
	pooled *[]byte
}

// bufPool holds activation buffers, packPool the tile kernels' repacked
// weights; apart, so neither keeps replacing the other's larger buffers.
var (
	bufPool  = sync.Pool{New: func() any { b := make([]byte, 0, 1<<16); return &b }}
	packPool = sync.Pool{New: func() any { b := make([]byte, 0, 1<<16); return &b }}
)

// tokenBytes is the converted activations' size per token (of nTok).
func (a actBuf) tokenBytes(nTok, cols int) int {
	n := a.stride + a.tstr + 4*len(a.dx)/nTok
	if a.f32 != nil {
		n += 4 * cols
	}
	return n
}

// tokens is the view of tokens [t0, t0+n) of a's nTok: every per-token
// field sliced, nothing owned (the caller releases a).
func (a actBuf) tokens(t0, n, nTok, cols int) actBuf {
	if t0 == 0 && n == nTok {
		v := a
		v.pooled = nil
		return v
	}
	v := actBuf{stride: a.stride, nb: a.nb, tstr: a.tstr}
	if a.f32 != nil {
		v.f32 = a.f32[t0*cols : (t0+n)*cols]
	}
	if a.bytes != nil {
		v.bytes = a.bytes[t0*a.stride : (t0+n)*a.stride]
	}
	if a.dx != nil {
		per := len(a.dx) / nTok
		v.dx = a.dx[t0*per : (t0+n)*per]
	}
	if a.tile != nil {
		v.tile = a.tile[t0*a.tstr : (t0+n)*a.tstr]
	}
	return v
}

func (a *actBuf) release() {
	if a.pooled != nil {
		bufPool.Put(a.pooled) // the whole buffer: a.bytes may be a sub-slice
		a.pooled = nil
	}
}

func newActBytes(n int) actBuf {
	p := bufPool.Get().(*[]byte)
	if cap(*p) < n {
		*p = make([]byte, n)
	}
	return actBuf{bytes: (*p)[:n], pooled: p}
}

// typeKernel is one weight type's MatMul implementation on the current path.
type typeKernel struct {
	// prepare converts nTok rows of cols activations once per call, so every
	// weight row reuses them (as ggml does).
	prepare func(x []float32, nTok, cols int) actBuf
	// rows computes out[i] = dot(weight row i of w, activation row t), for
	// len(out) consecutive rows stored back to back in w.
	rows func(out []float32, w []byte, act actBuf, t int)
	// tiles, when not nil, computes the rows [0, nRows/tileRows*tileRows)
	// of w for the first k tokens into out[t*outStride+i] and returns k,
	// a multiple of tileTok. Same canonical order as rows, so the two mix
	// freely.
	tiles func(out []float32, outStride int, w []byte, nRows int, act actBuf, nTok int) int
}

// Register tile of the blocked kernels: tileRows weight rows times tileTok
// tokens share every load.
const (
	tileRows = 4
	tileTok  = 4
)
