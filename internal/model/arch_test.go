package model

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"sluice/internal/testenv"
)

// editSource is a file with metadata keys set or removed and tensors
// removed, added or retyped: the refusal tests' way of making a file
// llama.cpp's converter would not write.
type editSource struct {
	source
	meta   map[string]any // nil value: key removed
	drop   map[string]bool
	extra  map[string]*memTensor
	retype map[string]quant.Type
}

func (e *editSource) lookup(k string) (any, bool) {
	v, ok := e.meta[k]
	return v, ok
}

func (e *editSource) str(k string) (string, bool) {
	if v, ok := e.lookup(k); ok {
		s, isStr := v.(string)
		return s, isStr
	}
	return e.source.str(k)
}

func (e *editSource) uint(k string) (uint64, bool) {
	if v, ok := e.lookup(k); ok {
		n, isInt := v.(int)
		return uint64(n), isInt
	}
	return e.source.uint(k)
}

func (e *editSource) float(k string) (float64, bool) {
	if v, ok := e.lookup(k); ok {
		f, isFloat := v.(float64)
		return f, isFloat
	}
	return e.source.float(k)
}

func (e *editSource) tensor(name string) (quant.Type, []uint64, []byte, bool) {
	if e.drop[name] {
		return 0, nil, nil, false
	}
	if t, ok := e.extra[name]; ok {
		return t.t, t.dims, t.data, true
	}
	t, dims, data, ok := e.source.tensor(name)
	if rt, re := e.retype[name]; re && ok {
		t = rt
	}
	return t, dims, data, ok
}

func (e *editSource) tensorNames() []string {
	var names []string
	if l, ok := e.source.(tensorLister); ok {
		for _, n := range l.tensorNames() {
			if !e.drop[n] {
				names = append(names, n)
			}
		}
	}
	for n := range e.extra {
		names = append(names, n)
	}
	return names
}

