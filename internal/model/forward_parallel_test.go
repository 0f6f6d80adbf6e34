package model

import (
	"math/rand/v2"
	"testing"
)

// TestParallelAttentionInvariant: a prompt long enough that attention is
// spread over the pool (its slots claimed dynamically by whichever thread
// is free) gives bitwise the logits and K/V of the one-thread prefill,
// whole or in chunks (batch invariance, DESIGN.md). Splitting one unit's
// softmax or value sum across slots, or two slots sharing a scores buffer,
// fails it.
func TestParallelAttentionInvariant(t *testing.T) {
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
	base, baseKV := runChunks(m, 1, toks, []int{n}, nil)
	for _, v := range []struct {
		name    string
		threads int
		chunk   []int
	}{
		{"one chunk, 2 threads", 2, []int{n}},
		{"one chunk, 3 threads", 3, []int{n}},
		{"chunks 120+80, 2 threads", 2, []int{120, 80}},
	} {
		got, kv := runChunks(m, v.threads, toks, v.chunk, nil)
		if !bitsEqual(got, base) {
			t.Errorf("%s: logits differ from one thread (first at %d)", v.name, firstDiff(got, base))
		}
		for l := 0; l < sh.layers; l++ {
			if !bitsEqual(kv.k[l], baseKV.k[l]) || !bitsEqual(kv.v[l], baseKV.v[l]) {
				t.Errorf("%s: layer %d K/V differ from one thread", v.name, l)
			}
		}
	}
}
