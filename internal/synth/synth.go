// Package synth writes seeded synthetic GGUF models (random weights, real
// shapes) and holds sluice's built-in default model.
//
// Weights are uniform with the standard deviation of N(0, 1/sqrt(fan_in))
// (token embeddings: standard deviation 1), norm weights are 1 and biases
// 0, so activations stay of order one through any depth. Each tensor's
// weights depend only on the seed and the tensor's name.
//
// # The built-in default model
//
// Default() returns a GGUF v3 file in memory:
//
//	general.architecture           "llama"
//	general.name                   "sluice-default-synthetic (random weights)"
//	llama.block_count 4, llama.embedding_length 128, llama.attention.head_count 4,
//	llama.attention.head_count_kv 2, llama.feed_forward_length 384,
//	llama.context_length 2048, llama.rope.dimension_count 32,
//	llama.rope.freq_base 10000, llama.attention.layer_norm_rms_epsilon 1e-5,
//	llama.vocab_size 514; 2-D weights Q8_0, norms F32, untied output.weight.
//
// Its tokenizer is byte-level BPE, loadable like GPT-2's:
//
//	tokenizer.ggml.model          "gpt2"
//	tokenizer.ggml.pre            "gpt-2"
//	tokenizer.ggml.tokens         [string x 514]: ids 0..255 are the bytes 0..255
//	                              (id = byte value) in GPT-2's byte-to-unicode
//	                              spelling (space = "Ġ" U+0120, '\n' = "Ċ");
//	                              ids 256..511 the results of the merges, in order;
//	                              512 "<|bos|>", 513 "<|eos|>"
//	tokenizer.ggml.token_type     [i32 x 514]: 1 (normal), 3 (control) for 512, 513
//	tokenizer.ggml.merges         [string x 256]: "left right", rank = index, learned
//	                              by BPE on a fixed English text; no merge crosses a
//	                              GPT-2 pre-token boundary
//	tokenizer.ggml.bos_token_id   u32 512
//	tokenizer.ggml.eos_token_id   u32 513
//	tokenizer.ggml.add_bos_token  true
//	tokenizer.ggml.add_eos_token  false
//
// It produces gibberish but is fully deterministic. With the built-in
// vocabulary the output.weight rows of control bytes, bytes 0x7F-0xFF and
// the special tokens are scaled down (x0.05), so generated text is almost
// always printable ASCII and EOS is rare: ask for max_tokens, don't wait
// for EOS.
package synth

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sync"

	"sluice/internal/gguf"
	"sluice/internal/quant"
)

// Spec describes a synthetic model.
type Spec struct {
	Arch     string // "llama", "qwen2", "qwen3", "gemma3", "qwen3moe" or "glm4moe"
	Layers   int
	Embd     int
	Heads    int
	KVHeads  int
	FF       int
	Vocab    int // 0: the tokenizer's size; larger: padded with unused tokens
	Context  int
	Type     quant.Type // type of the 2-D weights; norms and biases are F32
	RopeBase float64    // 0: 10000 for llama, 1e6 for qwen2
	Seed     uint64
	// VocabFrom is a GGUF whose tokenizer.* metadata is copied; empty means
	// the built-in byte-level BPE vocabulary.
	VocabFrom string
	// TieOutput omits output.weight (the output projection reuses
	// token_embd.weight, as small Qwen2 models do).
	TieOutput bool
	// Name and Description override general.name / general.description.
	Name        string
	Description string
	// MoE is the mixture-of-experts shape of qwen3moe and glm4moe (and
	// glm4moe's attention details); see moe.go.
	MoE MoESpec
	// HeadDim is qwen3's and gemma3's attention head dimension
	// (attention.key_length = value_length); 0 means Embd/Heads and
	// writes no key_length. (qwen3moe and glm4moe take MoE.HeadDim.)
	HeadDim int
	// SlidingWindow is gemma3's attention.sliding_window (0: 512, as
	// Gemma 3 1B has); every sixth layer is global, the others slide.
	SlidingWindow int
	// RopeScaling is a linear RoPE scaling factor written as
	// rope.scaling.type "linear" and rope.scaling.factor (0: none). gemma3
	// applies it to its global layers only, as Gemma 3 4B and larger do.
	RopeScaling float64
	// SPMVocab writes the built-in SentencePiece-style vocabulary (byte
	// fallback, Gemma's special-token layout, no space prefix) instead of
	// the byte-level BPE one; VocabFrom must be empty.
	SPMVocab bool
	// OutputScale multiplies the spread of output.weight (0: 1). Random
	// models have nearly flat logits (top two within a few tenths); a
	// scale of ~10 makes greedy choices decisive, as reference tests
	// against another implementation need.
	OutputScale float64
}

