package grammar

import (
	"regexp/syntax"
)

// minLength/maxLength beside a pattern or format. The grammar cannot
// count the characters of an arbitrary pattern, but it can when the
// pattern is anchored at both ends and is a sequence of parts of fixed
// length with at most one repeat of a fixed-length part (^[a-z0-9_-]+$,
// ^\d{3}-\d*$, what Pydantic's constr(pattern=..., max_length=...) and
// Zod's .regex().max() send): the lengths bound that repeat's count. A
// pattern whose every match already has an allowed length needs nothing
// more (a date is 10 characters). Anything else is refused.

// reLen is the shortest and longest match of r in characters (max -1:
// unbounded); ok false for constructs whose length is not read here.
func reLen(r *syntax.Regexp) (lo, hi int, ok bool) {
	switch r.Op {
	case syntax.OpEmptyMatch:
		return 0, 0, true
	case syntax.OpLiteral:
		return len(r.Rune), len(r.Rune), true
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1, 1, true
	case syntax.OpCapture:
		return reLen(r.Sub[0])
	case syntax.OpConcat:
		for _, s := range r.Sub {
			a, b, ok := reLen(s)
			if !ok {
				return 0, 0, false
			}
			lo += a
			if hi >= 0 {
				hi = addLen(hi, b)
			}
		}
		return lo, hi, true
	case syntax.OpAlternate:
		lo = -1
		for _, s := range r.Sub {
			a, b, ok := reLen(s)
			if !ok {
				return 0, 0, false
			}
			if lo < 0 || a < lo {
				lo = a
			}
			if hi >= 0 && (b < 0 || b > hi) {
				hi = b
			}
		}
		return max(lo, 0), hi, true
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		a, b, ok := reLen(r.Sub[0])
		if !ok {
			return 0, 0, false
		}
		mn, mx := repeatBounds(r)
		lo = mn * a
		switch {
		case b == 0:
			hi = 0
		case mx < 0 || b < 0:
			hi = -1
		default:
			hi = mx * b
		}
		return lo, hi, true
	}
	return 0, 0, false
}

func addLen(a, b int) int {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}

func repeatBounds(r *syntax.Regexp) (int, int) {
	switch r.Op {
	case syntax.OpStar:
		return 0, -1
	case syntax.OpPlus:
		return 1, -1
	case syntax.OpQuest:
		return 0, 1
	}
	return r.Min, r.Max
}

// lengthBounded is the items of a JSON string's content matching the
// anchored-or-not pattern re with between lo and hi characters (hi < 0:
// no bound), or an error saying why the two cannot be combined.
func (c *compiler) lengthBounded(pattern string, anchored bool, lo, hi int) ([]item, *Error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return c.regex(pattern, anchored) // its error
	}
	subs, begin, end := splitAnchors(re, anchored)
	refuse := &Error{Code: "unsupported_schema", Msg: "minLength/maxLength beside a pattern or format are supported when the pattern is anchored (^...$) and is fixed-length parts with at most one repeat (as ^[a-z0-9_-]+$); write the length into the pattern ({m,n})"}
	if !begin || !end {
		return nil, refuse
	}
	whole := &syntax.Regexp{Op: syntax.OpConcat, Sub: subs}
	mn, mx, ok := reLen(whole)
	if !ok {
		return nil, refuse
	}
	if mn >= lo && (hi < 0 || mx >= 0 && mx <= hi) {
		return c.regex(pattern, anchored) // every match has an allowed length
	}
	// One part of variable length: a repeat of a fixed-length part.
	fixed, v := 0, -1
	for i, s := range subs {
		a, b, _ := reLen(s)
		if a == b {
			fixed += a
			continue
		}
		if v >= 0 {
			return nil, refuse
		}
		v = i
	}
	if v < 0 {
		return nil, &Error{Code: "invalid_schema", Msg: "no string matches both the pattern and minLength/maxLength", empty: true}
	}
	rep := subs[v]
	for rep.Op == syntax.OpCapture {
		rep = rep.Sub[0]
	}
	if rep.Op != syntax.OpStar && rep.Op != syntax.OpPlus && rep.Op != syntax.OpQuest && rep.Op != syntax.OpRepeat {
		return nil, refuse
	}
	w, w2, _ := reLen(rep.Sub[0])
	if w != w2 || w == 0 {
		return nil, refuse
	}
	rmin, rmax := repeatBounds(rep)
	kmin := max(rmin, ceilDiv(lo-fixed, w))
	kmax := rmax
	if hi >= 0 {
		if k := floorDiv(hi-fixed, w); kmax < 0 || k < kmax {
			kmax = k
		}
	}
	if kmax >= 0 && kmax < kmin {
		return nil, &Error{Code: "invalid_schema", Msg: "no string matches both the pattern and minLength/maxLength", empty: true}
	}
	parts := append([]*syntax.Regexp{}, subs...)
	parts[v] = &syntax.Regexp{Op: syntax.OpRepeat, Min: kmin, Max: kmax, Sub: []*syntax.Regexp{rep.Sub[0]}}
	var out []item
	for _, s := range parts {
		x, e := c.re(s)
		if e != nil {
			return nil, e
		}
		out = append(out, x...)
	}
	if c.failed() {
		return nil, c.err
	}
	return out, nil
}

func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func floorDiv(a, b int) int {
	if a < 0 {
		return -1
	}
	return a / b
}
