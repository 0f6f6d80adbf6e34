package synth

import (
	"fmt"
	"math"

	"sluice/internal/gguf"
	"sluice/internal/quant"
)

// MoESpec is the mixture-of-experts part of a Spec, for the architectures
// qwen3moe and glm4moe. Metadata keys and tensor names are llama.cpp's
// (src/llama-arch.cpp); shapes are in ggml order, the expert tensors
// stacked as llama.cpp's converter writes them:
//
//	blk.N.ffn_gate_inp.weight   F32 [n_embd, n_expert]            router
//	blk.N.ffn_gate_exps.weight  [n_embd, n_ff_exp, n_expert]      expert e = rows [e*n_ff_exp, (e+1)*n_ff_exp)
//	blk.N.ffn_up_exps.weight    [n_embd, n_ff_exp, n_expert]
//	blk.N.ffn_down_exps.weight  [n_ff_exp, n_embd, n_expert]
//	blk.N.exp_probs_b.bias      F32 [n_expert]                    glm4moe: selection bias
//	blk.N.ffn_{gate,up}_shexp.weight [n_embd, n_ff_exp*n_shared]  glm4moe: shared expert
//	blk.N.ffn_down_shexp.weight [n_ff_exp*n_shared, n_embd]
//
// qwen3moe: per-head attn_q_norm/attn_k_norm, no QKV bias, softmax routing
// (renormalised top-k weights are llama.cpp's fixed choice, not metadata).
// glm4moe: QKV biases, post_attention_norm in place of ffn_norm, optional
// q/k norms, partial RoPE (rope.dimension_count < head dim), sigmoid
// routing with exp_probs_b, expert_weights_norm/scale, a shared expert,
// leading dense layers, and nextn_predict_layers extra layers at the end
// of the file (the multi-token-prediction head, which llama.cpp loads but
// never runs; block_count counts them).
type MoESpec struct {
	HeadDim     int // attention.key_length = value_length (0: embd/heads)
	RopeDim     int // rope.dimension_count (0: the head dimension)
	Experts     int // expert_count
	ExpertsUsed int // expert_used_count (top-k)
	ExpertFF    int // expert_feed_forward_length
	// glm4moe only.
	SharedExperts int     // expert_shared_count
	DenseLayers   int     // leading_dense_block_count: dense FFN of Spec.FF
	WeightsScale  float32 // expert_weights_scale (0: key not written)
	WeightsNorm   bool    // expert_weights_norm
	Groups        int     // expert_group_count (0: key not written)
	GroupsUsed    int     // expert_group_used_count
	NextN         int     // nextn_predict_layers, written after Spec.Layers
	QKNorm        bool    // attn_q_norm / attn_k_norm
}

func isMoE(arch string) bool { return arch == "qwen3moe" || arch == "glm4moe" }

func (s *Spec) headDim() int {
	if s.HeadDim != 0 {
		return s.HeadDim
	}
	if s.MoE.HeadDim != 0 {
		return s.MoE.HeadDim
	}
	return s.Embd / s.Heads
}

func (s *Spec) ropeDim() int {
	if s.MoE.RopeDim != 0 {
		return s.MoE.RopeDim
	}
	return s.headDim()
}

func (s *Spec) validateMoE() error {
	m := s.MoE
	if !isMoE(s.Arch) {
		if m != (MoESpec{}) {
			return specErr("expert and head-dimension settings are for qwen3moe and glm4moe, not %s", s.Arch)
		}
		return nil
	}
	if m.HeadDim < 0 || m.RopeDim < 0 || m.RopeDim > s.headDim() || s.ropeDim()%2 != 0 {
		return specErr("rope dimensions %d must be even and within the head dimension %d", s.ropeDim(), s.headDim())
	}
	if m.Experts < 1 || m.Experts > 512 || m.ExpertsUsed < 1 || m.ExpertsUsed > m.Experts || m.ExpertFF < 1 {
		return specErr("experts %d, experts used %d and expert ff %d must be positive, at most 512 experts, and used <= experts", m.Experts, m.ExpertsUsed, m.ExpertFF)
	}
	if m.Groups != 0 && (m.Groups < 1 || m.Experts%m.Groups != 0 || m.GroupsUsed < 1 || m.GroupsUsed > m.Groups || m.ExpertsUsed > m.GroupsUsed*(m.Experts/m.Groups)) {
		return specErr("expert groups %d (used %d) must divide %d experts and leave room for %d used experts", m.Groups, m.GroupsUsed, m.Experts, m.ExpertsUsed)
	}
	if s.Arch == "qwen3moe" {
		if m.SharedExperts != 0 || m.DenseLayers != 0 || m.NextN != 0 || m.WeightsScale != 0 || m.WeightsNorm || m.Groups != 0 || m.QKNorm || s.ropeDim() != s.headDim() {
			return specErr("qwen3moe has no shared experts, dense layers, nextn layers, expert weight scale/norm, groups or partial RoPE in llama.cpp (its q/k norms are always there)")
		}
	}
	if m.SharedExperts < 0 || m.DenseLayers < 0 || m.DenseLayers > s.Layers || m.NextN < 0 || m.NextN > 4 {
		return specErr("shared experts %d, dense layers %d (of %d) and nextn layers %d are out of range", m.SharedExperts, m.DenseLayers, s.Layers, m.NextN)
	}
	return nil
}

