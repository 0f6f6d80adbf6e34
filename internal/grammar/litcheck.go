package grammar

import (
	"math/big"
	"regexp"
	"strings"
	"unicode/utf8"
)

// A schema's enum or const is compiled as the list of its values, so the
// keywords beside it (a maximum, a pattern, minProperties) are applied by
// keeping only the values that satisfy them: satisfies is a validator of
// the keywords the compiler supports, run on each value at compile time.
// It errs towards "no" (a value it cannot decide is dropped, never
// written): an output must always validate.

// maxLitDepth bounds the $ref and nesting depth satisfies follows.
const maxLitDepth = 32

// maxLitSteps bounds the schemas satisfies looks at in one compile: an
// anyOf of two $refs back to itself is 2^depth of them.
const maxLitSteps = 200_000

// litChecker holds the compiled patterns of one compile.
type litChecker struct {
	c    *compiler // its shaper (oneOf)
	root *node
	res  map[string]*regexp.Regexp
	// steps counts satisfies' calls; over: it passed maxLitSteps (every
	// answer after is no).
	steps int
	over  bool
}

func (lc *litChecker) regexp(p string, anchored bool) *regexp.Regexp {
	if anchored {
		p = `^(?:` + p + `)$`
	}
	if re, ok := lc.res[p]; ok {
		return re
	}
	re, err := regexp.Compile(p)
	if err != nil {
		re = nil
	}
	if lc.res == nil {
		lc.res = map[string]*regexp.Regexp{}
	}
	lc.res[p] = re
	return re
}

