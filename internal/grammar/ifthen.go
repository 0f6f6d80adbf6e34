package grammar

import (
	"fmt"
	"slices"
	"strings"
)

// if/then/else in the shape schema generators and hand-written schemas
// use it: if tests one property p of an object (its value against a
// const or enum, or only its presence: {"required": ["p"]}), as a
// discriminator. The schema is rewritten (merge.go) as an anyOf of
// branches each of which accepts only values on one side of if:
//   - A: the schema, if and then merged (exactly the values that match
//     if and then);
//   - B: the schema and else merged, with p required and one of the
//     values the schema (or else) lists for p that if's test surely
//     refuses (oneof.go's shapes: a value it may accept is not taken);
//   - objects without p, when if requires p; values of other types than
//     object, when if says "type": "object": the schema and else
//     merged, narrowed to them.
// So every output is valid: one of A's matches if and then, one of the
// others does not match if and matches else. The values of p for B must
// be listed (enum, const, boolean) in the schema or in else: the
// grammar cannot write "any value but these". Other shapes of if are
// refused, saying what is supported.

// ifThenElse is the schema base (the keywords beside if/then/else) with
// if/then/else, as an anyOf, or why not.
func (c *compiler) ifThenElse(base, ifS, thenS, elseS *node, depth int) (*node, string) {
	if ifS.kind == 'b' {
		if ifS.b {
			return c.merge(base, thenS, depth+1)
		}
		return c.merge(base, elseS, depth+1)
	}
	if ifS.kind != 'o' {
		return nil, "if must be a schema"
	}
	p, sp, reqd, typed, why := ifTest(ifS)
	if why != "" {
		return nil, why
	}
	var branches []*node
	add := func(x *node, why string) string {
		if strings.HasSuffix(why, noneAllowed) {
			return "" // a side that accepts nothing
		}
		if why == "" && (x.kind != 'b' || x.b) {
			branches = append(branches, x)
		}
		return why
	}
	a, why := c.merge(base, ifS, depth+1)
	if why == "" {
		a, why = c.merge(a, thenS, depth+1)
	}
	if why := add(a, why); why != "" {
		return nil, why
	}
	e, why := c.merge(base, elseS, depth+1)
	if why == "" {
		e, why = c.flatten(e, depth+1) // a $ref left alone by the merge
	}
	if why != "" {
		return nil, why
	}
	if why := c.elseSide(e, p, sp, reqd, typed, add, depth); why != "" {
		return nil, why
	}
	return oneBranch(branches), ""
}

// elseSide adds (add) the branches of the values of e (the schema and
// else merged) that surely do not match if: an anyOf's branches each.
func (c *compiler) elseSide(e *node, p string, sp *node, reqd, typed bool, add func(*node, string) string, depth int) string {
	if depth > maxMergeDepth {
		return "allOf and keywords beside $ref nest too deeply to combine"
	}
	if e.kind == 'b' && !e.b {
		return ""
	}
	if a := e.get("anyOf"); a != nil && a.kind == 'a' && len(e.keys) == 1 {
		for _, b := range a.arr {
			f, why := c.flatten(b, depth+1)
			if why == "" {
				why = c.elseSide(f, p, sp, reqd, typed, add, depth+1)
			}
			if why != "" {
				return why
			}
		}
		return ""
	}
	if e.get("anyOf") != nil || e.get("oneOf") != nil {
		return "if/then/else: the schema beside it merged with else is a choice (oneOf, or anyOf beside other keywords); sluice supports if/then/else over object schemas and their anyOf: move the choice into then and else"
	}
	if sp != nil {
		// B: values of p if refuses.
		decl := e.get("properties").get(p)
		vals, ok := []*node(nil), false
		if decl != nil {
			vals, ok = c.finiteValues(decl)
		}
		if c.failed() {
			return c.err.Msg
		}
		if !ok {
			return fmt.Sprintf("if/then/else on the property %q: sluice writes the else side with values of %q that if refuses, so the schema (or else) must list them (enum, const or boolean under properties/%s); the grammar cannot write \"any value but these\"", p, p, p)
		}
		acc := c.shaper().of(sp, modeAcc)
		simple := plainTest(sp)
		var out []*node
		for _, v := range vals {
			// Surely refused by if's test: its shape cannot hold v, or
			// the test is of keywords the value check decides exactly.
			no := !mayHold(acc, canon(v), v) ||
				simple && !c.lits.satisfies(v, sp, 0) && !c.lits.over && (v.kind != 'n' || ratOf(string(v.num)) != nil)
			if no {
				out = append(out, v)
			}
		}
		if len(out) > 0 {
			x := &node{kind: 'o', keys: []string{"type", "required", "properties"}, vals: []*node{
				{kind: 's', str: "object"}, {kind: 'a', arr: []*node{{kind: 's', str: p}}},
				{kind: 'o', keys: []string{p}, vals: []*node{{kind: 'o', keys: []string{"enum"}, vals: []*node{{kind: 'a', arr: out}}}}}}}
			if why := add(c.merge(e, x, depth+1)); why != "" {
				return why
			}
		}
	}
	if reqd && !requires(e, p) {
		// Objects without p do not match if.
		x := &node{kind: 'o', keys: []string{"properties"}, vals: []*node{{kind: 'o', keys: []string{p}, vals: []*node{falseNode}}}}
		if why := add(c.merge(e, x, depth+1)); why != "" {
			return why
		}
	}
	if typed {
		// Neither do values of other types.
		var ts []*node
		for _, t := range []string{"array", "string", "number", "boolean", "null"} {
			ts = append(ts, &node{kind: 's', str: t})
		}
		x := &node{kind: 'o', keys: []string{"type"}, vals: []*node{{kind: 'a', arr: ts}}}
		if why := add(c.merge(e, x, depth+1)); why != "" {
			return why
		}
	}
	return ""
}

