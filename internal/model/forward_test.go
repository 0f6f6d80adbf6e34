package model

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sluice/internal/kernels"
	"testing"

	"sluice/internal/quant"
)

var shapes = map[string]testShape{
	// GQA with 2 query heads per KV head, untied output.
	"llama-gqa": {arch: "llama", vocab: 96, embd: 64, layers: 3, heads: 4, kvHeads: 2, ff: 96, wtype: quant.F32},
	// qwen2: biases, NEOX rope, tied output, large rope base.
	"qwen2-tied": {arch: "qwen2", vocab: 80, embd: 32, layers: 2, heads: 4, kvHeads: 1, ff: 64, tied: true, wtype: quant.F32, base: 1e6},
	// Quantized weights: exercises activation quantization paths.
	"llama-q8_0": {arch: "llama", vocab: 64, embd: 64, layers: 2, heads: 2, kvHeads: 2, ff: 96, wtype: quant.Q8_0},
	// RoPE variants: linear scaling, per-pair frequency factors.
	"llama-rope-scaled": {arch: "llama", vocab: 40, embd: 32, layers: 2, heads: 2, kvHeads: 1, ff: 32, wtype: quant.F32, ropeScaling: 4, ropeFreqs: true, base: 500000},
	// The other kernel paths (F16/BF16-rounded, Q8_0 and Q8_K activations).
	"qwen2-f16":  {arch: "qwen2", vocab: 48, embd: 64, layers: 1, heads: 4, kvHeads: 2, ff: 64, tied: true, wtype: quant.F16, base: 1e6},
	"llama-bf16": {arch: "llama", vocab: 48, embd: 64, layers: 1, heads: 2, kvHeads: 1, ff: 64, wtype: quant.BF16},
	"llama-q4_0": {arch: "llama", vocab: 48, embd: 64, layers: 1, heads: 2, kvHeads: 2, ff: 64, wtype: quant.Q4_0},
	"llama-q4_k": {arch: "llama", vocab: 32, embd: 256, layers: 1, heads: 4, kvHeads: 2, ff: 256, wtype: quant.Q4_K},
	"llama-q6_k": {arch: "llama", vocab: 32, embd: 256, layers: 1, heads: 2, kvHeads: 1, ff: 512, wtype: quant.Q6_K},
}

func randTokens(rng *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(rng.IntN(vocab))
	}
	return t
}

// TestForwardMatchesReference compares every position's logits with the
// float64 reference implementation of the equations. F32 weights must agree
// to float rounding; other types round the activations too (as ggml does),
// so they get a bound relative to the logits' scale that still catches a
// wrong kernel or layout (those are off by the whole scale).
func TestForwardMatchesReference(t *testing.T) {
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			src := newMemModel(sh, 1)
			m := mustBuild(src)
			toks := randTokens(rand.New(rand.NewPCG(2, 2)), 37, sh.vocab)
			kv := newMemKV(16, sh.layers, m.cfg.KVDim())
			res := m.NewRunner(kernels.NewParallel(2)).Forward([]Seq{{Tokens: toks, KV: kv, AllLogits: true}})
			if res[0].Err != nil {
				t.Fatal(res[0].Err)
			}
			ref := refForward(src, sh, toks)
			worst, scale := 0.0, 0.0
			for p := range toks {
				for v := 0; v < sh.vocab; v++ {
					worst = max(worst, math.Abs(float64(res[0].Logits[p*sh.vocab+v])-ref[p][v]))
					scale = max(scale, math.Abs(ref[p][v]))
				}
			}
			bound := 2e-4
			if sh.wtype != quant.F32 {
				bound = 0.025 * scale
			}
			t.Logf("max |logit - reference| = %.3g (logit scale %.3g)", worst, scale)
			if worst > bound {
				t.Fatalf("max |logit - reference| = %g, want <= %g", worst, bound)
			}
		})
	}
}

