// Package gguf reads and writes GGUF files (versions 2 and 3), the model
// format of llama.cpp: a header, typed key/value metadata, tensor
// descriptors, then aligned tensor data. The reader treats the file as
// untrusted input: every length is checked against the bytes remaining
// before anything is allocated, and every failure is an *Error with a code.
package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"sluice/internal/quant"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment applies when general.alignment is absent.
const DefaultAlignment = 32

// maxDims is ggml's GGML_MAX_DIMS.
const maxDims = 4

// maxNesting bounds arrays of arrays so hostile input cannot recurse deeply.
const maxNesting = 8

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] is the
// row length (the contiguous dimension). Offset is relative to the start of
// the data section; Size is the tensor's byte size.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   quant.Type
	Offset uint64
	Size   uint64
}

// Elements is the product of the dimensions.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Rows is the number of rows of length Dims[0].
func (t *TensorInfo) Rows() uint64 {
	if len(t.Dims) == 0 || t.Dims[0] == 0 {
		return 0
	}
	return t.Elements() / t.Dims[0]
}

// File is a parsed GGUF file. Its tensor data is a view of the mapping (or
// of the slice given to Parse) and is valid until Close.
type File struct {
	Version   uint32
	Alignment int
	// DataOffset is the byte position of the data section in the file.
	DataOffset uint64
	Tensors    []*TensorInfo

	keys    []string
	kv      map[string]Value
	byName  map[string]*TensorInfo
	data    []byte
	mmapped bool
}

// Open maps the file read-only and parses it. Close unmaps it.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, &Error{Code: ErrIO, Offset: -1, Msg: "cannot open " + path, Err: err}
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, &Error{Code: ErrIO, Offset: -1, Msg: "cannot stat " + path, Err: err}
	}
	if st.IsDir() {
		return nil, errf(ErrIsDirectory, -1, "%s", dirHint(path))
	}
	size := st.Size()
	if size < 8 {
		return nil, errf(ErrTruncated, 0, "%s is %d bytes, too short for a GGUF header", path, size)
	}
	if size > math.MaxInt {
		return nil, errf(ErrCount, -1, "%s is too large to map (%d bytes)", path, size)
	}
	data, err := mapFile(fh, int(size))
	if err != nil {
		return nil, &Error{Code: ErrIO, Offset: -1, Msg: "cannot map " + path, Err: err}
	}
	f, err := Parse(data)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Msg = path + ": " + e.Msg
			if e.Code == ErrBadMagic {
				e.Msg += formatHint(path, data)
				e.Offset = -1
			}
		}
		unmapFile(data)
		return nil, err
	}
	f.mmapped = true
	return f, nil
}

// Close releases the mapping made by Open. Tensor data slices must not be
// used afterwards. Close on a File from Parse only drops the reference.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	var err error
	if f.mmapped {
		if e := unmapFile(f.data); e != nil {
			err = &Error{Code: ErrIO, Offset: -1, Msg: "munmap failed", Err: e}
		}
	}
	f.data = nil
	return err
}

// Keys returns the metadata keys in file order.
func (f *File) Keys() []string { return append([]string(nil), f.keys...) }

// Value returns the raw typed value of key.
func (f *File) Value(key string) (Value, bool) {
	v, ok := f.kv[key]
	return v, ok
}

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.kv[key].Data.(string)
	return s, ok
}

// Uint returns a non-negative value of any integer type.
func (f *File) Uint(key string) (uint64, bool) {
	v, ok := f.kv[key]
	if !ok {
		return 0, false
	}
	return v.Uint()
}

// Int returns a value of any integer type that fits in int64.
func (f *File) Int(key string) (int64, bool) {
	v, ok := f.kv[key]
	if !ok {
		return 0, false
	}
	return v.Int()
}

