package grammar

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"unicode"
)

// patternProperties: a property whose name a pattern matches must be
// valid against that pattern's schema, besides its declared one (every
// matching pattern applies); additionalProperties governs only names no
// property declares and no pattern matches. The compiler applies that
// to what it writes:
//   - a declared property (or a required one, or a name of a
//     propertyNames enum) is written with its schema merged with the
//     schema of every pattern its name matches (merge.go);
//   - an object with no declared properties is a map whose keys follow
//     the patterns (Pydantic's Dict[constr(pattern=...), V] is
//     {"patternProperties": {"^[a-z]+$": V}}): a key written for one
//     pattern gets a value valid against every pattern it may also
//     match (the schemas of patterns not provably apart are merged);
//     other keys are not written (the output stays valid without them);
//   - a map that needs two keys or more (minProperties >= 2) cannot be
//     written from open patterns: a grammar cannot keep a key different
//     from the keys before it, and a repeated key counts once. When the
//     patterns (or the propertyNames pattern) match finitely many names
//     (^(en|fr|de)$), those names become optional properties, each
//     written at most once and counted.

// MaxPatternProperties bounds the patterns of one patternProperties
// (every declared property's name is matched against each).
const MaxPatternProperties = 64

// patProp is one entry of patternProperties.
type patProp struct {
	src    string
	re     *regexp.Regexp
	schema *node
	// few: its names when at most 64 (nil otherwise); prefix: the
	// literal beginning of every name when anchored at the start.
	few    []string
	prefix []rune
}

// patternProps reads s's patternProperties (nil when absent).
func (c *compiler) patternProps(s *node, path string) []patProp {
	pp := s.get("patternProperties")
	if pp == nil {
		return nil
	}
	path += "/patternProperties"
	if pp.kind != 'o' {
		c.bad(path, "patternProperties must be an object whose values are schemas")
		return nil
	}
	if len(pp.keys) > MaxPatternProperties {
		c.unsupported(path, "%d patterns; at most %d are supported", len(pp.keys), MaxPatternProperties)
		return nil
	}
	out := make([]patProp, 0, len(pp.keys))
	for i, p := range pp.keys {
		if len(p) > MaxPatternBytes {
			c.fail("pattern_too_complex", "%s: a pattern is %d bytes; at most %d are allowed", path, len(p), MaxPatternBytes)
			return nil
		}
		// What a pattern is read as, once per compile: a schema
		// reaching itself through $ref in merged copies reads its
		// patterns at every level.
		pr, ok := c.patterns[p]
		if !ok {
			re, err := regexp.Compile(p)
			if err != nil {
				c.bad(path, "the pattern %q is not a valid regular expression: %v", p, err)
				return nil
			}
			few, _ := finiteMatches(p, 64)
			prefix, _ := anchoredPrefix(p)
			pr = patProp{src: p, re: re, few: few, prefix: prefix}
			c.patterns[p] = pr
		}
		if v := pp.vals[i]; v.kind != 'o' && v.kind != 'b' {
			c.bad(path+"/"+p, "a schema must be an object or a boolean")
			return nil
		}
		pr.schema = pp.vals[i]
		out = append(out, pr)
	}
	return out
}

// propSchema is the schema a property named name is written with: its
// declared schema (decl, when declared) merged with the schema of every
// pattern matching name; a name neither declared nor matched gets addl
// (nil: any value). "" or why the schemas cannot be merged.
func (c *compiler) propSchema(name string, decl *node, declared bool, pats []patProp, addl *node) (*node, string) {
	var list []*node
	if declared {
		list = append(list, decl)
	}
	for _, p := range pats {
		if p.re.MatchString(name) {
			list = append(list, p.schema)
		}
	}
	if len(list) == 0 {
		return addl, ""
	}
	x := list[0]
	for _, y := range list[1:] {
		var why string
		if x, why = c.merge(x, y, 0); why != "" {
			return nil, why
		}
	}
	return x, ""
}

// matchesAny reports whether a pattern matches name.
func matchesAny(pats []patProp, name string) bool {
	for _, p := range pats {
		if p.re.MatchString(name) {
			return true
		}
	}
	return false
}

