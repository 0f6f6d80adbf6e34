package model

import (
	"fmt"

	"sluice/internal/kernels"
)

// MoEConfig is a mixture-of-experts model's routing as its GGUF metadata
// (and llama.cpp's fixed choices for the architecture) give it; the zero
// value is a dense model.
type MoEConfig struct {
	Experts int // expert_count
	Used    int // expert_used_count: experts per token (top-k)
	FF      int // expert_feed_forward_length: each expert's hidden size
	// Shared is expert_shared_count: always-on experts whose SwiGLU FFN is
	// Shared x FF wide (glm4moe).
	Shared int
	// DenseLead is leading_dense_block_count: the first layers use a dense
	// FFN of Config.FF instead (glm4moe).
	DenseLead int
	Gating    Gating
	NormW     bool    // renormalise the chosen experts' weights to sum to one
	Scale     float32 // expert_weights_scale: multiplies the weights (0 or 1: none)
	// Groups and GroupsUsed are expert_group_count and
	// expert_group_used_count: a token chooses only among the GroupsUsed
	// groups of experts whose two best scores sum highest (0: no groups).
	Groups, GroupsUsed int
	// NextN is nextn_predict_layers: blocks at the end of the file that
	// llama.cpp loads but never runs (glm4moe's multi-token prediction);
	// not counted in Config.Layers, never read.
	NextN int
}

func (mc MoEConfig) String() string {
	if mc.Experts == 0 {
		return ""
	}
	s := fmt.Sprintf(", experts %d (top %d, ff %d, %s", mc.Experts, mc.Used, mc.FF, mc.Gating)
	if mc.NormW {
		s += ", renormalised"
	}
	if mc.Scale != 0 && mc.Scale != 1 {
		s += fmt.Sprintf(", scale %g", mc.Scale)
	}
	if mc.Groups > 1 {
		s += fmt.Sprintf(", %d of %d groups", mc.GroupsUsed, mc.Groups)
	}
	s += ")"
	if mc.Shared > 0 {
		s += fmt.Sprintf(", %d shared", mc.Shared)
	}
	if mc.DenseLead > 0 {
		s += fmt.Sprintf(", %d dense lead layers", mc.DenseLead)
	}
	if mc.NextN > 0 {
		s += fmt.Sprintf(", %d nextn layers not run", mc.NextN)
	}
	return s
}

// maxExperts is llama.cpp's LLAMA_MAX_EXPERTS.
const maxExperts = 512

// readExperts reads the keys every MoE architecture shares (llama.cpp
// reads them for all architectures): expert_count, expert_used_count,
// expert_feed_forward_length (required when ffRequired, else n_ff /
// n_expert_used as llama.cpp's qwen3moe falls back) and the expert groups.
func readExperts(s source, c *Config, ffRequired bool) error {
	a, mc := c.Arch, &c.MoE
	get := func(key string) (int, bool) {
		v, ok := s.uint(a + "." + key)
		return int(min(v, 1<<30)), ok
	}
	var ok bool
	if mc.Experts, ok = get("expert_count"); !ok {
		return errf(CodeBadMetadata, "metadata key %s.expert_count is missing", a)
	}
	if mc.Used, ok = get("expert_used_count"); !ok {
		return errf(CodeBadMetadata, "metadata key %s.expert_used_count is missing", a)
	}
	if mc.Experts < 1 || mc.Experts > maxExperts || mc.Used < 1 || mc.Used > mc.Experts {
		return errf(CodeBadMetadata, "%s expert_count %d and expert_used_count %d must be positive, at most %d experts, and used <= count", a, mc.Experts, mc.Used, maxExperts)
	}
	if mc.FF, ok = get("expert_feed_forward_length"); !ok {
		if ffRequired {
			return errf(CodeBadMetadata, "metadata key %s.expert_feed_forward_length is missing", a)
		}
		mc.FF = c.FF / mc.Used
	}
	if mc.FF < 1 || mc.FF > 1<<18 {
		return errf(CodeBadMetadata, "%s expert feed-forward length %d is out of range", a, mc.FF)
	}
	mc.Groups, _ = get("expert_group_count")
	mc.GroupsUsed, _ = get("expert_group_used_count")
	if mc.Groups > 1 {
		// llama.cpp's own assertions, plus room for the top-k in the kept
		// groups; groups fit a 64-bit mask.
		per := mc.Experts / mc.Groups
		if mc.Groups >= mc.Experts || mc.Experts%mc.Groups != 0 || mc.Groups > 64 ||
			mc.GroupsUsed < 1 || mc.GroupsUsed >= mc.Groups || mc.Used > mc.GroupsUsed*per {
			return errf(CodeBadMetadata, "%s expert_group_count %d / expert_group_used_count %d do not fit %d experts with %d used", a, mc.Groups, mc.GroupsUsed, mc.Experts, mc.Used)
		}
	} else {
		mc.Groups, mc.GroupsUsed = 0, 0
	}
	return nil
}

