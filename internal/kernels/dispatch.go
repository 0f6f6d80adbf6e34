package kernels

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"unsafe"

	"sluice/internal/quant"
)

// Path is an implementation of the kernels. All paths give bitwise-equal
// results (package doc); they differ only in speed.
type Path int32

const (
	Generic Path = iota // portable Go
	AVX2                // AVX2 + FMA + F16C assembly
	AVX512              // AVX-512 (F, BW, VL, VNNI) assembly
)

func (p Path) String() string {
	switch p {
	case Generic:
		return "generic"
	case AVX2:
		return "avx2"
	case AVX512:
		return "avx512"
	}
	return fmt.Sprintf("Path(%d)", int32(p))
}

// ParsePath maps "generic", "avx2" or "avx512" to a Path.
func ParsePath(s string) (Path, bool) {
	for _, p := range []Path{Generic, AVX2, AVX512} {
		if p.String() == s {
			return p, true
		}
	}
	return 0, false
}

// Available reports whether this machine can run path p.
func Available(p Path) bool {
	switch p {
	case Generic:
		return true
	case AVX2:
		return hasAVX2
	case AVX512:
		return hasAVX512
	}
	return false
}

// Paths lists the paths this machine can run, slowest first.
func Paths() []Path {
	var ps []Path
	for _, p := range []Path{Generic, AVX2, AVX512} {
		if Available(p) {
			ps = append(ps, p)
		}
	}
	return ps
}

var curPath atomic.Int32

func init() {
	best := Paths()
	p := best[len(best)-1]
	if s := os.Getenv("SLUICE_KERNELS"); s != "" {
		if q, ok := ParsePath(s); ok && Available(q) {
			p = q
		} else {
			fmt.Fprintf(os.Stderr, "sluice: SLUICE_KERNELS=%q is not an available kernel path (have %v); using %v\n", s, Paths(), p)
		}
	}
	curPath.Store(int32(p))
}

// CurrentPath is the path MatMul and the vector functions use.
func CurrentPath() Path { return Path(curPath.Load()) }

// SetPath selects the implementation (for tests and benchmarks). It returns
// an error when this CPU cannot run p. Safe to call concurrently with
// kernels, which pick the path once per call.
func SetPath(p Path) error {
	if !Available(p) {
		return &Error{ErrUnsupportedType, fmt.Sprintf("kernel path %v is not available on this CPU (have %v)", p, Paths())}
	}
	curPath.Store(int32(p))
	return nil
}

func kernelFor(t quant.Type) *typeKernel {
	p := CurrentPath()
	switch t {
	case quant.F32:
		return &f32Kernels[p]
	case quant.F16:
		return &f16Kernels[p]
	case quant.BF16:
		return &bf16Kernels[p]
	case quant.Q8_0:
		return &q8_0Kernels[p]
	case quant.Q4_0:
		return &q4_0Kernels[p]
	case quant.Q4_K:
		return &q4_KKernels[p]
	case quant.Q6_K:
		return &q6_KKernels[p]
	case quant.Q5_K:
		return &q5_KKernels[p]
	case quant.Q4_1:
		return &q4_1Kernels[p]
	case quant.Q5_0:
		return &q5_0Kernels[p]
	case quant.Q5_1:
		return &q5_1Kernels[p]
	}
	panic("kernels: no kernel for " + t.String())
}

func prepareF32(x []float32, nTok, cols int) actBuf { return actBuf{f32: x, stride: cols} }

func prepareF16(x []float32, nTok, cols int) actBuf {
	a := newActBytes(2 * len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(a.bytes[2*i:], quant.FP32ToFP16(v))
	}
	a.stride = 2 * cols
	return a
}

func prepareBF16(x []float32, nTok, cols int) actBuf {
	a := newActBytes(2 * len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(a.bytes[2*i:], quant.FP32ToBF16(v))
	}
	a.stride = 2 * cols
	return a
}

func prepareQ8_0(x []float32, nTok, cols int) actBuf {
	return prepareQ8_0With(x, nTok, cols, 0, quantRowQ8_0)
}

// quantRowQ8_0 quantizes one activation row (blocks, widened scales and,
// if tile is not nil, the tile layout); the AVX-512 path replaces it.
var quantRowQ8_0 = func(x []float32, blocks []byte, dx []float32, tile []byte) {
	nb := len(dx)
	quant.QuantizeRowQ8_0(x, blocks)
	for b := 0; b < nb; b++ {
		dx[b] = fp16At(blocks, 34*b)
	}
	if tile != nil {
		q8TileRow(tile, blocks, nb)
	}
}