// runChunks prefills toks in chunks of the given sizes (cycled), each
// chunk in its own step together with the companions' steps, and returns
// the logits of every position and the KV written.
func runChunks(m *Model, threads int, toks []int32, chunk []int, companions [][]int32, newKV func(ps, layers, kvd int) *memKV) ([]float32, *memKV) {
	r := m.NewRunner(kernels.NewParallel(threads))
	kv := newKV(4, m.cfg.Layers, m.cfg.KVDim())
	compKV := make([]*memKV, len(companions))
	compPos := make([]int, len(companions))
	for i := range compKV {
		compKV[i] = newKV(8, m.cfg.Layers, m.cfg.KVDim())
	}
	var logits []float32
	for pos, ci := 0, 0; pos < len(toks); ci++ {
		n := min(chunk[ci%len(chunk)], len(toks)-pos)
		seqs := []Seq{}
		// Companions go before and after ours, with a few tokens each step.
		for i, c := range companions {
			if compPos[i] < len(c) && i%2 == 0 {
				k := min(1+i, len(c)-compPos[i])
				seqs = append(seqs, Seq{Tokens: c[compPos[i] : compPos[i]+k], Pos: compPos[i], KV: compKV[i]})
				compPos[i] += k
			}
		}
		mine := len(seqs)
		seqs = append(seqs, Seq{Tokens: toks[pos : pos+n], Pos: pos, KV: kv, AllLogits: true})
		for i, c := range companions {
			if compPos[i] < len(c) && i%2 == 1 {
				k := min(3, len(c)-compPos[i])
				seqs = append(seqs, Seq{Tokens: c[compPos[i] : compPos[i]+k], Pos: compPos[i], KV: compKV[i]})
				compPos[i] += k
			}
		}
		res := r.Forward(seqs)
		for i, rs := range res {
			if rs.Err != nil {
				panic(rs.Err)
			}
			_ = i
		}
		logits = append(logits, res[mine].Logits...)
		pos += n
	}
	return logits, kv
}

// TestBatchInvariance: a token's K/V and logits are bitwise identical
// whether its prompt is prefilled in one chunk or several, alone or beside
// other sequences, with 1 or 2 threads (DESIGN.md, batch invariance), on
// F32 and on F16 pages.
func TestBatchInvariance(t *testing.T) {
	for name, sh := range shapes {
		for _, kt := range kvTypes {
			t.Run(name+"/"+kt.name, func(t *testing.T) {
				m := mustBuild(newMemModel(sh, 3))
				rng := rand.New(rand.NewPCG(4, 4))
				toks := randTokens(rng, 29, sh.vocab)
				comps := [][]int32{randTokens(rng, 40, sh.vocab), randTokens(rng, 9, sh.vocab), randTokens(rng, 33, sh.vocab)}
				base, baseKV := runChunks(m, 1, toks, []int{len(toks)}, nil, kt.new)
				variants := []struct {
					name    string
					threads int
					chunk   []int
					comps   [][]int32
				}{
					{"one chunk, 2 threads", 2, []int{len(toks)}, nil},
					{"chunks of 1", 1, []int{1}, nil},
					{"chunks of 3", 2, []int{3}, nil},
					{"chunks of 7", 1, []int{7}, nil},
					{"mixed chunks with companions", 2, []int{5, 1, 11, 2}, comps},
					{"chunks of 1 with companions", 1, []int{1}, comps},
				}
				for _, v := range variants {
					got, kv := runChunks(m, v.threads, toks, v.chunk, v.comps, kt.new)
					if !bitsEqual(got, base) {
						t.Errorf("%s: logits differ from the single-chunk prefill (first at %d)", v.name, firstDiff(got, base))
					}
					if !sameKV(kv, baseKV) {
						t.Errorf("%s: K/V differ from the single-chunk prefill", v.name)
					}
				}
			})
		}
	}
}

