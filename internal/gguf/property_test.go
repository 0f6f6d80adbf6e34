package gguf

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"sluice/internal/quant"
)

// randValue builds a random metadata value of any type, arrays of arrays
// included, to check that whatever the writer accepts the reader returns
// unchanged.
func randValue(r *rand.Rand, depth int) Value {
	vt := ValueType(r.IntN(13))
	if vt == TypeArray && depth >= 3 {
		vt = TypeString
	}
	str := func() string {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		return string(b)
	}
	switch vt {
	case TypeUint8:
		return Value{Type: vt, Data: uint8(r.Uint32())}
	case TypeInt8:
		return Value{Type: vt, Data: int8(r.Uint32())}
	case TypeUint16:
		return Value{Type: vt, Data: uint16(r.Uint32())}
	case TypeInt16:
		return Value{Type: vt, Data: int16(r.Uint32())}
	case TypeUint32:
		return Value{Type: vt, Data: r.Uint32()}
	case TypeInt32:
		return Value{Type: vt, Data: int32(r.Uint32())}
	case TypeFloat32:
		return Value{Type: vt, Data: float32(r.NormFloat64())}
	case TypeBool:
		return Value{Type: vt, Data: r.IntN(2) == 1}
	case TypeString:
		return Value{Type: vt, Data: str()}
	case TypeUint64:
		return Value{Type: vt, Data: r.Uint64()}
	case TypeInt64:
		return Value{Type: vt, Data: int64(r.Uint64())}
	case TypeFloat64:
		return Value{Type: vt, Data: r.NormFloat64()}
	}
	n := r.IntN(5)
	elem := ValueType(r.IntN(13))
	if depth >= 2 && elem == TypeArray {
		elem = TypeInt32
	}
	v := Value{Type: TypeArray, Elem: elem}
	switch elem {
	case TypeArray:
		s := make([]Value, n)
		for i := range s {
			// Draw until an array comes up (depth+1 < 3 allows arrays).
			s[i] = randValue(r, depth+1)
			for s[i].Type != TypeArray {
				s[i] = randValue(r, depth+1)
			}
		}
		v.Data = s
	default:
		// Build n scalars of the element type and collect them in a typed slice.
		items := make([]Value, n)
		for i := range items {
			for {
				items[i] = randValue(r, 3)
				if items[i].Type == elem {
					break
				}
			}
		}
		v.Data = typedSlice(elem, items)
	}
	return v
}

func typedSlice(elem ValueType, items []Value) any {
	switch elem {
	case TypeUint8:
		return collect[uint8](items)
	case TypeInt8:
		return collect[int8](items)
	case TypeUint16:
		return collect[uint16](items)
	case TypeInt16:
		return collect[int16](items)
	case TypeUint32:
		return collect[uint32](items)
	case TypeInt32:
		return collect[int32](items)
	case TypeFloat32:
		return collect[float32](items)
	case TypeBool:
		return collect[bool](items)
	case TypeString:
		return collect[string](items)
	case TypeUint64:
		return collect[uint64](items)
	case TypeInt64:
		return collect[int64](items)
	case TypeFloat64:
		return collect[float64](items)
	}
	panic(fmt.Sprint("no slice for ", elem))
}

func collect[T any](items []Value) []T {
	out := make([]T, len(items))
	for i, it := range items {
		out[i] = it.Data.(T)
	}
	return out
}

func TestRandomRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 1))
	for iter := 0; iter < 200; iter++ {
		w := NewWriter()
		want := map[string]Value{}
		for k := 0; k < 1+r.IntN(10); k++ {
			key := fmt.Sprintf("k%d.%d", iter, k)
			v := randValue(r, 0)
			w.Set(key, v)
			want[key] = v
		}
		align := uint32(1) << r.IntN(8)
		w.SetUint32("general.alignment", align)
		want["general.alignment"] = Value{Type: TypeUint32, Data: align}
		var tensors []*TensorInfo
		for k := 0; k < r.IntN(4); k++ {
			typ := []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K}[r.IntN(4)]
			dims := []uint64{uint64(typ.BlockSize() * (1 + r.IntN(3))), uint64(1 + r.IntN(3))}
			size, _ := typ.RowBytes(int(dims[0] * dims[1]))
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			name := fmt.Sprintf("t%d", k)
			if err := w.AddTensor(name, typ, dims, data); err != nil {
				t.Fatal(err)
			}
			tensors = append(tensors, &TensorInfo{Name: name, Dims: dims, Type: typ, Size: uint64(size)})
		}
		b, err := w.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		f, err := Parse(b)
		if err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		for k, v := range want {
			got, ok := f.Value(k)
			if !ok || !sameValue(got, v) {
				t.Fatalf("iteration %d key %s: got %#v, want %#v", iter, k, got, v)
			}
		}
		if f.Alignment != int(align) || f.DataOffset%uint64(align) != 0 {
			t.Fatalf("alignment %d, data offset %d", f.Alignment, f.DataOffset)
		}
		for i, ti := range tensors {
			got := f.Tensors[i]
			if got.Name != ti.Name || got.Type != ti.Type || got.Size != ti.Size || !reflect.DeepEqual(got.Dims, ti.Dims) || got.Offset%uint64(align) != 0 {
				t.Fatalf("tensor %d: %+v, want %+v", i, got, ti)
			}
			if !reflect.DeepEqual(f.TensorData(got), w.data[i]) {
				t.Fatalf("tensor %s data differs", ti.Name)
			}
		}
	}
}

// sameValue is DeepEqual except that NaN floats compare by bits.
func sameValue(a, b Value) bool {
	if fa, ok := a.Data.(float64); ok {
		fb, ok := b.Data.(float64)
		return ok && math.Float64bits(fa) == math.Float64bits(fb)
	}
	return reflect.DeepEqual(a, b)
}