// ErrSpec is the error code of an invalid Spec.
const ErrSpec = "synth_bad_spec"

// Error is returned for an invalid Spec or vocabulary source.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return "synth: " + e.Msg }

func specErr(format string, args ...any) error {
	return &Error{Code: ErrSpec, Msg: fmt.Sprintf(format, args...)}
}

// Presets are llama.cpp's synthetic benchmark shapes from
// shared/reference/llama-cpp-speed.md (Llama-2 32000 vocab from VocabFrom).
var Presets = map[string]Spec{
	"bench-15M":  {Arch: "llama", Layers: 6, Embd: 288, Heads: 6, KVHeads: 6, FF: 768, Context: 2048, Type: quant.Q8_0, RopeBase: 10000, Seed: 20261130},
	"bench-110M": {Arch: "llama", Layers: 12, Embd: 768, Heads: 12, KVHeads: 12, FF: 2048, Context: 2048, Type: quant.Q8_0, RopeBase: 10000, Seed: 20261130},
}

// RowType is the type a tensor with rows of n elements gets when t is
// asked for: K-quant blocks are 256 wide, so, as llama.cpp's quantizer
// does, rows that are not a multiple of 256 fall back to a 32-wide type of
// similar size (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0). A "q4_K" model
// of n_embd 288 is therefore mostly Q5_0, like llama.cpp's Q4_K_M files of
// such shapes.
func RowType(t quant.Type, n int) quant.Type {
	if t.BlockSize() != quant.QK_K || n%quant.QK_K == 0 {
		return t
	}
	switch t {
	case quant.Q4_K:
		return quant.Q5_0
	case quant.Q5_K:
		return quant.Q5_1
	case quant.Q6_K:
		return quant.Q8_0
	}
	return t
}

// fileType is general.file_type (llama.cpp's LLAMA_FTYPE) for a weight type.
func fileType(t quant.Type) (uint32, bool) {
	switch t {
	case quant.F32:
		return 0, true
	case quant.F16:
		return 1, true
	case quant.Q4_0:
		return 2, true
	case quant.Q4_1:
		return 3, true
	case quant.Q8_0:
		return 7, true
	case quant.Q5_0:
		return 8, true
	case quant.Q5_1:
		return 9, true
	case quant.Q5_K:
		return 17, true // Q5_K_M
	case quant.Q4_K:
		return 15, true // Q4_K_M is the closest named mix
	case quant.Q6_K:
		return 18, true
	case quant.BF16:
		return 32, true
	}
	return 0, false
}

