package model

// glm4moe: GLM-4.5 / GLM-4.6 (and GLM-4.5-Air). llama.cpp's
// LLM_ARCH_GLM4_MOE (src/models/glm4-moe.cpp):
//
//	h   = x + Attention(RMSNorm(x))        QKV biases, optional per-head Q/K norms,
//	                                       RoPE NEOX over the first rope.dimension_count
//	                                       dimensions of each head (partial RoPE)
//	h'  = RMSNorm(h)                       (post_attention_norm)
//	out = h + DenseFFN(h')                 the first leading_dense_block_count layers
//	out = h + MoE(h') + SharedFFN(h')      the others
//
// The router gates by sigmoid (expert_gating_func, default sigmoid);
// exp_probs_b is added to the scores for choosing the experts only, the
// weights are the unbiased scores, renormalised if expert_weights_norm and
// multiplied by expert_weights_scale. The shared expert is a SwiGLU FFN
// of expert_shared_count x expert_feed_forward_length.
//
// The last nextn_predict_layers blocks of the file are the
// multi-token-prediction head: llama.cpp loads them but never runs them
// for decoding, and neither does sluice (it does not read them); the
// model's layers are block_count - nextn_predict_layers.

func init() {
	register("glm4moe", &archDef{rope: RopeNeox, config: configGLM4MoE, build: buildMoE})
}

func configGLM4MoE(s source, c *Config) error {
	a := c.Arch
	if err := readExperts(s, c, true); err != nil {
		return err
	}
	mc := &c.MoE
	v, ok := s.uint(a + ".expert_shared_count")
	if !ok {
		return errf(CodeBadMetadata, "metadata key %s.expert_shared_count is missing", a)
	}
	mc.Shared = int(min(v, 64))
	if v, ok := s.uint(a + ".leading_dense_block_count"); ok {
		mc.DenseLead = int(min(v, 1<<20))
	}
	if v, ok := s.float(a + ".expert_weights_scale"); ok {
		if !(v >= 0) || v > 1e6 {
			return errf(CodeBadMetadata, "metadata key %s.expert_weights_scale = %g is out of range", a, v)
		}
		mc.Scale = float32(v)
	}
	if b, ok := s.boolean(a + ".expert_weights_norm"); ok {
		mc.NormW = b
	}
	mc.Gating = GateSigmoid // llama.cpp's default for glm4moe
	if v, ok := s.uint(a + ".expert_gating_func"); ok {
		switch Gating(v) {
		case 0, GateSigmoid:
		case GateSoftmax:
			mc.Gating = GateSoftmax
		default:
			return errf(CodeBadMetadata, "metadata key %s.expert_gating_func = %d is not supported (1 softmax, 2 sigmoid)", a, v)
		}
	}
	if v, ok := s.uint(a + ".nextn_predict_layers"); ok {
		if int(min(v, 1<<20)) >= c.Layers {
			return errf(CodeBadMetadata, "%s.nextn_predict_layers %d must be fewer than block_count %d", a, v, c.Layers)
		}
		mc.NextN = int(v)
		c.Layers -= mc.NextN
	}
	if mc.DenseLead > c.Layers {
		return errf(CodeBadMetadata, "%s.leading_dense_block_count %d exceeds the %d layers", a, mc.DenseLead, c.Layers)
	}
	c.QKVBias = true
	return nil
}