// Float returns an f32 or f64 value.
func (f *File) Float(key string) (float64, bool) {
	v, ok := f.kv[key]
	if !ok {
		return 0, false
	}
	return v.Float()
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.kv[key].Data.(bool)
	return b, ok
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, bool) {
	s, ok := f.kv[key].Data.([]string)
	return s, ok
}

// Float32s returns an array of f32 (an f64 array is converted).
func (f *File) Float32s(key string) ([]float32, bool) {
	switch d := f.kv[key].Data.(type) {
	case []float32:
		return d, true
	case []float64:
		out := make([]float32, len(d))
		for i, x := range d {
			out[i] = float32(x)
		}
		return out, true
	}
	return nil, false
}

// Int32s returns an array of i32; arrays of other integer types are
// converted when every element fits in an int32.
func (f *File) Int32s(key string) ([]int32, bool) {
	v := f.kv[key]
	if d, ok := v.Data.([]int32); ok {
		return d, true
	}
	if v.Type != TypeArray {
		return nil, false
	}
	n := v.Len()
	out := make([]int32, n)
	conv := func(get func(i int) (int64, bool)) ([]int32, bool) {
		for i := 0; i < n; i++ {
			x, ok := get(i)
			if !ok || x < math.MinInt32 || x > math.MaxInt32 {
				return nil, false
			}
			out[i] = int32(x)
		}
		return out, true
	}
	switch d := v.Data.(type) {
	case []uint8:
		return conv(func(i int) (int64, bool) { return int64(d[i]), true })
	case []int8:
		return conv(func(i int) (int64, bool) { return int64(d[i]), true })
	case []uint16:
		return conv(func(i int) (int64, bool) { return int64(d[i]), true })
	case []int16:
		return conv(func(i int) (int64, bool) { return int64(d[i]), true })
	case []uint32:
		return conv(func(i int) (int64, bool) { return int64(d[i]), true })
	case []int64:
		return conv(func(i int) (int64, bool) { return d[i], true })
	case []uint64:
		return conv(func(i int) (int64, bool) { return int64(d[i]), d[i] <= math.MaxInt32 })
	}
	return nil, false
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	t, ok := f.byName[name]
	return t, ok
}

// TensorData returns the tensor's bytes, a view of the file (no copy).
// It returns nil after Close.
func (f *File) TensorData(t *TensorInfo) []byte {
	if f.data == nil {
		return nil
	}
	start := f.DataOffset + t.Offset
	return f.data[start : start+t.Size : start+t.Size]
}

// CheckSupported returns an ErrTensorType error naming the first tensor
// whose type quant cannot decode, or nil when every tensor is loadable.
func (f *File) CheckSupported() error {
	for _, t := range f.Tensors {
		if !t.Type.Supported() {
			return errf(ErrTensorType, -1, "tensor %q has type %s, which sluice cannot decode (supported: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_K..q6_K)", t.Name, t.Type)
		}
	}
	return nil
}

// Architecture returns general.architecture, or "" when absent.
func (f *File) Architecture() string {
	s, _ := f.String("general.architecture")
	return s
}

// decoder reads little-endian fields with bounds checks.
type decoder struct {
	b   []byte
	off int
	err *Error
}

func (d *decoder) need(n int, what string) bool {
	if d.err != nil {
		return false
	}
	if n < 0 || len(d.b)-d.off < n {
		d.err = errf(ErrTruncated, int64(d.off), "file ends inside %s (needs %d bytes, %d left)", what, n, len(d.b)-d.off)
		return false
	}
	return true
}

