package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sluice/internal/quant"
	"sluice/internal/testenv"
)

func sampleWriter(t testing.TB) *Writer {
	w := NewWriter()
	w.SetString("general.architecture", "llama")
	w.SetUint8("t.u8", 200)
	w.SetInt8("t.i8", -100)
	w.SetUint16("t.u16", 60000)
	w.SetInt16("t.i16", -30000)
	w.SetUint32("t.u32", 4000000000)
	w.SetInt32("t.i32", -2000000000)
	w.SetFloat32("t.f32", 1.5)
	w.SetBool("t.bool", true)
	w.SetUint64("t.u64", math.MaxUint64)
	w.SetInt64("t.i64", math.MinInt64)
	w.SetFloat64("t.f64", -2.25)
	w.SetStrings("t.strs", []string{"a", "", "héllo"})
	w.SetFloat32s("t.f32s", []float32{1, 2, 3})
	w.SetInt32s("t.i32s", []int32{1, -2, 3})
	w.SetUint8s("t.u8s", []uint8{1, 2})
	w.SetBools("t.bools", []bool{true, false})
	w.SetUint64s("t.u64s", []uint64{1 << 40})
	w.SetInt16s("t.i16s", []int16{-5, 7})
	w.Set("t.nested", Value{Type: TypeArray, Elem: TypeArray, Data: []Value{
		{Type: TypeArray, Elem: TypeInt32, Data: []int32{1, 2}},
		{Type: TypeArray, Elem: TypeString, Data: []string{"x"}},
	}})
	f32 := make([]byte, 4*6)
	for i := 0; i < 6; i++ {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(float32(i)))
	}
	if err := w.AddTensor("a", quant.F32, []uint64{3, 2}, f32); err != nil {
		t.Fatal(err)
	}
	q := make([]byte, 34*2)
	if err := w.AddTensor("b.weight", quant.Q8_0, []uint64{64}, q); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestRoundTrip(t *testing.T) {
	w := sampleWriter(t)
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v (buffer %d)", n, err, buf.Len())
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 3 || f.Alignment != 32 {
		t.Errorf("version %d alignment %d", f.Version, f.Alignment)
	}
	if !reflect.DeepEqual(f.Keys(), w.keys) {
		t.Errorf("keys %v, want %v", f.Keys(), w.keys)
	}
	for _, k := range w.keys {
		got, _ := f.Value(k)
		if !reflect.DeepEqual(got, w.kv[k]) {
			t.Errorf("%s = %#v, want %#v", k, got, w.kv[k])
		}
	}
	if u, ok := f.Uint("t.u8"); !ok || u != 200 {
		t.Error("Uint(u8)")
	}
	if _, ok := f.Uint("t.i8"); ok {
		t.Error("Uint accepted a negative i8")
	}
	if i, ok := f.Int("t.i64"); !ok || i != math.MinInt64 {
		t.Error("Int(i64)")
	}
	if _, ok := f.Int("t.u64"); ok {
		t.Error("Int accepted MaxUint64")
	}
	if x, ok := f.Float("t.f32"); !ok || x != 1.5 {
		t.Error("Float(f32)")
	}
	if b, ok := f.Bool("t.bool"); !ok || !b {
		t.Error("Bool")
	}
	if s, ok := f.Strings("t.strs"); !ok || s[2] != "héllo" {
		t.Error("Strings")
	}
	if s, ok := f.Int32s("t.i16s"); !ok || !reflect.DeepEqual(s, []int32{-5, 7}) {
		t.Error("Int32s conversion from i16")
	}
	if _, ok := f.Int32s("t.u64s"); ok {
		t.Error("Int32s accepted 1<<40")
	}
	if s, ok := f.String("general.architecture"); !ok || s != "llama" {
		t.Error("String")
	}
	if len(f.Tensors) != 2 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	a, _ := f.Tensor("a")
	if a.Elements() != 6 || a.Size != 24 || a.Type != quant.F32 || a.Offset != 0 {
		t.Errorf("tensor a = %+v", a)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(f.TensorData(a)[20:])); got != 5 {
		t.Errorf("a[5] = %v", got)
	}
	b, _ := f.Tensor("b.weight")
	if b.Offset != 32 || b.Size != 68 || f.DataOffset%32 != 0 {
		t.Errorf("tensor b offset %d size %d, data at %d", b.Offset, b.Size, f.DataOffset)
	}
	if uint64(buf.Len()) != f.DataOffset+32+96 {
		t.Errorf("file is %d bytes, want data offset + padded tensors %d", buf.Len(), f.DataOffset+128)
	}
}