// moeMeta writes the MoE architectures' extra metadata.
func (s *Spec) moeMeta(gw *gguf.Writer) {
	a, m := s.Arch, s.MoE
	gw.SetUint32(a+".attention.key_length", uint32(s.headDim()))
	gw.SetUint32(a+".attention.value_length", uint32(s.headDim()))
	gw.SetUint32(a+".expert_count", uint32(m.Experts))
	gw.SetUint32(a+".expert_used_count", uint32(m.ExpertsUsed))
	gw.SetUint32(a+".expert_feed_forward_length", uint32(m.ExpertFF))
	if m.Groups != 0 {
		gw.SetUint32(a+".expert_group_count", uint32(m.Groups))
		gw.SetUint32(a+".expert_group_used_count", uint32(m.GroupsUsed))
	}
	if a != "glm4moe" {
		return
	}
	gw.SetUint32(a+".block_count", uint32(s.Layers+m.NextN))
	gw.SetUint32(a+".expert_shared_count", uint32(m.SharedExperts))
	gw.SetUint32(a+".leading_dense_block_count", uint32(m.DenseLayers))
	gw.SetUint32(a+".expert_gating_func", 2) // LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID
	gw.SetBool(a+".expert_weights_norm", m.WeightsNorm)
	if m.WeightsScale != 0 {
		gw.SetFloat32(a+".expert_weights_scale", m.WeightsScale)
	}
	gw.SetUint32(a+".nextn_predict_layers", uint32(m.NextN))
}

// weights are build's tensor writers, shared with the MoE layers.
type weights struct {
	add         func(name string, typ quant.Type, dims []uint64, fill func(r *rng, x []float32)) error
	randn       func(std float64) func(r *rng, x []float32)
	ones, zeros func(r *rng, x []float32)
}