// sameKV reports whether two test views hold bitwise the same rows.
func sameKV(a, b *memKV) bool {
	for l := range a.k {
		if !bitsEqual(a.k[l], b.k[l]) || !bitsEqual(a.v[l], b.v[l]) {
			return false
		}
		if a.f16 && (!slices.Equal(a.k16[l], b.k16[l]) || !slices.Equal(a.v16[l], b.v16[l])) {
			return false
		}
		if a.q8 && (!slices.Equal(a.k8[l], b.k8[l]) || !slices.Equal(a.v8[l], b.v8[l])) {
			return false
		}
	}
	return true
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

func firstDiff(a, b []float32) int {
	for i := range min(len(a), len(b)) {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestKVFailureStopsOnlyThatSequence: a view error fails its own sequence
// with the cause attached (never zeros substituted), and the other
// sequences of the same step get exactly the logits they get alone.
func TestKVFailureStopsOnlyThatSequence(t *testing.T) {
	sh := shapes["llama-gqa"]
	m := mustBuild(newMemModel(sh, 5))
	rng := rand.New(rand.NewPCG(6, 6))
	a, b := randTokens(rng, 12, sh.vocab), randTokens(rng, 7, sh.vocab)
	solo := m.NewRunner(nil).Forward([]Seq{{Tokens: b, KV: newMemKV(4, sh.layers, m.cfg.KVDim())}})[0].Logits

	cases := map[string]func(*memKV){
		"put fails":   func(k *memKV) { k.failPut = func(l, p int) bool { return l == 1 && p == 9 } },
		"block fails": func(k *memKV) { k.failBlock = func(l, b int) bool { return l == 2 && b == 1 } },
	}
	for name, inject := range cases {
		t.Run(name, func(t *testing.T) {
			bad := newMemKV(4, sh.layers, m.cfg.KVDim())
			inject(bad)
			res := m.NewRunner(kernels.NewParallel(2)).Forward([]Seq{
				{Tokens: a, KV: bad},
				{Tokens: b, KV: newMemKV(4, sh.layers, m.cfg.KVDim())},
			})
			if res[0].Err == nil || res[0].Logits != nil {
				t.Fatalf("failing view: err %v, logits %d floats; want an error and no logits", res[0].Err, len(res[0].Logits))
			}
			var me *Error
			if !errors.As(res[0].Err, &me) || me.Code != CodeKV || !errors.Is(res[0].Err, errInjected) {
				t.Fatalf("error %v does not carry code %s and the view's cause", res[0].Err, CodeKV)
			}
			if res[1].Err != nil || !bitsEqual(res[1].Logits, solo) {
				t.Fatalf("the healthy sequence changed: err %v", res[1].Err)
			}
		})
	}
}

// TestShortBlockIsAnError: a view that serves fewer written positions than
// the step needs (I4 seen from the reader's side) fails the sequence rather
// than attending over a shorter context.
func TestShortBlockIsAnError(t *testing.T) {
	sh := shapes["qwen2-tied"]
	m := mustBuild(newMemModel(sh, 7))
	kv := newMemKV(4, sh.layers, m.cfg.KVDim())
	kv.shortBlock = true
	res := m.NewRunner(nil).Forward([]Seq{{Tokens: []int32{1, 2, 3, 4, 5, 6}, KV: kv}})
	if !errors.Is(res[0].Err, errBlockShort) {
		t.Fatalf("err = %v, want errBlockShort", res[0].Err)
	}
	// A sequence that claims Pos 5 while nothing was written before it.
	res = m.NewRunner(nil).Forward([]Seq{{Tokens: []int32{1}, Pos: 5, KV: newMemKV(4, sh.layers, m.cfg.KVDim())}})
	if res[0].Err == nil {
		t.Fatal("a step over unwritten earlier positions succeeded")
	}
}

func TestBadInputsFailOnlyThemselves(t *testing.T) {
	sh := shapes["llama-gqa"]
	m := mustBuild(newMemModel(sh, 8))
	kvd := m.cfg.KVDim()
	good := []int32{3, 4, 5}
	solo := m.NewRunner(nil).Forward([]Seq{{Tokens: good, KV: newMemKV(4, sh.layers, kvd)}})[0].Logits
	res := m.NewRunner(nil).Forward([]Seq{
		{Tokens: []int32{1, int32(sh.vocab)}, KV: newMemKV(4, sh.layers, kvd)},
		{Tokens: []int32{-1}, KV: newMemKV(4, sh.layers, kvd)},
		{Tokens: nil, KV: newMemKV(4, sh.layers, kvd)},
		{Tokens: []int32{1}, Pos: 256, KV: newMemKV(4, sh.layers, kvd)},
		{Tokens: []int32{1}, Pos: -1, KV: newMemKV(4, sh.layers, kvd)},
		{Tokens: []int32{1}},
		{Tokens: good, KV: newMemKV(4, sh.layers, kvd)},
	})
	want := []Code{CodeBadToken, CodeBadToken, CodeBadToken, CodeBadPosition, CodeBadPosition, CodeKV}
	for i, c := range want {
		var me *Error
		if !errors.As(res[i].Err, &me) || me.Code != c {
			t.Errorf("seq %d: err %v, want code %s", i, res[i].Err, c)
		}
	}
	if res[6].Err != nil || !bitsEqual(res[6].Logits, solo) {
		t.Errorf("valid sequence beside invalid ones: err %v", res[6].Err)
	}
}

func TestLoadErrors(t *testing.T) {
	sh := shapes["llama-gqa"]
	cases := []struct {
		name  string
		edit  func(s *memSource)
		code  Code
		words string
	}{
		{"unknown arch", func(s *memSource) { s.meta["general.architecture"] = "gpt2" }, CodeUnsupportedArch, "gpt2"},
		{"missing tensor", func(s *memSource) { delete(s.tensors, "blk.1.ffn_up.weight") }, CodeMissingTensor, "blk.1.ffn_up.weight"},
		{"bad shape", func(s *memSource) { s.tensors["blk.0.attn_k.weight"].dims = []uint64{64, 64} }, CodeBadShape, "blk.0.attn_k.weight"},
		{"short data", func(s *memSource) { d := s.tensors["output.weight"]; d.data = d.data[:len(d.data)-4] }, CodeBadShape, "output.weight"},
		{"unsupported type", func(s *memSource) { s.tensors["blk.2.attn_v.weight"].t = quant.IQ2_XS }, CodeUnsupportedType, "iq2_xs"},
		{"missing key", func(s *memSource) { delete(s.meta, "llama.block_count") }, CodeBadMetadata, "block_count"},
		{"bad gqa", func(s *memSource) { s.meta["llama.attention.head_count_kv"] = 3 }, CodeBadMetadata, "head_count_kv"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newMemModel(sh, 9)
			c.edit(s)
			cfg, err := configFrom(s)
			if err == nil {
				_, err = build(cfg, s)
			}
			var me *Error
			if !errors.As(err, &me) || me.Code != c.code {
				t.Fatalf("err = %v, want code %s", err, c.code)
			}
			if !contains(err.Error(), c.words) {
				t.Fatalf("error %q does not name %q", err, c.words)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestPageSizeInvariance: the page size of the view (prefill and decode
// workers may differ) does not change a bit of the logits.
func TestPageSizeInvariance(t *testing.T) {
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			m := mustBuild(newMemModel(sh, 31))
			toks := randTokens(rand.New(rand.NewPCG(31, 31)), 40, sh.vocab)
			var base []float32
			for _, ps := range []int{16, 1, 3, 4, 64} {
				res := m.NewRunner(nil).Forward([]Seq{{Tokens: toks, KV: newMemKV(ps, sh.layers, m.cfg.KVDim()), AllLogits: true}})
				if res[0].Err != nil {
					t.Fatal(res[0].Err)
				}
				if base == nil {
					base = slices.Clone(res[0].Logits)
				} else if !bitsEqual(res[0].Logits, base) {
					t.Fatalf("page size %d: logits differ from page size 16 (first at %d)", ps, firstDiff(res[0].Logits, base))
				}
			}
		})
	}
}
