// Package quant knows GGML's tensor element types: their ids as stored in
// GGUF files, their block layouts, conversion between the float formats, and
// how to turn blocks back into float32 (and, for a subset, float32 into
// blocks). It has no dependencies so every layer above can use it.
//
// Block layouts (little-endian, as ggml's ggml-common.h defines them;
// QK_K = 256):
//
//	Q4_0  32 el, 18 B: f16 d; u8 qs[16]           x = (nib - 8) * d; low nibbles are elements 0..15, high 16..31
//	Q4_1  32 el, 20 B: f16 d, f16 m; u8 qs[16]    x = nib * d + m
//	Q5_0  32 el, 22 B: f16 d; u32 qh; u8 qs[16]   x = (nib | hibit<<4 - 16) * d; hibit of element j is bit j of qh
//	Q5_1  32 el, 24 B: f16 d, f16 m; u32 qh; u8 qs[16]
//	Q8_0  32 el, 34 B: f16 d; i8 qs[32]           x = q * d
//	Q8_1  32 el, 36 B: f16 d, f16 s (= d * sum q); i8 qs[32]
//	Q2_K 256 el, 84 B: u8 scales[16]; u8 qs[64]; f16 d, f16 dmin
//	Q3_K 256 el,110 B: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
//	Q4_K 256 el,144 B: f16 d, f16 dmin; u8 scales[12] (6-bit scale/min pairs); u8 qs[128]
//	Q5_K 256 el,176 B: f16 d, f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
//	Q6_K 256 el,210 B: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
//	Q8_K 256 el,292 B: f32 d; i8 qs[256]; i16 bsums[16] (see QuantizeRowQ8_K)
package quant

import (
	"fmt"
)

// Type is a GGML tensor element type, numbered as in ggml.h and GGUF files.
type Type uint32

// GGML type ids. Gaps (4, 5, 31-33, 36-38) are ids ggml has retired.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

// QK_K is the super-block size of the K-quants.
const QK_K = 256

type typeInfo struct {
	name       string
	blockSize  int
	blockBytes int
	supported  bool // Dequantize handles it
}

var types = map[Type]typeInfo{
	F32:     {"f32", 1, 4, true},
	F16:     {"f16", 1, 2, true},
	Q4_0:    {"q4_0", 32, 18, true},
	Q4_1:    {"q4_1", 32, 20, true},
	Q5_0:    {"q5_0", 32, 22, true},
	Q5_1:    {"q5_1", 32, 24, true},
	Q8_0:    {"q8_0", 32, 34, true},
	Q8_1:    {"q8_1", 32, 36, true},
	Q2_K:    {"q2_K", QK_K, 84, true},
	Q3_K:    {"q3_K", QK_K, 110, true},
	Q4_K:    {"q4_K", QK_K, 144, true},
	Q5_K:    {"q5_K", QK_K, 176, true},
	Q6_K:    {"q6_K", QK_K, 210, true},
	Q8_K:    {"q8_K", QK_K, 292, true},
	IQ2_XXS: {"iq2_xxs", QK_K, 66, false},
	IQ2_XS:  {"iq2_xs", QK_K, 74, false},
	IQ3_XXS: {"iq3_xxs", QK_K, 98, false},
	IQ1_S:   {"iq1_s", QK_K, 50, false},
	IQ4_NL:  {"iq4_nl", 32, 18, false},
	IQ3_S:   {"iq3_s", QK_K, 110, false},
	IQ2_S:   {"iq2_s", QK_K, 82, false},
	IQ4_XS:  {"iq4_xs", QK_K, 136, false},
	I8:      {"i8", 1, 1, false},
	I16:     {"i16", 1, 2, false},
	I32:     {"i32", 1, 4, false},
	I64:     {"i64", 1, 8, false},
	F64:     {"f64", 1, 8, false},
	IQ1_M:   {"iq1_m", QK_K, 56, false},
	BF16:    {"bf16", 1, 2, true},
	TQ1_0:   {"tq1_0", QK_K, 54, false},
	TQ2_0:   {"tq2_0", QK_K, 66, false},
	MXFP4:   {"mxfp4", 32, 17, false},
}

// Known reports whether t is a type id ggml defines (block layout known),
// whether or not this package can decode it.
func (t Type) Known() bool { _, ok := types[t]; return ok }

// String returns ggml's name for the type ("q4_K", "f16", ...), or
// "type(N)" for ids ggml does not define.
func (t Type) String() string {
	if ti, ok := types[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType maps a name such as "q8_0", "Q4_K" or "f32" to its Type.
func ParseType(s string) (Type, bool) {
	for t, ti := range types {
		if equalFold(ti.name, s) {
			return t, true
		}
	}
	return 0, false
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// BlockSize is the number of elements per block (1 for plain float types),
// or 0 for an unknown type.
func (t Type) BlockSize() int { return types[t].blockSize }

// BlockBytes is the number of bytes per block, or 0 for an unknown type.
func (t Type) BlockBytes() int { return types[t].blockBytes }

// Supported reports whether Dequantize can decode t, i.e. whether a model
// holding tensors of this type can be loaded.
func (t Type) Supported() bool { return types[t].supported }

// maxRowElems bounds n in RowBytes so that byte counts never overflow int
// even on 32-bit platforms' callers multiplying by a row count.
const maxRowElems = 1 << 40

// RowBytes returns the byte size of n elements of type t. n must be a
// multiple of the block size.
func (t Type) RowBytes(n int) (int, error) {
	ti, ok := types[t]
	if !ok {
		return 0, &Error{Code: ErrUnknownType, Msg: fmt.Sprintf("tensor type id %d is not a ggml type", uint32(t))}
	}
	if n < 0 || n > maxRowElems {
		return 0, &Error{Code: ErrBadLength, Msg: fmt.Sprintf("row of %d elements is out of range", n)}
	}
	if n%ti.blockSize != 0 {
		return 0, &Error{Code: ErrBadLength, Msg: fmt.Sprintf("%s stores elements in blocks of %d; a row of %d elements is not a whole number of blocks", ti.name, ti.blockSize, n)}
	}
	return n / ti.blockSize * ti.blockBytes, nil
}

// ErrorCode is a stable machine-readable error class.
type ErrorCode string

const (
	ErrUnknownType     ErrorCode = "quant_unknown_type"
	ErrUnsupportedType ErrorCode = "quant_unsupported_type"
	ErrBadLength       ErrorCode = "quant_bad_length"
)

// Error is the error type of this package.
type Error struct {
	Code ErrorCode
	Msg  string
}

func (e *Error) Error() string { return "quant: " + e.Msg }

// checkLens validates that src holds exactly len(dst) elements of type t.
func checkLens(op string, t Type, nSrcBytes, nElems int) error {
	ti, ok := types[t]
	if !ok {
		return &Error{Code: ErrUnknownType, Msg: fmt.Sprintf("%s: tensor type id %d is not a ggml type", op, uint32(t))}
	}
	if nElems%ti.blockSize != 0 {
		return &Error{Code: ErrBadLength, Msg: fmt.Sprintf("%s %s: %d elements is not a multiple of the block size %d", op, ti.name, nElems, ti.blockSize)}
	}
	want := nElems / ti.blockSize * ti.blockBytes
	if nSrcBytes != want {
		return &Error{Code: ErrBadLength, Msg: fmt.Sprintf("%s %s: %d elements need %d bytes, got %d", op, ti.name, nElems, want, nSrcBytes)}
	}
	return nil
}
