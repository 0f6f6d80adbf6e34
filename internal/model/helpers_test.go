package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"sluice/internal/quant"
)

// memTensor / memSource: an in-memory model file for tests.
type memTensor struct {
	t    quant.Type
	dims []uint64
	data []byte
	f32  []float32 // the values before encoding (reference forward uses them)
}

type memSource struct {
	meta    map[string]any
	tensors map[string]*memTensor
}

func (s *memSource) str(k string) (string, bool) { v, ok := s.meta[k].(string); return v, ok }
func (s *memSource) uint(k string) (uint64, bool) {
	v, ok := s.meta[k].(int)
	return uint64(v), ok
}
func (s *memSource) float(k string) (float64, bool) { v, ok := s.meta[k].(float64); return v, ok }
func (s *memSource) boolean(k string) (bool, bool)  { v, ok := s.meta[k].(bool); return v, ok }
func (s *memSource) tensor(name string) (quant.Type, []uint64, []byte, bool) {
	t, ok := s.tensors[name]
	if !ok {
		return 0, nil, nil, false
	}
	return t.t, t.dims, t.data, true
}

type testShape struct {
	arch                                    string
	vocab, embd, layers, heads, kvHeads, ff int
	tied                                    bool
	wtype                                   quant.Type
	base                                    float64
	ropeScaling                             float64 // linear factor; 0: none
	ropeFreqs                               bool    // add rope_freqs.weight
}

// newMemModel builds a model with seeded random weights. Weights of wtype
// F32 are exact; others are encoded and their decoded values kept for the
// reference.
func newMemModel(sh testShape, seed uint64) *memSource {
	rng := rand.New(rand.NewPCG(seed, 99))
	s := &memSource{meta: map[string]any{}, tensors: map[string]*memTensor{}}
	a := sh.arch
	s.meta["general.architecture"] = a
	s.meta[a+".embedding_length"] = sh.embd
	s.meta[a+".block_count"] = sh.layers
	s.meta[a+".feed_forward_length"] = sh.ff
	s.meta[a+".attention.head_count"] = sh.heads
	s.meta[a+".attention.head_count_kv"] = sh.kvHeads
	s.meta[a+".context_length"] = 256
	s.meta[a+".attention.layer_norm_rms_epsilon"] = 1e-5
	if sh.base != 0 {
		s.meta[a+".rope.freq_base"] = sh.base
	}
	if sh.ropeScaling != 0 {
		s.meta[a+".rope.scaling.type"] = "linear"
		s.meta[a+".rope.scaling.factor"] = sh.ropeScaling
	}
	add := func(name string, typ quant.Type, scale float32, dims ...int) {
		n := 1
		ud := make([]uint64, len(dims))
		for i, d := range dims {
			n *= d
			ud[i] = uint64(d)
		}
		v := make([]float32, n)
		if len(dims) == 2 && name != "token_embd.weight" && name != "output.weight" {
			// Spread 1.5/sqrt(fan_in) keeps activations O(1) through the
			// layers, so rounding errors stay proportionate.
			scale *= 1.5 / float32(math.Sqrt(float64(dims[0])))
		}
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * scale
		}
		if len(dims) == 1 && scale == 0 {
			for i := range v {
				v[i] = 1 + 0.1*float32(rng.NormFloat64())
			}
		}
		var data []byte
		switch typ {
		case quant.F32:
			data = make([]byte, 4*n)
			for i, x := range v {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(x))
			}
		default:
			rb, err := typ.RowBytes(dims[0])
			if err != nil {
				panic(err)
			}
			data = make([]byte, rb*(n/dims[0]))
			if err := quant.Quantize(typ, v, data); err != nil {
				panic(err)
			}
			if err := quant.Dequantize(typ, data, v); err != nil {
				panic(err)
			}
		}
		s.tensors[name] = &memTensor{t: typ, dims: ud, data: data, f32: v}
	}
	hd := sh.embd / sh.heads
	Q, KD := sh.heads*hd, sh.kvHeads*hd
	if sh.ropeFreqs {
		ff := make([]float32, hd/2)
		data := make([]byte, 4*len(ff))
		for i := range ff {
			ff[i] = 1 + float32(i)*0.7 // Llama-3.1-like: low frequencies slowed
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(ff[i]))
		}
		s.tensors["rope_freqs.weight"] = &memTensor{t: quant.F32, dims: []uint64{uint64(len(ff))}, data: data, f32: ff}
	}
	add("token_embd.weight", sh.wtype, 1, sh.embd, sh.vocab)
	add("output_norm.weight", quant.F32, 0, sh.embd)
	if !sh.tied {
		add("output.weight", sh.wtype, 0.3, sh.embd, sh.vocab)
	}
	for l := 0; l < sh.layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", quant.F32, 0, sh.embd)
		add(p+"attn_q.weight", sh.wtype, 0.4, sh.embd, Q)
		add(p+"attn_k.weight", sh.wtype, 0.4, sh.embd, KD)
		add(p+"attn_v.weight", sh.wtype, 0.4, sh.embd, KD)
		add(p+"attn_output.weight", sh.wtype, 0.3, Q, sh.embd)
		if a == "qwen2" {
			add(p+"attn_q.bias", quant.F32, 0.5, Q)
			add(p+"attn_k.bias", quant.F32, 0.5, KD)
			add(p+"attn_v.bias", quant.F32, 0.5, KD)
		}
		add(p+"ffn_norm.weight", quant.F32, 0, sh.embd)
		add(p+"ffn_gate.weight", sh.wtype, 0.3, sh.embd, sh.ff)
		add(p+"ffn_up.weight", sh.wtype, 0.3, sh.embd, sh.ff)
		add(p+"ffn_down.weight", sh.wtype, 0.3, sh.ff, sh.embd)
	}
	return s
}

