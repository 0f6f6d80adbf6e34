package gguf

import (
	"fmt"
	"math"
)

// ValueType is a GGUF metadata value type id.
type ValueType uint32

// GGUF metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// fixedSize is the encoded size of a scalar type, 0 for string/array,
// -1 for unknown types.
func (t ValueType) fixedSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	case TypeString, TypeArray:
		return 0
	}
	return -1
}

// Value is one metadata value. Type is the value's type; for arrays Elem is
// the element type. Data holds, by Type:
//
//	u8 uint8, i8 int8, u16 uint16, i16 int16, u32 uint32, i32 int32,
//	f32 float32, bool bool, string string, u64 uint64, i64 int64, f64 float64,
//	array: a slice of the element's Go type ([]uint8 ... []string, []bool),
//	       or []Value when the elements are themselves arrays.
type Value struct {
	Type ValueType
	Elem ValueType
	Data any
}

// Len is the number of elements of an array value, 0 for scalars.
func (v Value) Len() int {
	if v.Type != TypeArray {
		return 0
	}
	switch d := v.Data.(type) {
	case []uint8:
		return len(d)
	case []int8:
		return len(d)
	case []uint16:
		return len(d)
	case []int16:
		return len(d)
	case []uint32:
		return len(d)
	case []int32:
		return len(d)
	case []float32:
		return len(d)
	case []bool:
		return len(d)
	case []string:
		return len(d)
	case []uint64:
		return len(d)
	case []int64:
		return len(d)
	case []float64:
		return len(d)
	case []Value:
		return len(d)
	}
	return 0
}

// asInt returns a scalar integer value widened, and whether it is one.
// neg is true for a negative signed value (then u is meaningless).
func asInt(d any) (i int64, u uint64, neg, ok bool) {
	switch x := d.(type) {
	case uint8:
		return int64(x), uint64(x), false, true
	case uint16:
		return int64(x), uint64(x), false, true
	case uint32:
		return int64(x), uint64(x), false, true
	case uint64:
		return int64(x), x, false, true // i meaningful only if x <= MaxInt64
	case int8:
		return int64(x), uint64(x), x < 0, true
	case int16:
		return int64(x), uint64(x), x < 0, true
	case int32:
		return int64(x), uint64(x), x < 0, true
	case int64:
		return x, uint64(x), x < 0, true
	}
	return 0, 0, false, false
}

// Uint returns an integer value of any integer type if it is non-negative.
func (v Value) Uint() (uint64, bool) {
	_, u, neg, ok := asInt(v.Data)
	if !ok || neg || v.Type == TypeArray {
		return 0, false
	}
	return u, true
}

// Int returns an integer value of any integer type if it fits in int64.
func (v Value) Int() (int64, bool) {
	i, u, _, ok := asInt(v.Data)
	if !ok || v.Type == TypeArray {
		return 0, false
	}
	if v.Type == TypeUint64 && u > math.MaxInt64 {
		return 0, false
	}
	return i, true
}

// Float returns an f32 or f64 value.
func (v Value) Float() (float64, bool) {
	switch x := v.Data.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// String formats the value for humans; long arrays are summarized.
func (v Value) String() string {
	if v.Type != TypeArray {
		if s, ok := v.Data.(string); ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprint(v.Data)
	}
	return fmt.Sprintf("[%s x %d]", v.Elem, v.Len())
}
