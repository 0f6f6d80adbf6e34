package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
	"sluice/internal/quant"
)

// deepShape is small enough (head dim 8) that attention over 16k positions
// costs milliseconds on the generic path.
var deepShape = testShape{arch: "llama", vocab: 16, embd: 16, layers: 2, heads: 2, kvHeads: 1, ff: 16, wtype: quant.F32}

// fillDeep writes seeded random K/V rows at positions [0, depth) of every
// layer, as if a prompt of that length had been prefilled.
func fillDeep(kv *memKV, depth int) *memKV {
	r := rand.New(rand.NewPCG(uint64(depth), 77))
	k, v := make([]float32, kv.kvd), make([]float32, kv.kvd)
	for l := 0; l < kv.layers; l++ {
		for p := 0; p < depth; p++ {
			for i := range k {
				k[i], v[i] = float32(r.NormFloat64()*2), float32(r.NormFloat64())
			}
			if err := kv.Put(l, p, k, v); err != nil {
				panic(err)
			}
		}
	}
	return kv
}

// TestFlashAttentionInvariantAtDepth: at depths up to 16k (many flash
// tiles, not a multiple of the tile or the page), a few tokens prefilled
// in one chunk, in chunks or decoded one by one, alone or beside another
// sequence, on 1, 2 and 3 threads, with the decode tokens' tiles split
// across units (flash-decoding, forced even on one thread) or not, with
// pages of 16 or 5 positions, on every kernel path, give the generic
// path's one-thread token-by-token logits and K/V bit for bit, F32 and
// F16 pages; and with a sliding-window layer. A merge order that followed the threads, a tile cut by page
// instead of position, or a fold of split partials in another order than
// the unsplit one fails it.
func TestFlashAttentionInvariantAtDepth(t *testing.T) {
	flashInvariantAtDepth(t, deepShape, kvTypes)
}

// deepShapeQ8 has whole Q8_0 blocks per KV row: two KV heads of 16, so a
// block holds both heads' columns and each head dequantizes the block it
// shares (attn_q8.go), over GQA groups of 2.
var deepShapeQ8 = testShape{arch: "llama", vocab: 16, embd: 64, layers: 2, heads: 4, kvHeads: 2, ff: 16, wtype: quant.F32}

// TestFlashAttentionInvariantAtDepthQ8 is TestFlashAttentionInvariantAtDepth
// on Q8_0 pages (dequantized per page piece and head, then the F32
// kernels): bitwise equal across paths, threads 1-3, chunks, batch mates,
// page sizes 16 and 5, split decode, sliding windows, at depths to 16k.
// A dequantization that differed between paths, or a piece cut at the
// wrong block or row, fails it.
func TestFlashAttentionInvariantAtDepthQ8(t *testing.T) {
	flashInvariantAtDepth(t, deepShapeQ8, []kvType{{name: "q8_0", new: newMemKVQ8}})
}

