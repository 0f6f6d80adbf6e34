package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// allOf of several schemas, and constraining keywords beside $ref, anyOf
// or oneOf (draft 2019+ allows them: {"$ref": "#/$defs/A", "required":
// ["x"]}), are compiled by merging the schemas into one that accepts
// exactly what all of them accept: types intersected, bounds tightened,
// required lists joined, properties merged one by one (a property only
// one side declares meets the other side's additionalProperties), enums
// intersected; an anyOf or oneOf takes the rest into each branch (x
// matches exactly one branch and the rest iff exactly one branch-and-rest
// matches it). Two different patterns, formats, multipleOfs,
// propertyNames or prefixItems cannot be intersected by the grammar: such
// a schema is refused, saying which keyword.

// noneAllowed ends the reason of a merge that accepts no value because
// a required property is allowed by no side (named in the error when
// the whole schema is that; an anyOf branch that is that is dropped).
const noneAllowed = "is allowed by no combined schema"

// maxMerges bounds the merges of one compile (an anyOf merged with an
// anyOf merges every pair of branches).
const maxMerges = 4096

// maxMergeDepth bounds the nesting of merges ($ref chains, properties
// merged within properties).
const maxMergeDepth = 32

var (
	falseNode = &node{kind: 'b'}
	trueNode  = &node{kind: 'b', b: true}
)

// needsMerge reports whether s holds a $ref, allOf, anyOf or oneOf with
// constraining keywords beside it, or an allOf of several schemas.
func needsMerge(s *node) bool {
	if s == nil || s.kind != 'o' {
		return false
	}
	if hasIf(s) {
		return true // rewritten as an anyOf (ifthen.go)
	}
	for _, k := range []string{"$ref", "anyOf", "oneOf", "allOf"} {
		if v := s.get(k); v != nil {
			return countHandled(s) > 1 || k == "allOf" && (v.kind != 'a' || len(v.arr) != 1)
		}
	}
	return false
}

// without is s without the keywords drop (annotations kept).
func without(s *node, drop ...string) *node {
	r := &node{kind: 'o'}
	for i, k := range s.keys {
		if !slices.Contains(drop, k) {
			r.keys, r.vals = append(r.keys, k), append(r.vals, s.vals[i])
		}
	}
	return r
}

func (r *node) set(k string, v *node) {
	for i, x := range r.keys {
		if x == k {
			r.vals[i] = v
			return
		}
	}
	r.keys, r.vals = append(r.keys, k), append(r.vals, v)
}

// normalize rewrites s, when needsMerge, into a schema accepting the
// same values with no $ref or allOf at its top and an anyOf/oneOf only
// alone; "" or why it cannot.
func (c *compiler) normalize(s *node, depth int) (*node, string) {
	if !needsMerge(s) {
		return s, ""
	}
	if m, ok := c.merged[s]; ok {
		return m.n, m.why
	}
	c.merged[s] = mergedNode{why: "the schema refers to itself through allOf or keywords beside $ref"}
	n, why := c.flatten(s, depth)
	c.merged[s] = mergedNode{n, why}
	return n, why
}

type mergedNode struct {
	n   *node
	why string
}

