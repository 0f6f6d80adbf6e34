package grammar

import "fmt"

// frame is one entry of a matcher stack: the top frame's pos is a byte
// class element; the frames below hold return positions (the element
// after a rule reference). Frames are immutable and shared between stacks.
type frame struct {
	pos int32
	// id numbers the frames interned by one trie walk (1, 2, ...; 0:
	// not interned), so the walk's memo is an array, not a map.
	id   int32
	next *frame
}

// MaxStacks bounds the stacks a matcher follows at once. The grammars the
// schema compiler emits are nearly deterministic (one or two stacks); an
// ambiguous schema (overlapping anyOf branches nested in each other) could
// multiply them, and past this bound the request fails rather than let one
// request's masks slow the batch everyone shares.
const MaxStacks = 256

func sameStack(a, b *frame) bool {
	for a != b {
		if a == nil || b == nil || a.pos != b.pos {
			return false
		}
		a, b = a.next, b.next
	}
	return true
}

// stackSet is a set of stacks; nil is the empty stack (the grammar is
// complete). over records that MaxStacks was exceeded; escaped that a
// byte could only be consumed after popping the bottom frame (computePos
// uses it: what follows then depends on the stack below).
type stackSet struct {
	s       []*frame
	over    bool
	escaped bool
	// in, when set, interns the frames made into it, so equal stacks
	// are the same pointer (trie walks memoise steps by it).
	in *interner
}

// interner hash-conses frames for one trie walk and numbers them.
type interner struct {
	m map[frameKey]*frame
	n int32
}

type frameKey struct {
	pos  int32
	next *frame
}

func (in *interner) get(pos int32, next *frame) *frame {
	k := frameKey{pos, next}
	if f, ok := in.m[k]; ok {
		return f
	}
	in.n++
	f := &frame{pos: pos, id: in.n, next: next}
	in.m[k] = f
	return f
}

func (ss *stackSet) frame(pos int32, next *frame) *frame {
	if ss.in == nil {
		return &frame{pos: pos, next: next}
	}
	return ss.in.get(pos, next)
}

func (ss *stackSet) add(f *frame) {
	for _, x := range ss.s {
		if x == f || sameStack(x, f) {
			return
		}
	}
	if len(ss.s) >= MaxStacks {
		ss.over = true
		return
	}
	ss.s = append(ss.s, f)
}

// resolve adds the stack at position pos with below under it. Stacks are
// lazy: a top that is a rule reference is expanded only when a byte comes
// (step), and only into the alternatives that byte can start, so a rule of
// many alternatives (a JSON string's character: ASCII, escapes, each UTF-8
// length) costs one stack, not one per alternative. An alternative that
// ends pops to the frame below.
func (g *Grammar) resolve(pos int32, below *frame, out *stackSet) {
	for g.elems[pos].kind == kEnd {
		if below == nil {
			out.add(nil)
			return
		}
		pos, below = below.pos, below.next
	}
	out.add(out.frame(pos, below))
}

// stepFrom consumes byte c at position pos with below under it, adding
// the stacks after it to out. The grammar has no left recursion (checked
// at compile), so the expansion terminates.
func (g *Grammar) stepFrom(pos int32, below *frame, c byte, out *stackSet) {
	e := g.elems[pos]
	switch e.kind {
	case kClass:
		if g.classes[e.arg].has(c) {
			g.resolve(pos+1, below, out)
		}
	case kEnd:
		if below == nil {
			out.escaped = true
			return
		}
		g.stepFrom(below.pos, below.next, c, out)
	case kRef:
		ret := below
		if g.elems[pos+1].kind != kEnd {
			// A reference last in its alternative is a tail call: it
			// pushes nothing, so right recursion does not grow the stack.
			ret = out.frame(pos+1, below)
		}
		for _, s := range g.rules[e.arg] {
			if g.nullAt[s] || g.firstAt[s].has(c) {
				g.stepFrom(s, ret, c, out)
			}
		}
	}
}

// step advances every stack of in by byte c into out.
func (g *Grammar) step(in []*frame, c byte, out *stackSet) {
	for _, f := range in {
		if f != nil {
			g.stepFrom(f.pos, f.next, c, out)
		}
	}
}

