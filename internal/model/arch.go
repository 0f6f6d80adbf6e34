package model

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"sluice/internal/kernels"
)

// archDef is one architecture: what llama.cpp fixes for it, how to read
// its own metadata, and how to assemble its blocks. Each lives in its
// arch_<name>.go file and registers itself in init.
type archDef struct {
	// rope is the RoPE pairing: llama.cpp decides it by architecture
	// (llama_model_rope_type), never by metadata.
	rope RopeType
	// config reads the architecture's own keys into c after the shared
	// ones (embedding_length, block_count, heads, key_length, RoPE base and
	// scaling, RMS epsilon) and refuses any value it does not implement.
	// nil: nothing beyond the shared keys.
	config func(s source, c *Config) error
	// build assembles the model's layers (m.blocks) and sets the
	// architecture's model-wide constants (m.ropes, m.attnScale,
	// m.embdScale) from the loader. The token embedding, output norm and
	// output projection are loaded already.
	build func(ld *loader, m *Model)
	// strict refuses a file with a tensor build did not read: llama.cpp
	// refuses such a file too ("wrong number of tensors"), and a tensor
	// left out (a bias, an extra norm) is output run approximately. llama
	// and qwen2 keep their old leniency.
	strict bool
}

var archs = map[string]*archDef{}

func register(name string, a *archDef) {
	if _, dup := archs[name]; dup {
		panic("model: architecture " + name + " registered twice")
	}
	archs[name] = a
}

