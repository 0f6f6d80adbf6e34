package grammar

// A mask over a large vocabulary can cost a walk of the whole token trie
// (a cold position of a wide byte class: 123k trie nodes at 151k tokens,
// ~3 ms of CPU, tens of ms on a loaded machine). On a
// worker that runs every request's sampling on one shared step, such a
// walk would stall every other tenant's next token. So the mask is a job
// that runs in slices of bounded work (MaskJob.Run): the caller decides
// how much of a step it may take and resumes it at the next one. The
// result does not depend on how the work was sliced.

// trieWalk is a depth-first walk of the token trie that can stop after
// any node and resume: the recursion of the walk is an explicit stack.
// At each node, visit is given the stack set after the node's byte (and
// the set before it, the parent's) and
// reports whether the node's children are walked (from r's live stacks)
// and the escape flag they inherit.
type trieWalk struct {
	v     *Vocab
	ws    *walkStep
	st    []walkFrame
	visit func(ch int32, parent, r *stepRes, esc bool) (descend, childEsc bool)
	// only, when set, restricts the walk to the subtrees holding one of
	// these tokens (trie-order indexes, ascending); at is the first of
	// them not behind the walk. The walk visits nodes in trie order, so
	// at only moves forward.
	only []int32
	at   int
}

type walkFrame struct {
	n, ch int32 // the node whose children are walked, the next child
	cur   *stepRes
	esc   bool
}

func newTrieWalk(v *Vocab, ws *walkStep, from []*frame, esc bool) *trieWalk {
	return &trieWalk{v: v, ws: ws, st: []walkFrame{{n: 0, ch: 1, cur: ws.state(from), esc: esc}}}
}

// run steps up to budget trie nodes; done when the walk is complete.
func (w *trieWalk) run(budget int) (used int, done bool) {
	work0 := w.ws.work
	for len(w.st) > 0 {
		if used >= budget {
			return used, false
		}
		d := len(w.st) - 1
		top := &w.st[d]
		if top.ch >= w.v.nodes[top.n].sub {
			w.st[d] = walkFrame{}
			w.st = w.st[:d]
			continue
		}
		ch := top.ch
		nd := w.v.nodes[ch]
		if w.only != nil {
			for w.at < len(w.only) && w.only[w.at] < nd.t0 {
				w.at++
			}
			if w.at == len(w.only) {
				w.st = w.st[:0] // nothing left to look at
				return used, true
			}
			if w.only[w.at] >= w.v.toks2(ch) {
				top.ch = nd.sub
				continue // no token of interest below ch
			}
		}
		// A node costs one unit and the work of its memo miss's step
		// (walkStep.work, what a token's check charges for the same
		// step): a walk from a set of many stacks costs up to MaxStacks
		// expansions a node, and a walk from one stack fans out too
		// (before a wide anyOf, hundreds after the first byte; in nested
		// repetitions thousands of ways for one byte). A step that does
		// not fit the budget stops inside and the walk resumes at the
		// same node.
		r := w.ws.step(top.cur, nd.b, budget-used)
		used += w.ws.work - work0
		work0 = w.ws.work
		if r == nil {
			return used, false
		}
		used++
		top.ch = nd.sub // the next sibling
		descend, esc := w.visit(ch, top.cur, r, top.esc)
		if descend && len(r.live) > 0 && nd.sub > ch+1 {
			w.st = append(w.st, walkFrame{n: ch, ch: ch + 1, cur: r, esc: esc})
		}
	}
	return used, true
}

