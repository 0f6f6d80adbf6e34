package model

// qwen3moe: Qwen3's attention (per-head RMSNorm of Q and K before RoPE
// NEOX, no QKV bias, head_dim from key_length) over a mixture-of-experts
// FFN: softmax over every expert's router logit, the top
// expert_used_count experts, their probabilities renormalised to sum to
// one (llama.cpp fixes norm_w = true for this architecture; it is not
// metadata). llama.cpp's LLM_ARCH_QWEN3MOE (src/models/qwen3moe.cpp):
//
//	h   = x + Attention(RMSNorm(x))
//	out = h + MoE(RMSNorm(h))

func init() {
	register("qwen3moe", &archDef{rope: RopeNeox, config: configQwen3MoE, build: buildMoE})
}

func configQwen3MoE(s source, c *Config) error {
	c.QKNorm = true
	if c.RopeDim != c.HeadDim {
		// llama.cpp asserts n_rot == head_dim for qwen3moe.
		return errf(CodeBadMetadata, "qwen3moe rope.dimension_count %d differs from the head dimension %d; llama.cpp's qwen3moe rotates whole heads", c.RopeDim, c.HeadDim)
	}
	if err := readExperts(s, c, false); err != nil {
		return err
	}
	c.MoE.Gating, c.MoE.NormW = GateSoftmax, true
	// llama.cpp's qwen3moe graph has no shared expert, dense layers,
	// selection bias or weight scale, and always gates by softmax: a file
	// that asks for one expects an effect neither engine applies.
	for _, k := range []struct {
		key string
		ok  func(v uint64) bool
	}{
		{"expert_shared_count", func(v uint64) bool { return v == 0 }},
		{"leading_dense_block_count", func(v uint64) bool { return v == 0 }},
		{"nextn_predict_layers", func(v uint64) bool { return v == 0 }},
		{"expert_gating_func", func(v uint64) bool { return v == 0 || v == uint64(GateSoftmax) }},
	} {
		if v, ok := s.uint(c.Arch + "." + k.key); ok && !k.ok(v) {
			return errf(CodeBadMetadata, "metadata key %s.%s = %d is not supported for qwen3moe (llama.cpp's qwen3moe does not apply it)", c.Arch, k.key, v)
		}
	}
	if v, ok := s.float(c.Arch + ".expert_weights_scale"); ok && v != 0 && v != 1 {
		return errf(CodeBadMetadata, "metadata key %s.expert_weights_scale = %g is not supported for qwen3moe (llama.cpp's qwen3moe does not apply it)", c.Arch, v)
	}
	return nil
}