// satisfies reports whether value v is valid against schema s (false
// when unsure).
func (lc *litChecker) satisfies(v *node, s *node, depth int) bool {
	if lc.steps++; lc.steps > maxLitSteps {
		lc.over = true
	}
	switch {
	case lc.over || depth > maxLitDepth:
		return false
	case s == nil:
		return true
	case s.kind == 'b':
		return s.b
	case s.kind != 'o':
		return false
	}
	for _, k := range s.keys {
		if !handled[k] && !annotations[k] {
			return false
		}
	}
	if r := s.get("$ref"); r != nil {
		t, ok := resolvePointer(lc.root, r.str)
		if r.kind != 's' || !ok || !lc.satisfies(v, t, depth+1) {
			return false
		}
	}
	if a := s.get("allOf"); a != nil {
		for _, x := range a.arr {
			if !lc.satisfies(v, x, depth+1) {
				return false
			}
		}
	}
	if a := s.get("anyOf"); a != nil {
		ok := false
		for _, x := range a.arr {
			if ok = lc.satisfies(v, x, depth+1); ok {
				break
			}
		}
		if !ok {
			return false
		}
	}
	if a := s.get("oneOf"); a != nil {
		// Exactly one. satisfies' no may be "not sure", which must not
		// make a second match look absent: every other branch must also
		// be refused by its shape (oneof.go), which over-approximates
		// what it accepts.
		n := 0
		key := canon(v)
		for _, x := range a.arr {
			switch {
			case lc.satisfies(v, x, depth+1):
				n++
			case lc.c != nil && mayHold(lc.c.shaper().of(x, modeAcc), key, v):
				return false // maybe a match: not sure of exactly one
			}
		}
		if n != 1 {
			return false
		}
	}
	if ifS := s.get("if"); ifS != nil {
		// then when v matches if; else when it surely does not (a
		// value if may accept, unsure, is no).
		switch {
		case lc.satisfies(v, ifS, depth+1):
			if !lc.satisfies(v, s.get("then"), depth+1) {
				return false
			}
		case lc.c == nil || mayHold(lc.c.shaper().of(ifS, modeAcc), canon(v), v):
			return false
		case !lc.satisfies(v, s.get("else"), depth+1):
			return false
		}
	}
	if t := s.get("type"); t != nil {
		var names []string
		switch t.kind {
		case 's':
			names = []string{t.str}
		case 'a':
			for _, x := range t.arr {
				names = append(names, x.str)
			}
		}
		ok := false
		for _, n := range names {
			if typeBits(n)&typeOf(v) != 0 {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	key := ""
	if e := s.get("const"); e != nil {
		key = canon(v)
		if canon(e) != key {
			return false
		}
	}
	if e := s.get("enum"); e != nil {
		if key == "" {
			key = canon(v)
		}
		ok := false
		for _, x := range e.arr {
			if canon(x) == key {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	switch v.kind {
	case 'n':
		return lc.number(v, s)
	case 's':
		return lc.str(v.str, s)
	case 'a':
		return lc.array(v, s, depth)
	case 'o':
		return lc.object(v, s, depth)
	}
	return true
}

func litCount(s *node, k string) (int, bool) {
	x := s.get(k)
	if x == nil {
		return -1, true
	}
	f, err := x.num.Float64()
	if x.kind != 'n' || err != nil || f < 0 || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

func (lc *litChecker) str(v string, s *node) bool {
	n := utf8.RuneCountInString(v)
	lo, ok1 := litCount(s, "minLength")
	hi, ok2 := litCount(s, "maxLength")
	if !ok1 || !ok2 || n < lo || hi >= 0 && n > hi {
		return false
	}
	if p := s.get("pattern"); p != nil {
		re := lc.regexp(p.str, false)
		if p.kind != 's' || re == nil || !re.MatchString(v) {
			return false
		}
	}
	if f := s.get("format"); f != nil {
		// The formats as the grammar writes them: a strict subset.
		p, ok := formats[f.str]
		re := lc.regexp(p, true)
		if f.kind != 's' || !ok || re == nil || !re.MatchString(v) {
			return false
		}
	}
	return true
}

// ratOf is a JSON number as a fraction; nil when its exponent is too far
// from 0 to build (such a value is then not decided).
func ratOf(num string) *big.Rat {
	n, _ := normNum(num)
	digits, exp, _ := strings.Cut(n, "e")
	if len(exp) > 4 {
		return nil
	}
	if exp == "" {
		exp = "0"
	}
	r, ok := new(big.Rat).SetString(digits + "e" + exp)
	if !ok {
		return nil
	}
	return r
}

func (lc *litChecker) number(v *node, s *node) bool {
	var x *big.Rat
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} {
		b := s.get(k)
		if b == nil {
			continue
		}
		if x == nil {
			if x = ratOf(string(v.num)); x == nil {
				return false
			}
		}
		if b.kind != 'n' {
			return false
		}
		y := ratOf(string(b.num))
		if y == nil {
			return false
		}
		c := x.Cmp(y)
		switch k {
		case "minimum":
			if c < 0 {
				return false
			}
		case "maximum":
			if c > 0 {
				return false
			}
		case "exclusiveMinimum":
			if c <= 0 {
				return false
			}
		case "exclusiveMaximum":
			if c >= 0 {
				return false
			}
		case "multipleOf":
			if y.Sign() <= 0 || !new(big.Rat).Quo(x, y).IsInt() {
				return false
			}
		}
	}
	return true
}

func (lc *litChecker) array(v *node, s *node, depth int) bool {
	lo, ok1 := litCount(s, "minItems")
	hi, ok2 := litCount(s, "maxItems")
	if !ok1 || !ok2 || len(v.arr) < lo || hi >= 0 && len(v.arr) > hi {
		return false
	}
	if u := s.get("uniqueItems"); u != nil && u.kind == 'b' && u.b {
		seen := map[string]bool{}
		for _, x := range v.arr {
			k := canon(x)
			if seen[k] {
				return false
			}
			seen[k] = true
		}
	}
	if cs := s.get("contains"); cs != nil {
		// At least minContains items surely match; at most maxContains
		// may (the shape of what contains accepts over-approximates).
		minC, ok1 := litCount(s, "minContains")
		maxC, ok2 := litCount(s, "maxContains")
		if !ok1 || !ok2 || lc.c == nil {
			return false
		}
		if minC < 0 {
			minC = 1
		}
		sure, maybe := 0, 0
		acc := lc.c.shaper().of(cs, modeAcc)
		for _, x := range v.arr {
			switch {
			case lc.satisfies(x, cs, depth+1):
				sure++
				maybe++
			case mayHold(acc, canon(x), x):
				maybe++
			}
		}
		if sure < minC || maxC >= 0 && maybe > maxC {
			return false
		}
	}
	var prefix []*node
	if p := s.get("prefixItems"); p != nil {
		prefix = p.arr
	}
	for i, x := range v.arr {
		sub := s.get("items")
		if i < len(prefix) {
			sub = prefix[i]
		}
		if !lc.satisfies(x, sub, depth+1) {
			return false
		}
	}
	return true
}

func (lc *litChecker) object(v *node, s *node, depth int) bool {
	lo, ok1 := litCount(s, "minProperties")
	hi, ok2 := litCount(s, "maxProperties")
	if !ok1 || !ok2 || len(v.keys) < lo || hi >= 0 && len(v.keys) > hi {
		return false
	}
	if r := s.get("required"); r != nil {
		for _, x := range r.arr {
			if x.kind != 's' || v.get(x.str) == nil {
				return false
			}
		}
	}
	props := s.get("properties")
	addl := s.get("additionalProperties")
	pn := s.get("propertyNames")
	pp := s.get("patternProperties")
	if pp == nil {
		pp = &node{kind: 'o'}
	} else if pp.kind != 'o' {
		return false
	}
	for i, k := range v.keys {
		if pn != nil && !lc.satisfies(&node{kind: 's', str: k}, pn, depth+1) {
			return false
		}
		// Every pattern matching the name applies, beside the declared
		// schema; additionalProperties only where neither does.
		matched := false
		for j, p := range pp.keys {
			re := lc.regexp(p, false)
			if re == nil {
				return false
			}
			if re.MatchString(k) {
				matched = true
				if !lc.satisfies(v.vals[i], pp.vals[j], depth+1) {
					return false
				}
			}
		}
		sub := props.get(k)
		if sub == nil {
			if addl == nil || matched {
				continue
			}
			sub = addl
		}
		if !lc.satisfies(v.vals[i], sub, depth+1) {
			return false
		}
	}
	return true
}