// posWalk is computePos as a resumable walk: the trie from the one-frame
// stack [p]. A path that pops that frame has left p's rule: what follows
// depends on the stack below, so the tokens on it that the rule alone
// does not accept are uncertain.
func (c *Compiled) posWalk(p int32) (*trieWalk, *posMask) {
	v := c.v
	pm := &posMask{accept: make([]uint64, v.Words())}
	ws := newWalkStep(c.g)
	w := newTrieWalk(v, ws, []*frame{ws.intern(&frame{pos: p})}, false)
	pm.fan = 1
	w.visit = func(ch int32, parent, r *stepRes, escaped bool) (bool, bool) {
		nd := v.nodes[ch]
		esc := escaped || r.over || r.escaped || r.ended
		pm.work = max(pm.work, r.work)
		if r.over {
			pm.fan = int32(maxStacks + 1)
		} else {
			pm.fan = max(pm.fan, int32(len(r.s)))
		}
		if len(r.live) == 0 {
			if esc {
				for k := nd.t0; k < v.toks2(ch); k++ {
					pm.uncertain = append(pm.uncertain, k)
				}
			}
			return false, esc
		}
		if r.escaped || parent.ended {
			// A token accepted here left p's rule at byte nd.b on one
			// parse and stayed in it on another: on the real stack, the
			// frames below step that byte too, adding stacks that fan
			// does not count unless they refuse it (escLive).
			pm.escLive = true
			pm.escBytes.add(nd.b)
		}
		for _, id := range v.toks[nd.t0:nd.t1] {
			pm.accept[id>>6] |= 1 << (id & 63)
		}
		return true, esc
	}
	return w, pm
}

// computePos is posWalk run to the end.
func (c *Compiled) computePos(p int32) *posMask {
	w, pm := c.posWalk(p)
	w.run(int(^uint(0) >> 1))
	return pm
}

// exactWalk sets in dst every token accepted from the stacks: a trie walk
// whose state at each node is the stack set after that node's bytes.
// With only set, it looks at those tokens (trie-order indexes, ascending)
// and does not walk the subtrees that hold none: what a position's own
// rule decides is in its posMask already, and only the uncertain tokens
// need the whole stack. A node whose set passes MaxStacks is refused with
// its subtree, as Accept refuses it; peak records the largest set met
// (MaxStacks+1 past the bound) and over that the bound refused a node.
//
// From a set of many stacks (the union walk), the walk carries the whole
// set, so a token is refused exactly when the union of all stacks
// refuses it or passes the bound, and each (set, byte) step is memoised
// once for every trie node that reaches it.
func (c *Compiled) exactWalk(stacks []*frame, dst []uint64, only []int32, peak, peakWork *int, over *bool) *trieWalk {
	v := c.v
	ws := newWalkStep(c.g)
	in := make([]*frame, len(stacks))
	for i, f := range stacks {
		in[i] = ws.intern(f)
	}
	w := newTrieWalk(v, ws, in, false)
	w.only = only
	w.visit = func(ch int32, _, r *stepRes, _ bool) (bool, bool) {
		*peakWork = max(*peakWork, int(r.work))
		if r.over {
			*peak, *over = maxStacks+1, true
			return false, false
		}
		if len(r.s) == 0 {
			return false, false
		}
		*peak = max(*peak, len(r.s))
		nd := v.nodes[ch]
		for _, id := range v.toks[nd.t0:nd.t1] {
			dst[id>>6] |= 1 << (id & 63)
		}
		return true, false
	}
	return w
}

// MaskJob computes a matcher's mask (what Mask computes) in slices of
// bounded work. The matcher must not accept a token while a job for it
// is unfinished. Its work unit is one trie node stepped, one stack
// stepped by a byte or one alternative a reference looks at (in a trie
// walk or an uncertain token's check; a token check,
// Matcher.CheckWithin, counts the same): tens of ns each, several times
// that on a loaded machine (MaxMaskWork).
//
// A mask is computed one stack at a time (each from its position's
// cached mask) while that is exact: the union of the stacks' masks is
// the mask of their union as long as no token can keep more than
// MaxStacks stacks alive or cost more than MaxByteWork for one byte,
// where Accept refuses it. The job sums bounds on what each stack can
// become within one token (fan) and on what one byte's step of it costs
// (posMask.work); a set of more than unionAt stacks, or a sum past
// either bound, is masked by one walk of the trie carrying the whole set
// instead (the union walk), which refuses exactly the tokens Accept
// refuses, the bounds included (its steps are the check's, memo and
// all).
type MaskJob struct {
	m   *Matcher
	dst []uint64
	i   int // the stack being masked
	ph  phase
	// For stack i: pm is its position's mask once known; pw computes it
	// into pmNew when it was not cached; u is the next uncertain token to
	// check; xw walks the trie from the whole stack instead.
	pm    *posMask
	pw    *trieWalk
	pmNew *posMask
	u     int
	xw    *trieWalk
	// uf feeds uncertain token u, cut short when feeding.
	uf      *feedJob
	feeding bool
	// fan sums the bounds of the stacks done; peak is stack i's. fanWork
	// and peakWork are the same for one byte's step work (posMask.work).
	fan, peak         int
	fanWork, peakWork int
	// uw is the union walk; over says it refused a token for MaxStacks
	// alone; work is the units it used.
	uw   *trieWalk
	over bool
	work int
}