func flashInvariantAtDepth(t *testing.T, shape testShape, kvTypes []kvType) {
	src := newMemModel(shape, 41)
	src.meta["llama.context_length"] = 16384
	global := mustBuild(src)
	// The same weights with layer 0 sliding over 300 positions (gemma3's
	// pattern): its tokens start their first tile mid-tile.
	sliding := mustBuild(src)
	sliding.blocks[0].(*preNormBlock).attn.window = 300
	m := global
	kvd := m.cfg.KVDim()
	toks := randTokens(rand.New(rand.NewPCG(42, 42)), 9, shape.vocab)
	comp := randTokens(rand.New(rand.NewPCG(43, 43)), 40, shape.vocab)
	prev := kernels.CurrentPath()
	defer kernels.SetPath(prev)
	type variant struct {
		threads, splitMin, ps int
		chunk                 []int
		companion             bool
		// pauseMACs > 0: steps run through ForwardBetween with a hook, in
		// attention pieces of at most that many multiply-adds.
		pauseMACs int
	}
	// The pause points inside the attention per variant with pauseMACs
	// (a step of one attention unit has none).
	inside := map[string]int{}
	// One fill per depth, page size and KV type, copied for each run.
	cache := map[[3]int]*memKV{}
	filled := func(depth, ps int, newKV func(ps, layers, kvd int) *memKV) *memKV {
		key := [3]int{depth, ps, 0}
		switch probe := newKV(1, 1, 32); {
		case probe.f16:
			key[2] = 1
		case probe.q8:
			key[2] = 2
		}
		if cache[key] == nil {
			cache[key] = fillDeep(newKV(ps, shape.layers, kvd), depth)
		}
		c := *cache[key]
		c.k, c.v, c.k16, c.v16 = cloneRows(c.k), cloneRows(c.v), cloneRows(c.k16), cloneRows(c.v16)
		c.k8, c.v8 = cloneRows(c.k8), cloneRows(c.v8)
		return &c
	}
	run := func(depth int, newKV func(ps, layers, kvd int) *memKV, v variant) ([]float32, *memKV) {
		r := m.NewRunner(kernels.NewParallel(v.threads))
		if m == sliding && r.m.blocks[0].(*preNormBlock).attn.window != 300 {
			t.Fatal("the sliding model lost its window")
		}
		r.splitMin = v.splitMin
		var between func(int)
		pauses, steps := 0, 0
		if v.pauseMACs > 0 {
			r.pauseMACs = v.pauseMACs
			between = func(int) { pauses++ }
		}
		kv := filled(depth, v.ps, newKV)
		ckv := newKV(8, shape.layers, kvd)
		var logits []float32
		defer func() {
			if between != nil {
				inside[fmt.Sprint(v)] += pauses - steps*(2*shape.layers-1)
			}
		}()
		for pos, ci, cp := 0, 0, 0; pos < len(toks); ci++ {
			n := min(v.chunk[ci%len(v.chunk)], len(toks)-pos)
			seqs := []Seq{{Tokens: toks[pos : pos+n], Pos: depth + pos, KV: kv, AllLogits: true}}
			if v.companion && cp < len(comp) {
				k := min(1+ci%5, len(comp)-cp)
				seqs = append([]Seq{{Tokens: comp[cp : cp+k], Pos: cp, KV: ckv}}, seqs...)
				cp += k
			}
			res := r.ForwardBetween(seqs, between)
			steps++
			mine := res[len(res)-1]
			if mine.Err != nil {
				t.Fatal(mine.Err)
			}
			logits = append(logits, mine.Logits...)
			pos += n
		}
		return logits, kv
	}
	depths := []int{16000 + 5, 1000, 3*flashTile - 1}
	if testing.Short() {
		depths = depths[1:]
	}
	for _, mm := range []*Model{global, sliding} {
		m = mm
		for _, kt := range kvTypes {
			for _, depth := range depths {
				if err := kernels.SetPath(kernels.Generic); err != nil {
					t.Fatal(err)
				}
				base, baseKV := run(depth, kt.new, variant{threads: 1, ps: 16, chunk: []int{1}})
				for _, p := range kernels.Paths() {
					if err := kernels.SetPath(p); err != nil {
						t.Fatal(err)
					}
					for _, v := range []variant{
						{threads: 1, ps: 16, chunk: []int{1}},
						{threads: 1, ps: 16, chunk: []int{1}, splitMin: 1},
						{threads: 2, ps: 16, chunk: []int{1}},
						{threads: 3, ps: 5, chunk: []int{1}, companion: true},
						{threads: 2, ps: 16, chunk: []int{9}},
						{threads: 3, ps: 16, chunk: []int{4, 1, 4}, companion: true},
						{threads: 1, ps: 5, chunk: []int{2, 7}, splitMin: 2},
						// Pause points inside the attention, serial and
						// parallel, split decode tiles folded after the
						// last piece.
						{threads: 1, ps: 16, chunk: []int{9, 1}, splitMin: 1, companion: true, pauseMACs: 1},
						{threads: 2, ps: 16, chunk: []int{9}, companion: true, pauseMACs: 1 << 12},
						{threads: 3, ps: 5, chunk: []int{4, 1, 4}, companion: true, pauseMACs: 1 << 10},
					} {
						got, kv := run(depth, kt.new, v)
						if !bitsEqual(got, base) {
							t.Errorf("window %v %s depth %d %v %+v: logits differ from generic one-thread decode (first at %d)", m == sliding, kt.name, depth, p, v, firstDiff(got, base))
						}
						if !sameKV(kv, baseKV) {
							t.Errorf("%s depth %d %v %+v: K/V differ from generic one-thread decode", kt.name, depth, p, v)
						}
					}
				}
			}
		}
	}
	for v, n := range inside {
		if n <= 0 {
			t.Errorf("%s: no pause point inside the attention", v)
		}
	}
}

