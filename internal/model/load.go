package model

import (
	"fmt"
	"math"
	"sluice/internal/kernels"

	"sluice/internal/quant"
)

// source is what building a model needs from a file: metadata by key and
// tensors by name. The GGUF adapter implements it; tests build models from
// plain slices through the same path, so shape and type checks are shared.
type source interface {
	str(key string) (string, bool)
	uint(key string) (uint64, bool)
	float(key string) (float64, bool)
	// tensor returns a tensor's type, dims (dims[0] = row length) and bytes.
	tensor(name string) (t quant.Type, dims []uint64, data []byte, ok bool)
}

// Architectures this package runs, and what differs between them.
var archs = map[string]struct {
	rope    RopeType
	qkvBias bool
}{
	// llama.cpp decides the rope type by architecture, not by metadata.
	"llama": {RopeNorm, false},
	"qwen2": {RopeNeox, true},
}

func configFrom(s source) (Config, error) {
	arch, ok := s.str("general.architecture")
	if !ok {
		return Config{}, errf(CodeBadMetadata, "general.architecture is missing; cannot tell which model this is")
	}
	a, ok := archs[arch]
	if !ok {
		return Config{}, errf(CodeUnsupportedArch, "architecture %q is not supported (supported: llama, qwen2)", arch)
	}
	c := Config{Arch: arch, Rope: a.rope, QKVBias: a.qkvBias}
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

// build checks every tensor against cfg and assembles the model. Matrices
// alias the source's bytes; small vectors (norms, biases) are decoded.
func build(c Config, s source) (*Model, error) {
	m := &Model{cfg: c, layers: make([]layer, c.Layers)}
	var err error
	var total int64
	mat := func(name string, rows, cols int) kernels.Matrix {
		if err != nil {
			return kernels.Matrix{}
		}
		var w kernels.Matrix
		w, err = matrixOf(s, name, rows, cols)
		total += int64(len(w.Data))
		return w
	}
	vec := func(name string, n int) []float32 {
		if err != nil {
			return nil
		}
		var v []float32
		v, err = vectorOf(s, name, n)
		total += int64(n * 4)
		return v
	}
	E, Q, KD := c.Embd, c.QDim(), c.KVDim()
	m.tokEmbd = mat("token_embd.weight", c.Vocab, E)
	m.outNorm = vec("output_norm.weight", E)
	if _, _, _, ok := s.tensor("output.weight"); ok {
		m.output = mat("output.weight", c.Vocab, E)
	} else {
		m.output = m.tokEmbd
		m.cfg.TiedOutput = true
	}
	for i := range m.layers {
		p := fmt.Sprintf("blk.%d.", i)
		ly := &m.layers[i]
		ly.attnNorm = vec(p+"attn_norm.weight", E)
		ly.wq = mat(p+"attn_q.weight", Q, E)
		ly.wk = mat(p+"attn_k.weight", KD, E)
		ly.wv = mat(p+"attn_v.weight", KD, E)
		ly.wo = mat(p+"attn_output.weight", E, Q)
		if c.QKVBias {
			ly.bq = vec(p+"attn_q.bias", Q)
			ly.bk = vec(p+"attn_k.bias", KD)
			ly.bv = vec(p+"attn_v.bias", KD)
		}
		ly.ffnNorm = vec(p+"ffn_norm.weight", E)
		ly.gate = mat(p+"ffn_gate.weight", c.FF, E)
		ly.up = mat(p+"ffn_up.weight", c.FF, E)
		ly.down = mat(p+"ffn_down.weight", E, c.FF)
	}
	if err != nil {
		return nil, err
	}
	m.cfg.TensorBytes = total
	m.ropeScale = ropeScale(c.RopeBase, c.RopeDim)
	m.ropeFreqScale = 1 / c.RopeScaling
	if _, _, _, ok := s.tensor("rope_freqs.weight"); ok {
		if m.ropeFreqs, err = vectorOf(s, "rope_freqs.weight", c.RopeDim/2); err != nil {
			return nil, err
		}
		for i, f := range m.ropeFreqs {
			if !(f > 0) || math.IsInf(float64(f), 0) {
				return nil, errf(CodeBadShape, "rope_freqs.weight[%d] = %g; frequency factors must be positive and finite", i, f)
			}
		}
	}
	m.attnScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	return m, nil
}

func ropeScale(base float32, dims int) float32 {
	return float32(math.Pow(float64(base), -2/float64(dims)))
}

func matrixOf(s source, name string, rows, cols int) (kernels.Matrix, error) {
	t, dims, data, ok := s.tensor(name)
	if !ok {
		return kernels.Matrix{}, errf(CodeMissingTensor, "tensor %s is missing", name)
	}
	if len(dims) != 2 || dims[0] != uint64(cols) || dims[1] != uint64(rows) {
		return kernels.Matrix{}, errf(CodeBadShape, "tensor %s has shape %v, want [%d %d]", name, dims, cols, rows)
	}
	if !kernels.Supported(t) {
		return kernels.Matrix{}, errf(CodeUnsupportedType, "tensor %s has type %s, which the matmul kernels do not support", name, t)
	}
	rb, err := t.RowBytes(cols)
	if err != nil {
		return kernels.Matrix{}, errf(CodeBadShape, "tensor %s: %v", name, err)
	}
	if len(data) != rb*rows {
		return kernels.Matrix{}, errf(CodeBadShape, "tensor %s holds %d bytes, its shape and type need %d", name, len(data), rb*rows)
	}
	return kernels.Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

func vectorOf(s source, name string, n int) ([]float32, error) {
	t, dims, data, ok := s.tensor(name)
	if !ok {
		return nil, errf(CodeMissingTensor, "tensor %s is missing", name)
	}
	if len(dims) != 1 || dims[0] != uint64(n) {
		return nil, errf(CodeBadShape, "tensor %s has shape %v, want [%d]", name, dims, n)
	}
	if !t.Supported() {
		return nil, errf(CodeUnsupportedType, "tensor %s has type %s, which cannot be decoded", name, t)
	}
	v := make([]float32, n)
	if err := quant.Dequantize(t, data, v); err != nil {
		return nil, errf(CodeBadShape, "tensor %s: %v", name, err)
	}
	return v, nil
}
