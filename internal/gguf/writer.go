package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"sluice/internal/quant"
)

// Writer builds a GGUF v3 file in memory and writes it with WriteTo.
// Metadata keys keep the order of their first Set; setting a key again
// replaces its value in place.
type Writer struct {
	keys    []string
	kv      map[string]Value
	tensors []*TensorInfo
	data    [][]byte
	names   map[string]bool
}

// NewWriter returns an empty writer.
func NewWriter() *Writer {
	return &Writer{kv: map[string]Value{}, names: map[string]bool{}}
}

// Set stores any value, including arrays of arrays. It panics on a Value
// whose Data does not match its Type, which is a programming error.
func (w *Writer) Set(key string, v Value) {
	if err := checkValue(v, 0); err != nil {
		panic("gguf.Writer.Set(" + key + "): " + err.Error())
	}
	if _, ok := w.kv[key]; !ok {
		w.keys = append(w.keys, key)
	}
	w.kv[key] = v
}

func (w *Writer) SetUint8(k string, v uint8)     { w.Set(k, Value{Type: TypeUint8, Data: v}) }
func (w *Writer) SetInt8(k string, v int8)       { w.Set(k, Value{Type: TypeInt8, Data: v}) }
func (w *Writer) SetUint16(k string, v uint16)   { w.Set(k, Value{Type: TypeUint16, Data: v}) }
func (w *Writer) SetInt16(k string, v int16)     { w.Set(k, Value{Type: TypeInt16, Data: v}) }
func (w *Writer) SetUint32(k string, v uint32)   { w.Set(k, Value{Type: TypeUint32, Data: v}) }
func (w *Writer) SetInt32(k string, v int32)     { w.Set(k, Value{Type: TypeInt32, Data: v}) }
func (w *Writer) SetFloat32(k string, v float32) { w.Set(k, Value{Type: TypeFloat32, Data: v}) }
func (w *Writer) SetBool(k string, v bool)       { w.Set(k, Value{Type: TypeBool, Data: v}) }
func (w *Writer) SetString(k string, v string)   { w.Set(k, Value{Type: TypeString, Data: v}) }
func (w *Writer) SetUint64(k string, v uint64)   { w.Set(k, Value{Type: TypeUint64, Data: v}) }
func (w *Writer) SetInt64(k string, v int64)     { w.Set(k, Value{Type: TypeInt64, Data: v}) }
func (w *Writer) SetFloat64(k string, v float64) { w.Set(k, Value{Type: TypeFloat64, Data: v}) }

func (w *Writer) SetUint8s(k string, v []uint8) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeUint8, Data: v})
}
func (w *Writer) SetInt8s(k string, v []int8) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeInt8, Data: v})
}
func (w *Writer) SetUint16s(k string, v []uint16) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeUint16, Data: v})
}
func (w *Writer) SetInt16s(k string, v []int16) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeInt16, Data: v})
}
func (w *Writer) SetUint32s(k string, v []uint32) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeUint32, Data: v})
}
func (w *Writer) SetInt32s(k string, v []int32) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeInt32, Data: v})
}
func (w *Writer) SetFloat32s(k string, v []float32) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeFloat32, Data: v})
}
func (w *Writer) SetBools(k string, v []bool) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeBool, Data: v})
}
func (w *Writer) SetStrings(k string, v []string) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeString, Data: v})
}
func (w *Writer) SetUint64s(k string, v []uint64) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeUint64, Data: v})
}
func (w *Writer) SetInt64s(k string, v []int64) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeInt64, Data: v})
}
func (w *Writer) SetFloat64s(k string, v []float64) {
	w.Set(k, Value{Type: TypeArray, Elem: TypeFloat64, Data: v})
}

// CopyFrom copies the metadata keys of f for which keep returns true.
func (w *Writer) CopyFrom(f *File, keep func(key string) bool) {
	for _, k := range f.keys {
		if keep(k) {
			w.Set(k, f.kv[k])
		}
	}
}

// AddTensor appends a tensor. dims are in ggml order (dims[0] = row
// length); data must be exactly the tensor's byte size. data is kept, not
// copied, until WriteTo.
func (w *Writer) AddTensor(name string, t quant.Type, dims []uint64, data []byte) error {
	if w.names[name] {
		return errf(ErrDuplicate, -1, "tensor %q added twice", name)
	}
	if len(dims) == 0 || len(dims) > maxDims {
		return errf(ErrBadShape, -1, "tensor %q has %d dimensions (1 to %d)", name, len(dims), maxDims)
	}
	ti := &TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: t}
	if err := sizeTensor(ti); err != nil {
		return err
	}
	if uint64(len(data)) != ti.Size {
		return errf(ErrWriter, -1, "tensor %q: %s %v needs %d bytes, got %d", name, t, dims, ti.Size, len(data))
	}
	w.names[name] = true
	w.tensors = append(w.tensors, ti)
	w.data = append(w.data, data)
	return nil
}

func (w *Writer) alignment() int {
	if v, ok := w.kv["general.alignment"]; ok {
		if a, ok := v.Data.(uint32); ok && a != 0 && a&(a-1) == 0 {
			return int(a)
		}
	}
	return DefaultAlignment
}

