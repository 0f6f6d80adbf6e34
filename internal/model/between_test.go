package model

import (
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
)

// chunked is one sequence prefilled chunk by chunk in the yield tests:
// its tokens, chunk size, next position, view and the logits of every
// token so far.
type chunked struct {
	toks   []int32
	chunk  int
	pos    int
	kv     *memKV
	logits []float32
}

func (c *chunked) next() (Seq, bool) {
	if c.pos >= len(c.toks) {
		return Seq{}, false
	}
	n := min(c.chunk, len(c.toks)-c.pos)
	return Seq{Tokens: c.toks[c.pos : c.pos+n], Pos: c.pos, KV: c.kv, AllLogits: true}, true
}

func (c *chunked) took(s Seq, r Result, t *testing.T) {
	t.Helper()
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	c.logits = append(c.logits, r.Logits...)
	c.pos += len(s.Tokens)
}

// runYielding prefills the paused sequences (several per step) on one
// runner; with nest, at every layer boundary of their steps the nested
// sequences' next chunks run as a whole step on a second runner over the
// same thread pool. Without nest every sequence runs its steps alone.
//
// pauseMACs > 0 cuts the paused steps' attention into pieces of at most
// that many multiply-adds, with a pause point between two (1: one a
// unit).
func runYielding(t *testing.T, m *Model, threads int, paused, nested []*chunked, nest bool, pauseMACs int) {
	t.Helper()
	par := kernels.NewParallel(threads)
	defer par.Close()
	outer, inner := m.NewRunner(par), m.NewRunner(par)
	outer.pauseMACs = pauseMACs
	step := func(r *Runner, cs []*chunked, between func(int)) {
		var seqs []Seq
		var who []*chunked
		for _, c := range cs {
			if s, ok := c.next(); ok {
				seqs, who = append(seqs, s), append(who, c)
			}
		}
		if len(seqs) == 0 {
			return
		}
		res := r.ForwardBetween(seqs, between)
		for i, c := range who {
			c.took(seqs[i], res[i], t)
		}
	}
	yields, steps := 0, 0
	var between func(int)
	if nest {
		between = func(l int) {
			yields++
			step(inner, nested, nil)
		}
	}
	for done := false; !done; {
		steps++
		step(outer, paused, between)
		done = true
		for _, c := range paused {
			done = done && c.pos >= len(c.toks)
		}
	}
	for done := false; !done; {
		step(inner, nested, nil)
		done = true
		for _, c := range nested {
			done = done && c.pos >= len(c.toks)
		}
	}
	// Two pause points a layer, none after the last; more inside the
	// attention when it is cut.
	switch want := steps * (2*m.cfg.Layers - 1); {
	case nest && pauseMACs == 0 && yields != want:
		t.Fatalf("%d pauses in %d steps of %d layers, want %d", yields, steps, m.cfg.Layers, want)
	case nest && pauseMACs > 0 && yields <= want:
		t.Fatalf("%d pauses in %d steps of %d layers with attention pieces of %d multiply-adds, want more than %d", yields, steps, m.cfg.Layers, pauseMACs, want)
	}
}

// namedModel is a model a test runs, by the name its subtests carry.
type namedModel struct {
	name string
	m    *Model
}

// stepModels are the models the step tests run: every test shape, and
// a qwen3 (Q8_0 weights) and a gemma3 (sliding windows, post-norms) file.
func stepModels(t *testing.T) []namedModel {
	var ms []namedModel
	for name, sh := range shapes {
		ms = append(ms, namedModel{name, mustBuild(newMemModel(sh, 5))})
	}
	for _, name := range []string{"qwen3-hd24-q8_0.gguf", "gemma3-w16-f16.gguf"} {
		m, err := Load(openArchFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, namedModel{name, m})
	}
	return ms
}

// TestForwardBetweenIsBitwise: a step paused at every pause point (after
// each layer's attention, between layers, and between every two units of
// its attention when it is cut into pieces) while other sequences' whole
// steps run on a second runner over the
// same thread pool gives every sequence, paused or nested, bitwise the
// logits and K/V it gets with no pause at all (batch invariance across
// interleavings: the basis of a prompt's step yielding to a co-tenant's).
func TestForwardBetweenIsBitwise(t *testing.T) {
	for _, mm := range stepModels(t) {
		kts := kvTypes
		if mm.m.Config().KVDim()%32 == 0 {
			kts = kvTypesQ8 // Q8_0 rows need whole blocks
		}
		for _, kt := range kts {
			t.Run(mm.name+"/"+kt.name, func(t *testing.T) {
				m, c := mm.m, mm.m.Config()
				rng := rand.New(rand.NewPCG(7, 7))
				mk := func(n, chunk, ps int) *chunked {
					return &chunked{toks: randTokens(rng, n, c.Vocab), chunk: chunk, kv: kt.new(ps, c.Layers, c.KVDim())}
				}
				// Two paused sequences (one long, one decoding token by
				// token after a short prompt) and two nested ones; then
				// again with a pause point between every two attention
				// units of the paused steps.
				for _, pauseMACs := range []int{0, 1} {
					a, a2, b, b2 := mk(37, 9, 4), mk(11, 1, 8), mk(29, 5, 4), mk(6, 2, 16)
					runYielding(t, m, 2, []*chunked{a, a2}, []*chunked{b, b2}, true, pauseMACs)
					for _, x := range []*chunked{a, a2, b, b2} {
						alone := &chunked{toks: x.toks, chunk: x.chunk, kv: kt.new(x.kv.ps, c.Layers, c.KVDim())}
						runYielding(t, m, 1, []*chunked{alone}, nil, false, 0)
						if !bitsEqual(x.logits, alone.logits) {
							t.Errorf("pauseMACs %d: logits differ from the unpaused run (first at %d)", pauseMACs, firstDiff(x.logits, alone.logits))
						}
						if !sameKV(x.kv, alone.kv) {
							t.Errorf("pauseMACs %d: K/V differ from the unpaused run", pauseMACs)
						}
					}
				}
			})
		}
	}
}