// canEnd reports whether stack f can finish without another byte.
func (g *Grammar) canEnd(f *frame) bool {
	for ; f != nil; f = f.next {
		if !g.nullAt[f.pos] {
			return false
		}
	}
	return true
}

// start is the initial stack set of the root rule.
func (g *Grammar) start() stackSet {
	var ss stackSet
	for _, s := range g.rules[g.root] {
		g.resolve(s, nil, &ss)
	}
	return ss
}

// Matcher follows one request's tokens through a compiled grammar. It is
// not safe for concurrent use (a request's sampler owns it).
type Matcher struct {
	c      *Compiled
	stacks []*frame
	ended  bool // an end-of-generation token was accepted
	// tmp are scratch sets for feeding a token's bytes.
	tmp [2]stackSet
}

// NewMatcher starts a matcher at the beginning of the grammar.
func (c *Compiled) NewMatcher() *Matcher {
	ss := c.g.start()
	return &Matcher{c: c, stacks: ss.s}
}

// feed returns the stack set after the bytes of piece from stacks, or
// nil when a byte is refused. over reports MaxStacks was exceeded.
func (m *Matcher) feed(stacks []*frame, piece string) (out []*frame, over bool) {
	cur := stacks
	for i := 0; i < len(piece); i++ {
		t := &m.tmp[i&1]
		t.s, t.over = t.s[:0], false
		m.c.g.step(cur, piece[i], t)
		if t.over {
			return nil, true
		}
		if len(t.s) == 0 {
			return nil, false
		}
		cur = t.s
	}
	return cur, false
}

// CanEnd reports whether the output so far is a complete match: only then
// may an end-of-generation token come.
func (m *Matcher) CanEnd() bool {
	if m.ended {
		return false
	}
	for _, f := range m.stacks {
		if m.c.g.canEnd(f) {
			return true
		}
	}
	return false
}

// Ended reports whether an end-of-generation token was accepted.
func (m *Matcher) Ended() bool { return m.ended }

// Allowed reports whether token id may come next.
func (m *Matcher) Allowed(id int32) bool {
	v := m.c.v
	if id < 0 || int(id) >= v.n || m.ended {
		return false
	}
	if v.isEOG(id) {
		return m.CanEnd()
	}
	p := v.pieces[id]
	if p == "" {
		return false
	}
	out, _ := m.feed(m.stacks, p)
	return len(out) > 0
}

// Accept consumes token id. A refused token is an error and leaves the
// state unchanged: the sampler never draws one, so on a worker it means a
// peer sent tokens this grammar cannot have produced (I14).
func (m *Matcher) Accept(id int32) error {
	v := m.c.v
	if id < 0 || int(id) >= v.n {
		return fmt.Errorf("token %d is outside the vocabulary", id)
	}
	if m.ended {
		return fmt.Errorf("token %d after the end of the constrained output", id)
	}
	if v.isEOG(id) {
		if !m.CanEnd() {
			return fmt.Errorf("end-of-generation token %d before the constrained output is complete", id)
		}
		m.ended, m.stacks = true, nil
		return nil
	}
	p := v.pieces[id]
	out, over := m.feed(m.stacks, p)
	if over {
		return &Error{Code: "grammar_ambiguous", Msg: fmt.Sprintf("the schema is too ambiguous: more than %d parses are alive at once; make anyOf branches distinguishable", MaxStacks)}
	}
	if p == "" || len(out) == 0 {
		return fmt.Errorf("token %d (%q) is not allowed by the grammar here", id, p)
	}
	// out aliases scratch: copy it before the next feed reuses it.
	m.stacks = append(m.stacks[:0:0], out...)
	return nil
}

// Mask sets in dst (one bit per token id, len >= (vocab+63)/64 words) the
// tokens that may come next, clearing the others. It runs a MaskJob to
// the end: a caller that must bound its time runs the job itself.
func (m *Matcher) Mask(dst []uint64) {
	m.MaskJob(dst).Run(int(^uint(0) >> 1))
}

// maxUncertain is the uncertain-token count above which a mask walks the
// trie from the stack instead of checking those tokens one by one.
const maxUncertain = 512

// Clone returns an independent copy of m's state.
func (m *Matcher) Clone() *Matcher {
	return &Matcher{c: m.c, stacks: append([]*frame(nil), m.stacks...), ended: m.ended}
}
