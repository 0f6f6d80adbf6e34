package model

// llama: Llama 1/2/3 and Mistral-style files. Pre-norm blocks
//
//	h   = x + Attention(RMSNorm(x))            (RoPE NORM, GQA)
//	out = h + W_down(SiLU(W_gate h') * W_up h'),  h' = RMSNorm(h)
//
// with linear RoPE scaling and Llama 3.1's rope_freqs.weight divisors.
// Tensor names: llama.cpp's llama-arch.cpp (LLM_ARCH_LLAMA).

func init() {
	register("llama", &archDef{rope: RopeNorm, build: buildPreNorm(false, false)})
}

// preNormBlock is the pre-norm decoder layer of llama, qwen2 and qwen3:
// they differ only in their attention (biases, Q/K norms, RoPE pairing).
type preNormBlock struct {
	attnNorm []float32 // blk.N.attn_norm.weight
	attn     attention
	ffnNorm  []float32 // blk.N.ffn_norm.weight
	ffn      ffn       // dense SwiGLU, or a mixture of experts
}

func (b *preNormBlock) forward(r *Runner, l int) {
	r.norm(r.xn, r.x, b.attnNorm)
	b.attn.forward(r, l)
	r.keepOutputRows(l)
	r.addNorm(b.ffnNorm)
	b.ffn.forward(r, r.xn, r.o)
	r.addResidual()
}

// buildPreNorm builds a model of preNormBlocks with dense SwiGLU FFNs,
// one RoPE variant (the file's base and linear scaling, and
// rope_freqs.weight if present) and scores scaled by 1/sqrt(head_dim).
func buildPreNorm(bias, qkNorm bool) func(ld *loader, m *Model) {
	return func(ld *loader, m *Model) {
		for i := range m.blocks {
			p := layerPrefix(i)
			b := &preNormBlock{}
			b.attnNorm = ld.vec(p+"attn_norm.weight", ld.c.Embd)
			b.attn = ld.attention(p, bias, qkNorm)
			b.ffnNorm = ld.vec(p+"ffn_norm.weight", ld.c.Embd)
			b.ffn = ld.denseFFN(p, actSiLU)
			m.blocks[i] = b
		}
		rp := ld.rope(ld.c.RopeBase, ld.c.RopeScaling)
		rp.freqs = ld.ropeFreqs()
		m.ropes = []ropeParams{rp}
		m.attnScale = defaultAttnScale(ld.c)
	}
}
