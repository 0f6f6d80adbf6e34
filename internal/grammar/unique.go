package grammar

import (
	"bytes"
	"slices"
	"strings"
)

// uniqueItems: true. The grammar cannot keep arbitrary items distinct, but
// when the items are a finite set of values (an enum, consts, booleans,
// null: Pydantic's Set[Literal[...]] or Set[SomeEnum]) it writes a
// subsequence of them in one fixed order, each at most once, counted
// against minItems/maxItems like declared properties. One item or none
// is unique anyway (array takes maxItems <= 1 itself).
func (c *compiler) uniqueArray(s *node, lo, hi int, path string) []item {
	if s.get("prefixItems") != nil {
		return c.unsupported(path, "uniqueItems with prefixItems is not supported")
	}
	it := s.get("items")
	vals, ok := c.finiteValues(it)
	if c.failed() {
		return nil
	}
	if !ok {
		return c.unsupported(path, "uniqueItems: true is supported when the items are a finite set of values (enum, const, boolean, null) or maxItems is at most 1: the grammar cannot keep other items distinct")
	}
	if lo > len(vals) {
		return c.none(path, "minItems %d is more than the %d distinct values the items allow", lo, len(vals))
	}
	elems := make([][]item, len(vals))
	for i, v := range vals {
		var b bytes.Buffer
		v.encode(&b)
		elems[i] = c.b.lit(b.String())
	}
	body := c.inOrder(elems, make([]bool, len(vals)), lo, hi, path, "minItems/maxItems with uniqueItems")
	if c.failed() {
		return nil
	}
	return seq(c.b.lit("["), body, c.b.lit("]"))
}

// finiteValues is the values schema it accepts when they are a finite
// list (at most MaxEnum, each checked against it, sorted by their
// canonical form so every compile writes them alike).
func (c *compiler) finiteValues(it *node) ([]*node, bool) {
	g := c.shaper().of(it, modeGen)
	if g.open&^(tBool|tNull) != 0 {
		return nil, false
	}
	cands := make([]*node, 0, len(g.lits)+3)
	for _, v := range g.lits {
		cands = append(cands, v)
	}
	if g.open&tBool != 0 {
		cands = append(cands, &node{kind: 'b', b: true}, &node{kind: 'b'})
	}
	if g.open&tNull != 0 {
		cands = append(cands, &node{kind: 'z'})
	}
	if len(cands) > MaxEnum {
		return nil, false
	}
	type kv struct {
		k, text string // canonical form, JSON text
		v       *node
	}
	var keep []kv
	for _, v := range cands {
		if c.lits.satisfies(v, it, 0) {
			var b bytes.Buffer
			v.encode(&b)
			keep = append(keep, kv{canon(v), b.String(), v})
		}
	}
	if c.lits.over {
		c.fail("unsupported_schema", "checking the items' values against their schema took more than %d steps; simplify the items", maxLitSteps)
		return nil, false
	}
	// By canonical form, then text (1 and 1.0 are one value: the first
	// text of the two is kept), whatever order the candidates came in.
	slices.SortFunc(keep, func(a, b kv) int {
		if a.k != b.k {
			return strings.Compare(a.k, b.k)
		}
		return strings.Compare(a.text, b.text)
	})
	keep = slices.CompactFunc(keep, func(a, b kv) bool { return a.k == b.k })
	out := make([]*node, len(keep))
	for i, x := range keep {
		out[i] = x.v
	}
	return out, true
}