func TestAlignment(t *testing.T) {
	w := sampleWriter(t)
	w.SetUint32("general.alignment", 64)
	data, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Tensor("b.weight")
	if f.Alignment != 64 || f.DataOffset%64 != 0 || b.Offset != 64 {
		t.Errorf("alignment %d, data offset %d, b offset %d", f.Alignment, f.DataOffset, b.Offset)
	}
	w.SetUint32("general.alignment", 48)
	if _, err := w.Bytes(); err == nil {
		t.Error("alignment 48 accepted by the writer")
	}
}

func TestOpenMmap(t *testing.T) {
	data, err := sampleWriter(t).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "x.gguf")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := f.Tensor("a")
	if len(f.TensorData(a)) != 24 {
		t.Error("tensor data")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.TensorData(a) != nil {
		t.Error("TensorData after Close")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.gguf")); code(err) != ErrIO {
		t.Errorf("missing file: %v", err)
	}
}

func code(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// header builds a raw file prefix by hand for the malformed-input cases.
func header(version uint32, nTensors, nKV uint64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, Magic)
	b = binary.LittleEndian.AppendUint32(b, version)
	b = binary.LittleEndian.AppendUint64(b, nTensors)
	return binary.LittleEndian.AppendUint64(b, nKV)
}

func appendStr(b []byte, s string) []byte {
	return append(binary.LittleEndian.AppendUint64(b, uint64(len(s))), s...)
}