func mustBuild(s source) *Model {
	c, err := configFrom(s)
	if err != nil {
		panic(err)
	}
	m, err := build(c, s)
	if err != nil {
		panic(err)
	}
	return m
}

var errInjected = errors.New("injected KV failure")

// memKV is a test KV view: pages as plain slices, with the contract's
// checks (in-order writes, only written slots returned) and fault hooks.
type memKV struct {
	ps, layers, kvd int
	k, v            [][]float32 // per layer, position-major
	failPut         func(layer, pos int) bool
	failBlock       func(layer, blk int) bool
	// shortBlock makes Block report one fewer written slot than it has.
	shortBlock bool
	// f16 stores rows as binary16 (quant.FP32ToFP16, the scalar
	// statement of ggml's rounding) and serves them through Block16, as
	// an F16 kv pool does.
	f16      bool
	k16, v16 [][]uint16
	// q8 stores rows as Q8_0 blocks (quant.QuantizeRowQ8_0, as llama.cpp
	// writes a q8_0 cache) and serves them through BlockQ8, as a Q8_0 kv
	// pool does.
	q8     bool
	k8, v8 [][]byte
}

// newMemKVQ8 is newMemKV with Q8_0 pages (kvd a multiple of 32).
func newMemKVQ8(ps, layers, kvd int) *memKV {
	m := newMemKV(ps, layers, kvd)
	m.q8, m.k8, m.v8 = true, make([][]byte, layers), make([][]byte, layers)
	return m
}

func (m *memKV) Q8() bool { return m.q8 }

func (m *memKV) BlockQ8(layer, blk int) ([]byte, []byte, int, error) {
	if !m.q8 {
		return nil, nil, 0, errors.New("memKV: q8_0 read of other rows")
	}
	k, v, n, err := m.block(layer, blk)
	if err != nil || n == 0 {
		return nil, nil, n, err
	}
	rb := m.kvd / 32 * 34
	k, v = k/m.kvd*rb, v/m.kvd*rb
	return m.k8[layer][k : k+n*rb], m.v8[layer][v : v+n*rb], n, nil
}