// buildMoE builds qwen3moe and glm4moe: pre-norm blocks (glm4moe's FFN
// norm is named post_attention_norm) whose FFN is dense for the leading
// dense layers and a mixture of experts after them.
func buildMoE(ld *loader, m *Model) {
	c := ld.c
	glm := c.Arch == "glm4moe"
	for i := range m.blocks {
		p := layerPrefix(i)
		b := &preNormBlock{}
		b.attnNorm = ld.vec(p+"attn_norm.weight", c.Embd)
		if glm {
			// Q/K norms are optional per layer (GLM-4.5 has them, -Air
			// not); biases as the file has them.
			b.attn = ld.attention(p, ld.has(p+"attn_q.bias"), ld.has(p+"attn_q_norm.weight"))
			b.ffnNorm = ld.vec(p+"post_attention_norm.weight", c.Embd)
		} else {
			b.attn = ld.attention(p, false, true)
			ld.refuse(p+"attn_q.bias", "llama.cpp's qwen3moe has no QKV biases")
			ld.refuse(p+"attn_output.bias", "sluice does not add an attention output bias")
			b.ffnNorm = ld.vec(p+"ffn_norm.weight", c.Embd)
		}
		if i < c.MoE.DenseLead {
			b.ffn = ld.denseFFN(p, actSiLU)
		} else {
			b.ffn = ld.moeFFN(p)
		}
		m.blocks[i] = b
	}
	ld.refuse("rope_freqs.weight", "llama.cpp's "+c.Arch+" applies no RoPE frequency factors")
	m.ropes = []ropeParams{ld.rope(c.RopeBase, c.RopeScaling)}
	m.attnScale = defaultAttnScale(c)
}

// moeFFN loads layer p's router, stacked experts and, for glm4moe, the
// selection bias and shared expert.
func (ld *loader) moeFFN(p string) *moeFFN {
	c := ld.c
	mc := c.MoE
	E, NE, EF := c.Embd, mc.Experts, mc.FF
	ld.refuse(p+"ffn_gate_up_exps.weight", "sluice reads separate ffn_gate_exps and ffn_up_exps tensors (convert the model with a llama.cpp that writes them)")
	f := &moeFFN{
		nExpert: NE, nUsed: mc.Used, gating: mc.Gating, normW: mc.NormW, scale: mc.Scale,
		groups: mc.Groups, gUsed: mc.GroupsUsed,
		router: ld.mat(p+"ffn_gate_inp.weight", NE, E),
		gate:   ld.experts(p+"ffn_gate_exps.weight", NE, EF, E),
		up:     ld.experts(p+"ffn_up_exps.weight", NE, EF, E),
		down:   ld.experts(p+"ffn_down_exps.weight", NE, E, EF),
	}
	if c.Arch == "glm4moe" {
		f.bias = ld.vec(p+"exp_probs_b.bias", NE)
		if mc.Shared > 0 {
			SF := EF * mc.Shared
			f.shared = &denseFFN{
				gate: ld.mat(p+"ffn_gate_shexp.weight", SF, E),
				up:   ld.mat(p+"ffn_up_shexp.weight", SF, E),
				down: ld.mat(p+"ffn_down_shexp.weight", E, SF),
				act:  actSiLU,
			}
		}
	} else {
		ld.refuse(p+"exp_probs_b.bias", "llama.cpp's qwen3moe adds no expert selection bias")
		ld.refuse(p+"ffn_gate_shexp.weight", "llama.cpp's qwen3moe has no shared expert")
	}
	return f
}

// experts splits the stacked expert tensor name (GGUF dims [cols, rows,
// n]: expert e is rows [e*rows, (e+1)*rows) of the data) into n matrices
// of rows x cols aliasing the file.
func (ld *loader) experts(name string, n, rows, cols int) []kernels.Matrix {
	if ld.err != nil {
		return nil
	}
	t, dims, data, ok := ld.s.tensor(name)
	if !ok {
		ld.fail(errf(CodeMissingTensor, "tensor %s is missing", name))
		return nil
	}
	if len(dims) != 3 || dims[0] != uint64(cols) || dims[1] != uint64(rows) || dims[2] != uint64(n) {
		ld.fail(errf(CodeBadShape, "tensor %s has shape %v, want [%d %d %d]", name, dims, cols, rows, n))
		return nil
	}
	if !kernels.Supported(t) {
		ld.fail(errf(CodeUnsupportedType, "tensor %s has type %s, which the matmul kernels do not support", name, t))
		return nil
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		ld.fail(errf(CodeBadShape, "tensor %s: %v", name, err))
		return nil
	}
	per := rb * rows
	if len(data) != per*n {
		ld.fail(errf(CodeBadShape, "tensor %s holds %d bytes, its shape and type need %d", name, len(data), per*n))
		return nil
	}
	ms := make([]kernels.Matrix, n)
	for e := range ms {
		ms[e] = kernels.Matrix{Type: t, Rows: rows, Cols: cols, Data: data[e*per : (e+1)*per : (e+1)*per]}
	}
	ld.total += int64(len(data))
	return ms
}
