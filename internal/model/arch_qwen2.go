package model

// qwen2: the llama block with biases on Q, K and V and RoPE NEOX; the
// output projection is often tied to token_embd (no output.weight).
// llama.cpp's LLM_ARCH_QWEN2.

func init() {
	register("qwen2", &archDef{rope: RopeNeox, build: buildPreNorm(true, false), config: func(_ source, c *Config) error {
		c.QKVBias = true
		return nil
	}})
}
