// Package grammar is sluice's constrained-decoding engine: a byte-level
// context-free grammar (compiled from a JSON Schema, or "any JSON
// object"), a matcher that follows one request's output through it, and
// a per-step mask of the vocabulary's tokens that may come next.
//
// Why this shape. The grammar is a set of rules, each a list of
// alternatives, each a sequence of byte classes and rule references (the
// shape of llama.cpp's GBNF). A matcher's state is a small set of stacks
// of grammar positions (a pushdown automaton run on all alternatives at
// once): a JSON Schema grammar is nearly deterministic, so the set holds
// one or two stacks and a byte costs a few pointer operations. An Earley
// parser would accept any grammar but costs more per byte and is harder to
// make allocation-light; a DFA cannot count brackets. Stacks are
// persistent linked frames, so advancing shares the unchanged tail and a
// token trie walk can fork the state at every trie node for free.
//
// The mask (Matcher.Mask) follows xgrammar's and llguidance's idea: for a
// stack whose top is grammar position p, most tokens are accepted or
// refused by p's own rule whatever lies below it on the stack ("context
// independent"); those are computed once per position by one walk of the
// token trie and cached with the compiled grammar (Compiled). Only the few
// tokens that may leave p's rule (in a JSON string: those holding a
// quote) are checked against the whole stack at each step.
//
// Everything here is deterministic: the same grammar, vocabulary and
// tokens give the same state and masks on every worker, so the decode
// worker re-derives a request's grammar state by replaying the tokens it
// is told were generated (I14), never trusting a peer's claim of it.
package grammar

import (
	"fmt"
	"math/bits"
)

// elemKind is what a grammar element matches.
type elemKind uint8

const (
	// kEnd ends an alternative: the rule is complete.
	kEnd elemKind = iota
	// kClass matches one byte of a class.
	kClass
	// kRef expands a rule.
	kRef
)

type elem struct {
	kind elemKind
	arg  int32 // class index (kClass) or rule index (kRef)
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}
func (s *byteSet) count() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}

// Grammar is a compiled grammar, independent of any vocabulary. It is
// immutable and safe to share.
type Grammar struct {
	elems   []elem
	rules   [][]int32 // rule -> start index (in elems) of each alternative
	classes []byteSet
	root    int32
	// nullAt[p]: the alternative can end from element p without a byte;
	// firstAt[p]: the bytes that can come first from p within it.
	nullAt  []bool
	firstAt []byteSet
	// usesRef: the schema followed a $ref (CompileSchema).
	usesRef bool
}

// UsesRef reports whether compiling the schema followed a $ref (a "#"
// pointer, resolved against the schema's own root). Only references the
// compiler reached count: a key named "$ref" among properties, or a
// "$ref" string in an enum, is no reference.
func (g *Grammar) UsesRef() bool { return g.usesRef }

// Size is the number of grammar elements, the measure the compile limits
// bound.
func (g *Grammar) Size() int { return len(g.elems) }

// Bytes is about the memory g holds: its elements with their first sets
// (41 bytes an element), its rules and its byte classes.
func (g *Grammar) Bytes() int64 {
	n := int64(len(g.elems))*8 + int64(len(g.nullAt)) + int64(len(g.firstAt))*32 + int64(len(g.classes))*32
	for _, r := range g.rules {
		n += 24 + int64(len(r))*4
	}
	return n
}

// item is one element of an alternative under construction.
type item struct {
	ref bool
	v   int32
}

// builder assembles a Grammar within an element budget.
type builder struct {
	g       *Grammar
	classID map[byteSet]int32
	budget  int
	err     error
	// stars are the rules star made: a cycle through one without a byte
	// is a repeat of something that can match empty, not a $ref cycle.
	stars map[int32]bool
}

func newBuilder(budget int) *builder {
	return &builder{g: &Grammar{}, classID: map[byteSet]int32{}, budget: budget}
}