// newMemKV16 is newMemKV with F16 pages.
func newMemKV16(ps, layers, kvd int) *memKV {
	m := newMemKV(ps, layers, kvd)
	m.f16, m.k16, m.v16 = true, make([][]uint16, layers), make([][]uint16, layers)
	return m
}

func (m *memKV) F16() bool { return m.f16 }

func (m *memKV) Block16(layer, blk int) ([]uint16, []uint16, int, error) {
	if !m.f16 {
		return nil, nil, 0, errors.New("memKV: binary16 read of F32 rows")
	}
	k, v, n, err := m.block(layer, blk)
	if err != nil || n == 0 {
		return nil, nil, n, err
	}
	return m.k16[layer][k : k+n*m.kvd], m.v16[layer][v : v+n*m.kvd], n, nil
}

func newMemKV(ps, layers, kvd int) *memKV {
	return &memKV{ps: ps, layers: layers, kvd: kvd, k: make([][]float32, layers), v: make([][]float32, layers)}
}

func (m *memKV) PageSize() int { return m.ps }

func (m *memKV) Put(layer, pos int, k, v []float32) error {
	if m.failPut != nil && m.failPut(layer, pos) {
		return errInjected
	}
	if len(k) != m.kvd || len(v) != m.kvd {
		return fmt.Errorf("memKV: row of %d/%d floats, want %d", len(k), len(v), m.kvd)
	}
	if pos != len(m.k[layer])/m.kvd {
		return fmt.Errorf("memKV: layer %d write at %d, next is %d", layer, pos, len(m.k[layer])/m.kvd)
	}
	m.k[layer] = append(m.k[layer], k...)
	m.v[layer] = append(m.v[layer], v...)
	if m.f16 {
		for i := range k {
			m.k16[layer] = append(m.k16[layer], quant.FP32ToFP16(k[i]))
			m.v16[layer] = append(m.v16[layer], quant.FP32ToFP16(v[i]))
		}
	}
	if m.q8 {
		rb := m.kvd / 32 * 34
		n := len(m.k8[layer])
		m.k8[layer] = append(m.k8[layer], make([]byte, rb)...)
		m.v8[layer] = append(m.v8[layer], make([]byte, rb)...)
		quant.QuantizeRowQ8_0(k, m.k8[layer][n:])
		quant.QuantizeRowQ8_0(v, m.v8[layer][n:])
	}
	return nil
}

func (m *memKV) Block(layer, blk int) ([]float32, []float32, int, error) {
	if m.f16 || m.q8 {
		return nil, nil, 0, errors.New("memKV: float32 read of F16 rows")
	}
	k, v, n, err := m.block(layer, blk)
	if err != nil || n == 0 {
		return nil, nil, n, err
	}
	return m.k[layer][k : k+n*m.kvd], m.v[layer][v : v+n*m.kvd], n, nil
}

// block is the contract's part of Block: fault hooks, written slots only.
// It returns the element offsets of the block's K and V rows.
func (m *memKV) block(layer, blk int) (int, int, int, error) {
	if m.failBlock != nil && m.failBlock(layer, blk) {
		return 0, 0, 0, errInjected
	}
	written := len(m.k[layer]) / m.kvd
	lo := blk * m.ps
	hi := min(written, lo+m.ps)
	if lo >= hi {
		return 0, 0, 0, nil
	}
	n := hi - lo
	if m.shortBlock {
		n--
	}
	return lo * m.kvd, lo * m.kvd, n, nil
}

