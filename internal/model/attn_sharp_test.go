package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"sluice/internal/kernels"
)

// sharpen multiplies every layer's query weights by f (F32 test models):
// attention scores then spread over far more than attnFlush's 50, so the
// softmax rows hold numerators that are flushed to 0, subnormal-range
// ones and ones of 1, the cases where a path or a form that disagreed on
// the flush would show.
func sharpen(t *testing.T, s *memSource, f float32) {
	t.Helper()
	n := 0
	for name, mt := range s.tensors {
		if !strings.HasSuffix(name, ".attn_q.weight") {
			continue
		}
		for i := range mt.f32 {
			mt.f32[i] *= f
			binary.LittleEndian.PutUint32(mt.data[4*i:], math.Float32bits(mt.f32[i]))
		}
		n++
	}
	if n == 0 {
		t.Fatal("no attn_q.weight tensors to sharpen")
	}
}

// TestSharpAttentionInvariant: with attention sharp enough that many of a
// row's numerators fall below e^-50 (checked), a prompt
// prefilled whole, token by token (decode's attendUnit) and in chunks,
// on 1 and 2 threads, on every kernel path, gives the Generic one-thread
// prefill's logits and K/V bit for bit, F32 and F16 pages.
func TestSharpAttentionInvariant(t *testing.T) {
	sh := shapes["llama-gqa"]
	src := newMemModel(sh, 21)
	sharpen(t, src, 80)
	m := mustBuild(src)
	toks := randTokens(rand.New(rand.NewPCG(22, 22)), 70, sh.vocab)
	prev := kernels.CurrentPath()
	defer kernels.SetPath(prev)
	for _, kt := range kvTypesQ8 {
		t.Run(kt.name, func(t *testing.T) {
			if err := kernels.SetPath(kernels.Generic); err != nil {
				t.Fatal(err)
			}
			base, baseKV := runChunks(m, 1, toks, []int{len(toks)}, nil, kt.new)
			z := flushedWeights(m, toks, kt.new)
			if z < 100 {
				t.Fatalf("%d flushed weights: the test needs attention sharper than e^-50", z)
			}
			t.Logf("%d softmax numerators flushed to 0", z)
			for _, p := range kernels.Paths() {
				if err := kernels.SetPath(p); err != nil {
					t.Fatal(err)
				}
				for _, v := range []struct {
					name    string
					threads int
					chunk   []int
				}{{"whole", 1, []int{len(toks)}}, {"whole, 2 threads", 2, []int{len(toks)}}, {"token by token", 1, []int{1}}, {"chunks of 9", 2, []int{9}}} {
					got, kv := runChunks(m, v.threads, toks, v.chunk, nil, kt.new)
					if !bitsEqual(got, base) {
						t.Errorf("%v %s: logits differ from Generic's whole prefill (first at %d)", p, v.name, firstDiff(got, base))
					}
					if !sameKV(kv, baseKV) {
						t.Errorf("%v %s: K/V differ from Generic's whole prefill", p, v.name)
					}
				}
			}
		})
	}
}

// flushedWeights runs the prompt through a fresh runner and counts the
// softmax weights of exactly 0 left in its scores scratch (the last units
// each slot ran): a weight is 0 only when its numerator was flushed.
func flushedWeights(m *Model, toks []int32, newKV func(ps, layers, kvd int) *memKV) int {
	r := m.NewRunner(kernels.NewParallel(1))
	kv := newKV(4, m.cfg.Layers, m.cfg.KVDim())
	if res := r.Forward([]Seq{{Tokens: toks, Pos: 0, KV: kv}}); res[0].Err != nil {
		return 0
	}
	zeros := 0
	for _, s := range r.scores {
		for _, w := range s {
			if w == 0 {
				zeros++
			}
		}
	}
	return zeros
}
