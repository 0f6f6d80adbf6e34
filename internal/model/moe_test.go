package model

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/quant"
	"sluice/internal/synth"
)

// moeSpecs are small synthetic MoE models: 8 experts, top-2, head_dim !=
// n_embd/n_head; glm4moe with a dense first layer, a shared expert,
// partial RoPE, renormalised and scaled weights, expert groups and a
// nextn layer that must not run.
var moeSpecs = map[string]synth.Spec{
	"qwen3moe": {Arch: "qwen3moe", Layers: 2, Embd: 64, Heads: 4, KVHeads: 2, FF: 96, Context: 512, Type: quant.Q8_0, Seed: 11,
		MoE: synth.MoESpec{HeadDim: 32, Experts: 8, ExpertsUsed: 2, ExpertFF: 64}},
	"glm4moe": {Arch: "glm4moe", Layers: 3, Embd: 64, Heads: 4, KVHeads: 2, FF: 128, Context: 512, Type: quant.F16, Seed: 12,
		MoE: synth.MoESpec{HeadDim: 32, RopeDim: 16, Experts: 8, ExpertsUsed: 2, ExpertFF: 64, SharedExperts: 1, DenseLayers: 1,
			WeightsScale: 2.5, WeightsNorm: true, Groups: 4, GroupsUsed: 2, NextN: 1, QKNorm: true}},
}

