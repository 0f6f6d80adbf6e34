package gguf

import (
	"testing"

	"sluice/internal/quant"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and any
// file it accepts must have every tensor's data inside the input and every
// getter must be safe to call.
func FuzzParse(f *testing.F) {
	valid, err := sampleWriter(f).Bytes()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	for _, n := range []int{0, 4, 8, 24, 40, 100, 300, len(valid) / 2, len(valid) - 40} {
		f.Add(valid[:n])
	}
	small := NewWriter()
	small.SetString("general.architecture", "llama")
	small.SetInt32s("tokenizer.ggml.token_type", []int32{1, 3})
	_ = small.AddTensor("t", quant.Q4_K, []uint64{256}, make([]byte, 144))
	if b, err := small.Bytes(); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %v is not a *gguf.Error", err)
			}
			return
		}
		for _, k := range file.Keys() {
			file.Value(k)
			file.Uint(k)
			file.Int(k)
			file.Int32s(k)
			file.Float32s(k)
			file.Strings(k)
		}
		for _, ti := range file.Tensors {
			d := file.TensorData(ti)
			if uint64(len(d)) != ti.Size {
				t.Fatalf("tensor %q: %d bytes, size %d", ti.Name, len(d), ti.Size)
			}
		}
		_ = file.CheckSupported()
	})
}