// newRule reserves a rule index, defined later by define.
func (b *builder) newRule() int32 {
	b.g.rules = append(b.g.rules, nil)
	return int32(len(b.g.rules) - 1)
}

// define sets rule r's alternatives.
func (b *builder) define(r int32, alts ...[]item) {
	for _, a := range alts {
		b.budget -= len(a) + 1
		if b.budget < 0 {
			if b.err == nil {
				b.err = errLimit("grammar_too_large", "the schema compiles to more than the allowed grammar size; simplify it (fewer properties, smaller enums, smaller min/max bounds)")
			}
			return
		}
	}
	starts := make([]int32, 0, len(alts))
	for _, a := range alts {
		starts = append(starts, int32(len(b.g.elems)))
		for _, it := range a {
			if it.ref {
				b.g.elems = append(b.g.elems, elem{kRef, it.v})
			} else {
				b.g.elems = append(b.g.elems, elem{kClass, it.v})
			}
		}
		b.g.elems = append(b.g.elems, elem{kind: kEnd})
	}
	b.g.rules[r] = starts
}

// rule is newRule + define.
func (b *builder) rule(alts ...[]item) int32 {
	r := b.newRule()
	b.define(r, alts...)
	return r
}

func (b *builder) class(s byteSet) item {
	id, ok := b.classID[s]
	if !ok {
		id = int32(len(b.g.classes))
		b.g.classes = append(b.g.classes, s)
		b.classID[s] = id
	}
	return item{v: id}
}

func (b *builder) byteItem(c byte) item {
	var s byteSet
	s.add(c)
	return b.class(s)
}

// lit is the bytes of s in sequence.
func (b *builder) lit(s string) []item {
	out := make([]item, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = b.byteItem(s[i])
	}
	return out
}

func ref(r int32) item { return item{ref: true, v: r} }