// patternMap is an object of keys written from the patterns (open
// languages; at most one key required by minP), each key's value valid
// against every pattern the key may match, at most maxP members (< 0:
// no bound). lo/hi bound the keys' lengths (propertyNames).
func (c *compiler) patternMap(pats []patProp, lo, hi, minP, maxP int, path string) []item {
	var alts [][]item
	for i, p := range pats {
		// The patterns this one's keys may also match: their schemas
		// apply too.
		v := p.schema
		for j, q := range pats {
			if j == i || patternsApart(&pats[i], &pats[j]) {
				continue
			}
			var why string
			if v, why = c.merge(v, q.schema, 0); why != "" {
				return c.unsupported(path+"/patternProperties", "the keys of %q may also match %q and the two schemas cannot be combined (%s); make the patterns exclude each other (different literal beginnings after ^)", p.src, q.src, why)
			}
		}
		if v != nil && v.kind == 'b' && !v.b {
			continue // no value allowed: such keys are never written
		}
		var key []item
		var err *Error
		if lo > 0 || hi >= 0 {
			key, err = c.lengthBounded(p.src, false, max(lo, 0), hi)
		} else {
			key, err = c.regex(p.src, false)
		}
		if err != nil {
			if c.err == nil {
				err.Msg = path + "/patternProperties: " + err.Msg
				c.err = err
			}
			return nil
		}
		val := c.value(v, path+"/patternProperties/"+p.src)
		if c.failed() {
			return nil
		}
		q := c.b.byteItem('"')
		alts = append(alts, seq([]item{q}, key, []item{q}, c.colon(), val))
	}
	if len(alts) == 0 {
		if minP > 0 {
			return c.unsupported(path, "minProperties %d: no pattern's schema, merged with those of the patterns its keys may also match, allows a value; make the patterns exclude each other (different literal beginnings after ^)", minP)
		}
		return c.b.lit("{}")
	}
	if maxP == 0 {
		return c.b.lit("{}")
	}
	return c.objectOf([]item{ref(c.b.rule(alts...))}, minP, maxP)
}

// patternsApart reports whether no name matches both patterns: one has
// few names (at most 64: ^(en|fr)$) and the other matches none of them,
// or both are anchored at the start with literal beginnings neither of
// which begins the other (^S_ and ^I_). false when not sure.
func patternsApart(a, b *patProp) bool {
	for _, p := range [2][2]*patProp{{a, b}, {b, a}} {
		if p[0].few != nil {
			return !slices.ContainsFunc(p[0].few, p[1].re.MatchString)
		}
	}
	if len(a.prefix) == 0 || len(b.prefix) == 0 {
		return false
	}
	n := min(len(a.prefix), len(b.prefix))
	return string(a.prefix[:n]) != string(b.prefix[:n])
}

// textAnchors parses pattern (Perl syntax) into its top-level parts
// without a leading ^ and a trailing $, and says whether each is there.
// Only text anchors count: (?m)'s line anchors do not bound a name, which
// may hold a newline.
func textAnchors(pattern string) (subs []*syntax.Regexp, begin, end, ok bool) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, false, false, false
	}
	subs = []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
		begin, subs = true, subs[1:]
	}
	if len(subs) > 0 && subs[len(subs)-1].Op == syntax.OpEndText {
		end, subs = true, subs[:len(subs)-1]
	}
	return subs, begin, end, true
}

// anchoredPrefix is the literal runes every match of pattern begins
// with, when it is anchored at the start (ok false otherwise).
func anchoredPrefix(pattern string) ([]rune, bool) {
	subs, begin, _, ok := textAnchors(pattern)
	if !ok || !begin {
		return nil, false
	}
	var out []rune
	for _, s := range subs {
		for s.Op == syntax.OpCapture {
			s = s.Sub[0]
		}
		if s.Op != syntax.OpLiteral || s.Flags&syntax.FoldCase != 0 {
			break
		}
		out = append(out, s.Rune...)
	}
	return out, len(out) > 0
}

