package synth

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/quant"
	"sluice/internal/testenv"
)

func mustBytes(t *testing.T, s Spec) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestDeterministic(t *testing.T) {
	s := Spec{Arch: "llama", Layers: 2, Embd: 64, Heads: 4, KVHeads: 2, FF: 96, Context: 256, Type: quant.Q8_0, Seed: 7}
	a, b := mustBytes(t, s), mustBytes(t, s)
	if !bytes.Equal(a, b) {
		t.Fatal("same spec, different bytes")
	}
	s.Seed = 8
	if bytes.Equal(a, mustBytes(t, s)) {
		t.Fatal("different seed, same bytes")
	}
}

func TestDefaultModel(t *testing.T) {
	data, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	str := func(k string) string { s, _ := f.String(k); return s }
	u := func(k string) uint64 { v, _ := f.Uint(k); return v }
	if str("general.architecture") != "llama" || str("general.name") != "sluice-default-synthetic (random weights)" {
		t.Fatal("identity metadata")
	}
	if str("tokenizer.ggml.model") != "gpt2" || str("tokenizer.ggml.pre") != "gpt-2" {
		t.Fatal("tokenizer model")
	}
	for k, want := range map[string]uint64{
		"llama.block_count": 4, "llama.embedding_length": 128, "llama.attention.head_count": 4,
		"llama.attention.head_count_kv": 2, "llama.feed_forward_length": 384, "llama.context_length": 2048,
		"llama.vocab_size": 514, "llama.rope.dimension_count": 32,
		"tokenizer.ggml.bos_token_id": 512, "tokenizer.ggml.eos_token_id": 513,
	} {
		if got := u(k); got != want {
			t.Errorf("%s = %d, want %d", k, got, want)
		}
	}
	if b, ok := f.Bool("tokenizer.ggml.add_bos_token"); !ok || !b {
		t.Error("add_bos_token")
	}
	toks, _ := f.Strings("tokenizer.ggml.tokens")
	types, _ := f.Int32s("tokenizer.ggml.token_type")
	merges, _ := f.Strings("tokenizer.ggml.merges")
	if len(toks) != 514 || len(types) != 514 || len(merges) != 256 {
		t.Fatalf("%d tokens, %d types, %d merges", len(toks), len(types), len(merges))
	}
	// GPT-2's byte-to-unicode spelling, from its definition.
	for b, want := range map[int]string{' ': "Ġ", '\n': "Ċ", 'a': "a", 0: "Ā", 0xAD: "Ń", 0xFF: "ÿ", '!': "!"} {
		if toks[b] != want {
			t.Errorf("token %d = %q, want %q", b, toks[b], want)
		}
	}
	if toks[512] != "<|bos|>" || toks[513] != "<|eos|>" || types[512] != 3 || types[513] != 3 || types[0] != 1 {
		t.Error("special tokens")
	}
	ids := map[string]int{}
	for i, s := range toks {
		if _, dup := ids[s]; dup {
			t.Fatalf("token %q appears twice", s)
		}
		ids[s] = i
	}
	// Every merge joins two tokens that exist before it, producing the
	// token with id 256+rank.
	for r, m := range merges {
		parts := strings.Split(m, " ")
		if len(parts) != 2 {
			t.Fatalf("merge %q", m)
		}
		l, okl := ids[parts[0]]
		rr, okr := ids[parts[1]]
		if !okl || !okr || l >= 256+r || rr >= 256+r || ids[parts[0]+parts[1]] != 256+r {
			t.Fatalf("merge %d %q is not built from earlier tokens", r, m)
		}
	}
	if ids["Ġthe"] == 0 || ids["Ġand"] == 0 {
		t.Error("common English merges missing")
	}
	// Shapes and weight scale.
	q, ok := f.Tensor("blk.3.attn_k.weight")
	if !ok || q.Type != quant.Q8_0 || q.Dims[0] != 128 || q.Dims[1] != 64 {
		t.Fatalf("attn_k = %+v", q)
	}
	for name, wantStd := range map[string]float64{"token_embd.weight": 1, "blk.0.attn_q.weight": 1 / math.Sqrt(128), "blk.1.ffn_down.weight": 1 / math.Sqrt(384)} {
		ti, _ := f.Tensor(name)
		x := make([]float32, ti.Elements())
		if err := quant.Dequantize(ti.Type, f.TensorData(ti), x); err != nil {
			t.Fatal(err)
		}
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		if std := math.Sqrt(ss / float64(len(x))); math.Abs(std/wantStd-1) > 0.05 {
			t.Errorf("%s std %g, want %g", name, std, wantStd)
		}
	}
	// Output rows of bytes a reader should not see, and of the specials,
	// are scaled down 20x; printable bytes and merges are not.
	out, _ := f.Tensor("output.weight")
	w := make([]float32, out.Elements())
	if err := quant.Dequantize(out.Type, f.TensorData(out), w); err != nil {
		t.Fatal(err)
	}
	rowStd := func(v int) float64 {
		var ss float64
		for _, x := range w[v*128 : (v+1)*128] {
			ss += float64(x) * float64(x)
		}
		return math.Sqrt(ss / 128)
	}
	full := 1 / math.Sqrt(128)
	for v, quiet := range map[int]bool{0: true, 0x1b: true, 0x80: true, 0xff: true, 512: true, 513: true, '\n': false, 'a': false, ' ': false, 300: false} {
		want := full
		if quiet {
			want *= 0.05
		}
		if got := rowStd(v); math.Abs(got/want-1) > 0.35 {
			t.Errorf("output row %d std %g, want about %g (quiet %v)", v, got, want, quiet)
		}
	}
	norm, _ := f.Tensor("output_norm.weight")
	x := make([]float32, 128)
	_ = quant.Dequantize(norm.Type, f.TensorData(norm), x)
	if x[0] != 1 || x[127] != 1 {
		t.Error("norm weights are not 1")
	}
}