func (d *decoder) u8(what string) uint8 {
	if !d.need(1, what) {
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) u16(what string) uint16 {
	if !d.need(2, what) {
		return 0
	}
	v := binary.LittleEndian.Uint16(d.b[d.off:])
	d.off += 2
	return v
}

func (d *decoder) u32(what string) uint32 {
	if !d.need(4, what) {
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b[d.off:])
	d.off += 4
	return v
}

func (d *decoder) u64(what string) uint64 {
	if !d.need(8, what) {
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b[d.off:])
	d.off += 8
	return v
}

// count reads a uint64 count of items each at least minSize bytes long and
// rejects counts that could not fit in the rest of the file, so no
// allocation is ever sized by an unchecked number.
func (d *decoder) count(what string, minSize int) int {
	at := d.off
	n := d.u64(what)
	if d.err != nil {
		return 0
	}
	left := uint64(len(d.b) - d.off)
	if n > left/uint64(minSize) {
		d.err = errf(ErrCount, int64(at), "%s is %d, more than the %d bytes left in the file can hold (truncated or corrupt file)", what, n, left)
		return 0
	}
	return int(n)
}

func (d *decoder) str(what string) string {
	n := d.count(what+" length", 1)
	if d.err != nil {
		return ""
	}
	s := string(d.b[d.off : d.off+n])
	d.off += n
	return s
}

// Parse parses a GGUF file held in memory. The File refers to data; it
// must not be modified while the File is in use.
func Parse(data []byte) (*File, error) {
	d := &decoder{b: data}
	if len(data) < 4 {
		return nil, errf(ErrTruncated, 0, "file is %d bytes, too short for a GGUF header", len(data))
	}
	if m := binary.LittleEndian.Uint32(data); m != Magic {
		return nil, errf(ErrBadMagic, 0, "bad magic %q, not a GGUF file", data[:4])
	}
	d.off = 4
	f := &File{kv: map[string]Value{}, byName: map[string]*TensorInfo{}, data: data, Alignment: DefaultAlignment}
	f.Version = d.u32("version")
	if d.err != nil {
		return nil, d.err
	}
	if f.Version != 2 && f.Version != 3 {
		msg := fmt.Sprintf("GGUF version %d is not supported (only 2 and 3)", f.Version)
		if v := f.Version>>24 | f.Version>>8&0xff00; f.Version&0xffff == 0 && (v == 2 || v == 3) {
			msg += "; this looks like a big-endian GGUF file"
		} else if f.Version == 1 {
			msg += "; re-convert the model with a current llama.cpp"
		}
		return nil, errf(ErrVersion, 4, "%s", msg)
	}
	// A tensor descriptor is at least 8 (name len) + 4 + 4 + 8 bytes; a KV
	// is at least 8 (key len) + 4 + 1.
	nTensors := d.count("tensor count", 24)
	nKV := d.count("metadata count", 13)
	if d.err != nil {
		return nil, d.err
	}
	f.keys = make([]string, 0, nKV)
	for i := 0; i < nKV; i++ {
		at := d.off
		key := d.str(fmt.Sprintf("key of metadata entry %d", i))
		vt := ValueType(d.u32("value type of " + key))
		if d.err != nil {
			return nil, d.err
		}
		v := d.value(key, vt, 0)
		if d.err != nil {
			return nil, d.err
		}
		if _, dup := f.kv[key]; dup {
			return nil, errf(ErrDuplicate, int64(at), "metadata key %q appears twice", key)
		}
		f.kv[key] = v
		f.keys = append(f.keys, key)
	}
	if v, ok := f.kv["general.alignment"]; ok {
		a, isU32 := v.Data.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, errf(ErrBadAlignment, -1, "general.alignment must be a u32 power of two up to 1 MiB, got %s %v", v.Type, v.Data)
		}
		f.Alignment = int(a)
	}
	f.Tensors = make([]*TensorInfo, 0, nTensors)
	for i := 0; i < nTensors; i++ {
		at := d.off
		t := &TensorInfo{Name: d.str(fmt.Sprintf("name of tensor %d", i))}
		nd := d.u32("dimension count of tensor " + t.Name)
		if d.err != nil {
			return nil, d.err
		}
		if nd > maxDims {
			return nil, errf(ErrBadShape, int64(at), "tensor %q has %d dimensions (at most %d)", t.Name, nd, maxDims)
		}
		t.Dims = make([]uint64, nd)
		for j := range t.Dims {
			t.Dims[j] = d.u64("dimensions of tensor " + t.Name)
		}
		t.Type = quant.Type(d.u32("type of tensor " + t.Name))
		t.Offset = d.u64("offset of tensor " + t.Name)
		if d.err != nil {
			return nil, d.err
		}
		if _, dup := f.byName[t.Name]; dup {
			return nil, errf(ErrDuplicate, int64(at), "tensor %q appears twice", t.Name)
		}
		if err := sizeTensor(t); err != nil {
			err.Offset = int64(at)
			return nil, err
		}
		f.byName[t.Name] = t
		f.Tensors = append(f.Tensors, t)
	}
	start := uint64(pad(d.off, f.Alignment))
	if len(f.Tensors) > 0 && start > uint64(len(data)) {
		return nil, errf(ErrTruncated, int64(d.off), "file ends before the tensor data section")
	}
	f.DataOffset = start
	dataLen := uint64(0)
	if start < uint64(len(data)) {
		dataLen = uint64(len(data)) - start
	}
	for _, t := range f.Tensors {
		if t.Offset%uint64(f.Alignment) != 0 {
			return nil, errf(ErrBadAlignment, -1, "tensor %q data offset %d is not a multiple of the alignment %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > dataLen || t.Size > dataLen-t.Offset {
			return nil, errf(ErrOutOfBounds, -1, "tensor %q (%d bytes at data offset %d) extends past the end of the file (data section is %d bytes; file truncated?)", t.Name, t.Size, t.Offset, dataLen)
		}
	}
	return f, nil
}

func pad(n, a int) int { return (n + a - 1) / a * a }

// sizeTensor validates the type and shape and sets Size.
func sizeTensor(t *TensorInfo) *Error {
	if !t.Type.Known() {
		return errf(ErrTensorType, -1, "tensor %q has unknown or retired ggml type id %d", t.Name, uint32(t.Type))
	}
	n := uint64(1)
	for _, dim := range t.Dims {
		if dim > math.MaxInt64 || (dim != 0 && n > math.MaxInt64/dim) {
			return errf(ErrBadShape, -1, "tensor %q shape %v overflows", t.Name, t.Dims)
		}
		n *= dim
	}
	bs := uint64(t.Type.BlockSize())
	row := uint64(1)
	if len(t.Dims) > 0 {
		row = t.Dims[0]
	}
	if row%bs != 0 {
		return errf(ErrBadShape, -1, "tensor %q of type %s has rows of %d elements, not a multiple of the block size %d", t.Name, t.Type, row, bs)
	}
	blocks := n / bs
	bb := uint64(t.Type.BlockBytes())
	if blocks > math.MaxInt64/bb {
		return errf(ErrBadShape, -1, "tensor %q byte size overflows", t.Name)
	}
	t.Size = blocks * bb
	return nil
}

func (d *decoder) value(key string, vt ValueType, depth int) Value {
	what := "value of " + key
	switch vt {
	case TypeUint8:
		return Value{Type: vt, Data: d.u8(what)}
	case TypeInt8:
		return Value{Type: vt, Data: int8(d.u8(what))}
	case TypeUint16:
		return Value{Type: vt, Data: d.u16(what)}
	case TypeInt16:
		return Value{Type: vt, Data: int16(d.u16(what))}
	case TypeUint32:
		return Value{Type: vt, Data: d.u32(what)}
	case TypeInt32:
		return Value{Type: vt, Data: int32(d.u32(what))}
	case TypeFloat32:
		return Value{Type: vt, Data: math.Float32frombits(d.u32(what))}
	case TypeUint64:
		return Value{Type: vt, Data: d.u64(what)}
	case TypeInt64:
		return Value{Type: vt, Data: int64(d.u64(what))}
	case TypeFloat64:
		return Value{Type: vt, Data: math.Float64frombits(d.u64(what))}
	case TypeBool:
		at := d.off
		b := d.u8(what)
		if d.err == nil && b > 1 {
			d.err = errf(ErrBadMetadata, int64(at), "%s: bool byte is %d (must be 0 or 1)", what, b)
		}
		return Value{Type: vt, Data: b == 1}
	case TypeString:
		return Value{Type: vt, Data: d.str(what)}
	case TypeArray:
		return d.array(key, depth)
	}
	d.err = errf(ErrBadMetadata, int64(d.off-4), "metadata %q has unknown value type %d", key, uint32(vt))
	return Value{}
}

func (d *decoder) array(key string, depth int) Value {
	if depth >= maxNesting {
		d.err = errf(ErrBadMetadata, int64(d.off), "metadata %q nests arrays deeper than %d", key, maxNesting)
		return Value{}
	}
	at := d.off
	et := ValueType(d.u32("array element type of " + key))
	if d.err != nil {
		return Value{}
	}
	min := et.fixedSize()
	switch {
	case min < 0:
		d.err = errf(ErrBadMetadata, int64(at), "metadata %q is an array of unknown value type %d", key, uint32(et))
		return Value{}
	case et == TypeString:
		min = 8
	case et == TypeArray:
		min = 12
	}
	what := "array length of " + key
	n := d.count(what, min)
	if d.err != nil {
		return Value{}
	}
	v := Value{Type: TypeArray, Elem: et}
	b := d.b[d.off : d.off+n*max(min, 1)]
	le := binary.LittleEndian
	switch et {
	case TypeUint8:
		s := make([]uint8, n)
		copy(s, b)
		v.Data = s
	case TypeInt8:
		s := make([]int8, n)
		for i := range s {
			s[i] = int8(b[i])
		}
		v.Data = s
	case TypeBool:
		s := make([]bool, n)
		for i := range s {
			if b[i] > 1 {
				d.err = errf(ErrBadMetadata, int64(d.off+i), "metadata %q: bool byte is %d (must be 0 or 1)", key, b[i])
				return Value{}
			}
			s[i] = b[i] == 1
		}
		v.Data = s
	case TypeUint16:
		v.Data = decodeFixed(b, n, 2, func(e []byte) uint16 { return le.Uint16(e) })
	case TypeInt16:
		v.Data = decodeFixed(b, n, 2, func(e []byte) int16 { return int16(le.Uint16(e)) })
	case TypeUint32:
		v.Data = decodeFixed(b, n, 4, func(e []byte) uint32 { return le.Uint32(e) })
	case TypeInt32:
		v.Data = decodeFixed(b, n, 4, func(e []byte) int32 { return int32(le.Uint32(e)) })
	case TypeFloat32:
		v.Data = decodeFixed(b, n, 4, func(e []byte) float32 { return math.Float32frombits(le.Uint32(e)) })
	case TypeUint64:
		v.Data = decodeFixed(b, n, 8, func(e []byte) uint64 { return le.Uint64(e) })
	case TypeInt64:
		v.Data = decodeFixed(b, n, 8, func(e []byte) int64 { return int64(le.Uint64(e)) })
	case TypeFloat64:
		v.Data = decodeFixed(b, n, 8, func(e []byte) float64 { return math.Float64frombits(le.Uint64(e)) })
	case TypeString:
		s := make([]string, n)
		for i := range s {
			s[i] = d.str(what)
			if d.err != nil {
				return Value{}
			}
		}
		v.Data = s
		return v
	case TypeArray:
		s := make([]Value, n)
		for i := range s {
			s[i] = d.array(key, depth+1)
			if d.err != nil {
				return Value{}
			}
		}
		v.Data = s
		return v
	}
	d.off += len(b)
	return v
}

// decodeFixed decodes n little-endian elements of size bytes each from b,
// which the caller has already checked holds n*size bytes.
func decodeFixed[T any](b []byte, n, size int, elem func([]byte) T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = elem(b[size*i:])
	}
	return s
}
