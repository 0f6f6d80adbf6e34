package model

import (
	"bytes"
	"sort"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/quant"
)

// memGGUF writes a test model as GGUF bytes: small seeds keep the fuzzer
// fast, and mutations then land in metadata and tensor infos.
func memGGUF(tb testing.TB, s *memSource) []byte {
	w := gguf.NewWriter()
	keys := make([]string, 0, len(s.meta))
	for k := range s.meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch v := s.meta[k].(type) {
		case string:
			w.SetString(k, v)
		case int:
			w.SetUint32(k, uint32(v))
		case float64:
			w.SetFloat32(k, float32(v))
		}
	}
	names := make([]string, 0, len(s.tensors))
	for n := range s.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t := s.tensors[n]
		if err := w.AddTensor(n, t.t, t.dims, t.data); err != nil {
			tb.Fatal(err)
		}
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// FuzzLoad: any GGUF the reader accepts either fails Load with a coded
// error or loads into a model that runs a step; nothing panics. Model files
// come from outside (downloads), so Load's shape, type and size checks are
// all that stands between them and the kernels' slicing.
func FuzzLoad(f *testing.F) {
	for i, sh := range []testShape{
		{arch: "llama", vocab: 8, embd: 32, layers: 1, heads: 2, kvHeads: 1, ff: 32, wtype: quant.Q8_0},
		{arch: "qwen2", vocab: 8, embd: 16, layers: 1, heads: 2, kvHeads: 1, ff: 16, tied: true, wtype: quant.F16},
	} {
		f.Add(memGGUF(f, newMemModel(sh, uint64(i))))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		gf, err := gguf.Parse(data)
		if err != nil {
			return
		}
		m, err := Load(gf)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Load error %T has no code: %v", err, err)
			}
			return
		}
		c := m.Config()
		if c.Layers*c.Embd*c.FF > 1<<24 {
			return // a valid but large shape: nothing to learn from running it
		}
		kv := newMemKV(4, c.Layers, c.KVDim())
		res := m.NewRunner(nil).Forward([]Seq{{Tokens: []int32{0, int32(c.Vocab - 1)}, KV: kv}})
		if res[0].Err == nil && len(res[0].Logits) != c.Vocab {
			t.Fatalf("%d logits for a vocabulary of %d", len(res[0].Logits), c.Vocab)
		}
	})
}