func TestMalformed(t *testing.T) {
	valid, err := sampleWriter(t).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	kv := func(b []byte, key string, vt ValueType, payload ...byte) []byte {
		b = appendStr(b, key)
		b = binary.LittleEndian.AppendUint32(b, uint32(vt))
		return append(b, payload...)
	}
	tensor := func(b []byte, name string, dims []uint64, typ uint32, off uint64) []byte {
		b = appendStr(b, name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(dims)))
		for _, d := range dims {
			b = binary.LittleEndian.AppendUint64(b, d)
		}
		b = binary.LittleEndian.AppendUint32(b, typ)
		return binary.LittleEndian.AppendUint64(b, off)
	}
	hugeArray := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(nil, uint32(TypeUint64)), 1<<62)
	be := binary.BigEndian.AppendUint32([]byte("GGUF"), 3)
	cases := []struct {
		name string
		data []byte
		want ErrorCode
	}{
		{"empty", nil, ErrTruncated},
		{"bad magic", []byte("GGML\x03\x00\x00\x00"), ErrBadMagic},
		{"version 1", header(1, 0, 0), ErrVersion},
		{"big endian", append(be, make([]byte, 16)...), ErrVersion},
		{"truncated header", header(3, 0, 0)[:12], ErrTruncated},
		{"absurd kv count", header(3, 0, 1<<60), ErrCount},
		{"absurd tensor count", header(3, 1<<40, 0), ErrCount},
		{"huge string length", append(header(3, 0, 1), binary.LittleEndian.AppendUint64(nil, 1<<50)...), ErrCount},
		{"huge array", kv(header(3, 0, 1), "k", TypeArray, hugeArray...), ErrCount},
		{"unknown value type", kv(header(3, 0, 1), "k", 99, 0, 0, 0, 0), ErrBadMetadata},
		{"bad bool", kv(header(3, 0, 1), "k", TypeBool, 7), ErrBadMetadata},
		{"duplicate key", kv(kv(header(3, 0, 2), "k", TypeUint8, 1), "k", TypeUint8, 2), ErrDuplicate},
		{"bad alignment", kv(header(3, 0, 1), "general.alignment", TypeUint32, 3, 0, 0, 0), ErrBadAlignment},
		{"alignment wrong type", kv(header(3, 0, 1), "general.alignment", TypeUint8, 32), ErrBadAlignment},
		{"unknown tensor type", tensor(header(3, 1, 0), "w", []uint64{32}, 4, 0), ErrTensorType},
		{"too many dims", tensor(header(3, 1, 0), "w", []uint64{1, 1, 1, 1, 1}, 0, 0), ErrBadShape},
		{"partial block row", tensor(header(3, 1, 0), "w", []uint64{33}, uint32(quant.Q8_0), 0), ErrBadShape},
		{"shape overflow", tensor(header(3, 1, 0), "w", []uint64{1 << 40, 1 << 40}, 0, 0), ErrBadShape},
		{"data past end", append(tensor(header(3, 1, 0), "w", []uint64{1000}, 0, 0), make([]byte, 64)...), ErrOutOfBounds},
		{"huge offset", append(tensor(header(3, 1, 0), "w", []uint64{1}, 0, 1<<63), make([]byte, 64)...), ErrOutOfBounds},
		{"misaligned offset", append(tensor(header(3, 1, 0), "w", []uint64{1}, 0, 4), make([]byte, 64)...), ErrBadAlignment},
		{"duplicate tensor", append(tensor(tensor(header(3, 2, 0), "w", []uint64{1}, 0, 0), "w", []uint64{1}, 0, 32), make([]byte, 64)...), ErrDuplicate},
		{"truncated tensor data", valid[:len(valid)-40], ErrOutOfBounds},
		{"truncated metadata", valid[:300], ErrTruncated},
	}
	for _, c := range cases {
		f, err := Parse(c.data)
		if err == nil {
			t.Errorf("%s: parsed (%d tensors), want %s", c.name, len(f.Tensors), c.want)
			continue
		}
		if code(err) != c.want {
			t.Errorf("%s: got %v (code %s), want %s", c.name, err, code(err), c.want)
		}
	}
	// Every prefix that cuts into tensor data is rejected with a coded
	// error (the last 28 bytes are padding after the last tensor, which
	// readers do not require).
	for n := 0; n < len(valid)-28; n++ {
		if _, err := Parse(valid[:n]); code(err) == "" {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
	}
	// The unsupported-type message names the tensor and the type.
	_, err = Parse(tensor(header(3, 1, 0), "blk.0.attn_q.weight", []uint64{32}, 31, 0))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("blk.0.attn_q.weight")) || !bytes.Contains([]byte(err.Error()), []byte("31")) {
		t.Errorf("unsupported tensor type error does not name tensor and type: %v", err)
	}
}

func TestCheckSupported(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensor("w", quant.IQ2_XXS, []uint64{256}, make([]byte, 66)); err != nil {
		t.Fatal(err)
	}
	data, _ := w.Bytes()
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CheckSupported(); code(err) != ErrTensorType || !bytes.Contains([]byte(err.Error()), []byte("iq2_xxs")) {
		t.Errorf("CheckSupported = %v", err)
	}
}