// seq concatenates pieces.
func seq(parts ...[]item) []item {
	var out []item
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// opt is a rule matching x or nothing.
func (b *builder) opt(x []item) item { return ref(b.rule(x, nil)) }

// star is a rule matching x zero or more times (right recursion, so the
// matcher's stack does not grow: the tail call pushes no frame).
func (b *builder) star(x []item) item {
	r := b.newRule()
	b.define(r, seq(x, []item{ref(r)}), nil)
	if b.stars == nil {
		b.stars = map[int32]bool{}
	}
	b.stars[r] = true
	return ref(r)
}

// repeat matches x between lo and hi times (hi < 0: no upper bound).
func (b *builder) repeat(x []item, lo, hi int) []item {
	if len(x) > 1 {
		// One rule for x, so a copy costs one reference: nested
		// repetitions then add their bounds' sizes instead of
		// multiplying them, and each rule is charged to the budget.
		x = []item{ref(b.rule(x))}
	}
	if b.err != nil || lo > b.budget || (hi >= 0 && hi > b.budget) {
		if b.err == nil {
			b.err = errLimit("grammar_too_large", "a repetition bound of %d (minItems/maxItems/minLength/maxLength or a regex count) is beyond the allowed grammar size", max(lo, hi))
		}
		return nil
	}
	var out []item
	for range lo {
		out = append(out, x...)
	}
	switch {
	case hi < 0:
		out = append(out, b.star(x))
	case hi > lo:
		// opt_k matches up to k more: x opt_{k-1} | ε.
		prev := b.rule(x, nil)
		for k := 2; k <= hi-lo && b.err == nil; k++ {
			prev = b.rule(seq(x, []item{ref(prev)}), nil)
		}
		out = append(out, ref(prev))
	}
	return out
}

// finish checks the grammar for left recursion (a rule that can reach
// itself without consuming a byte would loop the matcher) and returns it.
func (b *builder) finish(root int32) (*Grammar, error) {
	if b.err != nil {
		return nil, b.err
	}
	b.g.root = root
	if !pruneEndless(b.g) {
		return nil, errLimit("schema_recursion", "no finite value satisfies the schema: it requires itself without end (a required property, or an item, whose schema leads back to the schema it is in)")
	}
	null := nullable(b.g)
	if err := checkLeftRecursion(b.g, null, b.stars); err != nil {
		return nil, err
	}
	b.g.firsts(null)
	return b.g, nil
}

// firsts computes nullAt and firstAt. A rule's first bytes are those of
// the rules its alternatives can begin with, which form no cycle (that
// would be left recursion, refused before), so each rule's set is
// computed once, after those it begins with, and then each element's
// from its alternative's end: work linear in the grammar. (Iterated to a
// fixed point over all rules, a chain of n rules each beginning with the
// next took n passes over the whole grammar: a 55 KB schema, 1,000
// $defs each an anyOf of the next and a constant beside a 20,000-long
// string, compiled in 2-4 s of CPU, at the router and again at each
// worker.)
func (g *Grammar) firsts(null []bool) {
	ruleFirst := make([]byteSet, len(g.rules))
	done := make([]bool, len(g.rules))
	var first func(r int32)
	first = func(r int32) {
		// Marked before its dependencies: none leads back to r.
		done[r] = true
		var f byteSet
		for _, s := range g.rules[r] {
			for i := s; g.elems[i].kind != kEnd; i++ {
				e := g.elems[i]
				if e.kind == kClass {
					f.union(&g.classes[e.arg])
					break
				}
				if !done[e.arg] {
					first(e.arg)
				}
				f.union(&ruleFirst[e.arg])
				if !null[e.arg] {
					break
				}
			}
		}
		ruleFirst[r] = f
	}
	for r := range g.rules {
		if !done[r] {
			first(int32(r))
		}
	}
	g.nullAt = make([]bool, len(g.elems))
	g.firstAt = make([]byteSet, len(g.elems))
	for _, alts := range g.rules {
		for _, s := range alts {
			end := s
			for g.elems[end].kind != kEnd {
				end++
			}
			g.nullAt[end] = true
			for i := end - 1; i >= s; i-- {
				e := g.elems[i]
				if e.kind == kClass {
					g.firstAt[i] = g.classes[e.arg]
					continue
				}
				f := ruleFirst[e.arg]
				if null[e.arg] {
					g.nullAt[i] = g.nullAt[i+1]
					f.union(&g.firstAt[i+1])
				}
				g.firstAt[i] = f
			}
		}
	}
}

// union adds the bytes of o to s.
func (s *byteSet) union(o *byteSet) {
	for k := range s {
		s[k] |= o[k]
	}
}

// nullable computes which rules can match the empty string: a rule is
// when one of its alternatives holds only references to such rules. Each
// alternative counts its references not known nullable yet, and a rule
// found nullable counts down the alternatives that refer to it, so the
// work is linear in the grammar (a pass over every rule until nothing
// changed took one pass per link of a chain of rules).
func nullable(g *Grammar) []bool {
	n := make([]bool, len(g.rules))
	var left []int32                       // alternative -> references not known nullable
	var owner []int32                      // alternative -> its rule
	users := make([][]int32, len(g.rules)) // rule -> alternatives referring to it, once per reference
	var queue []int32
	for r, alts := range g.rules {
		for _, s := range alts {
			a := int32(len(left))
			refs, class := int32(0), false
			for i := s; g.elems[i].kind != kEnd; i++ {
				if g.elems[i].kind == kClass {
					class = true
					break
				}
				refs++
			}
			left, owner = append(left, refs), append(owner, int32(r))
			if class {
				continue
			}
			if refs == 0 && !n[r] {
				n[r] = true
				queue = append(queue, int32(r))
			}
			for i := s; g.elems[i].kind != kEnd; i++ {
				users[g.elems[i].arg] = append(users[g.elems[i].arg], a)
			}
		}
	}
	for len(queue) > 0 {
		t := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, a := range users[t] {
			if left[a]--; left[a] == 0 && !n[owner[a]] {
				n[owner[a]] = true
				queue = append(queue, owner[a])
			}
		}
	}
	return n
}

// pruneEndless drops every alternative that refers to a rule no finite
// text completes (a recursive rule whose every alternative refers to
// itself again: an object whose required property's schema is the object
// itself), so that a matcher never enters a way that cannot end (the
// model would write {"a":{"a":... until its token limit). It reports
// whether the root still completes. Linear in the grammar, as nullable:
// a rule completes once one of its alternatives refers only to rules
// that complete.
func pruneEndless(g *Grammar) bool {
	done := make([]bool, len(g.rules))
	var left []int32                       // alternative -> references not known to complete
	var owner []int32                      // alternative -> its rule
	users := make([][]int32, len(g.rules)) // rule -> alternatives referring to it, once per reference
	var queue []int32
	for r, alts := range g.rules {
		for _, s := range alts {
			a := int32(len(left))
			refs := int32(0)
			for i := s; g.elems[i].kind != kEnd; i++ {
				if g.elems[i].kind == kRef {
					refs++
					users[g.elems[i].arg] = append(users[g.elems[i].arg], a)
				}
			}
			left, owner = append(left, refs), append(owner, int32(r))
			if refs == 0 && !done[r] {
				done[r] = true
				queue = append(queue, int32(r))
			}
		}
	}
	for len(queue) > 0 {
		t := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, a := range users[t] {
			if left[a]--; left[a] == 0 && !done[owner[a]] {
				done[owner[a]] = true
				queue = append(queue, owner[a])
			}
		}
	}
	for r, alts := range g.rules {
		keep := alts[:0]
		for _, s := range alts {
			ok := true
			for i := s; g.elems[i].kind != kEnd; i++ {
				if g.elems[i].kind == kRef && !done[g.elems[i].arg] {
					ok = false
					break
				}
			}
			if ok {
				keep = append(keep, s)
			}
		}
		g.rules[r] = keep
	}
	return done[g.root]
}

// checkLeftRecursion refuses a grammar in which a rule can reach itself
// without a byte. stars are the unbounded repeats' rules: a cycle closed
// at one is a repeat whose body can match empty (a pattern's (a?)*), and
// the error says so; any other is a $ref or anyOf cycle.
func checkLeftRecursion(g *Grammar, null []bool, stars map[int32]bool) error {
	// edges r -> s when s can be the first thing r expands without a byte.
	state := make([]uint8, len(g.rules)) // 0 new, 1 on path, 2 done
	closed := int32(-1)                  // the rule the cycle found came back to
	var visit func(r int32) bool
	visit = func(r int32) bool {
		state[r] = 1
		for _, s := range g.rules[r] {
			for i := s; g.elems[i].kind == kRef; i++ {
				t := g.elems[i].arg
				if state[t] == 1 {
					closed = t
					return true
				}
				if state[t] == 0 && visit(t) {
					return true
				}
				if !null[t] {
					break
				}
			}
		}
		state[r] = 2
		return false
	}
	for r := range g.rules {
		if state[r] == 0 && visit(int32(r)) {
			if stars[closed] {
				return errLimit("unsupported_schema", "the pattern repeats without a bound (*, + or {n,}) a part that can match the empty string, as (a?)* does; make the repeated part match at least one character, e.g. (a)* for (a?)*")
			}
			return errLimit("schema_recursion", "the schema refers to itself without any output in between ($ref or anyOf cycle); such a schema matches nothing finite")
		}
	}
	return nil
}

// Error is a schema the compiler refuses, with a stable code and a
// sentence the user can act on.
type Error struct {
	// Code: "invalid_schema", "unsupported_schema", or the name of the
	// limit that was exceeded ("schema_too_large", "schema_too_deep",
	// "enum_too_large", "pattern_too_complex", "grammar_too_large",
	// "schema_recursion").
	Code string
	Msg  string
	// empty: the schema (part) accepts no value (compiler.none).
	empty bool
}

func (e *Error) Error() string { return e.Msg }

func errLimit(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}