// oneBranch is the anyOf of branches (false when none, the branch when
// one).
func oneBranch(branches []*node) *node {
	switch len(branches) {
	case 0:
		return falseNode
	case 1:
		return branches[0]
	}
	return &node{kind: 'o', keys: []string{"anyOf"}, vals: []*node{{kind: 'a', arr: branches}}}
}

// requires reports whether object schema s lists p in required.
func requires(s *node, p string) bool {
	r := s.get("required")
	return r != nil && slices.ContainsFunc(r.arr, func(x *node) bool { return x.kind == 's' && x.str == p })
}

// ifTest reads an if schema of the supported shape: one property p,
// tested against sp (nil: only its presence is tested), required or
// not (reqd), with "type": "object" or no type (typed).
func ifTest(s *node) (p string, sp *node, reqd, typed bool, why string) {
	refuse := func(what string) (string, *node, bool, bool, string) {
		return "", nil, false, false, "if/then/else is supported when if tests one property of an object, as a discriminator ({\"properties\": {\"kind\": {\"const\": \"a\"}}, \"required\": [\"kind\"]}, or only {\"required\": [\"kind\"]}), optionally with \"type\": \"object\"; " + what
	}
	props, req := s.get("properties"), s.get("required")
	for _, k := range s.keys {
		switch {
		case annotations[k], k == "properties", k == "required":
		case k == "type":
			t := s.get("type")
			if !(t.kind == 's' && t.str == "object" || t.kind == 'a' && len(t.arr) == 1 && t.arr[0].kind == 's' && t.arr[0].str == "object") {
				return refuse("its type must be \"object\"")
			}
			typed = true
		default:
			return refuse(fmt.Sprintf("%q in if is not", k))
		}
	}
	if props != nil {
		if props.kind != 'o' || len(props.keys) != 1 {
			return refuse("its properties must name exactly one property")
		}
		p, sp = props.keys[0], props.vals[0]
		if sp.kind == 'b' && sp.b || sp.kind == 'o' && countHandled(sp) == 0 {
			sp = nil // any value: a test of presence
		}
	}
	if req != nil {
		if req.kind != 'a' || len(req.arr) > 1 || len(req.arr) == 1 && (req.arr[0].kind != 's' || props != nil && req.arr[0].str != p) {
			return refuse("its required may list only the property it tests")
		}
		if len(req.arr) == 1 {
			p, reqd = req.arr[0].str, true
		}
	}
	if props == nil && !reqd {
		return refuse("if tests no property")
	}
	return p, sp, reqd, typed, ""
}

// plainTest reports whether schema s is of keywords on one value that
// litChecker.satisfies decides exactly (no subschema, no format: its
// check is the grammar's stricter subset), so its "no" is sure.
func plainTest(s *node) bool {
	if s == nil || s.kind != 'o' {
		return false
	}
	for _, k := range s.keys {
		switch k {
		case "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
			"minLength", "maxLength", "pattern":
		default:
			if !annotations[k] {
				return false
			}
		}
	}
	return true
}