func (s *Spec) validate() error {
	if s.Arch != "llama" && s.Arch != "qwen2" && s.Arch != "qwen3" && s.Arch != "gemma3" && !isMoE(s.Arch) {
		return specErr("architecture %q is not supported (llama, qwen2, qwen3, gemma3, qwen3moe, glm4moe)", s.Arch)
	}
	if s.HeadDim != 0 && s.Arch != "qwen3" && s.Arch != "gemma3" {
		return specErr("a head dimension is written for qwen3 and gemma3 this way (qwen3moe and glm4moe: MoE.HeadDim; llama and qwen2 use embd/heads)")
	}
	if s.HeadDim < 0 || s.HeadDim > 1024 || s.SlidingWindow < 0 {
		return specErr("head dimension %d or sliding window %d is out of range", s.HeadDim, s.SlidingWindow)
	}
	if s.SlidingWindow != 0 && s.Arch != "gemma3" {
		return specErr("a sliding window is only written for gemma3")
	}
	if s.RopeScaling < 0 || s.RopeScaling > 1024 {
		return specErr("rope scaling factor %g is out of range", s.RopeScaling)
	}
	if s.SPMVocab && s.VocabFrom != "" {
		return specErr("the built-in SentencePiece vocabulary and --vocab-from exclude each other")
	}
	if s.OutputScale < 0 || s.OutputScale > 1000 {
		return specErr("output scale %g is out of range [0, 1000]", s.OutputScale)
	}
	if s.Layers < 1 || s.Embd < 1 || s.Heads < 1 || s.KVHeads < 1 || s.FF < 1 || s.Context < 1 {
		return specErr("layers, embd, heads, kv-heads, ff and context must all be positive (got %d, %d, %d, %d, %d, %d)", s.Layers, s.Embd, s.Heads, s.KVHeads, s.FF, s.Context)
	}
	if s.Embd%s.Heads != 0 && s.MoE.HeadDim == 0 && s.HeadDim == 0 {
		return specErr("embd %d is not a multiple of heads %d", s.Embd, s.Heads)
	}
	if s.Heads%s.KVHeads != 0 {
		return specErr("heads %d is not a multiple of kv-heads %d", s.Heads, s.KVHeads)
	}
	if s.headDim()%2 != 0 {
		return specErr("head dimension %d must be even for RoPE", s.headDim())
	}
	if err := s.validateMoE(); err != nil {
		return err
	}
	if _, ok := fileType(s.Type); !ok {
		return specErr("weight type %s cannot be written (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K)", s.Type)
	}
	for _, row := range []int{s.Embd, s.FF, s.Heads * s.headDim(), s.MoE.ExpertFF} {
		if t := RowType(s.Type, row); row != 0 && row%t.BlockSize() != 0 {
			return specErr("%s (and its fallback %s) needs row lengths that are multiples of %d; embd %d, ff %d, heads x head dim %d and expert ff %d are not all", s.Type, t, t.BlockSize(), s.Embd, s.FF, s.Heads*s.headDim(), s.MoE.ExpertFF)
		}
	}
	if s.Layers > 1024 || s.Embd > 1<<16 || s.FF > 1<<18 || s.Vocab > 1<<20 {
		return specErr("shape is absurdly large")
	}
	return nil
}

// Write writes the model described by spec as GGUF. The output is a pure
// function of spec (and of VocabFrom's content).
func Write(w io.Writer, spec Spec) error {
	gw, err := build(spec)
	if err != nil {
		return err
	}
	_, err = gw.WriteTo(w)
	return err
}