// flatten is normalize for any s: a $ref is replaced by its target (with
// what is beside it merged in), an allOf by its schemas merged, and an
// anyOf/oneOf takes what is beside it into each branch.
func (c *compiler) flatten(s *node, depth int) (*node, string) {
	if s == nil || s.kind != 'o' {
		return s, ""
	}
	if depth > maxMergeDepth {
		return nil, "allOf and keywords beside $ref nest too deeply to combine"
	}
	if hasIf(s) {
		return c.withIf(s, without(s, "if", "then", "else"), depth+1)
	}
	if r := s.get("$ref"); r != nil {
		if r.kind != 's' {
			return nil, "$ref must be a string"
		}
		t, ok := resolvePointer(c.root, r.str)
		if !ok {
			return nil, fmt.Sprintf("reference %q points at nothing (only local references are supported)", r.str)
		}
		rest := without(s, "$ref")
		if countHandled(rest) == 0 {
			return c.flatten(t, depth+1)
		}
		return c.merge(t, rest, depth+1)
	}
	if a := s.get("allOf"); a != nil {
		if a.kind != 'a' || len(a.arr) == 0 {
			return nil, "allOf must be a non-empty array"
		}
		var x *node = without(s, "allOf")
		for _, sub := range a.arr {
			var why string
			if x, why = c.merge(x, sub, depth+1); why != "" {
				return nil, why
			}
		}
		return x, ""
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		a := s.get(kw)
		if a == nil {
			continue
		}
		if a.kind != 'a' || len(a.arr) == 0 {
			return nil, kw + " must be a non-empty array"
		}
		rest := without(s, kw)
		if countHandled(rest) == 0 {
			return s, ""
		}
		return c.distribute(kw, a.arr, rest, depth)
	}
	return s, ""
}

// merge is a schema accepting exactly the values both a and b accept, or
// why there is none sluice can compile.
func (c *compiler) merge(a, b *node, depth int) (*node, string) {
	if c.merges++; c.merges > maxMerges {
		return nil, fmt.Sprintf("allOf and keywords beside $ref/anyOf/oneOf need more than %d merges of schemas; simplify them", maxMerges)
	}
	if depth > maxMergeDepth {
		return nil, "allOf and keywords beside $ref nest too deeply to combine"
	}
	if a == nil { // absent: any value
		a = trueNode
	}
	if b == nil {
		b = trueNode
	}
	switch {
	case a.kind == 'b' && a.b:
		return b, ""
	case b.kind == 'b' && b.b:
		return a, ""
	case a.kind == 'b' || b.kind == 'b':
		return falseNode, ""
	case a.kind != 'o' || b.kind != 'o':
		return nil, "a schema must be an object or a boolean"
	}
	// if/then/else sees the other schema as part of what is beside it
	// (the else side takes the values of the tested property it lists).
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		if hasIf(p[0]) {
			base, why := c.merge(without(p[0], "if", "then", "else"), p[1], depth+1)
			if why != "" {
				return nil, why
			}
			return c.withIf(p[0], base, depth+1)
		}
	}
	var why string
	if a, why = c.flatten(a, depth+1); why != "" {
		return nil, why
	}
	if b, why = c.flatten(b, depth+1); why != "" {
		return nil, why
	}
	if a.kind == 'b' || b.kind == 'b' {
		return c.merge(a, b, depth+1)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		for _, p := range [][2]*node{{a, b}, {b, a}} {
			if br := p[0].get(kw); br != nil {
				return c.distribute(kw, br.arr, p[1], depth)
			}
		}
	}
	return c.mergePlain(a, b, depth)
}

// distribute is anyOf/oneOf (kw) of each branch merged with rest; the
// branches that accept nothing are left out (they match no value).
func (c *compiler) distribute(kw string, branches []*node, rest *node, depth int) (*node, string) {
	out := &node{kind: 'a'}
	for _, b := range branches {
		m, why := c.merge(b, rest, depth+1)
		if strings.HasSuffix(why, noneAllowed) {
			continue // this branch and rest accept nothing together
		}
		if why != "" {
			return nil, why
		}
		if m.kind != 'b' || m.b {
			out.arr = append(out.arr, m)
		}
	}
	if len(out.arr) == 0 {
		return falseNode, ""
	}
	return &node{kind: 'o', keys: []string{kw}, vals: []*node{out}}, ""
}