func openArchFile(t *testing.T, name string) *gguf.File {
	t.Helper()
	f, err := gguf.Open(testenv.Shared(t, "models/arch/"+name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func loadSource(s source) (*Model, error) {
	c, err := configFrom(s)
	if err != nil {
		return nil, err
	}
	return build(c, s)
}

// TestArchRefusals: what sluice does not implement is refused at load
// with a code and a message naming the key, value or tensor, never run
// approximately.
func TestArchRefusals(t *testing.T) {
	f32 := func(n int) *memTensor {
		return &memTensor{t: quant.F32, dims: []uint64{uint64(n)}, data: make([]byte, 4*n)}
	}
	cases := []struct {
		file, name string
		edit       editSource
		code       Code
		words      string
	}{
		{"qwen3-hd32-f16.gguf", "unknown architecture", editSource{meta: map[string]any{"general.architecture": "mamba"}}, CodeUnsupportedArch, `"mamba"`},
		{"qwen3-hd32-f16.gguf", "yarn rope scaling", editSource{meta: map[string]any{"qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": 4.0}}, CodeBadMetadata, `"yarn"`},
		{"qwen3-hd32-f16.gguf", "longrope scaling", editSource{meta: map[string]any{"qwen3.rope.scaling.type": "longrope"}}, CodeBadMetadata, `"longrope"`},
		{"qwen3-hd32-f16.gguf", "value_length differs", editSource{meta: map[string]any{"qwen3.attention.value_length": 16}}, CodeBadMetadata, "value_length 16"},
		{"qwen3-hd32-f16.gguf", "rope_freqs on qwen3", editSource{extra: map[string]*memTensor{"rope_freqs.weight": f32(16)}}, CodeBadShape, "rope_freqs.weight"},
		{"qwen3-hd32-f16.gguf", "missing q norm", editSource{drop: map[string]bool{"blk.1.attn_q_norm.weight": true}}, CodeMissingTensor, "blk.1.attn_q_norm.weight"},
		{"qwen3-hd32-f16.gguf", "unsupported weight type", editSource{retype: map[string]quant.Type{"blk.0.attn_k.weight": quant.IQ2_XS}}, CodeUnsupportedType, "iq2_xs"},
		{"qwen3-hd32-f16.gguf", "q/k/v bias on qwen3", editSource{extra: map[string]*memTensor{"blk.1.attn_q.bias": f32(128)}}, CodeBadShape, "blk.1.attn_q.bias"},
		{"gemma3-w16-q8_0.gguf", "a tensor gemma3 does not have", editSource{extra: map[string]*memTensor{"blk.0.layer_output_scale.weight": f32(1)}}, CodeBadShape, "blk.0.layer_output_scale.weight"},
		{"qwen3-hd32-f16.gguf", "q norm of n_embd/n_head", editSource{extra: map[string]*memTensor{"blk.0.attn_k_norm.weight": f32(16)}}, CodeBadShape, "blk.0.attn_k_norm.weight"},
		{"gemma3-w16-q8_0.gguf", "final logit soft-cap", editSource{meta: map[string]any{"gemma3.final_logit_softcapping": 30.0}}, CodeBadMetadata, "gemma3.final_logit_softcapping"},
		{"gemma3-w16-q8_0.gguf", "attention soft-cap", editSource{meta: map[string]any{"gemma3.attn_logit_softcapping": 50.0}}, CodeBadMetadata, "gemma3.attn_logit_softcapping"},
		{"gemma3-w16-q8_0.gguf", "no sliding window", editSource{meta: map[string]any{"gemma3.attention.sliding_window": nil}}, CodeBadMetadata, "gemma3.attention.sliding_window"},
		{"gemma3-w16-q8_0.gguf", "zero sliding window", editSource{meta: map[string]any{"gemma3.attention.sliding_window": 0}}, CodeBadMetadata, "sliding_window = 0"},
		{"gemma3-w16-q8_0.gguf", "linear-scaled rope with an unknown type", editSource{meta: map[string]any{"gemma3.rope.scaling.type": "su"}}, CodeBadMetadata, `"su"`},
		{"gemma3-w16-q8_0.gguf", "missing post-ffw norm", editSource{drop: map[string]bool{"blk.6.post_ffw_norm.weight": true}}, CodeMissingTensor, "blk.6.post_ffw_norm.weight"},
		{"gemma3-w16-q8_0.gguf", "rope_freqs on gemma3", editSource{extra: map[string]*memTensor{"rope_freqs.weight": f32(16)}}, CodeBadShape, "rope_freqs.weight"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := openArchFile(t, c.file)
			e := c.edit
			e.source = ggufSource{f}
			_, err := loadSource(&e)
			var me *Error
			if !errors.As(err, &me) || me.Code != c.code {
				t.Fatalf("err = %v, want code %s", err, c.code)
			}
			if !contains(err.Error(), c.words) {
				t.Fatalf("error %q does not name %q", err, c.words)
			}
		})
	}
	// The unedited files load.
	for _, name := range []string{"qwen3-hd32-f16.gguf", "gemma3-w16-q8_0.gguf"} {
		if _, err := Load(openArchFile(t, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestSlidingLayersNeverReadOutsideTheirWindow: a view that refuses every
// block a sliding layer has no business reading (wholly before the step's
// first token's window) changes nothing, bit for bit, over a prompt and
// decode steps well past the 16-token window; the same refusal aimed at
// the global layer fails the sequence, so the poison is live.
func TestSlidingLayersNeverReadOutsideTheirWindow(t *testing.T) {
	m, err := Load(openArchFile(t, "gemma3-w16-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config()
	const ps = 4
	prompt := randTokensN(40, c.Vocab)
	run := func(poison func(layer, blk, pos int) bool) ([][]float32, error) {
		kv := newMemKV(ps, c.Layers, c.KVDim())
		pos := 0 // position of the step's first token
		kv.failBlock = func(layer, blk int) bool { return poison != nil && poison(layer, blk, pos) }
		r := m.NewRunner(nil)
		var out [][]float32
		// A short prefill, then chunks and single tokens past the window.
		steps := [][]int32{prompt[:3], prompt[3:20], prompt[20:21], prompt[21:40]}
		for i := 0; i < 12; i++ {
			steps = append(steps, []int32{int32(7 + 13*i)})
		}
		for _, toks := range steps {
			res := r.Forward([]Seq{{Tokens: toks, Pos: pos, KV: kv, AllLogits: true}})
			if res[0].Err != nil {
				return nil, res[0].Err
			}
			out = append(out, slices.Clone(res[0].Logits))
			pos += len(toks)
		}
		return out, nil
	}
	outOfWindow := func(blk, pos int) bool { return (blk+1)*ps <= pos+1-c.SlidingWindow }
	want, err := run(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := run(func(layer, blk, pos int) bool { return c.Sliding(layer) && outOfWindow(blk, pos) })
	if err != nil {
		t.Fatalf("a sliding layer read a block outside its window: %v", err)
	}
	for i := range want {
		if !bitsEqual(got[i], want[i]) {
			t.Fatalf("step %d: logits changed under the out-of-window poison", i)
		}
	}
	if _, err := run(func(layer, blk, pos int) bool { return !c.Sliding(layer) && outOfWindow(blk, pos) }); !errors.Is(err, errInjected) {
		t.Fatalf("poisoning the global layer's early blocks: err = %v, want the injected failure (the poison must be live)", err)
	}
}

func randTokensN(n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32((i*131 + 17) % vocab)
	}
	return out
}

// TestArchBatchInvariance: on every qwen3 and gemma3 reference file, a
// sequence's logits at every position are bitwise the same prefilled
// whole, in chunks of 3 and 7 (crossing the 16-token window and the
// pages), with a second sequence sharing each step, and on pages of 4 or
// 16 positions (batch invariance, DESIGN.md).
func TestArchBatchInvariance(t *testing.T) {
	for _, name := range []string{"qwen3-hd32-f16.gguf", "qwen3-hd24-q8_0.gguf", "gemma3-w16-f16.gguf", "gemma3-w16-q8_0.gguf", "gemma3-spm-q8_0.gguf"} {
		t.Run(name, func(t *testing.T) {
			m, err := Load(openArchFile(t, name))
			if err != nil {
				t.Fatal(err)
			}
			c := m.Config()
			toks := randTokensN(45, c.Vocab)
			other := randTokensN(60, c.Vocab)[7:]
			run := func(chunk, ps int, mate bool) []float32 {
				r := m.NewRunner(nil)
				kv := newMemKV(ps, c.Layers, c.KVDim())
				kv2 := newMemKV(ps, c.Layers, c.KVDim())
				var out []float32
				for p := 0; p < len(toks); p += chunk {
					seqs := []Seq{{Tokens: toks[p:min(p+chunk, len(toks))], Pos: p, KV: kv, AllLogits: true}}
					if mate {
						q := min(p, len(other)-chunk)
						seqs = append(seqs, Seq{Tokens: other[q : q+chunk], Pos: q, KV: kv2})
						if q != p {
							seqs = seqs[:1]
						}
					}
					res := r.Forward(seqs)
					if res[0].Err != nil {
						t.Fatal(res[0].Err)
					}
					out = append(out, res[0].Logits...)
				}
				return out
			}
			base := run(len(toks), 16, false)
			for _, v := range []struct {
				chunk, ps int
				mate      bool
			}{{3, 4, false}, {7, 16, true}, {1, 4, true}, {45, 4, false}} {
				if got := run(v.chunk, v.ps, v.mate); !bitsEqual(got, base) {
					t.Errorf("chunk %d, page %d, mate %v: logits differ from one whole prefill (first at %d)", v.chunk, v.ps, v.mate, firstDiff(got, base))
				}
			}
		})
	}
}

// FuzzLoadArch is FuzzLoad's contract for qwen3 and gemma3 files: any
// GGUF the reader accepts either fails Load with a coded error or loads
// into a model that runs a step; nothing panics (seeds: tiny files from
// internal/synth, head dim unlike embd/heads, a 4-token window).
func FuzzLoadArch(f *testing.F) {
	for _, spec := range []synth.Spec{
		{Arch: "qwen3", Layers: 1, Embd: 32, Heads: 4, KVHeads: 2, HeadDim: 16, FF: 32, Context: 64, Type: quant.F16, Seed: 1},
		{Arch: "gemma3", Layers: 2, Embd: 32, Heads: 2, KVHeads: 1, HeadDim: 32, FF: 32, Context: 64, Type: quant.Q8_0, SlidingWindow: 4, TieOutput: true, Seed: 2},
	} {
		var b bytes.Buffer
		if err := synth.Write(&b, spec); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
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
		if c.Layers*c.Embd*c.FF > 1<<24 || c.Context < 8 {
			return
		}
		kv := newMemKV(4, c.Layers, c.KVDim())
		toks := []int32{0, int32(c.Vocab - 1), 1, 2, 3, 4, 5}
		res := m.NewRunner(nil).Forward([]Seq{{Tokens: toks, KV: kv}})
		if res[0].Err == nil && len(res[0].Logits) != c.Vocab {
			t.Fatalf("%d logits for a vocabulary of %d", len(res[0].Logits), c.Vocab)
		}
	})
}
