package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"testing"

	"github.com/zeebo/xxh3"

	"sluice/internal/quant"
)

// fpFile writes a small GGUF file: metadata, a small tensor (hashed whole)
// and a large one (sampled).
func fpFile(t *testing.T, name string, big []float32) []byte {
	t.Helper()
	w := NewWriter()
	w.SetString("general.name", name)
	w.SetStrings("tokenizer.ggml.tokens", []string{"alpha", "beta", "gamma"})
	f32 := func(v []float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	if err := w.AddTensor("norm.weight", quant.F32, []uint64{4}, f32([]float32{1, 2, 3, 4})); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("big.weight", quant.F32, []uint64{uint64(len(big))}, f32(big)); err != nil {
		t.Fatal(err)
	}
	b, err := w.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fp(t *testing.T, data []byte) [16]byte {
	t.Helper()
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return f.Fingerprint()
}

// The definition, recomputed here from the documented formula over the
// parsed layout, and what changes a fingerprint: any metadata byte, any
// byte of a small tensor, any byte of a large tensor's windows, the file
// length; a byte of a large tensor between windows does not (the sample,
// documented on Fingerprint).
func TestFingerprint(t *testing.T) {
	big := make([]float32, 64<<10) // 256 KiB: sampled
	for i := range big {
		big[i] = float32(i%977) / 7
	}
	data := fpFile(t, "model-a", big)
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// The formula, step by step.
	buf := append([]byte("sluice/fingerprint/v1"), byte(len(data)), byte(len(data)>>8), byte(len(data)>>16), byte(len(data)>>24), 0, 0, 0, 0)
	m := xxh3.Hash128(data[:f.DataOffset]).Bytes()
	buf = append(buf, m[:]...)
	for _, ti := range f.Tensors {
		d := f.TensorData(ti)
		var s [16]byte
		if len(d) <= 8*16<<10 {
			s = xxh3.Hash128(d).Bytes()
		} else {
			var cat []byte
			for k := 0; k < 8; k++ {
				off := (len(d) - 16<<10) * k / 7
				cat = append(cat, d[off:off+16<<10]...)
			}
			s = xxh3.Hash128(cat).Bytes()
		}
		buf = append(buf, s[:]...)
	}
	base := f.Fingerprint()
	if want := xxh3.Hash128(buf).Bytes(); base != want {
		t.Fatalf("fingerprint %x, the documented definition gives %x", base, want)
	}
	if fp(t, data) != base {
		t.Fatal("not deterministic")
	}
	if fp(t, fpFile(t, "model-b", big)) == base {
		t.Fatal("another name in the metadata, same fingerprint")
	}
	norm, _ := f.Tensor("norm.weight")
	bt, _ := f.Tensor("big.weight")
	bigOff := int(f.DataOffset + bt.Offset)
	bigLen := int(bt.Size)
	for name, at := range map[string]int{
		"a tokenizer byte":         bytes.Index(data, []byte("gamma")),
		"a small tensor's byte":    int(f.DataOffset+norm.Offset) + 5,
		"the large tensor's first": bigOff,
		"the large tensor's last":  bigOff + bigLen - 1,
		"inside its second window": bigOff + (bigLen-16<<10)/7 + 100,
	} {
		d := bytes.Clone(data)
		d[at] ^= 0x40
		if fp(t, d) == base {
			t.Errorf("changing %s (offset %d) left the fingerprint unchanged", name, at)
		}
	}
	// Between the first two windows: not sampled, by definition.
	d := bytes.Clone(data)
	d[bigOff+16<<10+100] ^= 0x40
	if fp(t, d) != base {
		t.Error("a byte between windows changed the fingerprint: the sample is not the documented one")
	}
}

// BenchmarkFingerprint measures the start-up cost on a real model file:
// SLUICE_FINGERPRINT_FILE names one (e.g. a ~1 GB q8_0 file from `sluice
// synth --layers 22 --embd 2048 --heads 32 --kv-heads 4 --ff 5632 --type
// q8_0`); without it the built-in test file stands in.
func BenchmarkFingerprint(b *testing.B) {
	path := os.Getenv("SLUICE_FINGERPRINT_FILE")
	if path == "" {
		b.Skip("set SLUICE_FINGERPRINT_FILE to a GGUF model")
	}
	f, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for b.Loop() {
		f.Fingerprint()
	}
}