// mergePlain merges two schemas of plain keywords.
func (c *compiler) mergePlain(a, b *node, depth int) (*node, string) {
	r := &node{kind: 'o'}
	keys := slices.Clone(a.keys)
	for _, k := range b.keys {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if annotations[k] {
			continue
		}
		if !handled[k] {
			return nil, fmt.Sprintf("the keyword %q is not supported", k)
		}
		va, vb := a.get(k), b.get(k)
		if k == "minContains" || k == "maxContains" {
			// They count matches of their own schema's contains only.
			if a.get("contains") == nil {
				va = nil
			}
			if b.get("contains") == nil {
				vb = nil
			}
			if va == nil && vb == nil {
				continue
			}
		}
		switch {
		case k == "enum" || k == "const" || k == "properties" || k == "additionalProperties":
			continue // below
		case va == nil:
			r.set(k, vb)
			continue
		case vb == nil || canon(va) == canon(vb):
			r.set(k, va)
			continue
		}
		switch k {
		case "type":
			var ts []*node
			both := typesOf(va) & typesOf(vb)
			for _, x := range typeNames(both) {
				if x == "integer" && both&tFrac != 0 {
					continue // "number" says it
				}
				ts = append(ts, &node{kind: 's', str: x})
			}
			if len(ts) == 0 {
				return falseNode, "" // no value has both types
			}
			r.set(k, &node{kind: 'a', arr: ts})
		case "required":
			u := &node{kind: 'a', arr: slices.Clone(va.arr)}
			for _, x := range vb.arr {
				if !slices.ContainsFunc(u.arr, func(y *node) bool { return y.kind == 's' && x.kind == 's' && y.str == x.str }) {
					u.arr = append(u.arr, x)
				}
			}
			r.set(k, u)
		case "minItems", "minLength", "minProperties", "minimum", "exclusiveMinimum", "minContains",
			"maxItems", "maxLength", "maxProperties", "maximum", "exclusiveMaximum", "maxContains":
			x, y := ratOf(string(va.num)), ratOf(string(vb.num))
			if va.kind != 'n' || vb.kind != 'n' || x == nil || y == nil {
				return nil, fmt.Sprintf("%s must be a number", k)
			}
			lower := k[:3] == "min" || k == "exclusiveMinimum"
			if x.Cmp(y) < 0 == lower {
				r.set(k, vb)
			} else {
				r.set(k, va)
			}
		case "uniqueItems":
			r.set(k, &node{kind: 'b', b: va.kind == 'b' && va.b || vb.kind == 'b' && vb.b})
		case "items":
			m, why := c.merge(va, vb, depth+1)
			if why != "" {
				return nil, why
			}
			r.set(k, m)
		default:
			return nil, fmt.Sprintf("%q appears in two combined schemas with different values; sluice cannot intersect them: keep one", k)
		}
	}
	// prefixItems: one side's items would apply to the other's prefix
	// positions too, which a merged prefixItems does not say.
	if xa, xb := a.get("prefixItems"), b.get("prefixItems"); xa != nil && b.get("items") != nil && (xb == nil || canon(xa) != canon(xb)) ||
		xb != nil && a.get("items") != nil && (xa == nil || canon(xa) != canon(xb)) {
		return nil, "prefixItems in one combined schema and items in another cannot be intersected; write the combined array schema"
	}
	// patternProperties (the same on both sides, or on one only; two
	// different ones are refused above): a merged object applies them
	// to every name, so the other side's additionalProperties, which
	// does not reach the names they match, cannot be kept beside them.
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		if p[0].get("patternProperties") != nil && p[1].get("patternProperties") == nil {
			if x := p[1].get("additionalProperties"); x != nil && (x.kind != 'b' || !x.b) {
				return nil, "patternProperties in one combined schema and additionalProperties in another cannot be intersected; write the combined object schema"
			}
		}
	}
	// enum and const: the values in every list.
	var lists [][]*node
	for _, s := range []*node{a, b} {
		if e := s.get("const"); e != nil {
			lists = append(lists, []*node{e})
		}
		if e := s.get("enum"); e != nil && e.kind == 'a' {
			lists = append(lists, e.arr)
		}
	}
	if len(lists) > 0 {
		vals := lists[0]
		for _, l := range lists[1:] {
			in := map[string]bool{}
			for _, x := range l {
				in[canon(x)] = true
			}
			vals = slices.DeleteFunc(slices.Clone(vals), func(x *node) bool { return !in[canon(x)] })
		}
		if len(vals) == 0 {
			return falseNode, ""
		}
		r.set("enum", &node{kind: 'a', arr: vals})
	}
	// properties: one declared by one side only meets the other side's
	// additionalProperties.
	pa, pb := a.get("properties"), b.get("properties")
	aa, ab := a.get("additionalProperties"), b.get("additionalProperties")
	if pa != nil && pa.kind != 'o' || pb != nil && pb.kind != 'o' {
		return nil, "properties must be an object"
	}
	if pa != nil || pb != nil {
		props := &node{kind: 'o'}
		add := func(k string, x, other, otherAddl, otherPats *node) string {
			if props.get(k) != nil {
				return "" // merged from the first side
			}
			y := otherAddl
			if o := other.get(k); o != nil {
				y = o
			} else if c.matchesPattern(otherPats, k) {
				// The other side's patterns, kept in the merged
				// schema, apply to k; its additionalProperties
				// does not.
				y = nil
			}
			m, why := c.merge(x, y, depth+1)
			if why != "" {
				return why
			}
			props.set(k, m)
			return ""
		}
		for _, p := range []struct{ mine, other, otherAddl, otherPats *node }{{pa, pb, ab, b.get("patternProperties")}, {pb, pa, aa, a.get("patternProperties")}} {
			if p.mine == nil {
				continue
			}
			for i, k := range p.mine.keys {
				if why := add(k, p.mine.vals[i], p.other, p.otherAddl, p.otherPats); why != "" {
					return nil, why
				}
			}
		}
		// A property no value can have stays declared, as false: the
		// object compiler never writes it, and it is no additional
		// property either (dropping it let a map write it with any
		// value); one that is also required leaves the schema
		// accepting nothing.
		for i, k := range props.keys {
			if v := props.vals[i]; v.kind == 'b' && !v.b {
				if req := r.get("required"); req != nil && slices.ContainsFunc(req.arr, func(x *node) bool { return x.str == k }) {
					return nil, fmt.Sprintf("the required property %q %s", k, noneAllowed)
				}
			}
		}
		r.set("properties", props)
	}
	if aa != nil || ab != nil {
		m, why := c.merge(aa, ab, depth+1)
		if why != "" {
			return nil, why
		}
		r.set("additionalProperties", m)
	}
	return r, ""
}