func TestQwen2Tied(t *testing.T) {
	s := Spec{Arch: "qwen2", Layers: 1, Embd: 32, Heads: 2, KVHeads: 1, FF: 64, Context: 128, Type: quant.F16, Seed: 1, TieOutput: true}
	f, err := gguf.Parse(mustBytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Tensor("output.weight"); ok {
		t.Error("tied model has output.weight")
	}
	if b, ok := f.Tensor("blk.0.attn_k.bias"); !ok || b.Dims[0] != 16 {
		t.Error("qwen2 k bias")
	}
	if base, _ := f.Float("qwen2.rope.freq_base"); base != 1e6 {
		t.Errorf("rope base %v", base)
	}
}

func TestBadSpecs(t *testing.T) {
	good := Spec{Arch: "llama", Layers: 1, Embd: 64, Heads: 4, KVHeads: 2, FF: 96, Context: 64, Type: quant.F32}
	for name, mod := range map[string]func(*Spec){
		"arch":       func(s *Spec) { s.Arch = "gpt2" },
		"heads":      func(s *Spec) { s.Heads = 5 },
		"kv":         func(s *Spec) { s.KVHeads = 3 },
		"q8_0 rows":  func(s *Spec) { s.Embd, s.Heads, s.KVHeads = 48, 2, 1; s.Type = quant.Q8_0 },
		"type":       func(s *Spec) { s.Type = quant.IQ2_XXS },
		"vocab":      func(s *Spec) { s.Vocab = 10 },
		"zero layer": func(s *Spec) { s.Layers = 0 },
	} {
		s := good
		mod(&s)
		if err := Write(&bytes.Buffer{}, s); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s := good
	s.Vocab = 600
	f, err := gguf.Parse(mustBytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if toks, _ := f.Strings("tokenizer.ggml.tokens"); len(toks) != 600 || toks[599] != "<|unused_599|>" {
		t.Error("padding to vocab 600")
	}
}

// TestPresetMatchesLlamaCppFiles checks the bench presets against the
// byte sizes of the files llama.cpp was benchmarked on
// (shared/reference/llama-cpp-speed.md): same shapes, types, metadata and
// tokenizer give the same size.
func TestPresetMatchesLlamaCppFiles(t *testing.T) {
	vocab := testenv.Shared(t, "vocab/ggml-vocab-llama-spm.gguf")
	cases := []struct {
		preset string
		typ    quant.Type
		size   int
	}{
		{"bench-15M", quant.Q8_0, 26671680},
		{"bench-15M", quant.F32, 98358304},
	}
	// bench-110M takes seconds to generate: opt in with SLUICE_SYNTH_110M=1.
	if os.Getenv("SLUICE_SYNTH_110M") == "1" {
		cases = append(cases, struct {
			preset string
			typ    quant.Type
			size   int
		}{"bench-110M", quant.Q8_0, 143274560})
	}
	for _, c := range cases {
		s, err := PresetSpec(c.preset, c.typ, vocab)
		if err != nil {
			t.Fatal(err)
		}
		var n countingWriter
		if err := Write(&n, s); err != nil {
			t.Fatal(err)
		}
		if int(n) != c.size {
			t.Errorf("%s %s: %d bytes, llama.cpp's file is %d", c.preset, c.typ, n, c.size)
		}
	}
	// The real file's tensor table and metadata, key by key. The repository
	// ships only the file's header (testdata/README.md); padded with zeros
	// to the file's size it parses as the file, tensor data aside.
	ref, err := gguf.Parse(testenv.Bench15MHeader(t))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := PresetSpec("bench-15M", quant.Q8_0, vocab)
	ours, err := gguf.Parse(mustBytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(ours.Keys(), ",") != strings.Join(ref.Keys(), ",") {
		t.Errorf("keys differ:\n ours %v\n ref  %v", ours.Keys(), ref.Keys())
	}
	for _, k := range ref.Keys() {
		if k == "general.description" {
			continue
		}
		a, _ := ref.Value(k)
		b, _ := ours.Value(k)
		if a.String() != b.String() || a.Len() != b.Len() {
			t.Errorf("%s: ours %v, llama.cpp file %v", k, b, a)
		}
	}
	for i, rt := range ref.Tensors {
		ot := ours.Tensors[i]
		if ot.Name != rt.Name || ot.Type != rt.Type || ot.Offset != rt.Offset || ot.Size != rt.Size {
			t.Errorf("tensor %d: ours %+v, ref %+v", i, ot, rt)
		}
	}
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/m.gguf"
	s := Spec{Arch: "llama", Layers: 1, Embd: 32, Heads: 2, KVHeads: 1, FF: 64, Context: 64, Type: quant.F32, Seed: 5}
	if err := WriteFile(p, s); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.Heads = 3
	if err := WriteFile(dir+"/bad.gguf", s); err == nil {
		t.Fatal("bad spec written")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only m.gguf", len(ents))
	}
}

// TestKQuantFallback: rows that are not whole 256-blocks get llama.cpp's
// fallback type; rows that are keep the K-quant.
func TestKQuantFallback(t *testing.T) {
	s := Spec{Arch: "llama", Layers: 1, Embd: 288, Heads: 6, KVHeads: 6, FF: 768, Context: 64, Type: quant.Q4_K, Seed: 1}
	f, err := gguf.Parse(mustBytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]quant.Type{
		"blk.0.attn_q.weight":    quant.Q5_0, // rows of 288
		"blk.0.ffn_gate.weight":  quant.Q5_0, // rows of 288
		"blk.0.ffn_down.weight":  quant.Q4_K, // rows of 768 = 3 x 256
		"token_embd.weight":      quant.Q5_0,
		"blk.0.attn_norm.weight": quant.F32,
	} {
		if ti, _ := f.Tensor(name); ti == nil || ti.Type != want {
			t.Errorf("%s: %v, want %s", name, ti, want)
		}
	}
	if RowType(quant.Q6_K, 64) != quant.Q8_0 || RowType(quant.Q5_K, 64) != quant.Q5_1 || RowType(quant.Q8_0, 64) != quant.Q8_0 {
		t.Error("RowType fallbacks")
	}
}

// TestMoEFiles: qwen3moe and glm4moe files carry llama.cpp's metadata keys
// and tensor names with the stacked expert shapes ([n_embd, n_ff_exp,
// n_expert] for gate/up, [n_ff_exp, n_embd, n_expert] for down), the
// router in F32, glm4moe's dense lead layers, shared expert, selection
// bias and nextn layers counted in block_count; bad MoE specs are refused.
func TestMoEFiles(t *testing.T) {
	q := Spec{Arch: "qwen3moe", Layers: 2, Embd: 64, Heads: 4, KVHeads: 2, FF: 96, Context: 256, Type: quant.Q8_0, Seed: 3,
		MoE: MoESpec{HeadDim: 32, Experts: 8, ExpertsUsed: 2, ExpertFF: 64}}
	g := Spec{Arch: "glm4moe", Layers: 3, Embd: 64, Heads: 4, KVHeads: 2, FF: 128, Context: 256, Type: quant.F16, Seed: 3,
		MoE: MoESpec{HeadDim: 32, RopeDim: 16, Experts: 8, ExpertsUsed: 2, ExpertFF: 64, SharedExperts: 1, DenseLayers: 1,
			WeightsScale: 2.5, WeightsNorm: true, Groups: 4, GroupsUsed: 2, NextN: 1}}
	for _, c := range []struct {
		s       Spec
		meta    map[string]uint64
		tensors map[string][]uint64
		absent  []string
	}{
		{q, map[string]uint64{"qwen3moe.block_count": 2, "qwen3moe.expert_count": 8, "qwen3moe.expert_used_count": 2,
			"qwen3moe.expert_feed_forward_length": 64, "qwen3moe.attention.key_length": 32, "qwen3moe.rope.dimension_count": 32},
			map[string][]uint64{"blk.1.attn_q.weight": {64, 128}, "blk.1.attn_output.weight": {128, 64}, "blk.1.attn_q_norm.weight": {32},
				"blk.1.ffn_norm.weight": {64}, "blk.1.ffn_gate_inp.weight": {64, 8}, "blk.1.ffn_gate_exps.weight": {64, 64, 8},
				"blk.1.ffn_up_exps.weight": {64, 64, 8}, "blk.1.ffn_down_exps.weight": {64, 64, 8}},
			[]string{"blk.0.attn_q.bias", "blk.0.exp_probs_b.bias", "blk.0.ffn_gate.weight", "blk.2.attn_norm.weight"}},
		{g, map[string]uint64{"glm4moe.block_count": 4, "glm4moe.nextn_predict_layers": 1, "glm4moe.leading_dense_block_count": 1,
			"glm4moe.expert_shared_count": 1, "glm4moe.expert_gating_func": 2, "glm4moe.rope.dimension_count": 16,
			"glm4moe.expert_group_count": 4, "glm4moe.expert_group_used_count": 2},
			map[string][]uint64{"blk.0.ffn_gate.weight": {64, 128}, "blk.0.attn_q.bias": {128}, "blk.1.post_attention_norm.weight": {64},
				"blk.1.exp_probs_b.bias": {8}, "blk.1.ffn_gate_shexp.weight": {64, 64}, "blk.1.ffn_down_exps.weight": {64, 64, 8},
				"blk.3.nextn.eh_proj.weight": {128, 64}, "blk.3.ffn_gate_exps.weight": {64, 64, 8}},
			[]string{"blk.0.ffn_gate_inp.weight", "blk.1.ffn_gate.weight", "blk.1.ffn_norm.weight", "blk.1.attn_q_norm.weight", "blk.2.nextn.eh_proj.weight"}},
	} {
		f, err := gguf.Parse(mustBytes(t, c.s))
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range c.meta {
			if got, ok := f.Uint(k); !ok || got != want {
				t.Errorf("%s: %s = %d (%v), want %d", c.s.Arch, k, got, ok, want)
			}
		}
		for name, dims := range c.tensors {
			ti, ok := f.Tensor(name)
			if !ok || !slicesEqual(ti.Dims, dims) {
				t.Errorf("%s: tensor %s dims %v (present %v), want %v", c.s.Arch, name, ti.Dims, ok, dims)
			}
		}
		if ti, _ := f.Tensor("blk.1.ffn_gate_inp.weight"); ti.Type != quant.F32 {
			t.Errorf("%s: router is %s, want F32", c.s.Arch, ti.Type)
		}
		for _, name := range c.absent {
			if _, ok := f.Tensor(name); ok {
				t.Errorf("%s: tensor %s should not be written", c.s.Arch, name)
			}
		}
	}
	if v, _ := gguf.Parse(mustBytes(t, g)); v != nil {
		if s, ok := v.Float("glm4moe.expert_weights_scale"); !ok || s != 2.5 {
			t.Errorf("expert_weights_scale %v %v", s, ok)
		}
	}
	for _, bad := range []func(s *Spec){
		func(s *Spec) { s.MoE.ExpertsUsed = 9 },
		func(s *Spec) { s.MoE.Experts = 0 },
		func(s *Spec) { s.MoE.RopeDim = 15 },
		func(s *Spec) { s.MoE.Groups, s.MoE.GroupsUsed = 3, 1 },
		func(s *Spec) { s.Arch = "qwen3moe" }, // glm-only settings
		func(s *Spec) { s.Arch = "llama" },
	} {
		s := g
		bad(&s)
		if err := Write(&bytes.Buffer{}, s); err == nil {
			t.Errorf("spec %+v accepted", s.MoE)
		}
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
