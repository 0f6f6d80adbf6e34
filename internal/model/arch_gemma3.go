package model

import "math"

// gemma3 (text): llama.cpp's LLM_ARCH_GEMMA3 (llm_build_gemma3_iswa).
//
//	x   = embd(tok) * sqrt(n_embd)
//	h   = x + RMSNorm_post_attn(Attention(RMSNorm(x)))
//	out = h + RMSNorm_post_ffn(W_down(GELU_tanh(W_gate h') * W_up h')),  h' = RMSNorm(h)
//
// Attention: per-head RMSNorm of Q and K before RoPE NEOX, queries scaled
// by 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the 62-layer 27B, as
// llama.cpp's f_attention_scale; Google's query_pre_attn_scalar), scores
// not scaled again. Five of every six layers (layer i with i%6 < 5) are
// sliding-window layers: a token sees gemma3.attention.sliding_window
// positions ending at its own, RoPE base 10000 unscaled; the others are
// global, RoPE base rope.freq_base with the file's linear scaling.
//
// Norm weights are used as stored: Gemma's RMSNorm is x*(1+w), and
// llama.cpp's converter stores w+1 in the GGUF, so the file already holds
// the multiplier. Final-logit and attention soft-capping keys are refused
// (Gemma 3 has none; llama.cpp builds that ignore the key would disagree
// with those that apply it).
//
// Pages that every sliding layer has left behind are not released early:
// the global layers still read them, and the KV pool's pages hold every
// layer of a position, so nothing could be freed without splitting pages
// by layer.

func init() {
	register("gemma3", &archDef{rope: RopeNeox, config: configGemma3, build: buildGemma3, strict: true})
}

// gemma3Pattern is llama.cpp's set_swa_pattern(6) for gemma3.
const gemma3Pattern = 6

func configGemma3(s source, c *Config) error {
	for _, k := range []string{"gemma3.attn_logit_softcapping", "gemma3.final_logit_softcapping"} {
		if err := refuseKey(s, k, "sluice does not apply logit soft-capping for gemma3"); err != nil {
			return err
		}
	}
	w, ok := s.uint("gemma3.attention.sliding_window")
	if !ok {
		return errf(CodeBadMetadata, "metadata key gemma3.attention.sliding_window is missing (llama.cpp requires it)")
	}
	if w == 0 || w > 1<<30 {
		return errf(CodeBadMetadata, "gemma3.attention.sliding_window = %d is not supported (must be positive)", w)
	}
	c.QKNorm = true
	c.SlidingWindow = int(w)
	c.SlidingPattern = gemma3Pattern
	c.RopeBaseSWA = 10000
	return nil
}

// gemma3Block is a gemma3 layer: pre- and post-norms around both the
// attention and the GeGLU FFN.
type gemma3Block struct {
	attnNorm     []float32 // blk.N.attn_norm.weight
	attn         attention
	attnPostNorm []float32 // blk.N.post_attention_norm.weight
	ffnNorm      []float32 // blk.N.ffn_norm.weight
	ffn          ffn
	ffnPostNorm  []float32 // blk.N.post_ffw_norm.weight
}

func (b *gemma3Block) forward(r *Runner, l int) {
	r.norm(r.xn, r.x, b.attnNorm)
	b.attn.forward(r, l)
	r.keepOutputRows(l)
	r.norm(r.o, r.o, b.attnPostNorm)
	r.addNorm(b.ffnNorm)
	b.ffn.forward(r, r.xn, r.o)
	r.norm(r.o, r.o, b.ffnPostNorm)
	r.addResidual()
}

const (
	gemma3RopeGlobal = 0 // index of the global layers' RoPE variant
	gemma3RopeSWA    = 1
)

func buildGemma3(ld *loader, m *Model) {
	c := ld.c
	ld.refuse("rope_freqs.weight", "llama.cpp's gemma3 graph has no per-pair RoPE frequency factors")
	qScale := 1 / float32(math.Sqrt(float64(c.HeadDim)))
	if c.Layers == 62 { // llama.cpp's LLM_TYPE_27B
		qScale = 1 / float32(math.Sqrt(float64(c.Embd/c.Heads)))
	}
	for i := range m.blocks {
		p := layerPrefix(i)
		b := &gemma3Block{}
		b.attnNorm = ld.vec(p+"attn_norm.weight", c.Embd)
		b.attn = ld.attention(p, false, true)
		b.attn.qScale = qScale
		if c.Sliding(i) {
			b.attn.window = c.SlidingWindow
			b.attn.rope = gemma3RopeSWA
		}
		b.attnPostNorm = ld.vec(p+"post_attention_norm.weight", c.Embd)
		b.ffnNorm = ld.vec(p+"ffn_norm.weight", c.Embd)
		b.ffn = ld.denseFFN(p, actGELUTan)
		b.ffnPostNorm = ld.vec(p+"post_ffw_norm.weight", c.Embd)
		m.blocks[i] = b
	}
	m.ropes = []ropeParams{gemma3RopeGlobal: ld.rope(c.RopeBase, c.RopeScaling), gemma3RopeSWA: ld.rope(c.RopeBaseSWA, 1)}
	m.attnScale = 1
	m.embdScale = float32(math.Sqrt(float64(c.Embd)))
}