// refForward is an independent float64 statement of the llama/qwen2
// equations over the whole token sequence at once (no KV cache, no
// batching), from the decoded weights. It returns the logits of every
// position.
func refForward(s *memSource, sh testShape, toks []int32) [][]float64 {
	hd := sh.embd / sh.heads
	ropeDim := hd
	base := sh.base
	if base == 0 {
		base = 10000
	}
	get := func(n string) []float32 { return s.tensors[n].f32 }
	matvec := func(w []float32, rows, cols int, x []float64) []float64 {
		y := make([]float64, rows)
		for r := 0; r < rows; r++ {
			var acc float64
			for c := 0; c < cols; c++ {
				acc += float64(w[r*cols+c]) * x[c]
			}
			y[r] = acc
		}
		return y
	}
	norm := func(x []float64, w []float32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		sc := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * sc * float64(w[i])
		}
		return y
	}
	rope := func(x []float64, nh, pos int) {
		for h := 0; h < nh; h++ {
			for i := 0; i < ropeDim/2; i++ {
				th := float64(pos) * math.Pow(base, -2*float64(i)/float64(ropeDim))
				if sh.ropeScaling != 0 {
					th /= sh.ropeScaling
				}
				if sh.ropeFreqs {
					th /= float64(s.tensors["rope_freqs.weight"].f32[i])
				}
				a, b := h*hd+2*i, h*hd+2*i+1
				if sh.arch == "qwen2" {
					a, b = h*hd+i, h*hd+i+ropeDim/2
				}
				x0, x1 := x[a], x[b]
				x[a] = x0*math.Cos(th) - x1*math.Sin(th)
				x[b] = x0*math.Sin(th) + x1*math.Cos(th)
			}
		}
	}
	n := len(toks)
	Q, KD := sh.heads*hd, sh.kvHeads*hd
	xs := make([][]float64, n)
	emb := get("token_embd.weight")
	for i, t := range toks {
		xs[i] = make([]float64, sh.embd)
		for j := range xs[i] {
			xs[i][j] = float64(emb[int(t)*sh.embd+j])
		}
	}
	for l := 0; l < sh.layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		qs, ks, vs := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for i := range xs {
			xn := norm(xs[i], get(p+"attn_norm.weight"))
			qs[i] = matvec(get(p+"attn_q.weight"), Q, sh.embd, xn)
			ks[i] = matvec(get(p+"attn_k.weight"), KD, sh.embd, xn)
			vs[i] = matvec(get(p+"attn_v.weight"), KD, sh.embd, xn)
			if sh.arch == "qwen2" {
				for j := range qs[i] {
					qs[i][j] += float64(get(p + "attn_q.bias")[j])
				}
				for j := range ks[i] {
					ks[i][j] += float64(get(p + "attn_k.bias")[j])
					vs[i][j] += float64(get(p + "attn_v.bias")[j])
				}
			}
			rope(qs[i], sh.heads, i)
			rope(ks[i], sh.kvHeads, i)
		}
		for i := range xs {
			att := make([]float64, Q)
			for h := 0; h < sh.heads; h++ {
				kh := h / (sh.heads / sh.kvHeads)
				sc := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var d float64
					for e := 0; e < hd; e++ {
						d += qs[i][h*hd+e] * ks[j][kh*hd+e]
					}
					sc[j] = d / math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[j])
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					z += sc[j]
				}
				for j := range sc {
					for e := 0; e < hd; e++ {
						att[h*hd+e] += sc[j] / z * vs[j][kh*hd+e]
					}
				}
			}
			o := matvec(get(p+"attn_output.weight"), sh.embd, Q, att)
			for j := range o {
				xs[i][j] += o[j]
			}
			xn := norm(xs[i], get(p+"ffn_norm.weight"))
			g := matvec(get(p+"ffn_gate.weight"), sh.ff, sh.embd, xn)
			u := matvec(get(p+"ffn_up.weight"), sh.ff, sh.embd, xn)
			for j := range g {
				g[j] = g[j] / (1 + math.Exp(-g[j])) * u[j]
			}
			d := matvec(get(p+"ffn_down.weight"), sh.embd, sh.ff, g)
			for j := range d {
				xs[i][j] += d[j]
			}
		}
	}
	out := "output.weight"
	if sh.tied {
		out = "token_embd.weight"
	}
	logits := make([][]float64, n)
	for i := range xs {
		logits[i] = matvec(get(out), sh.vocab, sh.embd, norm(xs[i], get("output_norm.weight")))
	}
	return logits
}