func TestWriterErrors(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensor("x", quant.Q8_0, []uint64{32}, make([]byte, 33)); err == nil {
		t.Error("wrong data size accepted")
	}
	if err := w.AddTensor("x", quant.Q4_K, []uint64{100}, nil); err == nil {
		t.Error("partial block accepted")
	}
	if err := w.AddTensor("x", quant.F32, []uint64{1}, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("x", quant.F32, []uint64{1}, make([]byte, 4)); code(err) != ErrDuplicate {
		t.Error("duplicate tensor accepted")
	}
	defer func() {
		if recover() == nil {
			t.Error("Set with mismatched Data did not panic")
		}
	}()
	w.Set("bad", Value{Type: TypeUint32, Data: "no"})
}

type modelFacts struct {
	file                                                     string
	arch                                                     string
	layers, embd, heads, kvHeads, ff, vocab, nTensorsAtLeast uint64
	tokModel                                                 string
}

func TestSharedModels(t *testing.T) {
	for _, m := range []modelFacts{
		{"models/stories260K.gguf", "llama", 5, 64, 8, 4, 172, 512, 5*9 + 2, "llama"},
		{"models/tiny-qwen2-random-gpt2vocab.gguf", "qwen2", 2, 16, 2, 1, 48, 50257, 2*12 + 2, "gpt2"},
		// Only its header is in testdata/ (metadata is all this checks).
		{"models/bench-15M-q8_0.header.gguf", "llama", 6, 288, 6, 6, 768, 32000, 6*9 + 2, "llama"},
	} {
		t.Run(filepath.Base(m.file), func(t *testing.T) {
			var f *File
			var err error
			if strings.HasSuffix(m.file, ".header.gguf") {
				f, err = Parse(testenv.Bench15MHeader(t))
			} else {
				f, err = Open(testenv.Shared(t, m.file))
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if got := f.Architecture(); got != m.arch {
				t.Fatalf("arch %q", got)
			}
			for key, want := range map[string]uint64{
				".block_count": m.layers, ".embedding_length": m.embd, ".attention.head_count": m.heads,
				".attention.head_count_kv": m.kvHeads, ".feed_forward_length": m.ff,
			} {
				if got, ok := f.Uint(m.arch + key); !ok || got != want {
					t.Errorf("%s%s = %d (%v), want %d", m.arch, key, got, ok, want)
				}
			}
			toks, ok := f.Strings("tokenizer.ggml.tokens")
			if !ok || uint64(len(toks)) != m.vocab {
				t.Errorf("%d tokens, want %d", len(toks), m.vocab)
			}
			if s, _ := f.String("tokenizer.ggml.model"); s != m.tokModel {
				t.Errorf("tokenizer model %q", s)
			}
			if uint64(len(f.Tensors)) < m.nTensorsAtLeast {
				t.Errorf("%d tensors", len(f.Tensors))
			}
			if err := f.CheckSupported(); err != nil {
				t.Error(err)
			}
			emb, ok := f.Tensor("token_embd.weight")
			if !ok || emb.Dims[0] != m.embd || emb.Dims[1] != m.vocab {
				t.Fatalf("token_embd.weight = %+v", emb)
			}
			// Decode every tensor: sizes agree with the data and values are finite.
			for _, ti := range f.Tensors {
				out := make([]float32, ti.Elements())
				if err := quant.Dequantize(ti.Type, f.TensorData(ti), out); err != nil {
					t.Fatalf("%s: %v", ti.Name, err)
				}
				for i, v := range out {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s[%d] = %v", ti.Name, i, v)
					}
				}
			}
		})
	}
}

func TestSharedVocabs(t *testing.T) {
	for _, c := range []struct {
		file, model, pre string
		n                int
	}{
		{"vocab/ggml-vocab-llama-spm.gguf", "llama", "", 32000},
		{"vocab/ggml-vocab-gpt-2.gguf", "gpt2", "gpt-2", 50257},
		{"vocab/ggml-vocab-qwen2.gguf", "gpt2", "qwen2", 0},
		{"vocab/ggml-vocab-llama-bpe.gguf", "gpt2", "llama-bpe", 128256},
	} {
		f, err := Open(testenv.Shared(t, c.file))
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := f.Strings("tokenizer.ggml.tokens")
		types, ok := f.Int32s("tokenizer.ggml.token_type")
		if m, _ := f.String("tokenizer.ggml.model"); m != c.model {
			t.Errorf("%s: model %q", c.file, m)
		}
		if c.pre != "" {
			if p, _ := f.String("tokenizer.ggml.pre"); p != c.pre {
				t.Errorf("%s: pre %q", c.file, p)
			}
		}
		if (c.n != 0 && len(toks) != c.n) || !ok || len(types) != len(toks) {
			t.Errorf("%s: %d tokens, %d types", c.file, len(toks), len(types))
		}
		if c.model == "gpt2" {
			if merges, ok := f.Strings("tokenizer.ggml.merges"); !ok || len(merges) == 0 {
				t.Errorf("%s: no merges", c.file)
			}
		}
		f.Close()
	}
}

// TestVersion2 reads a v2 file: v2 and v3 share the little-endian layout
// (v3 only added big-endian files), so the same bytes with version 2 parse.
func TestVersion2(t *testing.T) {
	data, err := sampleWriter(t).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(data[4:], 2)
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.Tensors) != 2 {
		t.Fatalf("version %d, %d tensors", f.Version, len(f.Tensors))
	}
}