func build(spec Spec) (*gguf.Writer, error) {
	s := spec
	if s.RopeBase == 0 {
		s.RopeBase = 10000
		if s.Arch != "llama" {
			s.RopeBase = 1e6
		}
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	gw := gguf.NewWriter()
	tok, nTokens, err := tokenizerMeta(s)
	if err != nil {
		return nil, err
	}
	vocab := nTokens
	if s.Vocab != 0 {
		if s.Vocab < nTokens {
			return nil, specErr("vocab %d is smaller than the tokenizer's %d tokens", s.Vocab, nTokens)
		}
		vocab = s.Vocab
	}
	ftype, _ := fileType(s.Type)
	name := s.Name
	if name == "" {
		name = fmt.Sprintf("synthetic-%s-random-%s", s.Arch, s.Type)
	}
	desc := s.Description
	if desc == "" {
		src := "built-in byte-level BPE vocab"
		if s.VocabFrom != "" {
			src = "tokenizer copied from " + baseName(s.VocabFrom)
		}
		desc = fmt.Sprintf("SYNTHETIC random weights (not pretrained), seed %d; %s", s.Seed, src)
	}
	a := s.Arch
	eps := float32(1e-5)
	if a == "qwen2" || a == "qwen3moe" || a == "qwen3" || a == "gemma3" {
		eps = 1e-6
	}
	gw.SetString("general.architecture", a)
	gw.SetString("general.name", name)
	gw.SetString("general.description", desc)
	gw.SetUint32("general.alignment", 32)
	gw.SetUint32("general.file_type", ftype)
	gw.SetUint32(a+".vocab_size", uint32(vocab))
	gw.SetUint32(a+".context_length", uint32(s.Context))
	gw.SetUint32(a+".embedding_length", uint32(s.Embd))
	gw.SetUint32(a+".block_count", uint32(s.Layers))
	gw.SetUint32(a+".feed_forward_length", uint32(s.FF))
	gw.SetUint32(a+".attention.head_count", uint32(s.Heads))
	gw.SetUint32(a+".attention.head_count_kv", uint32(s.KVHeads))
	gw.SetUint32(a+".rope.dimension_count", uint32(s.ropeDim()))
	if isMoE(a) {
		s.moeMeta(gw)
	}
	if s.HeadDim != 0 {
		gw.SetUint32(a+".attention.key_length", uint32(s.HeadDim))
		gw.SetUint32(a+".attention.value_length", uint32(s.HeadDim))
	}
	if a == "gemma3" {
		w := s.SlidingWindow
		if w == 0 {
			w = 512
		}
		gw.SetUint32(a+".attention.sliding_window", uint32(w))
	}
	gw.SetFloat32(a+".rope.freq_base", float32(s.RopeBase))
	if s.RopeScaling != 0 {
		gw.SetString(a+".rope.scaling.type", "linear")
		gw.SetFloat32(a+".rope.scaling.factor", float32(s.RopeScaling))
	}
	gw.SetFloat32(a+".attention.layer_norm_rms_epsilon", eps)
	if s.Type != quant.F32 && s.Type != quant.F16 && s.Type != quant.BF16 {
		gw.SetUint32("general.quantization_version", 2)
	}
	tok(gw, vocab)

	headDim := s.headDim()
	kvDim := headDim * s.KVHeads
	qDim := uint64(headDim * s.Heads)
	add := func(name string, typ quant.Type, dims []uint64, fill func(r *rng, x []float32)) error {
		typ = RowType(typ, int(dims[0]))
		n := 1
		for _, d := range dims {
			n *= int(d)
		}
		x := make([]float32, n)
		fill(tensorRNG(s.Seed, name), x)
		size, err := typ.RowBytes(n)
		if err != nil {
			return err
		}
		buf := make([]byte, size)
		if err := quant.Quantize(typ, x, buf); err != nil {
			return err
		}
		return gw.AddTensor(name, typ, dims, buf)
	}
	randn := func(std float64) func(r *rng, x []float32) {
		// Uniform on [-a, a) has standard deviation a/sqrt(3).
		a := float32(std * math.Sqrt(3))
		return func(r *rng, x []float32) {
			for i := range x {
				x[i] = r.uniform() * a
			}
		}
	}
	ones := func(_ *rng, x []float32) {
		for i := range x {
			x[i] = 1
		}
	}
	zeros := func(_ *rng, x []float32) {}
	// The norms of qwen3 and gemma3 are 1 +- 0.25 (uniform), so a reader
	// that skipped one (or applied it to the wrong rows) would produce
	// other logits: references against llama.cpp then test the norm.
	norms := ones
	if a == "qwen3" || a == "gemma3" {
		norms = func(r *rng, x []float32) {
			for i := range x {
				x[i] = 1 + 0.25*r.uniform()
			}
		}
	}
	E, F, V := uint64(s.Embd), uint64(s.FF), uint64(vocab)
	inE := 1 / math.Sqrt(float64(s.Embd))
	inF := 1 / math.Sqrt(float64(s.FF))
	steps := []func() error{
		func() error { return add("token_embd.weight", s.Type, []uint64{E, V}, randn(1)) },
		func() error { return add("output_norm.weight", quant.F32, []uint64{E}, norms) },
	}
	if !s.TieOutput {
		scale := s.OutputScale
		if scale == 0 {
			scale = 1
		}
		fill := randn(inE * scale)
		if s.VocabFrom == "" && !s.SPMVocab {
			fill = quietRows(fill, s.Embd, vocab)
		}
		steps = append(steps, func() error { return add("output.weight", s.Type, []uint64{E, V}, fill) })
	}
	w := weights{add: add, randn: randn, ones: ones, zeros: zeros}
	for l := 0; isMoE(s.Arch) && l < s.Layers+s.MoE.NextN; l++ {
		steps = append(steps, s.moeLayer(l, w)...)
	}
	HD := uint64(headDim)
	for l := 0; !isMoE(s.Arch) && l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		steps = append(steps,
			func() error { return add(p+"attn_norm.weight", quant.F32, []uint64{E}, norms) },
			func() error { return add(p+"attn_q.weight", s.Type, []uint64{E, qDim}, randn(inE)) },
			func() error { return add(p+"attn_k.weight", s.Type, []uint64{E, uint64(kvDim)}, randn(inE)) },
			func() error { return add(p+"attn_v.weight", s.Type, []uint64{E, uint64(kvDim)}, randn(inE)) },
		)
		if s.Arch == "qwen2" {
			steps = append(steps,
				func() error { return add(p+"attn_q.bias", quant.F32, []uint64{qDim}, zeros) },
				func() error { return add(p+"attn_k.bias", quant.F32, []uint64{uint64(kvDim)}, zeros) },
				func() error { return add(p+"attn_v.bias", quant.F32, []uint64{uint64(kvDim)}, zeros) },
			)
		}
		if s.Arch == "qwen3" || s.Arch == "gemma3" {
			steps = append(steps,
				func() error { return add(p+"attn_q_norm.weight", quant.F32, []uint64{HD}, norms) },
				func() error { return add(p+"attn_k_norm.weight", quant.F32, []uint64{HD}, norms) },
			)
		}
		inQ := 1 / math.Sqrt(float64(qDim)) // inE for llama and qwen2
		steps = append(steps, func() error { return add(p+"attn_output.weight", s.Type, []uint64{qDim, E}, randn(inQ)) })
		if s.Arch == "gemma3" {
			steps = append(steps, func() error { return add(p+"post_attention_norm.weight", quant.F32, []uint64{E}, norms) })
		}
		steps = append(steps,
			func() error { return add(p+"ffn_norm.weight", quant.F32, []uint64{E}, norms) },
			func() error { return add(p+"ffn_gate.weight", s.Type, []uint64{E, F}, randn(inE)) },
			func() error { return add(p+"ffn_down.weight", s.Type, []uint64{F, E}, randn(inF)) },
			func() error { return add(p+"ffn_up.weight", s.Type, []uint64{E, F}, randn(inE)) },
		)
		if s.Arch == "gemma3" {
			steps = append(steps, func() error { return add(p+"post_ffw_norm.weight", quant.F32, []uint64{E}, norms) })
		}
	}
	for _, st := range steps {
		if err := st(); err != nil {
			return nil, err
		}
	}
	return gw, nil
}

