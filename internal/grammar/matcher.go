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
	// h hashes the whole stack from this frame down (equal stacks, equal
	// h), so a set of many stacks finds a duplicate by one probe instead
	// of comparing it with every member.
	h uint64
}

func newFrame(pos int32, next *frame) *frame {
	var h uint64
	if next != nil {
		h = next.h
	}
	h = (h ^ uint64(uint32(pos))) * 0x9E3779B97F4A7C15
	h ^= h >> 29
	return &frame{pos: pos, next: next, h: h | 1} // nonzero: 0 is the empty stack's
}

func (f *frame) hash() uint64 {
	if f == nil {
		return 0
	}
	return f.h
}

// MaxStacks bounds the stacks a matcher follows at once. The grammars the
// schema compiler emits are nearly deterministic (one or two stacks); an
// ambiguous schema (anyOf branches that begin alike: a 300-way anyOf of
// objects is 300 stacks after its "{") multiplies them. The bound is on
// what one byte of a token's check may cost (an expansion per stack; a
// check runs within the step's grammar budget in slices, CheckWithin)
// and what a mask's walk steps at once: a token
// that would keep more parses alive is refused (Allowed, the mask), and a
// request left with no other token fails with grammar_ambiguous rather
// than let one request's masks slow the batch everyone shares.
const MaxStacks = 512

// maxStacks is the bound in force: MaxStacks, lowered by tests to reach
// it with small schemas.
var maxStacks = MaxStacks