// Architectures lists the architectures Load accepts, sorted.
func Architectures() []string {
	names := make([]string, 0, len(archs))
	for n := range archs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// configFrom reads the shared hyper-parameters (llama.cpp's keys, prefixed
// by the architecture) and then the architecture's own.
func configFrom(s source) (Config, error) {
	arch, ok := s.str("general.architecture")
	if !ok {
		return Config{}, errf(CodeBadMetadata, "general.architecture is missing; cannot tell which model this is")
	}
	a, ok := archs[arch]
	if !ok {
		return Config{}, errf(CodeUnsupportedArch, "architecture %q is not supported (supported: %s)", arch, strings.Join(Architectures(), ", "))
	}
	c := Config{Arch: arch, Rope: a.rope}
	var err error
	need := func(key string) int {
		v, ok := s.uint(arch + "." + key)
		if !ok && err == nil {
			err = errf(CodeBadMetadata, "metadata key %s.%s is missing", arch, key)
		}
		if v > 1<<40 && err == nil {
			err = errf(CodeBadMetadata, "metadata key %s.%s = %d is absurd", arch, key, v)
		}
		return int(min(v, 1<<40))
	}
	c.Embd = need("embedding_length")
	c.Layers = need("block_count")
	c.FF = need("feed_forward_length")
	c.Heads = need("attention.head_count")
	c.Context = need("context_length")
	if err != nil {
		return Config{}, err
	}
	c.KVHeads = c.Heads
	if v, ok := s.uint(arch + ".attention.head_count_kv"); ok {
		c.KVHeads = int(min(v, 1<<20))
	}
	if c.Heads > 0 {
		c.HeadDim = c.Embd / c.Heads
	}
	if v, ok := s.uint(arch + ".attention.key_length"); ok {
		c.HeadDim = int(min(v, 1<<20))
	}
	if v, ok := s.uint(arch + ".attention.value_length"); ok && int(v) != c.HeadDim {
		return Config{}, errf(CodeBadMetadata, "value_length %d differs from key_length %d; not supported", v, c.HeadDim)
	}
	c.RopeDim = c.HeadDim
	if v, ok := s.uint(arch + ".rope.dimension_count"); ok {
		c.RopeDim = int(min(v, 1<<20))
	}
	c.RopeBase = 10000 // llama.cpp's default when the key is absent
	if v, ok := s.float(arch + ".rope.freq_base"); ok {
		c.RopeBase = float32(v)
	}
	c.RopeScaling = 1
	typ, _ := s.str(arch + ".rope.scaling.type")
	factor, hasFactor := s.float(arch + ".rope.scaling.factor")
	switch {
	case typ == "" && !hasFactor, typ == "none":
	case typ == "linear" || typ == "" && hasFactor:
		// llama.cpp treats a factor without a type as linear.
		if !(factor > 0) {
			return Config{}, errf(CodeBadMetadata, "rope scaling factor %g must be positive", factor)
		}
		c.RopeScaling = float32(factor)
	default:
		return Config{}, errf(CodeBadMetadata, "rope scaling type %q is not supported (none, linear)", typ)
	}
	eps, ok := s.float(arch + ".attention.layer_norm_rms_epsilon")
	if !ok {
		return Config{}, errf(CodeBadMetadata, "metadata key %s.attention.layer_norm_rms_epsilon is missing", arch)
	}
	c.RMSEps = float32(eps)
	if a.config != nil {
		if err := a.config(s, &c); err != nil {
			return Config{}, err
		}
	}
	c.ModelName, _ = s.str("general.name")
	t, dims, _, ok := s.tensor("token_embd.weight")
	if !ok {
		return Config{}, errf(CodeMissingTensor, "tensor token_embd.weight is missing")
	}
	if len(dims) != 2 {
		return Config{}, errf(CodeBadShape, "token_embd.weight has %d dimensions, want 2", len(dims))
	}
	c.Vocab = int(min(dims[1], 1<<40))
	c.FileType = t.String()
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// build checks every tensor against cfg and assembles the model: the
// shared embedding, output norm and output projection, then the
// architecture's layers. Matrices alias the source's bytes; small vectors
// (norms, biases) are decoded.
func build(c Config, s source) (*Model, error) {
	a, ok := archs[c.Arch]
	if !ok {
		return nil, errf(CodeUnsupportedArch, "architecture %q is not supported (supported: %s)", c.Arch, strings.Join(Architectures(), ", "))
	}
	m := &Model{cfg: c, blocks: make([]block, c.Layers)}
	ld := &loader{s: s, c: c}
	m.tokEmbd = ld.mat("token_embd.weight", c.Vocab, c.Embd)
	m.outNorm = ld.vec("output_norm.weight", c.Embd)
	if ld.has("output.weight") {
		m.output = ld.mat("output.weight", c.Vocab, c.Embd)
	} else {
		m.output = m.tokEmbd
		m.cfg.TiedOutput = true
	}
	a.build(ld, m)
	if ld.err == nil && a.strict {
		ld.checkAllRead()
	}
	if ld.err != nil {
		return nil, ld.err
	}
	m.cfg.TensorBytes = ld.total
	return m, nil
}

// loader reads tensors by name, checking shape and type; the first error
// sticks and later calls return zero values, so a build function reads
// as a list of tensors.
type loader struct {
	s     source
	c     Config
	err   error
	total int64
	read  map[string]bool // tensors mat and vec returned
}

// tensorLister is a source that can list its tensors (a GGUF file).
type tensorLister interface {
	tensorNames() []string
}

// checkAllRead fails the load if the file has a tensor the build did not
// read, naming it.
func (ld *loader) checkAllRead() {
	l, ok := ld.s.(tensorLister)
	if !ok {
		return
	}
	for _, name := range l.tensorNames() {
		if !ld.read[name] {
			ld.fail(errf(CodeBadShape, "tensor %s is not used by %s as llama.cpp runs it (llama.cpp refuses the file too); refusing to run without it", name, ld.c.Arch))
			return
		}
	}
}

func (ld *loader) markRead(name string) {
	if ld.read == nil {
		ld.read = map[string]bool{}
	}
	ld.read[name] = true
}

func (ld *loader) fail(err error) {
	if ld.err == nil {
		ld.err = err
	}
}

func (ld *loader) has(name string) bool {
	_, _, _, ok := ld.s.tensor(name)
	return ok
}

// mat is the rows x cols matrix name (GGUF dims [cols, rows]).
func (ld *loader) mat(name string, rows, cols int) kernels.Matrix {
	if ld.err != nil {
		return kernels.Matrix{}
	}
	w, err := matrixOf(ld.s, name, rows, cols)
	ld.fail(err)
	ld.markRead(name)
	ld.total += int64(len(w.Data))
	return w
}

// vec is the n-vector name, decoded to float32.
func (ld *loader) vec(name string, n int) []float32 {
	if ld.err != nil {
		return nil
	}
	v, err := vectorOf(ld.s, name, n)
	ld.fail(err)
	ld.markRead(name)
	ld.total += int64(n * 4)
	return v
}

// refuse fails the load if the file has tensor name, which the
// architecture does not use in llama.cpp either: a file that carries it
// expects an effect sluice would silently skip.
func (ld *loader) refuse(name, why string) {
	if ld.has(name) {
		ld.fail(errf(CodeBadShape, "tensor %s is present, but %s; refusing to run the file without it", name, why))
	}
}

// attention loads blk.N.attn_{q,k,v,output}.weight and, as asked, their
// biases and the per-head Q/K norms.
func (ld *loader) attention(p string, bias, qkNorm bool) attention {
	c := ld.c
	E, Q, KD := c.Embd, c.QDim(), c.KVDim()
	at := attention{
		wq: ld.mat(p+"attn_q.weight", Q, E),
		wk: ld.mat(p+"attn_k.weight", KD, E),
		wv: ld.mat(p+"attn_v.weight", KD, E),
		wo: ld.mat(p+"attn_output.weight", E, Q),
	}
	if bias {
		at.bq = ld.vec(p+"attn_q.bias", Q)
		at.bk = ld.vec(p+"attn_k.bias", KD)
		at.bv = ld.vec(p+"attn_v.bias", KD)
	}
	if qkNorm {
		at.qNorm = ld.vec(p+"attn_q_norm.weight", c.HeadDim)
		at.kNorm = ld.vec(p+"attn_k_norm.weight", c.HeadDim)
	}
	return at
}

// denseFFN loads blk.N.ffn_{gate,up,down}.weight.
func (ld *loader) denseFFN(p string, act activation) *denseFFN {
	c := ld.c
	return &denseFFN{
		gate: ld.mat(p+"ffn_gate.weight", c.FF, c.Embd),
		up:   ld.mat(p+"ffn_up.weight", c.FF, c.Embd),
		down: ld.mat(p+"ffn_down.weight", c.Embd, c.FF),
		act:  act,
	}
}

// rope is the RoPE variant of base and linear factor scaling over the
// config's rotated dimensions.
func (ld *loader) rope(base, scaling float32) ropeParams {
	return ropeParams{scale: ropeScale(base, ld.c.RopeDim), freqScale: 1 / scaling}
}

// ropeFreqs reads rope_freqs.weight (Llama 3.1's per-pair frequency
// divisors) if the file has it.
func (ld *loader) ropeFreqs() []float32 {
	if ld.err != nil || !ld.has("rope_freqs.weight") {
		return nil
	}
	f, err := vectorOf(ld.s, "rope_freqs.weight", ld.c.RopeDim/2)
	if err != nil {
		ld.fail(err)
		return nil
	}
	for i, x := range f {
		if !(x > 0) || math.IsInf(float64(x), 0) {
			ld.fail(errf(CodeBadShape, "rope_freqs.weight[%d] = %g; frequency factors must be positive and finite", i, x))
			return nil
		}
	}
	return f
}

// defaultAttnScale is 1/sqrt(head_dim), the softmax scale of llama.cpp's
// llama, qwen2 and qwen3 graphs.
func defaultAttnScale(c Config) float32 {
	return float32(1 / math.Sqrt(float64(c.HeadDim)))
}

func layerPrefix(i int) string { return fmt.Sprintf("blk.%d.", i) }

// refuseKey fails if the file sets metadata key (any type): the
// architecture's graph in llama.cpp would apply it and sluice does not.
func refuseKey(s source, key, why string) error {
	_, isStr := s.str(key)
	_, isUint := s.uint(key)
	_, isFloat := s.float(key)
	if isStr || isUint || isFloat {
		return errf(CodeBadMetadata, "metadata key %s is set, but %s; refusing to run the file approximately", key, why)
	}
	return nil
}