// prepareQ8_0With quantizes to Q8_0 blocks with quantRow, which also widens
// their scales into dx and, when tilePair is not 0, writes a tile layout
// of tilePair bytes per block pair (q8tile.go: q8TilePair for the AVX2
// tiles, q8TilePairZ for the AVX-512 one).
func prepareQ8_0With(x []float32, nTok, cols, tilePair int, quantRow func(x []float32, blocks []byte, dx []float32, tile []byte)) actBuf {
	nb := cols / 32
	rb := nb * 34
	tstr := (nb + 1) / 2 * tilePair
	tiled := tstr > 0
	// One pooled buffer: [tile, 64-aligned][dx][blocks].
	a := newActBytes(64 + nTok*tstr + 4*nTok*nb + nTok*rb)
	off := int(-uintptr(unsafe.Pointer(&a.bytes[0])) & 63)
	if tiled {
		a.tile = a.bytes[off : off+nTok*tstr]
		a.tstr = tstr
		off += nTok * tstr
	}
	a.dx = f32Bytes(a.bytes[off : off+4*nTok*nb])
	off += 4 * nTok * nb
	blocks := a.bytes[off : off+nTok*rb]
	for t := 0; t < nTok; t++ {
		var tile []byte
		if tiled {
			tile = a.tile[t*tstr : (t+1)*tstr]
		}
		quantRow(x[t*cols:(t+1)*cols], blocks[t*rb:(t+1)*rb], a.dx[t*nb:(t+1)*nb], tile)
	}
	a.bytes, a.stride, a.nb = blocks, rb, nb
	return a
}

func prepareQ8_K(x []float32, nTok, cols int) actBuf {
	rb := cols / 256 * 292
	a := newActBytes(nTok * rb)
	for t := 0; t < nTok; t++ {
		quant.QuantizeRowQ8_K(x[t*cols:(t+1)*cols], a.bytes[t*rb:(t+1)*rb])
	}
	a.stride = rb
	return a
}

func (a actBuf) row(t int) []byte { return a.bytes[t*a.stride : (t+1)*a.stride] }

// f32Bytes views float32 weights stored little-endian in a byte slice (all
// supported platforms are little-endian, and GGUF data is 32-byte aligned).
func f32Bytes(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

func genericRows(dot func(w, x []byte, n int) float32, blockBytes, blockSize int) func(out []float32, w []byte, act actBuf, t int) {
	return func(out []float32, w []byte, act actBuf, t int) {
		x := act.row(t)
		rb := len(w) / len(out)
		n := rb / blockBytes * blockSize
		for i := range out {
			out[i] = dot(w[i*rb:(i+1)*rb], x, n)
		}
	}
}

func f32RowsGeneric(out []float32, w []byte, act actBuf, t int) {
	x := act.f32[t*act.stride : (t+1)*act.stride]
	wf := f32Bytes(w)
	n := act.stride
	for i := range out {
		out[i] = dotF32Generic(wf[i*n:(i+1)*n], x)
	}
}

var (
	q4_0Kernels = fill3(typeKernel{prepare: prepareQ8_0, rows: genericRows(func(w, x []byte, n int) float32 { return dotQ4_0Generic(w, x, n/32) }, 18, 32)})

	// Indexed by Path; the assembly files fill in their entries in init.
	f32Kernels = [3]typeKernel{
		{prepare: prepareF32, rows: f32RowsGeneric}, {prepare: prepareF32, rows: f32RowsGeneric}, {prepare: prepareF32, rows: f32RowsGeneric},
	}
	f16RowsGeneric  = genericRows(dotF16Generic, 2, 1)
	f16Kernels      = fill3(typeKernel{prepare: prepareF16, rows: f16RowsGeneric})
	q8_0Kernels     = fill3(typeKernel{prepare: prepareQ8_0, rows: genericRows(func(w, x []byte, n int) float32 { return dotQ8_0Generic(w, x, n/32) }, 34, 32)})
	bf16RowsGeneric = genericRows(dotBF16Generic, 2, 1)
	bf16Kernels     = fill3(typeKernel{prepare: prepareBF16, rows: bf16RowsGeneric})
	q6_KKernels     = fill3(typeKernel{prepare: prepareQ8_K, rows: genericRows(func(w, x []byte, n int) float32 { return dotQ6_KGeneric(w, x, n/256) }, 210, 256)})
	q5_KKernels     = fill3(typeKernel{prepare: prepareQ8_K, rows: genericRows(func(w, x []byte, n int) float32 { return dotQ5_KGeneric(w, x, n/256) }, 176, 256)})
	q4_KKernels     = fill3(typeKernel{prepare: prepareQ8_K, rows: genericRows(func(w, x []byte, n int) float32 { return dotQ4_KGeneric(w, x, n/256) }, 144, 256)})
)

func fill3(k typeKernel) [3]typeKernel { return [3]typeKernel{k, k, k} }

// Describe names the current path and what this CPU offers, for start-up
// logs and benchmark reports, e.g. "avx512 (available: generic avx2 avx512)".
func Describe() string {
	return fmt.Sprintf("%v (available: %s)", CurrentPath(), pathNames())
}

// CPUFeatures lists the SIMD features of this CPU that the kernel paths
// use or could use (e.g. "avx2 fma avx512f avx512bw avx512vl avx512vnni
// avxvnni"), for benchmark reports.
func CPUFeatures() string { return strings.Join(cpuFeatures(), " ") }

func pathNames() string {
	s := ""
	for i, p := range Paths() {
		if i > 0 {
			s += " "
		}
		s += p.String()
	}
	return s
}