// moeLayer returns the steps writing block l of a qwen3moe or glm4moe
// model (for glm4moe, l >= Spec.Layers is a nextn layer).
func (s *Spec) moeLayer(l int, w weights) []func() error {
	m := s.MoE
	p := fmt.Sprintf("blk.%d.", l)
	E, HD := uint64(s.Embd), uint64(s.headDim())
	Q, KV := uint64(s.Heads)*HD, uint64(s.KVHeads)*HD
	EF, NE := uint64(m.ExpertFF), uint64(m.Experts)
	inE := 1 / math.Sqrt(float64(s.Embd))
	inQ := 1 / math.Sqrt(float64(Q))
	inEF := 1 / math.Sqrt(float64(m.ExpertFF))
	glm := s.Arch == "glm4moe"
	steps := []func() error{
		func() error { return w.add(p+"attn_norm.weight", quant.F32, []uint64{E}, w.ones) },
		func() error { return w.add(p+"attn_q.weight", s.Type, []uint64{E, Q}, w.randn(inE)) },
		func() error { return w.add(p+"attn_k.weight", s.Type, []uint64{E, KV}, w.randn(inE)) },
		func() error { return w.add(p+"attn_v.weight", s.Type, []uint64{E, KV}, w.randn(inE)) },
		func() error { return w.add(p+"attn_output.weight", s.Type, []uint64{Q, E}, w.randn(inQ)) },
	}
	if glm {
		// Non-zero biases, so that a reader that drops them is caught.
		steps = append(steps,
			func() error { return w.add(p+"attn_q.bias", quant.F32, []uint64{Q}, w.randn(0.1)) },
			func() error { return w.add(p+"attn_k.bias", quant.F32, []uint64{KV}, w.randn(0.1)) },
			func() error { return w.add(p+"attn_v.bias", quant.F32, []uint64{KV}, w.randn(0.1)) },
			func() error { return w.add(p+"post_attention_norm.weight", quant.F32, []uint64{E}, w.ones) },
		)
	} else {
		steps = append(steps, func() error { return w.add(p+"ffn_norm.weight", quant.F32, []uint64{E}, w.ones) })
	}
	if !glm || m.QKNorm {
		steps = append(steps,
			func() error { return w.add(p+"attn_q_norm.weight", quant.F32, []uint64{HD}, w.ones) },
			func() error { return w.add(p+"attn_k_norm.weight", quant.F32, []uint64{HD}, w.ones) },
		)
	}
	if glm && l < m.DenseLayers {
		F := uint64(s.FF)
		inF := 1 / math.Sqrt(float64(s.FF))
		return append(steps,
			func() error { return w.add(p+"ffn_gate.weight", s.Type, []uint64{E, F}, w.randn(inE)) },
			func() error { return w.add(p+"ffn_down.weight", s.Type, []uint64{F, E}, w.randn(inF)) },
			func() error { return w.add(p+"ffn_up.weight", s.Type, []uint64{E, F}, w.randn(inE)) },
		)
	}
	// The router stays F32, as llama.cpp's quantizer leaves it.
	steps = append(steps,
		func() error { return w.add(p+"ffn_gate_inp.weight", quant.F32, []uint64{E, NE}, w.randn(inE)) },
		func() error { return w.add(p+"ffn_gate_exps.weight", s.Type, []uint64{E, EF, NE}, w.randn(inE)) },
		func() error { return w.add(p+"ffn_down_exps.weight", s.Type, []uint64{EF, E, NE}, w.randn(inEF)) },
		func() error { return w.add(p+"ffn_up_exps.weight", s.Type, []uint64{E, EF, NE}, w.randn(inE)) },
	)
	if glm {
		// Sigmoid scores are spread over about 0.2..0.8: a bias of this
		// size changes some selections, never most.
		steps = append(steps, func() error { return w.add(p+"exp_probs_b.bias", quant.F32, []uint64{NE}, w.randn(0.05)) })
		if m.SharedExperts > 0 {
			SF := EF * uint64(m.SharedExperts)
			inSF := 1 / math.Sqrt(float64(SF))
			steps = append(steps,
				func() error { return w.add(p+"ffn_gate_shexp.weight", s.Type, []uint64{E, SF}, w.randn(inE)) },
				func() error { return w.add(p+"ffn_down_shexp.weight", s.Type, []uint64{SF, E}, w.randn(inSF)) },
				func() error { return w.add(p+"ffn_up_shexp.weight", s.Type, []uint64{E, SF}, w.randn(inE)) },
			)
		}
		if l >= s.Layers { // the nextn (MTP) head's own tensors
			steps = append(steps,
				func() error {
					return w.add(p+"nextn.eh_proj.weight", s.Type, []uint64{2 * E, E}, w.randn(1/math.Sqrt(float64(2*E))))
				},
				func() error { return w.add(p+"nextn.enorm.weight", quant.F32, []uint64{E}, w.ones) },
				func() error { return w.add(p+"nextn.hnorm.weight", quant.F32, []uint64{E}, w.ones) },
				func() error { return w.add(p+"nextn.shared_head_norm.weight", quant.F32, []uint64{E}, w.ones) },
			)
		}
	}
	return steps
}

// MoEReference is a small MoE file whose llama.cpp outputs are committed
// in testdata/reference/moe.json (written by scripts/moeref).
type MoEReference struct {
	Name string // the file's name in the reference, without .gguf
	Spec Spec
}

// MoEReferences are the reference files: per architecture one Q8_0 and
// one F32 or F16, 8 experts with top-2, head_dim != n_embd/n_head;
// glm4moe with partial RoPE, a dense first layer, a shared expert,
// renormalised weights scaled by 2.5 and a nextn layer (llama.cpp skips
// it), one with Q/K norms, the other with expert groups instead.
func MoEReferences() []MoEReference {
	q := Spec{Arch: "qwen3moe", Layers: 3, Embd: 128, Heads: 4, KVHeads: 2, FF: 192, Context: 512, Seed: 2401,
		MoE: MoESpec{HeadDim: 48, Experts: 8, ExpertsUsed: 2, ExpertFF: 96}}
	g := Spec{Arch: "glm4moe", Layers: 3, Embd: 128, Heads: 4, KVHeads: 2, FF: 256, Context: 512, Seed: 2402,
		MoE: MoESpec{HeadDim: 48, RopeDim: 24, Experts: 8, ExpertsUsed: 2, ExpertFF: 96, SharedExperts: 1, DenseLayers: 1,
			WeightsScale: 2.5, WeightsNorm: true, NextN: 1, QKNorm: true}}
	var out []MoEReference
	for _, c := range []struct {
		s      Spec
		t      quant.Type
		groups bool
	}{{q, quant.Q8_0, false}, {q, quant.F32, false}, {g, quant.F16, false}, {g, quant.Q8_0, true}} {
		s := c.s
		s.Type = c.t
		name := fmt.Sprintf("moe-%s-%s", s.Arch, c.t)
		if c.groups {
			// GLM-4.5-Air style: no Q/K norms; plus expert groups.
			s.MoE.Groups, s.MoE.GroupsUsed, s.MoE.QKNorm = 4, 2, false
			name += "-groups"
		}
		s.Name = name
		out = append(out, MoEReference{name, s})
	}
	return out
}