// quietScale shrinks the output rows of tokens a reader should not see in
// gibberish, so they almost never win the argmax.
const quietScale = 0.05

// quietRows wraps an output.weight fill for the built-in vocabulary: the
// rows of control bytes (other than tab and newline), bytes 0x7F-0xFF
// (which alone are never valid UTF-8) and the special and padding tokens
// are scaled by quietScale. Greedy text from random weights is then
// printable and rarely hits EOS, so requests run to max_tokens.
func quietRows(fill func(*rng, []float32), embd, vocab int) func(*rng, []float32) {
	return func(r *rng, x []float32) {
		fill(r, x)
		for v := 0; v < vocab; v++ {
			quiet := v >= 256+defaultMerges // specials and padding
			if v < 256 {
				quiet = (v < 0x20 && v != '\n' && v != '\t') || v >= 0x7F
			}
			if quiet {
				for i := v * embd; i < (v+1)*embd; i++ {
					x[i] *= quietScale
				}
			}
		}
	}
}

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' || p[i] == '\\' {
			return p[i+1:]
		}
	}
	return p
}

// tokenizerMeta returns a function writing the tokenizer metadata for a
// vocabulary of n >= the source's token count, and that count.
func tokenizerMeta(s Spec) (func(w *gguf.Writer, n int), int, error) {
	if s.SPMVocab {
		v := spmVocab()
		return func(w *gguf.Writer, n int) {
			toks, types := padVocab(v.tokens, v.types, n)
			scores := append(append([]float32(nil), v.scores...), make([]float32, n-len(v.scores))...)
			w.SetString("tokenizer.ggml.model", "llama")
			w.SetString("tokenizer.ggml.pre", "default")
			w.SetStrings("tokenizer.ggml.tokens", toks)
			w.SetFloat32s("tokenizer.ggml.scores", scores)
			w.SetInt32s("tokenizer.ggml.token_type", types)
			w.SetUint32("tokenizer.ggml.bos_token_id", 2)
			w.SetUint32("tokenizer.ggml.eos_token_id", 1)
			w.SetUint32("tokenizer.ggml.unknown_token_id", 3)
			w.SetUint32("tokenizer.ggml.padding_token_id", 0)
			w.SetBool("tokenizer.ggml.add_bos_token", true)
			w.SetBool("tokenizer.ggml.add_eos_token", false)
			w.SetBool("tokenizer.ggml.add_space_prefix", false)
		}, len(v.tokens), nil
	}
	if s.VocabFrom == "" {
		v := builtinVocab()
		return func(w *gguf.Writer, n int) {
			toks, types := padVocab(v.tokens, v.types, n)
			w.SetString("tokenizer.ggml.model", "gpt2")
			w.SetString("tokenizer.ggml.pre", "gpt-2")
			w.SetStrings("tokenizer.ggml.tokens", toks)
			w.SetInt32s("tokenizer.ggml.token_type", types)
			w.SetStrings("tokenizer.ggml.merges", v.merges)
			w.SetUint32("tokenizer.ggml.bos_token_id", v.bos)
			w.SetUint32("tokenizer.ggml.eos_token_id", v.eos)
			w.SetBool("tokenizer.ggml.add_bos_token", true)
			w.SetBool("tokenizer.ggml.add_eos_token", false)
		}, len(v.tokens), nil
	}
	f, err := gguf.Open(s.VocabFrom)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	toks, ok := f.Strings("tokenizer.ggml.tokens")
	if !ok || len(toks) == 0 {
		return nil, 0, specErr("%s has no tokenizer.ggml.tokens", s.VocabFrom)
	}
	// Copy the values now: the file is unmapped when this returns, and
	// the writer must own what it writes.
	type kv struct {
		k string
		v gguf.Value
	}
	var kvs []kv
	for _, k := range f.Keys() {
		if len(k) > 10 && k[:10] == "tokenizer." {
			v, _ := f.Value(k)
			kvs = append(kvs, kv{k, v})
		}
	}
	nTok := len(toks)
	return func(w *gguf.Writer, n int) {
		for _, e := range kvs {
			v := e.v
			if n > nTok {
				switch e.k {
				case "tokenizer.ggml.tokens":
					t, _ := padVocab(v.Data.([]string), nil, n)
					v.Data = t
				case "tokenizer.ggml.token_type":
					if ty, ok := v.Data.([]int32); ok {
						_, ty = padVocab(make([]string, len(ty)), ty, n)
						v.Data = ty
					}
				case "tokenizer.ggml.scores":
					if sc, ok := v.Data.([]float32); ok {
						v.Data = append(append([]float32(nil), sc...), make([]float32, n-len(sc))...)
					}
				}
			}
			w.Set(e.k, v)
		}
	}, nTok, nil
}