// unionAt is the stack count above which a mask is the union walk: per
// stack, each stack costs a pass over its position's mask (a word per 64
// tokens) and a cold position a walk of the trie.
const unionAt = 32

// MaxMaskWork bounds the work of one union walk: a schema whose mask
// needs more gets no token (its request fails with grammar_ambiguous)
// rather than hold a share of the worker's steps for long. What the bound
// costs: a unit of the union walk is 35-55 ns of CPU on an AMD EPYC Zen 4
// (BenchmarkUnionWalk, Qwen2's 151k vocabulary, 2 vCPUs at load 7-13),
// so a walk at the bound is 0.6-0.9 s of CPU, and 1.7-5 s on a machine
// loaded 13-30 (0.1-0.3 us a unit measured there). It is spread over
// steps by the grammar budget, so that time is the constrained request's
// wait, not its co-tenants'. For scale: the first mask inside a 300-way
// anyOf of objects is about 176,000 units, inside a 500-way anyOf of
// string patterns about 1,050,000 (21-47 ns a unit on an Intel Xeon
// family 6 model 167 at load 26: since walks count the alternatives
// their steps look at, as checks do; counting stacks alone they were
// 99,000 and 270,000 units of 130-180 ns).
const MaxMaskWork = 1 << 24

// maxMaskWork is the bound in force (tests lower it).
var maxMaskWork = MaxMaskWork

type phase uint8

const (
	phStart     phase = iota // stack i not looked at yet
	phPos                    // computing its position's mask (pw)
	phAccept                 // its position's mask is known (pm)
	phUncertain              // checking pm's uncertain tokens one by one
	phExact                  // walking the trie from the whole stack (xw)
	phUnion                  // walking the trie from the whole set (uw)
	phDone                   // the mask is complete
)

// MaskJob starts computing the tokens that may come next into dst (one
// bit per token id, len >= (vocab+63)/64 words); dst is cleared now and
// complete when Run reports done.
func (m *Matcher) MaskJob(dst []uint64) *MaskJob {
	clear(dst)
	j := &MaskJob{m: m, dst: dst}
	switch {
	case m.ended:
		j.ph = phDone
	case m.wide:
		j.ph, j.over = phDone, true
	case len(m.stacks) > unionAt:
		j.union()
	}
	return j
}

// Done reports whether the mask is complete.
func (j *MaskJob) Done() bool { return j.ph == phDone }

// Over reports whether the mask refused a token only because it would
// keep more than MaxStacks parses alive (or the union walk passed
// MaxMaskWork): a request left with no token then fails with
// grammar_ambiguous, not as a dead end of the schema.
func (j *MaskJob) Over() bool { return j.over }

// union restarts the job as the union walk.
func (j *MaskJob) union() {
	m := j.m
	clear(j.dst)
	var live []*frame
	for _, f := range m.stacks {
		if f == nil {
			continue
		}
		live = append(live, f)
	}
	if m.CanEnd() {
		for _, id := range m.c.v.eog {
			j.dst[id>>6] |= 1 << (id & 63)
		}
	}
	j.pm, j.pw, j.pmNew, j.xw, j.u, j.feeding = nil, nil, nil, nil, 0, false
	j.ph = phDone
	if len(live) > 0 {
		var peak, peakWork int
		j.uw = m.c.exactWalk(live, j.dst, nil, &peak, &peakWork, &j.over)
		j.ph = phUnion
	}
}