// typesOf is the types a "type" value names.
func typesOf(t *node) typeSet {
	var ts typeSet
	switch t.kind {
	case 's':
		ts = typeBits(t.str)
	case 'a':
		for _, x := range t.arr {
			if x.kind == 's' {
				ts |= typeBits(x.str)
			}
		}
	}
	return ts
}

// matchesPattern reports whether a pattern of patternProperties pp
// matches name (a pattern that does not compile is taken as matching:
// the compile refuses it).
func (c *compiler) matchesPattern(pp *node, name string) bool {
	if pp == nil || pp.kind != 'o' {
		return false
	}
	for _, p := range pp.keys {
		if re := c.lits.regexp(p, false); re == nil || re.MatchString(name) {
			return true
		}
	}
	return false
}

// hasIf reports whether s has if/then/else to rewrite as an anyOf
// (ifthen.go); beside enum/const they are checked on each value instead
// (litcheck.go).
func hasIf(s *node) bool {
	return (s.get("if") != nil || s.get("then") != nil || s.get("else") != nil) && s.get("enum") == nil && s.get("const") == nil
}

// withIf is s's if/then/else applied to base (what is beside them).
func (c *compiler) withIf(s, base *node, depth int) (*node, string) {
	ifS, thenS, elseS := s.get("if"), s.get("then"), s.get("else")
	if ifS == nil || thenS == nil && elseS == nil {
		return c.flatten(base, depth) // then/else without if, if alone: no constraint
	}
	return c.ifThenElse(base, ifS, thenS, elseS, depth)
}
