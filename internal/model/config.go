package model

import "fmt"

// RopeType is how rotary position embedding pairs a head's dimensions.
type RopeType int

const (
	// RopeNorm rotates adjacent pairs (x[2i], x[2i+1]); llama.cpp's
	// LLAMA_ROPE_TYPE_NORM, used for the llama architecture.
	RopeNorm RopeType = iota
	// RopeNeox rotates (x[i], x[i+d/2]); llama.cpp's LLAMA_ROPE_TYPE_NEOX,
	// used for qwen2.
	RopeNeox
)

func (r RopeType) String() string {
	if r == RopeNeox {
		return "neox"
	}
	return "norm"
}

// Config is a model's shape and hyper-parameters as read from GGUF metadata.
type Config struct {
	Arch        string // general.architecture: one of Architectures()
	Vocab       int
	Embd        int // n_embd
	Layers      int
	Heads       int
	KVHeads     int
	HeadDim     int
	FF          int // feed-forward hidden size
	RopeBase    float32
	RopeDim     int // dimensions of each head that are rotated (from the front)
	Rope        RopeType
	RopeScaling float32 // linear RoPE scaling factor (1: none)
	RMSEps      float32
	Context     int  // trained context length
	QKVBias     bool // qwen2: attn_q/k/v carry biases
	QKNorm      bool // qwen3, gemma3: per-head RMSNorm of Q and K before RoPE
	// SlidingWindow is the attention window of the sliding layers in
	// positions (a token sees itself and the SlidingWindow-1 before it);
	// 0: every layer attends over the whole context. gemma3.
	SlidingWindow int
	// SlidingPattern: layer i is a sliding layer unless i%SlidingPattern
	// == SlidingPattern-1 (gemma3: 6, every sixth layer is global).
	SlidingPattern int
	// RopeBaseSWA is the RoPE base of the sliding layers (gemma3: 10000,
	// unscaled); the global layers use RopeBase and RopeScaling.
	RopeBaseSWA float32
	// MoE is the mixture-of-experts routing (qwen3moe, glm4moe); zero
	// for dense models.
	MoE         MoEConfig
	TiedOutput  bool // no output.weight: logits use token_embd
	ModelName   string
	FileType    string
	TensorBytes int64 // total bytes of tensor data the model maps
}

// KVDim is the width of one position's key (or value) row: n_kv_heads x
// head_dim.
func (c Config) KVDim() int { return c.KVHeads * c.HeadDim }

// QDim is the width of the query (and attention output) row.
func (c Config) QDim() int { return c.Heads * c.HeadDim }

func (c Config) validate() error {
	pos := []struct {
		name string
		v    int
	}{{"vocab size", c.Vocab}, {"n_embd", c.Embd}, {"block_count", c.Layers}, {"head_count", c.Heads},
		{"head_count_kv", c.KVHeads}, {"head dimension", c.HeadDim}, {"feed_forward_length", c.FF}, {"context_length", c.Context}}
	for _, p := range pos {
		if p.v <= 0 {
			return errf(CodeBadMetadata, "%s %s is %d; it must be positive", c.Arch, p.name, p.v)
		}
	}
	if c.SlidingWindow < 0 || c.SlidingPattern < 0 {
		return errf(CodeBadMetadata, "%s sliding window %d / pattern %d must not be negative", c.Arch, c.SlidingWindow, c.SlidingPattern)
	}
	// Bounds keep every buffer size computed from these numbers far from
	// overflow and refuse files whose shapes are nonsense.
	if c.Vocab > 1<<22 || c.Embd > 1<<16 || c.Layers > 1024 || c.Heads > 1024 || c.FF > 1<<18 || c.HeadDim > 1024 {
		return errf(CodeBadMetadata, "%s shape (vocab %d, n_embd %d, layers %d, heads %d, ff %d) is out of the supported range", c.Arch, c.Vocab, c.Embd, c.Layers, c.Heads, c.FF)
	}
	if c.Heads%c.KVHeads != 0 {
		return errf(CodeBadMetadata, "head_count %d is not a multiple of head_count_kv %d (GQA needs whole groups)", c.Heads, c.KVHeads)
	}
	if c.RopeDim <= 0 || c.RopeDim > c.HeadDim || c.RopeDim%2 != 0 {
		return errf(CodeBadMetadata, "rope dimension count %d must be even and within the head dimension %d", c.RopeDim, c.HeadDim)
	}
	if !(c.RopeBase > 0) {
		return errf(CodeBadMetadata, "rope freq base %v must be positive", c.RopeBase)
	}
	if !(c.RMSEps > 0 && c.RMSEps < 1) {
		return errf(CodeBadMetadata, "rms norm epsilon %v is out of range (0, 1)", c.RMSEps)
	}
	return nil
}

// Sliding reports whether layer l attends over a sliding window.
func (c Config) Sliding(l int) bool {
	return c.SlidingWindow > 0 && c.SlidingPattern > 0 && l%c.SlidingPattern < c.SlidingPattern-1
}

func (c Config) String() string {
	s := fmt.Sprintf("%s: vocab %d, n_embd %d, layers %d, heads %d (kv %d, dim %d), ff %d, rope %s base %g dims %d, eps %g, ctx %d",
		c.Arch, c.Vocab, c.Embd, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.FF, c.Rope, c.RopeBase, c.RopeDim, c.RMSEps, c.Context)
	if c.RopeScaling != 1 && c.RopeScaling != 0 {
		s += fmt.Sprintf(", rope linear scaling x%g", c.RopeScaling)
	}
	if c.QKVBias {
		s += ", q/k/v bias"
	}
	if c.QKNorm {
		s += ", q/k norm"
	}
	if c.TiedOutput {
		s += ", output tied to token_embd"
	}
	s += c.MoE.String()
	if c.SlidingWindow > 0 {
		s += fmt.Sprintf(", sliding window %d (every %dth layer global, sliding rope base %g)", c.SlidingWindow, c.SlidingPattern, c.RopeBaseSWA)
	}
	return s
}