// finiteMatches lists every string pattern matches when the pattern is
// anchored at both ends and matches at most limit strings (ok false
// otherwise), in a fixed order, each once.
func finiteMatches(pattern string, limit int) ([]string, bool) {
	subs, begin, end, ok := textAnchors(pattern)
	if !ok || !begin || !end {
		return nil, false
	}
	e := expander{limit: limit, bytes: 1 << 20}
	out := []string{""}
	for _, s := range subs {
		x, ok := e.expand(s)
		if !ok {
			return nil, false
		}
		if out, ok = e.cross(out, x); !ok {
			return nil, false
		}
	}
	seen := map[string]bool{}
	keep := out[:0]
	for _, s := range out {
		if !seen[s] {
			seen[s] = true
			keep = append(keep, s)
		}
	}
	return keep, true
}

// expander lists a pattern's matches within a count and a byte budget.
type expander struct {
	limit int
	bytes int
}

func (e *expander) cross(a, b []string) ([]string, bool) {
	if len(a)*len(b) > e.limit {
		return nil, false
	}
	out := make([]string, 0, len(a)*len(b))
	for _, x := range a {
		for _, y := range b {
			if e.bytes -= len(x) + len(y); e.bytes < 0 {
				return nil, false
			}
			out = append(out, x+y)
		}
	}
	return out, true
}

func (e *expander) expand(r *syntax.Regexp) ([]string, bool) {
	switch r.Op {
	case syntax.OpEmptyMatch:
		return []string{""}, true
	case syntax.OpLiteral:
		out := []string{""}
		for _, ch := range r.Rune {
			alts := []string{string(ch)}
			if r.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(ch); f != ch; f = unicode.SimpleFold(f) {
					alts = append(alts, string(f))
				}
			}
			var ok bool
			if out, ok = e.cross(out, alts); !ok {
				return nil, false
			}
		}
		return out, true
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(r.Rune); i += 2 {
			for ch := r.Rune[i]; ch <= r.Rune[i+1]; ch++ {
				if ch >= 0xD800 && ch <= 0xDFFF {
					continue // not text
				}
				if len(out) >= e.limit {
					return nil, false
				}
				out = append(out, string(ch))
			}
		}
		return out, true
	case syntax.OpCapture:
		return e.expand(r.Sub[0])
	case syntax.OpConcat:
		out := []string{""}
		for _, s := range r.Sub {
			x, ok := e.expand(s)
			if !ok {
				return nil, false
			}
			if out, ok = e.cross(out, x); !ok {
				return nil, false
			}
		}
		return out, true
	case syntax.OpAlternate:
		var out []string
		for _, s := range r.Sub {
			x, ok := e.expand(s)
			if !ok || len(out)+len(x) > e.limit {
				return nil, false
			}
			out = append(out, x...)
		}
		return out, true
	case syntax.OpQuest, syntax.OpRepeat:
		mn, mx := repeatBounds(r)
		if mx < 0 {
			return nil, false
		}
		base, ok := e.expand(r.Sub[0])
		if !ok {
			return nil, false
		}
		var out []string
		cur := []string{""}
		for k := 0; k <= mx; k++ {
			if k >= mn {
				if len(out)+len(cur) > e.limit {
					return nil, false
				}
				out = append(out, cur...)
			}
			if k < mx {
				if cur, ok = e.cross(cur, base); !ok {
					return nil, false
				}
			}
		}
		return out, true
	}
	return nil, false
}

// finiteNames is every name a map of no declared properties may have
// when they are finitely many (at most MaxEnum): the matches of its
// patternProperties (or, without them, of its propertyNames pattern)
// that propertyNames allows; nil when they are not finite.
func (c *compiler) finiteNames(pats []patProp, pn *node, names keyNames) []string {
	var srcs []string
	for _, p := range pats {
		srcs = append(srcs, p.src)
	}
	if len(pats) == 0 {
		p := pn.get("pattern")
		if p == nil || p.kind != 's' {
			return nil
		}
		srcs = []string{p.str}
	}
	seen := map[string]bool{}
	out := []string{}
	for _, src := range srcs {
		ms, ok := finiteMatches(src, MaxEnum)
		if !ok {
			return nil
		}
		for _, m := range ms {
			if !seen[m] && names.allows(m) {
				seen[m] = true
				out = append(out, m)
			}
		}
		if len(out) > MaxEnum {
			return nil
		}
	}
	return out
}