// Run does up to about budget units of work (it may pass it by one
// expansion, a reference's alternatives, and by the union of one
// position's accepted set; the steps of its trie nodes and uncertain
// tokens are cut inside a byte when they do not fit) and reports the
// units used and whether the mask is complete.
func (j *MaskJob) Run(budget int) (used int, done bool) {
	m := j.m
	v := m.c.v
	for {
		switch j.ph {
		case phDone:
			return used, true
		case phStart:
			if j.i >= len(m.stacks) {
				j.ph = phDone
				continue
			}
			f := m.stacks[j.i]
			if m.c.g.canEnd(f) {
				for _, id := range v.eog {
					j.dst[id>>6] |= 1 << (id & 63)
				}
			}
			if f == nil {
				j.i++
				continue
			}
			if j.pm = m.c.cachedPos(f.pos); j.pm != nil {
				j.ph = phAccept
			} else {
				j.pw, j.pmNew = m.c.posWalk(f.pos)
				j.ph = phPos
			}
		case phPos:
			n, ok := j.pw.run(budget - used)
			used += n
			if !ok {
				return used, false
			}
			j.pm = m.c.storePos(m.stacks[j.i].pos, j.pmNew)
			j.pw, j.pmNew = nil, nil
			j.ph = phAccept
		case phAccept:
			j.peak, j.peakWork = int(j.pm.fan), int(j.pm.work)
			if j.past() || (j.pm.escLive && m.c.g.takesAny(m.stacks[j.i].next, &j.pm.escBytes)) {
				j.union()
				continue
			}
			for i, w := range j.pm.accept {
				j.dst[i] |= w
			}
			used += len(j.pm.accept) / 64
			if len(j.pm.uncertain) > maxUncertain {
				// Near the end of a rule most tokens leave it, and what
				// they may continue with depends on the stack below: one
				// walk of the trie from the whole stack, which prunes
				// each subtree at its first refused byte, is cheaper than
				// checking each.
				var over bool
				j.xw = m.c.exactWalk(m.stacks[j.i:j.i+1], j.dst, j.pm.uncertain, &j.peak, &j.peakWork, &over)
				j.ph = phExact
			} else {
				j.u = 0
				j.ph = phUncertain
			}
		case phExact:
			n, ok := j.xw.run(budget - used)
			used += n
			if j.past() {
				j.union()
				continue
			}
			if !ok {
				return used, false
			}
			j.next()
		case phUncertain:
			for j.u < len(j.pm.uncertain) {
				if used >= budget {
					return used, false
				}
				id := v.toks[j.pm.uncertain[j.u]]
				if !j.feeding {
					// Each token is fed even when another stack allowed
					// it already: its stacks count towards fan.
					if j.uf == nil {
						j.uf = &feedJob{}
					}
					j.uf.start(m.stacks[j.i:j.i+1], v.pieces[id])
					j.feeding = true
					m.fed++
					used++
				}
				// One stack can fan out to many within the token: the
				// work is the stacks stepped, not the token's bytes; a
				// byte's step is cut into slices like the walks' nodes.
				units, done := j.uf.run(m.c.g, budget-used)
				used += units
				m.work += units
				if !done {
					return used, false
				}
				j.feeding = false
				j.u++
				if len(j.uf.out) > 0 {
					j.dst[id>>6] |= 1 << (id & 63)
				}
				j.peak, j.peakWork = max(j.peak, j.uf.peak), max(j.peakWork, j.uf.peakWork)
				if j.past() {
					break
				}
			}
			if j.past() {
				j.union()
				continue
			}
			j.next()
		case phUnion:
			n, ok := j.uw.run(min(budget-used, maxMaskWork-j.work+1))
			used += n
			j.work += n
			if j.work > maxMaskWork {
				clear(j.dst)
				j.over, j.uw, j.ph = true, nil, phDone
				continue
			}
			if !ok {
				return used, false
			}
			j.uw, j.ph = nil, phDone
		}
		if used >= budget && j.ph != phDone {
			return used, false
		}
	}
}

// past reports whether the stacks done and stack i could, on one token,
// keep more than MaxStacks parses alive or take more than MaxByteWork for
// one byte's step: then masking one stack at a time is not exact (a
// token's check steps them all at once) and the job becomes the union
// walk.
func (j *MaskJob) past() bool {
	return j.fan+j.peak > maxStacks || j.fanWork+j.peakWork > maxByteWork
}

// next moves the job to the next stack.
func (j *MaskJob) next() {
	j.i++
	j.fan += j.peak
	j.fanWork += j.peakWork
	j.pm, j.pw, j.pmNew, j.xw, j.u, j.peak, j.peakWork, j.feeding = nil, nil, nil, nil, 0, 0, 0, false
	j.ph = phStart
}