// TestForwardBetweenRefusesReentry: a nested step on the paused step's
// own runner would overwrite its rows; it panics instead, and the runner
// works again after.
func TestForwardBetweenRefusesReentry(t *testing.T) {
	sh := shapes["llama-gqa"]
	m := mustBuild(newMemModel(sh, 5))
	r := m.NewRunner(nil)
	kv := newMemKV(4, sh.layers, m.cfg.KVDim())
	other := newMemKV(4, sh.layers, m.cfg.KVDim())
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a step re-entered its own runner")
			}
		}()
		r.ForwardBetween([]Seq{{Tokens: []int32{1, 2}, KV: kv}}, func(int) {
			r.Forward([]Seq{{Tokens: []int32{3}, KV: other}})
		})
	}()
	if res := r.Forward([]Seq{{Tokens: []int32{1, 2}, KV: newMemKV(4, sh.layers, m.cfg.KVDim())}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
}

// TestForwardBetweenPausePieces: a step whose attention is cut into
// pieces (here one unit each) pauses exactly between every two pieces,
// beside its two pause points a layer, and gives the logits and K/V of
// the step run whole with no hook.
func TestForwardBetweenPausePieces(t *testing.T) {
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			m := mustBuild(newMemModel(sh, 5))
			c := m.Config()
			toks := randTokens(rand.New(rand.NewPCG(3, 3)), 20, c.Vocab)
			whole := m.NewRunner(nil)
			want := whole.Forward([]Seq{{Tokens: toks, KV: newMemKV(4, c.Layers, c.KVDim()), AllLogits: true}})
			wantKV := newMemKV(4, c.Layers, c.KVDim())
			whole.Forward([]Seq{{Tokens: toks, KV: wantKV, AllLogits: true}})
			r := m.NewRunner(nil)
			r.pauseMACs = 1
			kv := newMemKV(4, c.Layers, c.KVDim())
			pauses := 0
			got := r.ForwardBetween([]Seq{{Tokens: toks, KV: kv, AllLogits: true}}, func(int) { pauses++ })
			if got[0].Err != nil || want[0].Err != nil {
				t.Fatal(got[0].Err, want[0].Err)
			}
			// An attention unit per query block and KV head.
			qb := queryBlock(c.Heads / c.KVHeads)
			units := (len(toks) + qb - 1) / qb * c.KVHeads
			if n := c.Layers*(units-1) + 2*c.Layers - 1; pauses != n {
				t.Errorf("%d pause points, want %d (%d layers, %d attention units a layer)", pauses, n, c.Layers, units)
			}
			if !bitsEqual(got[0].Logits, want[0].Logits) {
				t.Errorf("logits differ from the step run whole (first at %d)", firstDiff(got[0].Logits, want[0].Logits))
			}
			if !sameKV(kv, wantKV) {
				t.Error("K/V differ from the step run whole")
			}
		})
	}
}

// TestForwardBetweenPausePiecesThreads: on T threads an attention piece
// holds at least T units, or the pool would run a piece of one unit on
// one core while the others wait: a deep 20-token chunk of two KV heads
// (two units a layer, enough work for the pool) is not cut on two
// threads, is cut once a layer on one, and gives the same bits either way.
func TestForwardBetweenPausePiecesThreads(t *testing.T) {
	sh := shapes["llama-gqa"]
	src := newMemModel(sh, 5)
	src.meta["llama.context_length"] = 1024
	m := mustBuild(src)
	c := m.Config()
	const depth = 600
	toks := randTokens(rand.New(rand.NewPCG(4, 4)), 20, c.Vocab)
	var want []float32
	for _, threads := range []int{1, 2} {
		par := kernels.NewParallel(threads)
		r := m.NewRunner(par)
		r.pauseMACs = 1
		pauses := 0
		res := r.ForwardBetween([]Seq{{Tokens: toks, Pos: depth, KV: fillDeep(newMemKV(16, c.Layers, c.KVDim()), depth)}}, func(int) { pauses++ })
		par.Close()
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		extra := 0
		if threads == 1 {
			extra = c.Layers // two units a layer, one piece each
		}
		if n := 2*c.Layers - 1 + extra; pauses != n {
			t.Errorf("%d threads: %d pause points, want %d", threads, pauses, n)
		}
		if want == nil {
			want = res[0].Logits
		} else if !bitsEqual(res[0].Logits, want) {
			t.Errorf("%d threads: logits differ from one thread's (first at %d)", threads, firstDiff(res[0].Logits, want))
		}
	}
}