// padVocab extends a vocabulary to n tokens with unused "<|unused_i|>".
func padVocab(toks []string, types []int32, n int) ([]string, []int32) {
	toks = append([]string(nil), toks...)
	if types != nil {
		types = append([]int32(nil), types...)
	}
	for i := len(toks); i < n; i++ {
		toks = append(toks, fmt.Sprintf("<|unused_%d|>", i))
		if types != nil {
			types = append(types, tokUnused)
		}
	}
	return toks, types
}

// DefaultSpec is the shape of the built-in default model.
var DefaultSpec = Spec{
	Arch: "llama", Layers: 4, Embd: 128, Heads: 4, KVHeads: 2, FF: 384, Context: 2048,
	Type: quant.Q8_0, RopeBase: 10000, Seed: 0x5eed,
	Name:        "sluice-default-synthetic (random weights)",
	Description: "SYNTHETIC random weights (not pretrained): sluice's built-in default model; its text is gibberish but deterministic",
}

var (
	defaultOnce  sync.Once
	defaultBytes []byte
	defaultErr   error
)

// Default returns the built-in default model as GGUF bytes (a fresh copy
// each call; it is about 1 MB).
func Default() ([]byte, error) {
	defaultOnce.Do(func() {
		var b bytes.Buffer
		defaultErr = Write(&b, DefaultSpec)
		defaultBytes = b.Bytes()
	})
	if defaultErr != nil {
		return nil, defaultErr
	}
	return append([]byte(nil), defaultBytes...), nil
}

// PresetSpec returns the named preset ("bench-15M", "bench-110M") with
// weight type t, the tokenizer of vocabFrom (the Llama-2 vocab,
// shared/vocab/ggml-vocab-llama-spm.gguf, reproduces llama.cpp's benchmark
// files) and the general.name "synthetic-<preset>-random-<type>" those
// files carry.
func PresetSpec(name string, t quant.Type, vocabFrom string) (Spec, error) {
	s, ok := Presets[name]
	if !ok {
		return Spec{}, specErr("unknown preset %q (bench-15M, bench-110M)", name)
	}
	s.Type = t
	s.VocabFrom = vocabFrom
	s.Name = fmt.Sprintf("synthetic-%s-random-%s", name, t)
	return s, nil
}