func cloneRows[T any](rows [][]T) [][]T {
	if rows == nil {
		return nil
	}
	out := make([][]T, len(rows))
	for i, r := range rows {
		out[i] = append([]T(nil), r...)
	}
	return out
}

// TestFlashAttentionInvariantWideHeads: head dim 64 (bench-110M's and
// TinyLlama's), where a prefill unit's 16 or more rows take other kernels
// than a decode token's few (on the AVX-512 path, the YMM kernels for F16
// rows; kernels.MQADot and MQAAxpy): a 40-token prompt after 300
// positions, prefilled in one chunk, in uneven chunks or token by token,
// on 1 and 2 threads, MHA and GQA, on every path and page type, gives the
// generic path's one-thread token-by-token logits bit for bit.
func TestFlashAttentionInvariantWideHeads(t *testing.T) {
	prev := kernels.CurrentPath()
	defer kernels.SetPath(prev)
	for _, shape := range []testShape{
		{arch: "llama", vocab: 16, embd: 128, layers: 1, heads: 2, kvHeads: 2, ff: 16, wtype: quant.F32},
		{arch: "llama", vocab: 16, embd: 256, layers: 1, heads: 4, kvHeads: 1, ff: 16, wtype: quant.F32},
	} {
		src := newMemModel(shape, 51)
		src.meta["llama.context_length"] = 1024
		m := mustBuild(src)
		toks := randTokens(rand.New(rand.NewPCG(52, 52)), 40, shape.vocab)
		const depth = 300
		for _, kt := range kvTypesQ8 {
			fill := fillDeep(kt.new(16, shape.layers, m.cfg.KVDim()), depth)
			run := func(threads int, chunks []int) []float32 {
				kv := *fill
				kv.k, kv.v, kv.k16, kv.v16 = cloneRows(kv.k), cloneRows(kv.v), cloneRows(kv.k16), cloneRows(kv.v16)
				kv.k8, kv.v8 = cloneRows(kv.k8), cloneRows(kv.v8)
				r := m.NewRunner(kernels.NewParallel(threads))
				var logits []float32
				for pos, ci := 0, 0; pos < len(toks); ci++ {
					n := min(chunks[ci%len(chunks)], len(toks)-pos)
					res := r.Forward([]Seq{{Tokens: toks[pos : pos+n], Pos: depth + pos, KV: &kv, AllLogits: true}})
					if res[0].Err != nil {
						t.Fatal(res[0].Err)
					}
					logits = append(logits, res[0].Logits...)
					pos += n
				}
				return logits
			}
			if err := kernels.SetPath(kernels.Generic); err != nil {
				t.Fatal(err)
			}
			base := run(1, []int{1})
			for _, p := range kernels.Paths() {
				if err := kernels.SetPath(p); err != nil {
					t.Fatal(err)
				}
				for _, v := range []struct {
					threads int
					chunks  []int
				}{{1, []int{40}}, {2, []int{40}}, {2, []int{17, 3, 20}}, {1, []int{1}}} {
					if got := run(v.threads, v.chunks); !bitsEqual(got, base) {
						t.Errorf("heads %d/%d %s %v %+v: logits differ from generic one-thread decode (first at %d)", shape.heads, shape.kvHeads, kt.name, p, v, firstDiff(got, base))
					}
				}
			}
		}
	}
}