// WriteTo writes the file: header, metadata, tensor descriptors, then the
// tensor data, each tensor padded to general.alignment (default 32).
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	if v, ok := w.kv["general.alignment"]; ok {
		a, isU32 := v.Data.(uint32)
		if !isU32 || a == 0 || a&(a-1) != 0 {
			return 0, errf(ErrBadAlignment, -1, "general.alignment must be a u32 power of two")
		}
	}
	align := w.alignment()
	cw := &countWriter{w: bufio.NewWriterSize(out, 1<<16)}
	e := &encoder{w: cw}
	e.u32(Magic)
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.keys)))
	for _, k := range w.keys {
		e.str(k)
		v := w.kv[k]
		e.u32(uint32(v.Type))
		e.value(v)
	}
	off := uint64(0)
	for _, t := range w.tensors {
		t.Offset = off
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
		off += uint64(pad(int(t.Size), align))
	}
	e.zeros(pad(int(cw.n), align) - int(cw.n))
	for i, t := range w.tensors {
		e.bytes(w.data[i])
		e.zeros(pad(int(t.Size), align) - int(t.Size))
	}
	if e.err == nil {
		e.err = cw.w.(*bufio.Writer).Flush()
	}
	if e.err != nil {
		return cw.n, &Error{Code: ErrIO, Offset: cw.n, Msg: "write failed", Err: e.err}
	}
	return cw.n, nil
}

// Bytes returns the encoded file.
func (w *Writer) Bytes() ([]byte, error) {
	var b bytesBuf
	if _, err := w.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.b, nil
}

type bytesBuf struct{ b []byte }

func (b *bytesBuf) Write(p []byte) (int, error) { b.b = append(b.b, p...); return len(p), nil }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type encoder struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) zeros(n int) {
	var z [64]byte
	for n > 0 {
		k := min(n, len(z))
		e.bytes(z[:k])
		n -= k
	}
}

func (e *encoder) u8(v uint8) { e.buf[0] = v; e.bytes(e.buf[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.bytes(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.bytes(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.bytes(e.buf[:8])
}
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.bytes([]byte(s)) }

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (e *encoder) value(v Value) {
	switch x := v.Data.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		e.u8(b2u(x))
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	default:
		e.u32(uint32(v.Elem))
		e.u64(uint64(v.Len()))
		switch s := x.(type) {
		case []uint8:
			e.bytes(s)
		case []int8:
			for _, y := range s {
				e.u8(uint8(y))
			}
		case []bool:
			for _, y := range s {
				e.u8(b2u(y))
			}
		case []uint16:
			for _, y := range s {
				e.u16(y)
			}
		case []int16:
			for _, y := range s {
				e.u16(uint16(y))
			}
		case []uint32:
			for _, y := range s {
				e.u32(y)
			}
		case []int32:
			for _, y := range s {
				e.u32(uint32(y))
			}
		case []float32:
			for _, y := range s {
				e.u32(math.Float32bits(y))
			}
		case []uint64:
			for _, y := range s {
				e.u64(y)
			}
		case []int64:
			for _, y := range s {
				e.u64(uint64(y))
			}
		case []float64:
			for _, y := range s {
				e.u64(math.Float64bits(y))
			}
		case []string:
			for _, y := range s {
				e.str(y)
			}
		case []Value:
			for _, y := range s {
				e.value(y)
			}
		}
	}
}

// checkValue verifies that Data has the Go type Type (and Elem) promise.
func checkValue(v Value, depth int) error {
	if depth > maxNesting {
		return fmt.Errorf("arrays nested deeper than %d", maxNesting)
	}
	ok := false
	switch v.Type {
	case TypeUint8:
		_, ok = v.Data.(uint8)
	case TypeInt8:
		_, ok = v.Data.(int8)
	case TypeUint16:
		_, ok = v.Data.(uint16)
	case TypeInt16:
		_, ok = v.Data.(int16)
	case TypeUint32:
		_, ok = v.Data.(uint32)
	case TypeInt32:
		_, ok = v.Data.(int32)
	case TypeFloat32:
		_, ok = v.Data.(float32)
	case TypeBool:
		_, ok = v.Data.(bool)
	case TypeString:
		_, ok = v.Data.(string)
	case TypeUint64:
		_, ok = v.Data.(uint64)
	case TypeInt64:
		_, ok = v.Data.(int64)
	case TypeFloat64:
		_, ok = v.Data.(float64)
	case TypeArray:
		switch v.Elem {
		case TypeUint8:
			_, ok = v.Data.([]uint8)
		case TypeInt8:
			_, ok = v.Data.([]int8)
		case TypeUint16:
			_, ok = v.Data.([]uint16)
		case TypeInt16:
			_, ok = v.Data.([]int16)
		case TypeUint32:
			_, ok = v.Data.([]uint32)
		case TypeInt32:
			_, ok = v.Data.([]int32)
		case TypeFloat32:
			_, ok = v.Data.([]float32)
		case TypeBool:
			_, ok = v.Data.([]bool)
		case TypeString:
			_, ok = v.Data.([]string)
		case TypeUint64:
			_, ok = v.Data.([]uint64)
		case TypeInt64:
			_, ok = v.Data.([]int64)
		case TypeFloat64:
			_, ok = v.Data.([]float64)
		case TypeArray:
			var s []Value
			s, ok = v.Data.([]Value)
			for _, x := range s {
				if x.Type != TypeArray {
					return fmt.Errorf("array of arrays holds a %s", x.Type)
				}
				if err := checkValue(x, depth+1); err != nil {
					return err
				}
			}
		}
	}
	if !ok {
		return fmt.Errorf("value of type %s (elem %s) holds Go %T", v.Type, v.Elem, v.Data)
	}
	return nil
}
