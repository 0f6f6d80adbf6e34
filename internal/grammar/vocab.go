package grammar

import (
	"math"
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
	// spaces are the whitespace-only tokens, made with the rest
	// (Spaces).
	spaces []int32
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
			if IsSpace(p) {
				v.spaces = append(v.spaces, id)
			}
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
// is bounded (MaxMaskBytes, and the owning Cache's byte budget), past
// which masks are computed and not kept.
type Compiled struct {
	g *Grammar
	v *Vocab
	// owner is the Cache that holds c and accounts its masks' bytes
	// against the worker's budget (nil: bound directly, MaxMaskBytes
	// only); tenant is whose schema it is (the Cache's eviction order).
	owner  *Cache
	tenant string

	mu   sync.Mutex
	pos  map[int32]*posMask
	mem  int64
	maxM int64
	// retired: the Cache let c go; requests still using it compute
	// their masks without keeping them.
	retired bool
}

// posMask is what the token trie says from a stack whose top is one
// position, whatever lies below: accept holds the tokens matched without
// leaving the position's rule; uncertain lists the tokens that may only
// match by leaving it (they are checked against the whole stack), as
// indexes into the trie's token order (Vocab.toks), ascending, so a walk
// of the trie can skip the subtrees that hold none.
type posMask struct {
	accept    []uint64
	uncertain []int32
	// fan is the largest stack set the walk from [p] met (MaxStacks+1 if
	// past the bound): on a real stack, a token settled by accept or
	// refused by p's rule keeps at most that many stacks alive at any
	// byte, unless escLive: at a node whose tokens are accepted, a parse
	// left p's rule by one of escBytes while another stayed in it, and
	// the frames below may take that byte too (Grammar.takesAny).
	fan      int32
	escLive  bool
	escBytes byteSet
	// work is the most units one byte's step took in the walk from [p]
	// (stepRes.work): on a real stack, a token settled by accept or
	// refused by p's rule costs at most that much a byte, unless
	// escLive (the frames below step the byte too). A token's check
	// steps every stack of the matcher at once, against MaxByteWork for
	// their sum, so the job sums work as it sums fan.
	work int32
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
// The owning Cache's budget is asked first, without c's lock held (the
// Cache locks grammars to evict them, never the other way round).
func (c *Compiled) storePos(p int32, pm *posMask) *posMask {
	size := pm.bytes()
	c.mu.Lock()
	if old := c.pos[p]; old != nil {
		c.mu.Unlock()
		return old
	}
	fits := !c.retired && c.mem+size <= c.maxM
	c.mu.Unlock()
	if !fits || (c.owner != nil && !c.owner.reserve(c, size)) {
		return pm
	}
	c.mu.Lock()
	old := c.pos[p]
	kept := old == nil && !c.retired && c.mem+size <= c.maxM
	if kept {
		c.pos[p] = pm
		c.mem += size
	}
	c.mu.Unlock()
	if !kept && c.owner != nil {
		c.owner.release(size)
	}
	if old != nil {
		return old
	}
	return pm
}

// bytes is what pm holds in memory, as the budgets count it.
func (pm *posMask) bytes() int64 { return int64(len(pm.accept)*8 + len(pm.uncertain)*4) }

// dropMasks empties c's mask cache and returns the bytes it held; with
// retire, c keeps no mask from now on.
func (c *Compiled) dropMasks(retire bool) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	freed := c.mem
	clear(c.pos)
	c.mem = 0
	c.retired = c.retired || retire
	return freed
}

// walkStep is a trie walk's step. Frames are interned, each stack set a
// walk reaches is interned too (an id), and the step from a set by a byte
// is memoised by (set id, byte): a walk through a JSON string, where every
// byte leads back to the same set, costs two array indexes per trie node
// instead of an expansion. (A map keyed by (frame, byte), for one-stack
// sets only, cost 80 ns a node, most of a cold 151k-token walk; a
// many-stack set, as in a string with a maxLength, was expanded at every
// node, ~470 ns.)
type walkStep struct {
	g  *Grammar
	in interner
	t  stackSet // scratch of the expansions
	// sets interns live stack sets by their frames' ids; memo[id][b] is
	// the step from set id by byte b (nil: not computed yet), for the
	// first maxDenseSets sets; sparse holds the rest's, so a walk's memo
	// grows with the steps it memoises, not 2 KB a set.
	sets   map[string]int32
	memo   [][]*stepRes
	sparse map[memoKey]*stepRes
	key    []byte
	// work counts the units of the memo misses' steps (stackSet.n: a
	// stack stepped, an alternative looked at): what a walk costs beyond
	// its trie nodes. One stack's step by one byte can cost up to
	// MaxByteWork (a nested repetition's ways, a wide anyOf), so counting
	// the stacks alone let a trie node of 80,000 units pass as 2.
	work int
	// pcur and pb are the step under way in t (pcur nil: none): a step
	// that passes the walk's budget stops inside and resumes when the
	// walk asks for it again.
	pcur *stepRes
	pb   byte
}

type memoKey struct {
	set int32
	b   byte
}

// maxDenseSets bounds the 2 KB memo rows of one walk (4 MB).
const maxDenseSets = 2048

// stepRes is the stack set after one byte: s as stepped (nil stands for
// the empty stack, the grammar complete), live the non-nil stacks of s,
// id the interned id of live. It is memoised, shared by every trie node it
// is reached at, and never written to.
type stepRes struct {
	s, live       []*frame
	id            int32
	ended         bool // s holds the empty stack
	over, escaped bool
	work          int32 // the step's units (stackSet.n)
}

func newWalkStep(g *Grammar) *walkStep {
	return &walkStep{g: g, in: interner{m: map[frameKey]*frame{}}, sets: map[string]int32{}, sparse: map[memoKey]*stepRes{}}
}

// intern returns the interned copy of stack f (built bottom up).
func (w *walkStep) intern(f *frame) *frame {
	if f == nil {
		return nil
	}
	return w.in.get(f.pos, w.intern(f.next))
}

// state is the walk state of interned stacks live (all non-nil).
func (w *walkStep) state(live []*frame) *stepRes {
	return &stepRes{s: live, live: live, id: w.setID(live)}
}

// setID interns the set of interned stacks live, in its order (the same
// set in another order gets another id: less sharing, same results).
func (w *walkStep) setID(live []*frame) int32 {
	k := w.key[:0]
	for _, f := range live {
		k = append(k, byte(f.id), byte(f.id>>8), byte(f.id>>16), byte(f.id>>24))
	}
	w.key = k
	if id, ok := w.sets[string(k)]; ok {
		return id
	}
	id := int32(len(w.sets))
	w.sets[string(k)] = id
	return id
}

// step returns the stack set after byte b from cur, or nil when the step
// is cut short after about budget units (walkStep.work counts them): it
// resumes when asked again for the same cur and b.
func (w *walkStep) step(cur *stepRes, b byte, budget int) *stepRes {
	var row []*stepRes
	if cur.id < maxDenseSets {
		for int(cur.id) >= len(w.memo) {
			w.memo = append(w.memo, nil)
		}
		if row = w.memo[cur.id]; row == nil {
			row = make([]*stepRes, 256)
			w.memo[cur.id] = row
		}
		if m := row[b]; m != nil {
			return m
		}
	} else if m := w.sparse[memoKey{cur.id, b}]; m != nil {
		return m
	}
	t := &w.t
	if w.pcur != cur || w.pb != b {
		t.reset()
		t.in = &w.in
		w.g.begin(cur.live, b, t)
		w.pcur, w.pb = cur, b
	}
	n := t.n
	done := w.g.run(t, budget)
	w.work += t.n - n
	if !done {
		return nil
	}
	w.pcur = nil
	m := &stepRes{s: append([]*frame(nil), t.s...), over: t.over, escaped: t.escaped, work: int32(min(t.n, math.MaxInt32))}
	for _, f := range m.s {
		if f == nil {
			m.ended = true
		} else {
			m.live = append(m.live, f)
		}
	}
	if len(m.live) > 0 {
		m.id = w.setID(m.live)
	}
	if row != nil {
		row[b] = m
	} else {
		w.sparse[memoKey{cur.id, b}] = m
	}
	return m
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

// Space reports whether token id's text is whitespace only (spaces,
// tabs, newlines; not empty): what a thinking model writes between
// </think> and its answer (Think's lead).
func (v *Vocab) Space(id int32) bool {
	if id < 0 || int(id) >= v.n {
		return false
	}
	return IsSpace(v.pieces[id])
}

// Spaces are the whitespace-only tokens (Space), in id order. They are
// listed when the vocabulary is made (NewVocab, off any step): made on
// first use, the ~1 ms walk of a 151k vocabulary ran inside the shared
// step whose sampler first needed them (a thinking model's answer lead),
// and every tenant's step waited for it.
func (v *Vocab) Spaces() []int32 { return v.spaces }

// IsSpace reports whether s is non-empty JSON white space only.
func IsSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return false
		}
	}
	return s != ""
}
