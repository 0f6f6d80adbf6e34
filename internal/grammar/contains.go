package grammar

import (
	"bytes"
	"fmt"
)

// contains, minContains, maxContains: an array is valid when between
// minContains (default 1) and maxContains (default: no bound) of its
// items are valid against the contains schema. The grammar counts the
// items it writes that surely match: an item is written either as a
// match (its position's schema merged with contains: every such value
// matches) or, while the count may still grow without bound, as any
// value of its position's schema (matching or not: only the lower bound
// counts), or, under maxContains, as a value that surely does not match
// (a branch, the whole position schema or the literals whose shapes
// exclude contains: oneof.go's proofs). A state is (position, count);
// positions past the prefix and minItems are one state when maxItems
// does not bound them.

// maxContainsStates bounds the (position, count) states of one array.
const maxContainsStates = 4096

// containsArray compiles an array schema with contains (lo, hi: its
// minItems/maxItems, hi < 0 unbounded).
// ok false: contains constrains nothing here (minContains 0 and no
// maxContains below maxItems), compile the array without it.
func (c *compiler) containsArray(s *node, lo, hi int, path string) (_ []item, ok bool) {
	cs := s.get("contains")
	minC, maxC := c.count(s, "minContains", path), c.count(s, "maxContains", path)
	if c.failed() {
		return nil, true
	}
	if minC < 0 {
		minC = 1
	}
	if maxC >= 0 && maxC < minC {
		return c.none(path, "maxContains %d is below minContains %d", maxC, minC), true
	}
	var prefix []*node
	if p := s.get("prefixItems"); p != nil {
		if p.kind != 'a' {
			return c.bad(path+"/prefixItems", "prefixItems must be an array of schemas"), true
		}
		prefix = p.arr
	}
	itemsNode := s.get("items")
	P := len(prefix)
	if itemsNode != nil && itemsNode.kind == 'b' && !itemsNode.b {
		if hi < 0 || hi > P {
			hi = P
		}
		if lo > P {
			return c.none(path, "minItems %d is more than the %d items allowed", lo, P), true
		}
	}
	if hi >= 0 && minC > hi {
		return c.none(path, "minContains %d is more than the %d items the array may have", minC, hi), true
	}
	if maxC >= 0 && hi >= 0 && maxC >= hi {
		maxC = -1 // never reached
	}
	if minC == 0 && maxC < 0 {
		return nil, false
	}
	top := max(minC, maxC)
	if top > MaxCount {
		return c.unsupported(path, "minContains/maxContains of %d are not supported; at most %d", top, MaxCount), true
	}
	// Per position schema (the prefix's, then items'): a match, any
	// value, a value surely not matching (nil: none).
	type kinds struct {
		match, any, miss []item
	}
	n := P + 1
	if hi >= 0 && hi <= P {
		n = hi // items never reached
	}
	ks := make([]kinds, n)
	accC := c.shaper().of(cs, modeAcc)
	for j := range ks {
		sj, p := itemsNode, path+"/items"
		if j < P {
			sj, p = prefix[j], fmt.Sprintf("%s/prefixItems/%d", path, j)
		}
		if m, why := c.merge(sj, cs, 0); why != "" {
			return c.unsupported(path+"/contains", "the items and contains cannot be combined: %s", why), true
		} else if (m.kind != 'b' || m.b) && !disjoint(c.shaper().of(sj, modeGen), accC, &c.oneOfWork) {
			ks[j].match = c.oneRule(c.maybe(func() []item { return c.value(m, p) }))
		}
		if maxC < 0 {
			ks[j].any = c.oneRule(c.value(sj, p))
		} else {
			ks[j].miss = c.misses(sj, accC, p)
		}
		if c.failed() {
			return nil, true
		}
	}
	// Positions: i < I are each their own; from I on (past the prefix
	// and minItems) one state when maxItems does not bound them.
	I := max(P, lo, 1)
	if hi >= 0 {
		I = hi
	}
	if (I+1)*(top+1) > maxContainsStates {
		return c.unsupported(path, "contains beside minItems/maxItems/prefixItems of this size needs more than %d counting states (items times counts); lower maxItems or minContains/maxContains", maxContainsStates), true
	}
	pos := func(i int) int { return min(i, I) }
	kindAt := func(i int) kinds { return ks[min(i, n-1)] }
	// live(i, k): a valid array can go on from i items written, k of
	// them counted.
	type st struct{ i, k int }
	// The only cycles are a state's loop to itself (an item not
	// counted past I), which adds no way out: a state busy below is
	// not live through it.
	memo := map[st]bool{}
	busy := map[st]bool{}
	var live func(i, k int) bool
	next := func(i, k int, f func(it []item, i2, k2 int)) {
		if hi >= 0 && i >= hi {
			return
		}
		kd := kindAt(i)
		if kd.match != nil && (maxC < 0 || k < maxC) {
			k2 := k + 1
			if maxC < 0 {
				k2 = min(k2, minC)
			}
			f(kd.match, pos(i+1), k2)
		}
		if kd.any != nil {
			f(kd.any, pos(i+1), k)
		}
		if kd.miss != nil {
			f(kd.miss, pos(i+1), k)
		}
	}
	live = func(i, k int) bool {
		s := st{i, k}
		if v, ok := memo[s]; ok {
			return v
		}
		if busy[s] {
			return false // a loop: live only through another way out
		}
		busy[s] = true
		ok := i >= lo && k >= minC
		next(i, k, func(_ []item, i2, k2 int) { ok = ok || live(i2, k2) })
		delete(busy, s)
		memo[s] = ok
		return ok
	}
	if !live(0, 0) {
		if maxC >= 0 {
			return c.unsupported(path, "maxContains: sluice writes items it can prove do not match contains (other types, other const/enum values, a discriminator), and these items leave no way to write a valid array; use items of a type or values contains does not accept, or drop maxContains"), true
		}
		return c.none(path, "no item can match contains"), true
	}
	rules := map[st]int32{}
	var state func(i, k int) int32
	state = func(i, k int) int32 {
		s := st{i, k}
		if r, ok := rules[s]; ok {
			return r
		}
		r := c.b.newRule()
		rules[s] = r
		var alts [][]item
		next(i, k, func(it []item, i2, k2 int) {
			if !live(i2, k2) {
				return
			}
			var a []item
			if i > 0 {
				a = c.comma()
			}
			alts = append(alts, seq(a, it, []item{ref(state(i2, k2))}))
		})
		if i >= lo && k >= minC {
			alts = append(alts, nil)
		}
		c.b.define(r, alts...)
		return r
	}
	body := state(0, 0)
	if c.failed() {
		return nil, true
	}
	return seq(c.b.lit("["), []item{ref(body)}, c.b.lit("]")), true
}

