package grammar

import (
	"slices"
	"sync"
)

// Vocab is a model's vocabulary as the grammar sees it: the bytes of each
// token, the end-of-generation tokens, and a trie of the pieces. It is
// immutable and shared by every request of a worker.
type Vocab struct {
	n      int
	pieces []string
	eog    []int32
	eogSet []uint64
	// nodes is the token trie in preorder: node i's subtree is
	// nodes[i : nodes[i].sub]; node 0 is the root (no byte).
	nodes []tnode
	toks  []int32
}

type tnode struct {
	b      byte
	sub    int32
	t0, t1 int32 // toks[t0:t1] end at this node
}

// NewVocab builds a Vocab. pieces[id] is the bytes token id stands for in
// generated text, or "" for a token that never appears in constrained
// output (control and unknown tokens); eog reports the tokens that end
// generation (allowed only where the grammar may end).
func NewVocab(pieces []string, eog func(int32) bool) *Vocab {
	v := &Vocab{n: len(pieces), pieces: make([]string, len(pieces)), eogSet: make([]uint64, (len(pieces)+63)/64)}
	var ids []int32
	for i, p := range pieces {
		id := int32(i)
		if eog != nil && eog(id) {
			v.eog = append(v.eog, id)
			v.eogSet[id>>6] |= 1 << (id & 63)
			continue
		}
		if p != "" {
			v.pieces[i] = p
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int32) int {
		if c := compareStr(v.pieces[a], v.pieces[b]); c != 0 {
			return c
		}
		return int(a - b)
	})
	v.nodes = append(v.nodes, tnode{})
	v.build(0, ids, 0)
	return v
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// build fills the subtree of node n from ids (sorted, all sharing the
// first depth bytes).
func (v *Vocab) build(n int32, ids []int32, depth int) {
	i := 0
	v.nodes[n].t0 = int32(len(v.toks))
	for i < len(ids) && len(v.pieces[ids[i]]) == depth {
		v.toks = append(v.toks, ids[i])
		i++
	}
	v.nodes[n].t1 = int32(len(v.toks))
	for i < len(ids) {
		b := v.pieces[ids[i]][depth]
		j := i
		for j < len(ids) && v.pieces[ids[j]][depth] == b {
			j++
		}
		c := int32(len(v.nodes))
		v.nodes = append(v.nodes, tnode{b: b})
		v.build(c, ids[i:j], depth+1)
		i = j
	}
	v.nodes[n].sub = int32(len(v.nodes))
}

// Size is the number of token ids.
func (v *Vocab) Size() int { return v.n }

func (v *Vocab) isEOG(id int32) bool { return v.eogSet[id>>6]&(1<<(id&63)) != 0 }

// Words is the length of a mask for this vocabulary in uint64 words.
func (v *Vocab) Words() int { return (v.n + 63) / 64 }

// Compiled binds a grammar to a vocabulary and caches the per-position
// token masks. It is safe for concurrent use by many matchers; the cache
// is bounded (MaxMaskBytes), past which masks are computed and not kept.
type Compiled struct {
	g *Grammar
	v *Vocab

	mu   sync.Mutex
	pos  map[int32]*posMask
	mem  int64
	maxM int64
}

// posMask is what the token trie says from a stack whose top is one
// position, whatever lies below: accept holds the tokens matched without
// leaving the position's rule; uncertain lists the tokens that may only
// match by leaving it (they are checked against the whole stack).
type posMask struct {
	accept    []uint64
	uncertain []int32
}

// MaxMaskBytes bounds the memory of one compiled grammar's mask cache.
const MaxMaskBytes = 64 << 20

// Bind compiles g against v.
func Bind(g *Grammar, v *Vocab) *Compiled {
	return &Compiled{g: g, v: v, pos: map[int32]*posMask{}, maxM: MaxMaskBytes}
}

// Vocab is the vocabulary c was bound to.
func (c *Compiled) Vocab() *Vocab { return c.v }

// Grammar is c's grammar.
func (c *Compiled) Grammar() *Grammar { return c.g }

// MaskBytes is the memory held by c's mask cache.
func (c *Compiled) MaskBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mem
}

// cachedPos is position p's mask if it is cached.
func (c *Compiled) cachedPos(p int32) *posMask {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pos[p]
}

// storePos caches pm as position p's mask while the cache has room and
// returns the cached mask (another matcher's, when it got there first).
func (c *Compiled) storePos(p int32, pm *posMask) *posMask {
	size := int64(len(pm.accept)*8 + len(pm.uncertain)*4)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.pos[p]; old != nil {
		return old
	}
	if c.mem+size <= c.maxM {
		c.pos[p] = pm
		c.mem += size
	}
	return pm
}

// walkStep is a trie walk's step: frames are interned, and a step from
// a one-stack set is memoised by (stack, byte), so a walk through a JSON
// string, where every byte leads back to the same stack, costs a map
// lookup per trie node instead of an expansion.
type walkStep struct {
	g    *Grammar
	in   interner
	memo map[memoKey]memoVal
}

type memoKey struct {
	f *frame
	b byte
}

type memoVal struct {
	s            []*frame
	over, escape bool
}

func newWalkStep(g *Grammar) *walkStep {
	return &walkStep{g: g, in: interner{}, memo: map[memoKey]memoVal{}}
}

// intern returns the interned copy of stack f (built bottom up).
func (w *walkStep) intern(f *frame) *frame {
	if f == nil {
		return nil
	}
	next := w.intern(f.next)
	k := frame{f.pos, next}
	if x, ok := w.in[k]; ok {
		return x
	}
	x := &frame{f.pos, next}
	w.in[k] = x
	return x
}

func (w *walkStep) step(cur []*frame, b byte, t *stackSet) {
	t.s, t.over, t.escaped, t.in = t.s[:0], false, false, &w.in
	if len(cur) != 1 {
		w.g.step(cur, b, t)
		return
	}
	k := memoKey{cur[0], b}
	if v, ok := w.memo[k]; ok {
		t.s = append(t.s, v.s...)
		t.over, t.escaped = v.over, v.escape
		return
	}
	w.g.step(cur, b, t)
	w.memo[k] = memoVal{append([]*frame(nil), t.s...), t.over, t.escaped}
}

// toks2 is the end in toks of the tokens of node n's whole subtree: the
// preorder layout puts them right after the node's own.
func (v *Vocab) toks2(n int32) int32 {
	end := v.nodes[n].sub
	if int(end) < len(v.nodes) {
		return v.nodes[end].t0
	}
	return int32(len(v.toks))
}

// Piece is the bytes token id stands for in constrained text ("" for
// control and end-of-generation tokens).
func (v *Vocab) Piece(id int32) string {
	if id < 0 || int(id) >= v.n {
		return ""
	}
	return v.pieces[id]
}