func synthBytes(t testing.TB, s synth.Spec) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := synth.Write(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func loadBytes(t testing.TB, data []byte) (*Model, error) {
	t.Helper()
	f, err := gguf.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return Load(f)
}

func synthModel(t testing.TB, s synth.Spec) *Model {
	t.Helper()
	m, err := loadBytes(t, synthBytes(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMoEConfig: the hyper-parameters read from the files, with the
// nextn layer excluded from the layers that run.
func TestMoEConfig(t *testing.T) {
	q := synthModel(t, moeSpecs["qwen3moe"]).Config()
	if q.MoE != (MoEConfig{Experts: 8, Used: 2, FF: 64, Gating: GateSoftmax, NormW: true}) || q.HeadDim != 32 || !q.QKNorm || q.Layers != 2 {
		t.Errorf("qwen3moe config %+v", q)
	}
	g := synthModel(t, moeSpecs["glm4moe"]).Config()
	want := MoEConfig{Experts: 8, Used: 2, FF: 64, Shared: 1, DenseLead: 1, Gating: GateSigmoid, NormW: true, Scale: 2.5, Groups: 4, GroupsUsed: 2, NextN: 1}
	if g.MoE != want || g.Layers != 3 || g.RopeDim != 16 || g.HeadDim != 32 || !g.QKVBias {
		t.Errorf("glm4moe config %+v", g)
	}
	if s := g.String(); !strings.Contains(s, "experts 8 (top 2, ff 64, sigmoid") || !strings.Contains(s, "1 nextn layers not run") {
		t.Errorf("String() = %s", s)
	}
}

// TestMoEBatchInvariance: a MoE model's logits and K/V are bitwise the
// same whether a prompt is prefilled in one chunk or many, alone or beside
// other sequences whose tokens choose the same experts, on 1 to 3 threads
// and every kernel path: a token's experts, their outputs and the order
// the k outputs are summed in depend on its own row alone.
func TestMoEBatchInvariance(t *testing.T) {
	for name, sp := range moeSpecs {
		for _, typ := range []quant.Type{sp.Type, quant.Q4_K} {
			sp := sp
			sp.Type = typ
			if typ == quant.Q4_K {
				// K-quant rows need multiples of 256.
				sp.Embd, sp.Heads, sp.KVHeads, sp.MoE.HeadDim, sp.MoE.ExpertFF, sp.FF = 256, 4, 2, 64, 256, 256
				if sp.MoE.RopeDim != 0 {
					sp.MoE.RopeDim = 32
				}
			}
			t.Run(name+"/"+typ.String(), func(t *testing.T) {
				m := synthModel(t, sp)
				V := m.cfg.Vocab
				rng := rand.New(rand.NewPCG(4, 4))
				toks := randTokens(rng, 23, V)
				comps := [][]int32{randTokens(rng, 40, V), randTokens(rng, 9, V), randTokens(rng, 33, V)}
				base, baseKV := runChunks(m, 1, toks, []int{len(toks)}, nil, newMemKV)
				for _, v := range []struct {
					name    string
					threads int
					chunk   []int
					comps   [][]int32
				}{
					{"one chunk, 2 threads", 2, []int{len(toks)}, nil},
					{"one chunk, 3 threads, companions", 3, []int{len(toks)}, comps},
					{"chunks of 1 (decode)", 1, []int{1}, nil},
					{"chunks of 1 with companions, 2 threads", 2, []int{1}, comps},
					{"mixed chunks with companions, 3 threads", 3, []int{5, 1, 11, 2}, comps},
				} {
					got, kv := runChunks(m, v.threads, toks, v.chunk, v.comps, newMemKV)
					if !bitsEqual(got, base) {
						t.Errorf("%s: logits differ from the single-chunk prefill (first at %d)", v.name, firstDiff(got, base))
					}
					if !sameKV(kv, baseKV) {
						t.Errorf("%s: K/V differ from the single-chunk prefill", v.name)
					}
				}
			})
		}
	}
}

// TestMoERoute: llama.cpp's build_moe_ffn routing on hand-made logits.
func TestMoERoute(t *testing.T) {
	route := func(f *moeFFN, logits []float32) ([]int32, []float32) {
		var s moeScratch
		s.choose = make([]float32, f.nExpert)
		sel, w := make([]int32, f.nUsed), make([]float32, f.nUsed)
		f.route(&s, slices.Clone(logits), sel, w)
		return sel, w
	}
	near := func(a, b float32) bool { return math.Abs(float64(a-b)) < 1e-6 }
	// Softmax, renormalised: weights are the chosen probabilities over
	// their sum, in descending order.
	sel, w := route(&moeFFN{nExpert: 4, nUsed: 2, gating: GateSoftmax, normW: true}, []float32{0, 2, 1, 2})
	if !slices.Equal(sel, []int32{1, 3}) || !near(w[0], 0.5) || !near(w[1], 0.5) {
		t.Errorf("softmax tie: sel %v w %v (want experts 1, 3: ties to the lower id, weights 0.5)", sel, w)
	}
	sel, w = route(&moeFFN{nExpert: 4, nUsed: 2, gating: GateSoftmax}, []float32{0, 3, 1, 2})
	e := []float64{1, math.Exp(3), math.E, math.Exp(2)}
	sum := e[0] + e[1] + e[2] + e[3]
	if !slices.Equal(sel, []int32{1, 3}) || !near(w[0], float32(e[1]/sum)) || !near(w[1], float32(e[3]/sum)) {
		t.Errorf("softmax without norm: sel %v w %v", sel, w)
	}
	// Sigmoid with a selection bias: the bias puts expert 0 (sigmoid 0.5
	// + 0.5) first and ahead of expert 2 (0.73); its weight stays its
	// unbiased sigmoid; then norm and scale.
	sig := func(x float64) float32 { return float32(1 / (1 + math.Exp(-x))) }
	f := &moeFFN{nExpert: 4, nUsed: 2, gating: GateSigmoid, bias: []float32{0.5, 0, 0, 0}}
	sel, w = route(f, []float32{0, 2, 1, -1})
	if !slices.Equal(sel, []int32{0, 1}) || !near(w[0], sig(0)) || !near(w[1], sig(2)) {
		t.Errorf("sigmoid + bias: sel %v w %v", sel, w)
	}
	f.normW, f.scale = true, 2.5
	sel, w = route(f, []float32{0, 2, 1, -1})
	if d := sig(0) + sig(2); !slices.Equal(sel, []int32{0, 1}) || !near(w[0], sig(0)/d*2.5) || !near(w[1], sig(2)/d*2.5) {
		t.Errorf("sigmoid + bias, norm, scale: sel %v w %v", sel, w)
	}
	// Groups of 2: group scores (sum of the two best) 1+0, 5+(-9), 3+2,
	// 0+0; with 2 groups kept (2 and 1), expert 0's 1 loses to 4's 3 and
	// 5's 2 even though group 0 holds the third-best single score.
	g := &moeFFN{nExpert: 8, nUsed: 3, gating: GateSoftmax, groups: 4, gUsed: 2}
	sel, _ = route(g, []float32{1, 0, 5, -9, 3, 2, 0, 0})
	if !slices.Equal(sel, []int32{2, 4, 5}) {
		t.Errorf("groups: sel %v, want [2 4 5]", sel)
	}
}

// TestMoELoadRefusals: what sluice does not implement is refused by name.
func TestMoELoadRefusals(t *testing.T) {
	edit := func(sp synth.Spec, f func(w map[string]gguf.Value, tensors map[string]bool)) []byte {
		data := synthBytes(t, sp)
		src, err := gguf.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		w := gguf.NewWriter()
		meta := map[string]gguf.Value{}
		for _, k := range src.Keys() {
			v, _ := src.Value(k)
			meta[k] = v
		}
		drop := map[string]bool{}
		f(meta, drop)
		for _, k := range src.Keys() {
			if v, ok := meta[k]; ok {
				w.Set(k, v)
			}
		}
		for k, v := range meta {
			if !slices.Contains(src.Keys(), k) {
				w.Set(k, v)
			}
		}
		for _, ti := range src.Tensors {
			if !drop[ti.Name] {
				if err := w.AddTensor(ti.Name, ti.Type, ti.Dims, src.TensorData(ti)); err != nil {
					t.Fatal(err)
				}
			}
		}
		var b bytes.Buffer
		if _, err := w.WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	u32 := func(v uint32) gguf.Value { return gguf.Value{Type: gguf.TypeUint32, Data: v} }
	f32 := func(v float32) gguf.Value { return gguf.Value{Type: gguf.TypeFloat32, Data: v} }
	q, g := moeSpecs["qwen3moe"], moeSpecs["glm4moe"]
	for _, c := range []struct {
		name string
		data []byte
		code Code
		want string
	}{
		{"qwen3moe weight scale", edit(q, func(m map[string]gguf.Value, _ map[string]bool) { m["qwen3moe.expert_weights_scale"] = f32(2) }), CodeBadMetadata, "expert_weights_scale"},
		{"qwen3moe sigmoid", edit(q, func(m map[string]gguf.Value, _ map[string]bool) { m["qwen3moe.expert_gating_func"] = u32(2) }), CodeBadMetadata, "expert_gating_func"},
		{"qwen3moe partial rope", edit(q, func(m map[string]gguf.Value, _ map[string]bool) { m["qwen3moe.rope.dimension_count"] = u32(16) }), CodeBadMetadata, "rope.dimension_count"},
		{"glm softmax-weight gating", edit(g, func(m map[string]gguf.Value, _ map[string]bool) { m["glm4moe.expert_gating_func"] = u32(3) }), CodeBadMetadata, "expert_gating_func"},
		{"missing expert count", edit(q, func(m map[string]gguf.Value, _ map[string]bool) { delete(m, "qwen3moe.expert_count") }), CodeBadMetadata, "expert_count"},
		{"too many used", edit(q, func(m map[string]gguf.Value, _ map[string]bool) { m["qwen3moe.expert_used_count"] = u32(9) }), CodeBadMetadata, "expert_used_count"},
		{"bad groups", edit(g, func(m map[string]gguf.Value, _ map[string]bool) { m["glm4moe.expert_group_used_count"] = u32(4) }), CodeBadMetadata, "expert_group"},
		{"missing experts", edit(q, func(_ map[string]gguf.Value, d map[string]bool) { d["blk.1.ffn_down_exps.weight"] = true }), CodeMissingTensor, "blk.1.ffn_down_exps.weight"},
		{"missing bias", edit(g, func(_ map[string]gguf.Value, d map[string]bool) { d["blk.2.exp_probs_b.bias"] = true }), CodeMissingTensor, "blk.2.exp_probs_b.bias"},
		{"missing shared", edit(g, func(_ map[string]gguf.Value, d map[string]bool) { d["blk.1.ffn_up_shexp.weight"] = true }), CodeMissingTensor, "ffn_up_shexp"},
		{"wrong expert count", edit(q, func(m map[string]gguf.Value, _ map[string]bool) { m["qwen3moe.expert_count"] = u32(4) }), CodeBadShape, "ffn_gate_inp"},
	} {
		_, err := loadBytes(t, c.data)
		var me *Error
		if err == nil || !errors.As(err, &me) || me.Code != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want code %s naming %q", c.name, err, c.code, c.want)
		}
	}
	// The nextn layer's tensors are never read: dropping them loads.
	if _, err := loadBytes(t, edit(g, func(_ map[string]gguf.Value, d map[string]bool) {
		for _, n := range []string{"nextn.eh_proj.weight", "ffn_gate_exps.weight", "attn_q.weight"} {
			d["blk.3."+n] = true
		}
	})); err != nil {
		t.Errorf("glm4moe without its nextn layer's tensors: %v", err)
	}
}
