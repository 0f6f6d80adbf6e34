package model

// qwen3: the llama block without Q/K/V biases, with an RMSNorm over each
// head of Q and of K (blk.N.attn_q_norm / attn_k_norm, head_dim wide)
// before RoPE NEOX. Its head dimension (attention.key_length, 128 in the
// released models) is not n_embd / n_head, so Q is wider or narrower than
// the residual stream and attn_output maps n_head*head_dim back to n_embd.
// llama.cpp's LLM_ARCH_QWEN3 (llm_build_qwen3).

func init() {
	register("qwen3", &archDef{rope: RopeNeox, config: configQwen3, strict: true, build: func(ld *loader, m *Model) {
		ld.refuse("rope_freqs.weight", "llama.cpp's qwen3 graph has no per-pair RoPE frequency factors")
		buildPreNorm(false, true)(ld, m)
	}})
}

func configQwen3(s source, c *Config) error {
	c.QKNorm = true
	return nil
}