// oneRule is x as one item (several states refer to it).
func (c *compiler) oneRule(x []item) []item {
	if len(x) > 1 {
		return []item{ref(c.b.rule(x))}
	}
	return x
}

// misses is the items of values of schema s that surely do not match
// the schema whose accepted shape is acc (nil: none it can prove): all
// of s when its shape excludes acc; else the branches of its anyOf/oneOf
// that do; else, for a list of values, those acc cannot hold.
func (c *compiler) misses(s *node, acc *shape, path string) []item {
	sh := c.shaper()
	if disjoint(sh.of(s, modeGen), acc, &c.oneOfWork) {
		return c.oneRule(c.value(s, path))
	}
	f, why := c.flatten(s, 0)
	if why != "" || f == nil || f.kind != 'o' {
		return nil
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		a := f.get(kw)
		if a == nil || a.kind != 'a' {
			continue
		}
		var alts [][]item
		for i, b := range a.arr {
			if disjoint(sh.of(b, modeGen), acc, &c.oneOfWork) {
				alts = append(alts, c.value(b, fmt.Sprintf("%s/%s/%d", path, kw, i)))
			}
		}
		if len(alts) == 0 || c.failed() {
			return nil
		}
		return []item{ref(c.b.rule(alts...))}
	}
	vals, ok := c.finiteValues(f)
	if !ok {
		return nil
	}
	var lits []string
	for _, v := range vals {
		if !mayHold(acc, canon(v), v) {
			var b bytes.Buffer
			v.encode(&b)
			lits = append(lits, b.String())
		}
	}
	if len(lits) == 0 {
		return nil
	}
	return c.literalTrie(lits)
}

// maybe is compile(), or nil when what it compiles accepts no value
// (c.none: an intersection left empty), the error then forgotten.
func (c *compiler) maybe(compile func() []item) []item {
	if c.failed() {
		return nil
	}
	nr, nm := len(c.refLog), len(c.mergedLog)
	x := compile()
	if c.err != nil && c.err.empty && c.b.err == nil {
		c.err = nil
		// A $ref (or a merged schema) first compiled in there holds
		// what the failed compile left (nothing: it would match
		// empty); compiled again on its next use, it fails there too.
		for _, k := range c.refLog[nr:] {
			delete(c.refs, k)
		}
		for _, k := range c.mergedLog[nm:] {
			delete(c.mergedRules, k)
		}
		c.refLog, c.mergedLog = c.refLog[:nr], c.mergedLog[:nm]
		return nil
	}
	return x
}
