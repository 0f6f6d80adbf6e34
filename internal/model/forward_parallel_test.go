package model

import (
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
)

// TestParallelAttentionInvariant: a prompt long enough that attention is
// spread over the pool (its slots claimed dynamically by whichever thread
// is free) gives bitwise the logits and K/V of the one-thread prefill,
// whole or in chunks (batch invariance, DESIGN.md). Splitting one unit's
// softmax or value sum across slots, or two slots sharing a scores buffer,
// fails it. F16 pages too, and on every kernel path: the widened F16 rows
// go through the canonical F32 orders, so each path gives Generic's bits.
func TestParallelAttentionInvariant(t *testing.T) {
	for _, kt := range kvTypesQ8 {
		t.Run(kt.name, func(t *testing.T) { parallelAttentionInvariant(t, kt.new) })
	}
}

func parallelAttentionInvariant(t *testing.T, newKV func(ps, layers, kvd int) *memKV) {
	sh := shapes["llama-gqa"]
	m := mustBuild(newMemModel(sh, 9))
	const n = 200
	// The whole-prompt step must be above the attention threshold, or the
	// threaded path is not exercised at all.
	group, hd := sh.heads/sh.kvHeads, sh.embd/sh.heads
	if macs := sh.kvHeads * 2 * hd * group * n * (n + 1) / 2; macs < minParallelMACs {
		t.Fatalf("prompt too short to parallelise attention: %d MACs < %d", macs, minParallelMACs)
	}
	toks := randTokens(rand.New(rand.NewPCG(10, 10)), n, sh.vocab)
	prev := kernels.CurrentPath()
	defer kernels.SetPath(prev)
	if err := kernels.SetPath(kernels.Generic); err != nil {
		t.Fatal(err)
	}
	base, baseKV := runChunks(m, 1, toks, []int{n}, nil, newKV)
	for _, p := range kernels.Paths() {
		if err := kernels.SetPath(p); err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct {
			name    string
			threads int
			chunk   []int
		}{
			{"one chunk, 1 thread", 1, []int{n}},
			{"one chunk, 2 threads", 2, []int{n}},
			{"one chunk, 3 threads", 3, []int{n}},
			{"chunks 120+80, 2 threads", 2, []int{120, 80}},
			{"chunks 37+1+162, 3 threads", 3, []int{37, 1, 162}},
			{"chunks 64+136, 4 threads", 4, []int{64, 136}},
		} {
			got, kv := runChunks(m, v.threads, toks, v.chunk, nil, newKV)
			if !bitsEqual(got, base) {
				t.Errorf("%v %s: logits differ from one thread on the generic path (first at %d)", p, v.name, firstDiff(got, base))
			}
			if !sameKV(kv, baseKV) {
				t.Errorf("%v %s: K/V differ from one thread on the generic path", p, v.name)
			}
		}
	}
}