func sameStack(a, b *frame) bool {
	for a != b {
		if a == nil || b == nil || a.pos != b.pos || a.h != b.h {
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
	// tab indexes s by stack hash (open addressing, index+1; 0 empty)
	// once s holds hashAt stacks; below that a scan is cheaper.
	tab []int32
	// n counts the work of the steps into s since reset: one unit per
	// stack stepped and per alternative a reference looks at (a
	// reference of 1,000 alternatives costs 1,000 whichever the byte).
	n int
	// visits are the (position, stack below) pairs stepFrom expanded
	// since reset, kept while one stack's expansion has cost more than
	// memoAt (n0 is n when it began): two ways to the same pair add the
	// same stacks, so the second is skipped. A pair is known by its
	// stack below's content (hash, then sameStack), not by the frame's
	// address: a token's check builds its frames afresh where a mask's
	// walk shares them (interner), and keyed by address the check merged
	// fewer ways than the walk, so near MaxByteWork the mask allowed
	// tokens whose check passed the bound (10,832 units against the
	// walk's 8,498 for one byte of nested repetitions).
	visits map[visitKey]*frame
	n0     int
	// The step under way (begin, run): the stacks from (from; from[i:]
	// not begun yet), the byte, and the work list of the (position,
	// stack below) pairs the stack being stepped has still to expand,
	// last first. The step can stop between two pairs when its budget
	// is spent and resume there (a byte of nested repetitions is tens of
	// thousands of units, several steps' grammar budgets).
	from []*frame
	i    int
	c    byte
	todo []frameKey
}

// memoAt is the work of one stack's step by a byte from which stepFrom
// remembers what it expanded. A schema can reach one rule by many ways
// without a byte in between ($defs d_i = anyOf[d_i+1, d_i+1]: 2^n ways
// to d_n, a regex's (a?|b?)(a?|b?)...): followed way by way, one byte
// cost 2^n expansions (n = 24: 134 million, seconds of a worker's shared
// step; n = 40: days), all adding the same stacks. A stack's step below
// memoAt, the common case even at hundreds of stacks, is cheaper without
// the map (with it from the step's first unit, a check at 500 stacks
// took 4x as long).
const memoAt = 256

// memoKeep is the most pairs a step's memo may hold and still be kept
// for the next step (cleared) rather than dropped: about 100 KB.
const memoKeep = 4096

// MaxByteWork bounds the work of stepping the stacks by one byte: past
// it the step counts as over (too many parses, as past MaxStacks: the
// token is refused, grammar_ambiguous if nothing else is allowed). It
// stops what the memo does not merge: ways that each build a different
// stack below, as nested repetitions that may all be empty do (60
// string patterns of nine nested {0,2} groups, 37 KB: a byte none of
// them takes follows about 2 million ways). A byte's step is cut into
// slices like the rest of a check or a mask (stackSet's work list: the
// grammar budget of the worker's shared step bounds each slice), so the
// bound does not say what one byte may hold one step; it is a safety
// limit on one byte's whole work and its memo, spread over the
// constrained request's own steps: a remembered unit costs about 1-2 us
// on a loaded machine (map and frames), so 2^21 units were 4.1 s at load
// 25 (Intel Xeon family 6 model 167) and 2^16 are 70 ms. No schema the tests know
// comes near it (the hostile corpus, wide anyOf of objects and of
// patterns); a 512-stack step into a 1,000-way anyOf (about 512,000)
// is now refused.
const MaxByteWork = 1 << 16

// maxByteWork is the bound in force: MaxByteWork, lowered by tests.
var maxByteWork = MaxByteWork

// hashAt is the set size from which add finds duplicates through tab.
const hashAt = 16

// reset empties ss for another step (keeping its memory).
func (ss *stackSet) reset() {
	ss.s, ss.over, ss.escaped, ss.n = ss.s[:0], false, false, 0
	ss.from, ss.i, ss.todo = nil, 0, ss.todo[:0]
	if len(ss.visits) > 0 {
		clear(ss.visits)
	}
	if len(ss.tab) > 0 {
		clear(ss.tab)
		ss.tab = ss.tab[:0]
	}
}

// index puts s[i] in tab, which has room.
func (ss *stackSet) index(i int) {
	mask := uint64(len(ss.tab) - 1)
	for k := ss.s[i].hash() & mask; ; k = (k + 1) & mask {
		if ss.tab[k] == 0 {
			ss.tab[k] = int32(i + 1)
			return
		}
	}
}

// has reports whether stack f is in ss (through tab).
func (ss *stackSet) has(f *frame) bool {
	h := f.hash()
	mask := uint64(len(ss.tab) - 1)
	for k := h & mask; ss.tab[k] != 0; k = (k + 1) & mask {
		if x := ss.s[ss.tab[k]-1]; x == f || (x.hash() == h && sameStack(x, f)) {
			return true
		}
	}
	return false
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

// visitKey is a (position, stack below) pair by the stack's hash.
type visitKey struct {
	pos int32
	h   uint64
}

func (in *interner) get(pos int32, next *frame) *frame {
	k := frameKey{pos, next}
	if f, ok := in.m[k]; ok {
		return f
	}
	in.n++
	f := newFrame(pos, next)
	f.id = in.n
	in.m[k] = f
	return f
}

func (ss *stackSet) frame(pos int32, next *frame) *frame {
	if ss.in == nil {
		return newFrame(pos, next)
	}
	return ss.in.get(pos, next)
}

// add puts stack f in ss unless it is there already. The set keeps its
// order of first addition, whichever way duplicates are found.
func (ss *stackSet) add(f *frame) {
	if len(ss.s) < hashAt {
		for _, x := range ss.s {
			if x == f || sameStack(x, f) {
				return
			}
		}
	} else {
		if len(ss.tab) < 2*(len(ss.s)+1) {
			// (Re)build the index at twice the room it needs.
			n := 4 * hashAt
			for n < 2*(len(ss.s)+1) {
				n *= 2
			}
			if cap(ss.tab) >= n {
				ss.tab = ss.tab[:n]
				clear(ss.tab)
			} else {
				ss.tab = make([]int32, n)
			}
			for i := range ss.s {
				ss.index(i)
			}
		}
		if ss.has(f) {
			return
		}
	}
	if len(ss.s) >= maxStacks {
		ss.over = true
		return
	}
	ss.s = append(ss.s, f)
	if len(ss.tab) > 0 {
		ss.index(len(ss.s) - 1)
	}
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

// expand consumes byte c at position pos with below under it: a class
// that takes c adds the stack after it to out; an alternative's end pops
// to the frame below, and a reference expands into its alternatives that
// may take c. It returns the pair to expand next, if any (the frame
// below, the first such alternative), and puts the other alternatives on
// out's work list, last first, so the work list expands the ways depth
// first in the grammar's order, as a recursion would. The grammar has no
// left recursion (checked at compile), so the expansion terminates.
func (g *Grammar) expand(pos int32, below *frame, c byte, out *stackSet) (int32, *frame, bool) {
	e := g.elems[pos]
	out.n++
	if out.n-out.n0 > memoAt {
		// The same (pos, below) adds the same stacks: once is enough.
		// (No way leads back to its own pair: that would be left
		// recursion.)
		if out.visits == nil {
			out.visits = map[visitKey]*frame{}
		}
		k := visitKey{pos, below.hash()}
		if seen, ok := out.visits[k]; !ok {
			out.visits[k] = below
		} else if sameStack(seen, below) {
			return 0, nil, false
		}
		// (Another stack of the same hash: expanded without the memo.)
		if out.n > maxByteWork {
			out.over = true
			return 0, nil, false
		}
	}
	switch e.kind {
	case kClass:
		if g.classes[e.arg].has(c) {
			g.resolve(pos+1, below, out)
		}
	case kEnd:
		if below == nil {
			out.escaped = true
			return 0, nil, false
		}
		return below.pos, below.next, true
	case kRef:
		ret := below
		if g.elems[pos+1].kind != kEnd {
			// A reference last in its alternative is a tail call: it
			// pushes nothing, so right recursion does not grow the stack.
			ret = out.frame(pos+1, below)
		}
		alts := g.rules[e.arg]
		out.n += len(alts)
		first := -1
		for k, s := range alts {
			if g.nullAt[s] || g.firstAt[s].has(c) {
				first = k
				break
			}
		}
		if first < 0 {
			return 0, nil, false
		}
		for k := len(alts) - 1; k > first; k-- {
			if s := alts[k]; g.nullAt[s] || g.firstAt[s].has(c) {
				out.todo = append(out.todo, frameKey{s, ret})
			}
		}
		return alts[first], ret, true
	}
	return 0, nil, false
}

// begin starts the step of every stack of from by byte c into out (reset).
// from must not change until the step is done.
func (g *Grammar) begin(from []*frame, c byte, out *stackSet) {
	out.from, out.i, out.c = from, 0, c
}

// run goes on with out's step for about budget units (it may pass it by
// one pair's expansion: a reference's alternatives) and reports whether
// the step is done. A step cut short resumes where it stopped at the next
// run, with the same result as a step run at once.
func (g *Grammar) run(out *stackSet, budget int) (done bool) {
	n, c := out.n, out.c
	for {
		if out.over {
			// Past MaxStacks (or MaxByteWork) the step is refused
			// whatever else it adds: following the rest of the ways is
			// work for nothing. (expand hands back no pair once over.)
			out.todo, out.i = out.todo[:0], len(out.from)
		}
		var k frameKey
		if l := len(out.todo); l > 0 {
			k = out.todo[l-1]
			out.todo = out.todo[:l-1]
		} else if out.i < len(out.from) {
			f := out.from[out.i]
			out.i++
			if f == nil {
				continue
			}
			out.n0 = out.n
			k = frameKey{f.pos, f.next}
		} else {
			break
		}
		// Depth first: the pair expand hands back is expanded next.
		for more := true; more; {
			if out.n-n >= budget {
				out.todo = append(out.todo, k)
				return false
			}
			k.pos, k.next, more = g.expand(k.pos, k.next, c, out)
		}
	}
	out.from = nil
	// The memo is this step's alone: a large one is not kept (up to
	// MaxByteWork pairs and the frames they point to, in each of a
	// matcher's sets for its request's life); a small one is
	// reused (a union walk over a 300-way anyOf of objects passes
	// memoAt at most nodes: making the map anew each took 2x as long).
	if len(out.visits) > memoKeep {
		out.visits = nil
	}
	return true
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

// takesAny reports whether stack f may consume one of the bytes of set
// (an upper bound: first sets, through the frames an empty match pops).
func (g *Grammar) takesAny(f *frame, set *byteSet) bool {
	for ; f != nil; f = f.next {
		for k := range set {
			if set[k]&g.firstAt[f.pos][k] != 0 {
				return true
			}
		}
		if !g.nullAt[f.pos] {
			return false
		}
	}
	return false
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
	// wide: the grammar's start alone is more than MaxStacks parses; no
	// token is allowed and the mask reports it (MaskJob.Over).
	wide bool
	// tmp is the scratch of feeding a token's bytes at once (Accept).
	tmp feedJob
	// Checking a token costs a step of every stack the matcher follows
	// by every byte of the token: up to MaxStacks x the token's bytes
	// (a 128-space token at 500 stacks is about 10^5 units, tens of
	// milliseconds), so a check is resumable (CheckWithin) and a worker
	// runs it within the step's grammar budget like a mask. chk is the
	// check under way; seen are the checks done at this position, so
	// a draw repeated after a deferral does not check again, and the
	// Accept of a checked token takes its stack set instead of feeding
	// the token a second time (TestAcceptTakesTheCheck).
	chk  tokenCheck
	seen []checked
	// fed counts feeds of a token's bytes begun (tests); work counts the
	// units of every check and feed (CheckWork).
	fed  int
	work int
}

// tokenCheck is a check of token id cut short: the feed of its bytes.
type tokenCheck struct {
	id     int32
	active bool
	f      feedJob
}

// feedJob feeds a token's bytes to a set of stacks in slices of bounded
// work, cut between two bytes or inside one byte's step (stackSet's work
// list): the stacks after bytes [0, i) are in sets[(i-1)&1] (from, when
// i is 0), and byte i's step is under way in sets[i&1] when mid. Done, out
// is the stack set after the token (scratch: sets's), nil when a byte was
// refused; over says a step passed MaxStacks (or MaxByteWork); peak is
// the largest set stepped through (MaxStacks+1 when over).
type feedJob struct {
	from  []*frame
	piece string
	i     int
	mid   bool
	sets  [2]stackSet
	out   []*frame
	over  bool
	peak  int
	// peakWork is the most units one byte's step took.
	peakWork int
}

// start begins feeding piece to stacks from, which must not change until
// the feed is done.
func (f *feedJob) start(from []*frame, piece string) {
	f.from, f.piece, f.i, f.mid, f.out, f.over, f.peak, f.peakWork = from, piece, 0, false, nil, false, 0, 0
}

// run goes on feeding for about budget units (it may pass it by one
// expansion of a byte's step) and reports the units used and whether the
// feed is done.
func (f *feedJob) run(g *Grammar, budget int) (used int, done bool) {
	cur := f.from
	for f.i < len(f.piece) {
		if used >= budget {
			return used, false
		}
		t := &f.sets[f.i&1]
		if !f.mid {
			if f.i > 0 {
				cur = f.sets[(f.i-1)&1].s
			}
			t.reset()
			g.begin(cur, f.piece[f.i], t)
			f.mid = true
		}
		n := t.n
		ok := g.run(t, budget-used)
		used += t.n - n
		if !ok {
			return used, false
		}
		f.mid = false
		f.i++
		f.peakWork = max(f.peakWork, t.n)
		if t.over {
			f.over, f.peak = true, maxStacks+1
			return used, true
		}
		f.peak = max(f.peak, len(t.s))
		if len(t.s) == 0 {
			return used, true
		}
		cur = t.s
	}
	f.out = cur
	return used, true
}

// checked is a finished check: ok with the stack set after the token
// (owned), or refused (over: only for passing MaxStacks).
type checked struct {
	id       int32
	ok, over bool
	out      []*frame
}

// NewMatcher starts a matcher at the beginning of the grammar.
func (c *Compiled) NewMatcher() *Matcher {
	ss := c.g.start()
	if ss.over {
		return &Matcher{c: c, wide: true}
	}
	return &Matcher{c: c, stacks: ss.s}
}

// feed returns the stack set after the bytes of piece from stacks, or
// nil when a byte is refused, at once. over reports MaxStacks was
// exceeded.
func (m *Matcher) feed(stacks []*frame, piece string) (out []*frame, over bool) {
	m.fed++
	m.tmp.start(stacks, piece)
	units, _ := m.tmp.run(m.c.g, int(^uint(0)>>1))
	m.work += units
	return m.tmp.out, m.tmp.over
}

// ErrAmbiguous is the error of a request whose schema keeps more than
// MaxStacks parses alive at once where it must go on (or whose mask
// needs more than MaxMaskWork): the schema's fault, a 400.
func ErrAmbiguous() *Error {
	return &Error{Code: "grammar_ambiguous", Msg: fmt.Sprintf("the schema is too ambiguous: more than %d parses would be alive at once; make anyOf branches distinguishable by their first bytes (a different key or type), or split the anyOf", MaxStacks)}
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

// Costly reports whether checking one token (Allowed) costs like a
// slice of a mask: the matcher follows more stacks than a mask takes one
// at a time, each stepped by every byte. A sampler then checks several
// candidates against the mask, whose work the step's budget bounds,
// rather than one by one outside it.
func (m *Matcher) Costly() bool { return len(m.stacks) > unionAt }

// Ended reports whether an end-of-generation token was accepted.
func (m *Matcher) Ended() bool { return m.ended }

// Allowed reports whether token id may come next.
func (m *Matcher) Allowed(id int32) bool {
	ok, _, _ := m.CheckWithin(id, int(^uint(0)>>1))
	return ok
}

// CheckWithin is Allowed in slices: it goes on checking token id for
// about budget units of work (it may pass it by one expansion: the
// alternatives of one rule reference) and reports whether the check is
// done and, when it is, its answer. A check is cut between two bytes or
// inside one byte's step (a byte of nested repetitions can cost tens of
// thousands of units). A check cut short resumes where it stopped when the same token
// is asked again before the matcher moves on (another token's check
// drops it); a finished one is answered again without work. The unit is
// MaskJob's (one stack stepped by one byte, one alternative looked at).
func (m *Matcher) CheckWithin(id int32, budget int) (ok, done bool, used int) {
	v := m.c.v
	if id < 0 || int(id) >= v.n || m.ended {
		return false, true, 0
	}
	if v.isEOG(id) {
		return m.CanEnd(), true, 0
	}
	p := v.pieces[id]
	if p == "" || m.wide {
		return false, true, 0
	}
	if r := m.result(id); r != nil {
		return r.ok, true, 0
	}
	c := &m.chk
	if !c.active || c.id != id {
		c.id, c.active = id, true
		c.f.start(m.stacks, p)
		m.fed++
	}
	used, done = c.f.run(m.c.g, budget)
	m.work += used
	if !done {
		return false, false, used
	}
	c.active = false
	if c.f.out == nil {
		if len(m.seen) < maxSeen {
			m.seen = append(m.seen, checked{id: id, over: c.f.over})
		}
		return false, true, used
	}
	if len(m.seen) < maxSeen {
		out := append([]*frame(nil), c.f.out...)
		m.seen = append(m.seen, checked{id: id, ok: true, out: out})
	}
	return true, true, used
}

// maxSeen bounds the checks a position remembers: a sampler checks the
// drawn token and at most a few dozen candidates (more are masked), and a
// caller that checks the whole vocabulary (tests) should not grow a list
// it scans.
const maxSeen = 64

// CheckPending is the token whose check CheckWithin cut short, if any.
func (m *Matcher) CheckPending() (id int32, ok bool) { return m.chk.id, m.chk.active }

// CheckWork is the work units the matcher spent checking and feeding
// tokens since it was made (masks are MaskJob's, counted by their Run).
func (m *Matcher) CheckWork() int { return m.work }

// result is the finished check of token id at this position, or nil.
func (m *Matcher) result(id int32) *checked {
	for i := range m.seen {
		if m.seen[i].id == id {
			return &m.seen[i]
		}
	}
	return nil
}

// moved forgets the checks of the position the matcher left.
func (m *Matcher) moved() {
	clear(m.seen)
	m.seen = m.seen[:0]
	m.chk.active = false
}

// Accept consumes token id. A refused token is an error and leaves the
// state unchanged: the sampler never draws one, so on a worker it means a
// peer sent tokens this grammar cannot have produced (I14). A token
// checked at this position costs no work: Accept takes the check's
// result.
func (m *Matcher) Accept(id int32) error {
	v := m.c.v
	if id < 0 || int(id) >= v.n {
		return fmt.Errorf("token %d is outside the vocabulary", id)
	}
	if m.ended {
		return fmt.Errorf("token %d after the end of the constrained output", id)
	}
	if m.wide {
		return ErrAmbiguous()
	}
	if v.isEOG(id) {
		if !m.CanEnd() {
			return fmt.Errorf("end-of-generation token %d before the constrained output is complete", id)
		}
		m.ended, m.stacks = true, nil
		m.moved()
		return nil
	}
	p := v.pieces[id]
	var out []*frame
	var over bool
	if r := m.result(id); r != nil {
		out, over = r.out, r.over
	} else if p != "" {
		out, over = m.feed(m.stacks, p)
		// out aliases scratch: copy it before the next feed reuses it.
		out = append([]*frame(nil), out...)
	}
	if over {
		return ErrAmbiguous()
	}
	if p == "" || len(out) == 0 {
		return fmt.Errorf("token %d (%q) is not allowed by the grammar here", id, p)
	}
	m.stacks = out
	m.moved()
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
	return &Matcher{c: m.c, stacks: append([]*frame(nil), m.stacks...), ended: m.ended, wide: m.wide}
}

// Vocab is the vocabulary the matcher's tokens come from.
func (m *Matcher) Vocab() *Vocab { return m.c.v }
