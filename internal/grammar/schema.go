package grammar

import (
	"bytes"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits on what a client may ask the compiler for. A schema past any of
// them is refused with an Error whose Code names the limit, before any
// work that grows with it: a hostile schema costs its sender a 400 and
// costs the worker nothing another tenant would notice.
const (
	// MaxSchemaBytes bounds the schema's JSON text.
	MaxSchemaBytes = 64 << 10
	// MaxSchemaDepth bounds the nesting of the schema document.
	MaxSchemaDepth = 64
	// MaxEnum bounds the values of one enum (OpenAI allows 500 in strict
	// mode, 1000 in total).
	MaxEnum = 1000
	// MaxPatternBytes bounds one pattern's text.
	MaxPatternBytes = 1000
	// MaxElements bounds the compiled grammar (elements of 8 bytes): the
	// product of nested repetition bounds, enum sizes and property counts
	// is caught here, while compiling, not after.
	MaxElements = 100_000
	// MaxIntDigits bounds the digits of an integer part the grammar lets
	// the model write (15 keep every integer exact in a float64).
	MaxIntDigits = 15
	// MaxFracDigits bounds the digits after a decimal point.
	MaxFracDigits = 15
)

// maxMagnitude is the largest integer part: 10^MaxIntDigits - 1.
const maxMagnitude = 999_999_999_999_999

// JSONObject is the grammar of any JSON object ({"type": "json_object"}).
func JSONObject() *Grammar {
	c := newCompiler(nil)
	root := c.b.rule([]item{c.anyObject()})
	g, err := c.b.finish(root)
	if err != nil {
		panic(err) // a fixed grammar; cannot fail
	}
	return g
}

// CompileSchema compiles a JSON Schema (the subset OpenAI's strict mode
// and vLLM accept, see docs) to a grammar of the JSON values it accepts.
// Keywords that would constrain the output in ways the grammar does not
// enforce are refused by name, never ignored.
func CompileSchema(schema []byte) (*Grammar, error) {
	if len(schema) > MaxSchemaBytes {
		return nil, errLimit("schema_too_large", "the schema is %d bytes; at most %d are allowed", len(schema), MaxSchemaBytes)
	}
	root, err := parseJSON(schema, MaxSchemaDepth)
	if err != nil {
		if e, ok := err.(*Error); ok {
			return nil, e
		}
		return nil, &Error{Code: "invalid_schema", Msg: "the schema is not valid JSON: " + err.Error()}
	}
	if p := innerID(root, "#"); p != "" {
		return nil, &Error{Code: "unsupported_schema", Msg: fmt.Sprintf("%s/$id: $id is supported only at the schema's root when a $ref is under it (the $id changes what those references point at; sluice resolves every reference against the root): remove it or move the schema into the root's $defs", p)}
	}
	c := newCompiler(root)
	items := c.value(root, "#")
	if c.err != nil {
		return nil, c.err
	}
	r := c.b.rule(items)
	g, err := c.b.finish(r)
	if g != nil {
		g.usesRef = len(c.refs) > 0
	}
	return g, err
}

type compiler struct {
	b    *builder
	root *node
	err  *Error
	refs map[string]int32
	// refLog and mergedLog list refs' and mergedRules' keys in the
	// order they were added (maybe forgets those a failed compile
	// added).
	refLog    []string
	mergedLog []*node
	// shapes and oneOfWork prove oneOf branches exclusive (oneof.go).
	shapes    *shaper
	oneOfWork int
	// lits checks enum values against the keywords beside them.
	lits litChecker
	// merges and merged: allOf and keywords beside $ref/anyOf/oneOf
	// (merge.go).
	merges int
	merged map[*node]mergedNode
	// mergedRules: the rule of each schema value() normalized, by the
	// schema, compiled once like a $ref's target (a merged schema that
	// reaches itself again is a recursive rule, not a compile that
	// never ends); depth: value()'s nesting now (maxValueDepth).
	mergedRules map[*node]int32
	depth       int
	// patterns: each patternProperties pattern read (patprops.go), by
	// its text, its schema unset.
	patterns map[string]patProp
	// shared rules, built on first use
	ws, anyVal, anyObj, anyStr, strChar, anyNum, anyInt int32
	haveAny                                             bool
}

func newCompiler(root *node) *compiler {
	c := &compiler{b: newBuilder(MaxElements), root: root, refs: map[string]int32{}, lits: litChecker{root: root}, merged: map[*node]mergedNode{}, mergedRules: map[*node]int32{}, patterns: map[string]patProp{},
		ws: -1, anyVal: -1, anyObj: -1, anyStr: -1, strChar: -1, anyNum: -1, anyInt: -1}
	c.lits.c = c
	return c
}

func (c *compiler) fail(code, format string, args ...any) []item {
	if c.err == nil {
		c.err = errLimit(code, format, args...)
	}
	return nil
}

func (c *compiler) bad(path, format string, args ...any) []item {
	return c.fail("invalid_schema", "%s: %s", path, fmt.Sprintf(format, args...))
}

// none is bad for a schema that accepts no value (bounds that cross,
// values that break the keywords beside them): an anyOf branch or a
// contains match that is none is left out, not an error.
func (c *compiler) none(path, format string, args ...any) []item {
	if c.err == nil {
		c.bad(path, format, args...)
		c.err.empty = true
	}
	return nil
}

func (c *compiler) unsupported(path, format string, args ...any) []item {
	return c.fail("unsupported_schema", "%s: %s", path, fmt.Sprintf(format, args...))
}

// failed reports whether compiling must stop (an error, or the builder's
// budget spent).
func (c *compiler) failed() bool {
	if c.err == nil && c.b.err != nil {
		if e, ok := c.b.err.(*Error); ok {
			c.err = e
		} else {
			c.err = &Error{Code: "grammar_too_large", Msg: c.b.err.Error()}
		}
	}
	return c.err != nil
}

// wsItem is the optional single space after ':' and ','. One space, not
// any run of whitespace: a model must not be able to pad forever.
func (c *compiler) wsItem() item {
	if c.ws < 0 {
		c.ws = c.b.rule(nil, c.b.lit(" "))
	}
	return ref(c.ws)
}

func (c *compiler) comma() []item { return []item{c.b.byteItem(','), c.wsItem()} }
func (c *compiler) colon() []item { return []item{c.b.byteItem(':'), c.wsItem()} }

func digitClass(lo, hi byte) byteSet {
	var s byteSet
	s.addRange(lo, hi)
	return s
}

// stringChar is one character of a JSON string: any valid UTF-8 character
// but '"', '\' and controls, or a short escape. \u escapes are not
// offered: they could spell lone surrogates, which are not text.
func (c *compiler) stringChar() item {
	if c.strChar >= 0 {
		return ref(c.strChar)
	}
	var ascii byteSet
	ascii.addRange(0x20, 0x7f)
	ascii[0] &^= 1 << '"'
	ascii[1] &^= 1 << ('\\' - 64)
	alts := [][]item{{c.b.class(ascii)}}
	var esc byteSet
	for _, e := range `"\/bfnrt` {
		esc.add(byte(e))
	}
	alts = append(alts, []item{c.b.byteItem('\\'), c.b.class(esc)})
	utf8Ranges(0x80, 0x10FFFF, func(lo, hi []byte) {
		var a []item
		for i := range lo {
			a = append(a, c.b.class(digitClass(lo[i], hi[i])))
		}
		alts = append(alts, a)
	})
	c.strChar = c.b.rule(alts...)
	return ref(c.strChar)
}

func (c *compiler) anyString() item {
	if c.anyStr < 0 {
		q := c.b.byteItem('"')
		c.anyStr = c.b.rule([]item{q, c.b.star([]item{c.stringChar()}), q})
	}
	return ref(c.anyStr)
}

// intPart is "0" or up to MaxIntDigits digits without a leading zero.
func (c *compiler) intPart() []item {
	return []item{ref(c.b.rule(c.b.lit("0"), seq([]item{c.b.class(digitClass('1', '9'))},
		c.b.repeat([]item{c.b.class(digitClass('0', '9'))}, 0, MaxIntDigits-1))))}
}

func (c *compiler) frac() item {
	return c.b.opt(seq(c.b.lit("."), c.b.repeat([]item{c.b.class(digitClass('0', '9'))}, 1, MaxFracDigits)))
}

func (c *compiler) anyInteger() item {
	if c.anyInt < 0 {
		c.anyInt = c.b.rule(seq([]item{c.b.opt(c.b.lit("-"))}, c.intPart()))
	}
	return ref(c.anyInt)
}

// anyNumber has no exponent: 1e999 is valid JSON that most parsers refuse
// or turn into infinity.
func (c *compiler) anyNumber() item {
	if c.anyNum < 0 {
		c.anyNum = c.b.rule(seq([]item{c.b.opt(c.b.lit("-"))}, c.intPart(), []item{c.frac()}))
	}
	return ref(c.anyNum)
}

// anyValue is any JSON value; anyObject any JSON object.
func (c *compiler) anyValue() item {
	if !c.haveAny {
		c.haveAny = true
		c.anyVal = c.b.newRule()
		c.anyObj = c.b.newRule()
		arr := c.b.newRule()
		v := ref(c.anyVal)
		member := seq([]item{c.anyString()}, c.colon(), []item{v})
		c.b.define(c.anyObj, seq(c.b.lit("{"), []item{c.b.opt(seq(member, []item{c.b.star(seq(c.comma(), member))}))}, c.b.lit("}")))
		c.b.define(arr, seq(c.b.lit("["), []item{c.b.opt([]item{v, c.b.star(seq(c.comma(), []item{v}))})}, c.b.lit("]")))
		c.b.define(c.anyVal, []item{ref(c.anyObj)}, []item{ref(arr)}, []item{c.anyString()}, []item{c.anyNumber()},
			c.b.lit("true"), c.b.lit("false"), c.b.lit("null"))
	}
	return ref(c.anyVal)
}

func (c *compiler) anyObject() item {
	c.anyValue()
	return ref(c.anyObj)
}

// keywords the compiler reads; annotations it ignores. Anything else
// would constrain the output in a way the grammar does not enforce, so it
// is refused by name.
var (
	handled = map[string]bool{"type": true, "properties": true, "required": true, "additionalProperties": true,
		"items": true, "prefixItems": true, "minItems": true, "maxItems": true, "enum": true, "const": true,
		"pattern": true, "format": true, "minLength": true, "maxLength": true, "minimum": true, "maximum": true,
		"exclusiveMinimum": true, "exclusiveMaximum": true, "anyOf": true, "allOf": true, "$ref": true,
		"oneOf": true, "minProperties": true, "maxProperties": true, "propertyNames": true, "multipleOf": true,
		"uniqueItems": true, "patternProperties": true, "contains": true, "minContains": true, "maxContains": true,
		"if": true, "then": true, "else": true}
	annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true,
		"$schema": true, "$id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
		"$defs": true, "definitions": true, "contentMediaType": true, "contentEncoding": true, "discriminator": true,
		"$anchor": true, "strict": true, "nullable": true}
)

// value compiles schema s (at JSON pointer path) to the items of one
// JSON value it accepts.
func (c *compiler) value(s *node, path string) []item {
	if c.failed() {
		return nil
	}
	// Schemas merged afresh on each use (patternProperties' keys, a
	// property and its patterns, items and contains) may reach
	// themselves again through a $ref: each use nests one value()
	// deeper, so the nesting is bounded, and so is the path each
	// level keeps (it only names a place in error messages).
	if c.depth >= maxValueDepth {
		return c.unsupported(shortPath(path), "the schema nests more than %d levels deep (counting schemas reached again through $ref in combined schemas); simplify it", maxValueDepth)
	}
	c.depth++
	defer func() { c.depth-- }()
	path = shortPath(path)
	switch {
	case s == nil:
		return []item{c.anyValue()}
	case s.kind == 'b':
		if !s.b {
			return c.none(path, "the schema false accepts nothing")
		}
		return []item{c.anyValue()}
	case s.kind != 'o':
		return c.bad(path, "a schema must be an object or a boolean")
	}
	for _, k := range s.keys {
		if !handled[k] && !annotations[k] {
			return c.unsupported(path, "the keyword %q is not supported", k)
		}
	}
	if d := s.get("discriminator"); d != nil {
		// OpenAPI's annotation (Pydantic writes it beside a oneOf): it
		// constrains nothing the branches do not, but a malformed one is
		// a mistake worth telling.
		if pn := d.get("propertyName"); d.kind != 'o' || pn == nil || pn.kind != 's' {
			return c.bad(path+"/discriminator", "discriminator must be an object whose propertyName is a string")
		}
	}
	if needsMerge(s) {
		if id, ok := c.mergedRules[s]; ok {
			return []item{ref(id)}
		}
		m, why := c.normalize(s, 0)
		if why != "" {
			return c.unsupported(path, "%s", why)
		}
		id := c.b.newRule()
		c.mergedRules[s] = id
		c.mergedLog = append(c.mergedLog, s)
		c.b.define(id, c.value(m, path))
		return []item{ref(id)}
	}
	if r := s.get("$ref"); r != nil {
		return c.ref(r, path)
	}
	if a := s.get("allOf"); a != nil {
		return c.value(a.arr[0], path+"/allOf/0")
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		a := s.get(kw)
		if a == nil {
			continue
		}
		if countHandled(s) > 1 {
			return c.unsupported(path, "keywords beside %s are not supported; move them into each branch", kw)
		}
		if a.kind != 'a' || len(a.arr) == 0 {
			return c.bad(path+"/"+kw, "%s must be a non-empty array", kw)
		}
		if len(a.arr) > MaxEnum {
			return c.fail("enum_too_large", "%s/%s has %d branches; at most %d are allowed", path, kw, len(a.arr), MaxEnum)
		}
		var alts [][]item
		for i, sub := range a.arr {
			// A branch that accepts no value matches nothing: left out.
			if x := c.maybe(func() []item { return c.value(sub, fmt.Sprintf("%s/%s/%d", path, kw, i)) }); x != nil {
				alts = append(alts, x)
			}
		}
		if c.failed() {
			return nil
		}
		if len(alts) == 0 {
			return c.none(path+"/"+kw, "no branch accepts a value")
		}
		// oneOf is anyOf when no value matches two branches (oneof.go).
		if kw == "oneOf" {
			if why := c.exclusive(a.arr, path); why != "" {
				return c.unsupported(path, "%s", why)
			}
		}
		return []item{ref(c.b.rule(alts...))}
	}
	types, items := c.types(s, path)
	if c.failed() {
		return nil
	}
	if e := s.get("const"); e != nil {
		return c.literals([]*node{e}, types, s, path+"/const")
	}
	if e := s.get("enum"); e != nil {
		if e.kind != 'a' || len(e.arr) == 0 {
			return c.bad(path+"/enum", "enum must be a non-empty array")
		}
		if len(e.arr) > MaxEnum {
			return c.fail("enum_too_large", "%s/enum has %d values; at most %d are allowed", path, len(e.arr), MaxEnum)
		}
		return c.literals(e.arr, types, s, path+"/enum")
	}
	if items != nil {
		return items
	}
	var alts [][]item
	for _, t := range types {
		var a []item
		switch t {
		case "object":
			a = c.object(s, path)
		case "array":
			a = c.array(s, path)
		case "string":
			a = c.str(s, path)
		case "integer":
			a = c.integer(s, path)
		case "number":
			a = c.number(s, path)
		case "boolean":
			a = []item{ref(c.b.rule(c.b.lit("true"), c.b.lit("false")))}
		case "null":
			a = c.b.lit("null")
		}
		if c.failed() {
			return nil
		}
		alts = append(alts, a)
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return []item{ref(c.b.rule(alts...))}
}

func countHandled(s *node) int {
	n := 0
	for _, k := range s.keys {
		if handled[k] {
			n++
		}
	}
	return n
}

// types lists the types s allows, or returns the items of "any value"
// when s says nothing that restricts the type.
func (c *compiler) types(s *node, path string) ([]string, []item) {
	var types []string
	t := s.get("type")
	switch {
	case t == nil:
		if types = impliedTypes(s); types == nil {
			return nil, []item{c.anyValue()}
		}
	case t.kind == 's':
		types = []string{t.str}
	case t.kind == 'a' && len(t.arr) > 0:
		for _, x := range t.arr {
			if x.kind != 's' {
				c.bad(path+"/type", "type must be a string or an array of strings")
				return nil, nil
			}
			types = append(types, x.str)
		}
	default:
		c.bad(path+"/type", "type must be a string or an array of strings")
		return nil, nil
	}
	for _, x := range types {
		switch x {
		case "object", "array", "string", "integer", "number", "boolean", "null":
		default:
			c.bad(path+"/type", "unknown type %q", x)
			return nil, nil
		}
	}
	return types, nil
}

// impliedTypes is the type the compiler writes for a schema without
// "type", read from the keywords it has (nil: any value). The output is
// of that type, which such a schema accepts: its keywords constrain
// only values of their type.
func impliedTypes(s *node) []string {
	has := func(ks ...string) bool {
		for _, k := range ks {
			if s.get(k) != nil {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "additionalProperties", "required", "minProperties", "maxProperties", "propertyNames", "patternProperties"):
		return []string{"object"}
	case has("items", "prefixItems", "minItems", "maxItems", "contains", "minContains", "maxContains"):
		return []string{"array"}
	case has("pattern", "format", "minLength", "maxLength"):
		return []string{"string"}
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
		return []string{"number"}
	case has("enum", "const"):
		return []string{"object", "array", "string", "integer", "number", "boolean", "null"}
	}
	return nil
}

// literals is one of the given JSON values, those of the allowed types
// that satisfy the keywords of s beside enum/const (a maximum, a
// pattern: litcheck.go).
func (c *compiler) literals(vals []*node, types []string, s *node, path string) []item {
	rest := &node{kind: 'o'}
	for i, k := range s.keys {
		if handled[k] && k != "enum" && k != "const" && k != "type" {
			rest.keys, rest.vals = append(rest.keys, k), append(rest.vals, s.vals[i])
		}
	}
	var lits []string
	seen := map[string]bool{}
	typed := 0
	for _, v := range vals {
		if !valueHasType(v, types) {
			continue
		}
		typed++
		if len(rest.keys) > 0 && !c.lits.satisfies(v, rest, 0) {
			continue
		}
		var b bytes.Buffer
		v.encode(&b)
		if seen[b.String()] {
			continue
		}
		seen[b.String()] = true
		lits = append(lits, b.String())
	}
	if c.lits.over {
		return c.unsupported(path, "checking the values against the keywords beside them took more than %d steps (an anyOf or $ref they reach branches too much); simplify those keywords", maxLitSteps)
	}
	if len(lits) == 0 && typed > 0 {
		return c.none(path, "no value satisfies the schema's other keywords (%s)", strings.Join(rest.keys, ", "))
	}
	if len(lits) == 0 {
		return c.none(path, "no value is of the schema's type")
	}
	return c.literalTrie(lits)
}

// litNode is a node of a trie of literals.
type litNode struct {
	kids  map[byte]*litNode
	order []byte
	end   bool
}

// literalTrie matches any of lits, built as a trie: alternatives that
// share a prefix share its elements, so the matcher follows one stack
// through "value-1" | "value-2" | ... instead of one per value (a
// 1000-value enum would otherwise be 1000 parses at its first byte).
func (c *compiler) literalTrie(lits []string) []item {
	root := &litNode{}
	for _, l := range lits {
		n := root
		for i := 0; i < len(l); i++ {
			if n.kids == nil {
				n.kids = map[byte]*litNode{}
			}
			k := n.kids[l[i]]
			if k == nil {
				k = &litNode{}
				n.kids[l[i]] = k
				n.order = append(n.order, l[i])
			}
			n = k
		}
		n.end = true
	}
	var emit func(n *litNode) []item
	emit = func(n *litNode) []item {
		var out []item
		for !n.end && len(n.order) == 1 { // a chain: inline
			b := n.order[0]
			out = append(out, c.b.byteItem(b))
			n = n.kids[b]
		}
		if len(n.order) == 0 {
			return out
		}
		var alts [][]item
		for _, b := range n.order {
			alts = append(alts, append([]item{c.b.byteItem(b)}, emit(n.kids[b])...))
		}
		if n.end {
			alts = append(alts, nil)
		}
		return append(out, ref(c.b.rule(alts...)))
	}
	return emit(root)
}

func valueHasType(v *node, types []string) bool {
	for _, t := range types {
		switch {
		case t == "object" && v.kind == 'o', t == "array" && v.kind == 'a', t == "string" && v.kind == 's',
			t == "number" && v.kind == 'n', t == "boolean" && v.kind == 'b', t == "null" && v.kind == 'z':
			return true
		case t == "integer" && v.kind == 'n':
			f, err := v.num.Float64()
			if err == nil && f == math.Trunc(f) {
				return true
			}
		}
	}
	return false
}

// ref compiles a local JSON pointer reference; each target is one rule, so
// recursive schemas become recursive rules.
func (c *compiler) ref(r *node, path string) []item {
	if r.kind != 's' || !strings.HasPrefix(r.str, "#") {
		return c.unsupported(path+"/$ref", "only local references (#/$defs/...) are supported")
	}
	if id, ok := c.refs[r.str]; ok {
		return []item{ref(id)}
	}
	if p := strings.TrimPrefix(r.str, "#"); p != "" && !strings.HasPrefix(p, "/") {
		return c.unsupported(path+"/$ref", "reference %q is not a JSON pointer", r.str)
	}
	target, ok := resolvePointer(c.root, r.str)
	if !ok {
		return c.bad(path+"/$ref", "reference %q points at nothing", r.str)
	}
	id := c.b.newRule()
	c.refs[r.str] = id
	c.refLog = append(c.refLog, r.str)
	c.b.define(id, c.value(target, r.str))
	return []item{ref(id)}
}

// innerID is the path of a schema below s that has an "$id" and a
// "$ref" in it or below it ("" when none): such a reference resolves
// against that $id, not the root. An $id over no reference changes
// nothing sluice reads (a tool's parameters with their own $id, placed
// inside the schema the router builds for several tools). Every schema
// position is looked at, those of keywords sluice refuses too (a
// reference may point into them), never the values of enum, const,
// default or examples, which are data.
func innerID(s *node, path string) string {
	_, p := scanRefs(s, path)
	return p
}

// scanRefs reports whether s or a schema below it has a "$ref", and the
// path of a schema below s whose $id is over one ("" when none).
func scanRefs(s *node, path string) (bool, string) {
	has := s.get("$ref") != nil
	var sub func(x *node, path string) string
	sub = func(x *node, path string) string {
		switch x.kind {
		case 'o':
			h, p := scanRefs(x, path)
			has = has || h
			if p == "" && h && x.get("$id") != nil {
				p = path
			}
			return p
		case 'a':
			for i, y := range x.arr {
				if p := sub(y, fmt.Sprintf("%s/%d", path, i)); p != "" {
					return p
				}
			}
		}
		return ""
	}
	for i, k := range s.keys {
		v := s.vals[i]
		switch k {
		case "enum", "const", "default", "examples":
			continue
		case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
			if v.kind == 'o' {
				for j, name := range v.keys {
					if p := sub(v.vals[j], path+"/"+k+"/"+name); p != "" {
						return has, p
					}
				}
				continue
			}
		}
		if p := sub(v, path+"/"+k); p != "" {
			return has, p
		}
	}
	return has, ""
}

// resolvePointer is what a local reference ("#", "#/$defs/a") points at
// within root.
func resolvePointer(root *node, r string) (*node, bool) {
	p, ok := strings.CutPrefix(r, "#")
	if !ok || p != "" && !strings.HasPrefix(p, "/") {
		return nil, false
	}
	// The fragment of a URI reference is percent-encoded ("#/$defs/a%20b"
	// is the key "a b", as every validator reads it): decoded first, then
	// split into the pointer's tokens.
	p, err := url.PathUnescape(p)
	if err != nil {
		return nil, false
	}
	target := root
	if p == "" {
		return target, true
	}
	for _, part := range strings.Split(p[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		switch {
		case target != nil && target.kind == 'o':
			target = target.get(part)
		case target != nil && target.kind == 'a':
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(target.arr) {
				target = nil
			} else {
				target = target.arr[i]
			}
		default:
			target = nil
		}
	}
	return target, target != nil
}

// MaxPropertyCount bounds minProperties and maxProperties where they
// constrain an object of declared properties: the grammar counts the
// properties written, a rule per property and count.
const MaxPropertyCount = 64

// object compiles properties in their declared order. Required ones must
// appear; optional ones may be skipped. Additional properties, when
// allowed, are not generated (the output stays valid without them),
// except for a map schema (additionalProperties a schema, no properties).
// minProperties/maxProperties are counted as properties are written;
// propertyNames drops the optional properties it refuses, adds the names
// of its enum as optional properties, and is a map's key grammar.
func (c *compiler) object(s *node, path string) []item {
	props := s.get("properties")
	if props != nil && props.kind != 'o' {
		return c.bad(path+"/properties", "properties must be an object")
	}
	req := map[string]bool{}
	if r := s.get("required"); r != nil {
		if r.kind != 'a' {
			return c.bad(path+"/required", "required must be an array of strings")
		}
		for _, x := range r.arr {
			if x.kind != 's' {
				return c.bad(path+"/required", "required must be an array of strings")
			}
			req[x.str] = true
		}
	}
	minP, maxP := c.count(s, "minProperties", path), c.count(s, "maxProperties", path)
	names := c.propertyNames(s.get("propertyNames"), path+"/propertyNames")
	pats := c.patternProps(s, path)
	if c.failed() {
		return nil
	}
	minP = max(minP, 0)
	if maxP >= 0 && maxP < minP {
		return c.none(path, "maxProperties %d is below minProperties %d", maxP, minP)
	}
	addl := s.get("additionalProperties")
	closed := addl != nil && addl.kind == 'b' && !addl.b
	var addlSchema *node
	if addl != nil && addl.kind == 'o' {
		addlSchema = addl
	}
	type prop struct {
		name     string
		schema   *node
		required bool
	}
	var ps []prop
	declared := map[string]bool{}
	never := 0 // declared properties whose schema is false
	// schemaOf is the schema property k is written with (patprops.go).
	schemaOf := func(k string, decl *node, isDecl bool) *node {
		m, why := c.propSchema(k, decl, isDecl, pats, addlSchema)
		if why != "" {
			c.unsupported(path+"/properties/"+k, "the property and the patternProperties matching its name cannot be combined: %s", why)
		}
		return m
	}
	if props != nil {
		for i, k := range props.keys {
			declared[k] = true
			v := schemaOf(k, props.vals[i], true)
			if c.failed() {
				return nil
			}
			if v.kind == 'b' && !v.b {
				// No value is allowed (what merging two schemas whose
				// property types differ leaves): never written.
				if req[k] {
					return c.none(path+"/required", "%q is required but its schema is false", k)
				}
				never++
				continue
			}
			if !names.allows(k) {
				if req[k] {
					return c.bad(path+"/required", "%q is required but propertyNames does not allow it", k)
				}
				continue // never written
			}
			ps = append(ps, prop{k, v, req[k]})
		}
	}
	var extra []string
	for k := range req {
		if !declared[k] {
			if closed && !matchesAny(pats, k) {
				return c.none(path+"/required", "%q is required but not among the properties and additionalProperties is false", k)
			}
			if !names.allows(k) {
				return c.bad(path+"/required", "%q is required but propertyNames does not allow it", k)
			}
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		v := schemaOf(k, nil, false)
		if c.failed() {
			return nil
		}
		if v != nil && v.kind == 'b' && !v.b {
			return c.none(path+"/required", "%q is required but the patternProperties matching it allow no value", k)
		}
		ps = append(ps, prop{k, v, true})
	}
	var others []string // other names the object may have, as optional properties
	switch {
	case names.enum != nil:
		// The only other keys a value may have: optional properties of
		// the additionalProperties schema (or of the patterns matching
		// them), written in the enum's order.
		others = names.enum
	case minP > max(len(ps), 1) && !names.none:
		// An object needing more keys than it declares: those of its
		// finite set of names too, each at most once, or refused
		// below.
		others = c.finiteNames(pats, s.get("propertyNames"), names)
		if c.failed() {
			return nil
		}
		if others != nil && len(others) < minP {
			return c.none(path, "minProperties %d is more than the %d names the patterns allow", minP, len(others))
		}
	}
	for _, k := range others {
		if declared[k] || req[k] || closed && !matchesAny(pats, k) {
			continue
		}
		v := schemaOf(k, nil, false)
		if c.failed() {
			return nil
		}
		if v == nil || v.kind != 'b' || v.b {
			ps = append(ps, prop{k, v, false})
		}
	}
	if len(ps) == 0 {
		switch {
		case names.none || names.enum != nil || others != nil || closed && len(pats) == 0:
			if minP > 0 {
				return c.none(path, "minProperties %d: no property is allowed", minP)
			}
			return c.b.lit("{}")
		case never > 0:
			// The map below could write a key declared false.
			if minP > 0 {
				return c.unsupported(path, "minProperties %d where every declared property's schema is false is not supported: sluice writes declared properties only", minP)
			}
			return c.b.lit("{}")
		case minP > 1:
			return c.unsupported(path, "minProperties %d without declared properties is not supported: a grammar cannot keep a key different from the keys before it, and a repeated key counts once; declare the properties, list the allowed keys in propertyNames enum, or use patterns with finitely many matches (^(en|fr|de)$, at most %d names)", minP, MaxEnum)
		}
		if maxP == 0 {
			return c.b.lit("{}")
		}
		if len(pats) > 0 {
			if pn := s.get("propertyNames"); pn != nil && pn.get("pattern") != nil {
				return c.unsupported(path+"/propertyNames", "a propertyNames pattern beside patternProperties is not supported: fold the name rule into the patterns")
			}
			lo, hi := -1, -1
			if pn := s.get("propertyNames"); pn != nil && pn.kind == 'o' {
				lo, hi = c.count(pn, "minLength", path), c.count(pn, "maxLength", path)
			}
			return c.patternMap(pats, lo, hi, minP, maxP, path)
		}
		if addlSchema == nil && names.key == nil && minP == 0 && maxP < 0 {
			return []item{c.anyObject()}
		}
		v := []item{c.anyValue()}
		if addlSchema != nil {
			v = c.value(addlSchema, path+"/additionalProperties")
		}
		key := []item{c.anyString()}
		if names.key != nil {
			key = names.key
		}
		if c.failed() {
			return nil
		}
		// Duplicate keys count once, so only the upper bound and a
		// minimum of one can be counted by members written.
		return c.objectOf(seq(key, c.colon(), v), minP, maxP)
	}
	n := len(ps)
	nreq := 0
	for _, p := range ps {
		if p.required {
			nreq++
		}
	}
	if maxP >= 0 && nreq > maxP {
		return c.none(path, "the %d required properties are more than maxProperties %d", nreq, maxP)
	}
	if minP > n {
		if closed || names.enum != nil {
			return c.none(path, "minProperties %d is more than the %d properties an object may have", minP, n)
		}
		return c.unsupported(path, "minProperties %d is more than the %d declared properties; sluice writes declared properties only: declare at least %d", minP, n, minP)
	}
	// Each property's key and value, compiled once (properties from
	// the last, as rules are numbered).
	kv := make([][]item, n)
	required := make([]bool, n)
	for i := n - 1; i >= 0; i-- {
		var key bytes.Buffer
		writeString(&key, ps[i].name)
		kv[i] = seq(c.b.lit(key.String()), c.colon(), c.value(ps[i].schema, path+"/properties/"+ps[i].name))
		required[i] = ps[i].required
		if c.failed() {
			return nil
		}
	}
	body := c.inOrder(kv, required, minP, maxP, path, "minProperties/maxProperties")
	if c.failed() {
		return nil
	}
	return seq(c.b.lit("{"), body, c.b.lit("}"))
}

// maxValueDepth bounds value()'s nesting; maxPathBytes the path it
// keeps at each level.
const (
	maxValueDepth = 2048
	maxPathBytes  = 1024
)

// shortPath is path, its middle cut when it is longer than maxPathBytes.
func shortPath(path string) string {
	if len(path) <= maxPathBytes {
		return path
	}
	return path[:maxPathBytes/2] + "/.../" + path[len(path)-maxPathBytes/2:]
}

// MaxCount bounds the counts the grammar keeps while writing elements in
// order (inOrder): minProperties/maxProperties on declared properties,
// minItems/maxItems with uniqueItems.
const MaxCount = MaxPropertyCount

// inOrder is elems written in their order, each at most once, the
// required ones always, at least lo and at most hi of them (hi < 0: no
// bound), separated by commas (the caller checked lo <= len(elems) and
// that the required ones are at most hi). A state (i, k): elements i..
// remain, k written (k > 0: a comma comes first). With hi below
// len(elems), k counts up to hi and an element past it is not offered;
// otherwise k saturates at max(1, lo), all the count needs to tell.
func (c *compiler) inOrder(elems [][]item, required []bool, lo, hi int, path, what string) []item {
	n := len(elems)
	capped := hi >= 0 && hi < n
	top := max(1, lo)
	if capped {
		top = hi
	}
	if top > MaxCount {
		return c.unsupported(path, "%s of %d are not supported here; at most %d", what, top, MaxCount)
	}
	reqFrom := make([]int, n+1) // required elements among i..
	for i := n - 1; i >= 0; i-- {
		reqFrom[i] = reqFrom[i+1]
		if required[i] {
			reqFrom[i]++
		}
	}
	feasible := func(i, k int) bool {
		return k+n-i >= lo && (!capped || k+reqFrom[i] <= hi)
	}
	if top > 1 {
		// Several states refer to each element: one rule each.
		for i, e := range elems {
			if len(e) > 1 {
				elems[i] = []item{ref(c.b.rule(e))}
			}
		}
	}
	rules := map[[2]int]int32{}
	var state func(i, k int) int32
	state = func(i, k int) int32 {
		if r, ok := rules[[2]int{i, k}]; ok {
			return r
		}
		r := c.b.newRule()
		rules[[2]int{i, k}] = r
		if i == n {
			c.b.define(r, nil) // k >= lo: feasible
			return r
		}
		var alts [][]item
		if k2 := min(k+1, top); (!capped || k+1 <= top) && feasible(i+1, k2) {
			var a []item
			if k > 0 {
				a = c.comma()
			}
			alts = append(alts, seq(a, elems[i], []item{ref(state(i+1, k2))}))
		}
		if !required[i] && feasible(i+1, k) {
			alts = append(alts, []item{ref(state(i+1, k))})
		}
		c.b.define(r, alts...)
		return r
	}
	return []item{ref(state(0, 0))}
}

// keyNames is what propertyNames allows.
type keyNames struct {
	// none: no key at all (propertyNames false).
	none bool
	// enum: the only names allowed (in order), nil if not finite.
	enum []string
	// key: the grammar of a map's keys (nil: any string).
	key []item
	// ok checks a declared property's name (nil: any).
	ok func(string) bool
}

func (k keyNames) allows(name string) bool {
	switch {
	case k.none:
		return false
	case k.ok != nil:
		return k.ok(name)
	}
	return true
}

// propertyNames reads a propertyNames schema: a string schema of enum or
// const, pattern, minLength, maxLength (nil: any name).
func (c *compiler) propertyNames(pn *node, path string) keyNames {
	switch {
	case pn == nil:
		return keyNames{}
	case pn.kind == 'b':
		return keyNames{none: !pn.b}
	case pn.kind != 'o':
		c.bad(path, "propertyNames must be a schema")
		return keyNames{}
	}
	for _, k := range pn.keys {
		switch {
		case annotations[k]:
		case k == "type":
			if t := pn.get("type"); t.kind != 's' || t.str != "string" {
				c.bad(path+"/type", `property names are strings: type must be "string"`)
				return keyNames{}
			}
		case k == "enum", k == "const", k == "pattern", k == "minLength", k == "maxLength":
		default:
			c.unsupported(path, "the keyword %q is not supported in propertyNames (supported: enum, const, pattern, minLength, maxLength)", k)
			return keyNames{}
		}
	}
	lo, hi := c.count(pn, "minLength", path), c.count(pn, "maxLength", path)
	var re *regexp.Regexp
	if p := pn.get("pattern"); p != nil {
		if p.kind != 's' {
			c.bad(path+"/pattern", "pattern must be a string")
			return keyNames{}
		}
		var err error
		if re, err = regexp.Compile(p.str); err != nil {
			c.bad(path+"/pattern", "the pattern %q is not a valid regular expression: %v", p.str, err)
			return keyNames{}
		}
	}
	ok := func(name string) bool {
		n := utf8.RuneCountInString(name)
		return n >= lo && (hi < 0 || n <= hi) && (re == nil || re.MatchString(name))
	}
	var vals []*node
	if e := pn.get("const"); e != nil {
		vals = []*node{e}
	} else if e := pn.get("enum"); e != nil {
		if e.kind != 'a' || len(e.arr) == 0 {
			c.bad(path+"/enum", "enum must be a non-empty array")
			return keyNames{}
		}
		vals = e.arr
	}
	if vals != nil {
		set := map[string]bool{}
		enum := []string{}
		for _, v := range vals {
			if v.kind == 's' && ok(v.str) && !set[v.str] {
				set[v.str] = true
				enum = append(enum, v.str)
			}
		}
		if len(enum) > MaxEnum {
			c.fail("enum_too_large", "%s/enum has %d values; at most %d are allowed", path, len(enum), MaxEnum)
			return keyNames{}
		}
		return keyNames{enum: enum, none: len(enum) == 0, ok: func(name string) bool { return set[name] }}
	}
	if re == nil && lo <= 0 && hi < 0 {
		return keyNames{}
	}
	key := c.str(pn, path)
	if c.failed() {
		return keyNames{}
	}
	return keyNames{key: key, ok: ok}
}

// count reads a non-negative integer keyword; -1 when absent.
func (c *compiler) count(s *node, k, path string) int {
	v := s.get(k)
	if v == nil {
		return -1
	}
	f, err := v.num.Float64()
	if v.kind != 'n' || err != nil || f < 0 || f != math.Trunc(f) {
		c.bad(path+"/"+k, "%s must be a non-negative integer", k)
		return -1
	}
	if f > MaxElements {
		c.fail("grammar_too_large", "%s/%s is %v; bounds above %d are not supported", path, k, f, MaxElements)
		return -1
	}
	return int(f)
}

func (c *compiler) array(s *node, path string) []item {
	unique := false
	if u := s.get("uniqueItems"); u != nil {
		if u.kind != 'b' {
			return c.bad(path+"/uniqueItems", "uniqueItems must be a boolean")
		}
		unique = u.b
	}
	lo, hi := c.count(s, "minItems", path), c.count(s, "maxItems", path)
	if c.failed() {
		return nil
	}
	lo = max(lo, 0)
	if hi >= 0 && hi < lo {
		return c.none(path, "maxItems %d is below minItems %d", hi, lo)
	}
	if s.get("contains") != nil {
		if unique && (hi < 0 || hi > 1) {
			return c.unsupported(path, "contains beside uniqueItems: true is not supported")
		}
		if items, ok := c.containsArray(s, lo, hi, path); ok {
			return items
		}
	}
	if it := s.get("items"); unique && (hi < 0 || hi > 1) && !(it != nil && it.kind == 'b' && !it.b && s.get("prefixItems") == nil) {
		// One item or none is unique anyway.
		return c.uniqueArray(s, lo, hi, path)
	}
	var prefix []*node
	if p := s.get("prefixItems"); p != nil {
		if p.kind != 'a' {
			return c.bad(path+"/prefixItems", "prefixItems must be an array of schemas")
		}
		prefix = p.arr
	}
	itemsNode := s.get("items")
	noMore := itemsNode != nil && itemsNode.kind == 'b' && !itemsNode.b
	if noMore {
		if lo > len(prefix) {
			return c.none(path, "minItems %d is more than the %d items allowed", lo, len(prefix))
		}
		if hi < 0 || hi > len(prefix) {
			hi = len(prefix)
		}
	}
	var item0 []item
	if !noMore {
		item0 = c.value(itemsNode, path+"/items")
	}
	// Values: the prefix schemas first, then items. chain[i] follows i
	// values written (i < len(prefix)).
	k := len(prefix)
	if hi >= 0 {
		k = min(k, hi)
	}
	var tail []item // after k values
	if !noMore && (hi < 0 || hi > k) {
		more := -1
		if hi >= 0 {
			more = hi - k
		}
		need := max(lo-k, 0)
		if k == 0 {
			// no prefix: the first value has no comma
			if more == 0 {
				tail = nil
			} else {
				inner := seq(item0, c.b.repeat(seq(c.comma(), item0), max(need, 1)-1, dec(more)))
				if need == 0 {
					tail = []item{c.b.opt(inner)}
				} else {
					tail = inner
				}
			}
		} else {
			tail = c.b.repeat(seq(c.comma(), item0), need, more)
		}
	}
	if c.failed() {
		return nil
	}
	// rest[i]: values i.. of the prefix, then the tail.
	rest := tail
	for i := k - 1; i >= 0; i-- {
		v := c.value(prefix[i], fmt.Sprintf("%s/prefixItems/%d", path, i))
		if i > 0 {
			v = seq(c.comma(), v)
		}
		body := seq(v, rest)
		if i+1 > lo {
			// i values are enough: the rest may be absent.
			rest = []item{c.b.opt(body)}
		} else {
			rest = body
		}
	}
	return seq(c.b.lit("["), rest, c.b.lit("]"))
}

func dec(n int) int {
	if n < 0 {
		return n
	}
	return n - 1
}

var formats = map[string]string{
	"date":      `(\d{4})-(((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01]))|((0[469]|11)-(0[1-9]|[12][0-9]|30))|(02-(0[1-9]|1[0-9]|2[0-8])))`,
	"time":      `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`,
	"uuid":      `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`,
	"ipv4":      `(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}`,
	"email":     `[a-z0-9]{1,16}(\.[a-z0-9]{1,16}){0,2}@[a-z0-9]{1,16}(\.[a-z0-9]{1,16}){0,2}\.[a-z]{2,8}`,
	"hostname":  `[a-z0-9]{1,32}(\.[a-z0-9]{1,32}){0,4}`,
	"date-time": "",
}

func init() {
	formats["date-time"] = formats["date"] + "T" + formats["time"]
}

func (c *compiler) str(s *node, path string) []item {
	lo, hi := c.count(s, "minLength", path), c.count(s, "maxLength", path)
	if c.failed() {
		return nil
	}
	q := c.b.byteItem('"')
	pat := s.get("pattern")
	f := s.get("format")
	if pat != nil || f != nil {
		if pat != nil && f != nil {
			return c.unsupported(path, "pattern together with format is not supported")
		}
		var re string
		anchored := true
		if pat != nil {
			if pat.kind != 's' {
				return c.bad(path+"/pattern", "pattern must be a string")
			}
			if len(pat.str) > MaxPatternBytes {
				return c.fail("pattern_too_complex", "%s/pattern is %d bytes; at most %d are allowed", path, len(pat.str), MaxPatternBytes)
			}
			re, anchored = pat.str, false
		} else {
			if f.kind != 's' {
				return c.bad(path+"/format", "format must be a string")
			}
			var ok bool
			if re, ok = formats[f.str]; !ok {
				return c.unsupported(path+"/format", "format %q is not supported (supported: date, time, date-time, uuid, ipv4, email, hostname)", f.str)
			}
		}
		if hi >= 0 && hi < max(lo, 0) {
			return c.none(path, "maxLength %d is below minLength %d", hi, lo)
		}
		var body []item
		var err *Error
		if lo > 0 || hi >= 0 {
			body, err = c.lengthBounded(re, anchored, max(lo, 0), hi)
		} else {
			body, err = c.regex(re, anchored)
		}
		if err != nil {
			if c.err == nil {
				err.Msg = path + ": " + err.Msg
				c.err = err
			}
			return nil
		}
		return seq([]item{q}, body, []item{q})
	}
	if hi >= 0 && hi < max(lo, 0) {
		return c.none(path, "maxLength %d is below minLength %d", hi, lo)
	}
	if lo <= 0 && hi < 0 {
		return []item{c.anyString()}
	}
	return seq([]item{q}, c.b.repeat([]item{c.stringChar()}, max(lo, 0), hi), []item{q})
}

// bound reads a numeric keyword.
func (c *compiler) bound(s *node, k, path string) (float64, bool) {
	v := s.get(k)
	if v == nil {
		return 0, false
	}
	f, err := v.num.Float64()
	if v.kind != 'n' || err != nil || math.IsInf(f, 0) {
		c.bad(path+"/"+k, "%s must be a number", k)
		return 0, false
	}
	return f, true
}

// intBounds is the integer range [lo, hi] of an integer schema, clamped
// to the digits the grammar writes.
func (c *compiler) intBounds(s *node, path string) (int64, int64) {
	lo, hi := math.Inf(-1), math.Inf(1)
	if f, ok := c.bound(s, "minimum", path); ok {
		lo = max(lo, math.Ceil(f))
	}
	if f, ok := c.bound(s, "exclusiveMinimum", path); ok {
		lo = max(lo, math.Floor(f)+1)
	}
	if f, ok := c.bound(s, "maximum", path); ok {
		hi = min(hi, math.Floor(f))
	}
	if f, ok := c.bound(s, "exclusiveMaximum", path); ok {
		hi = min(hi, math.Ceil(f)-1)
	}
	if lo <= hi && (lo > maxMagnitude || hi < -maxMagnitude) {
		c.unsupported(path, "the bounds allow only integers beyond ±%d; the output's integers have at most %d digits", int64(maxMagnitude), MaxIntDigits)
		return 0, 0
	}
	lo = max(lo, -maxMagnitude)
	hi = min(hi, maxMagnitude)
	return int64(lo), int64(hi)
}

func (c *compiler) integer(s *node, path string) []item {
	d := c.divisor(s, path)
	lo, hi := c.intBounds(s, path)
	if c.failed() {
		return nil
	}
	if lo > hi {
		return c.none(path, "no integer lies within the bounds")
	}
	if d > 1 {
		return c.multiples(d, lo, hi, path)
	}
	if lo == -maxMagnitude && hi == maxMagnitude {
		return []item{c.anyInteger()}
	}
	var alts [][]item
	if lo < 0 {
		for _, a := range c.uintRange(uint64(max(1, -hi)), uint64(-lo)) {
			alts = append(alts, seq(c.b.lit("-"), a))
		}
	}
	if hi >= 0 {
		alts = append(alts, c.uintRange(uint64(max(lo, 0)), uint64(hi))...)
	}
	return []item{ref(c.b.rule(alts...))}
}

func (c *compiler) number(s *node, path string) []item {
	fracDigits := MaxFracDigits
	if m := s.get("multipleOf"); m != nil {
		r := c.ratio(m, path)
		if c.failed() {
			return nil
		}
		switch k, ok := decimalStep(r); {
		case r.IsInt():
			// Multiples of an integer are integers.
			return c.integer(s, path)
		case ok && k <= MaxFracDigits:
			fracDigits = k
		default:
			return c.unsupported(path+"/multipleOf", "multipleOf %s on a number is not supported: use an integer (the output is then an integer) or a power of ten such as 0.01 (at most that many decimals), or type integer, where any multipleOf is", m.num)
		}
	}
	if s.get("exclusiveMinimum") != nil || s.get("exclusiveMaximum") != nil {
		return c.unsupported(path, "exclusiveMinimum/exclusiveMaximum on a number are not supported; use minimum/maximum or type integer")
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	if f, ok := c.bound(s, "minimum", path); ok {
		lo = f
	}
	if f, ok := c.bound(s, "maximum", path); ok {
		hi = f
	}
	if c.failed() {
		return nil
	}
	if lo != math.Trunc(lo) || hi != math.Trunc(hi) {
		return c.unsupported(path, "non-integer minimum/maximum on a number are not supported")
	}
	if lo <= hi && (lo > maxMagnitude || hi < -maxMagnitude) {
		return c.unsupported(path, "the bounds allow only numbers beyond ±%d; the output's numbers have at most %d integer digits", int64(maxMagnitude), MaxIntDigits)
	}
	lo, hi = max(lo, -maxMagnitude), min(hi, maxMagnitude)
	if lo > hi {
		return c.none(path, "no number lies within the bounds")
	}
	unbounded := lo == -maxMagnitude && hi == maxMagnitude
	if unbounded && fracDigits == MaxFracDigits {
		return []item{c.anyNumber()}
	}
	frac := c.frac()
	if fracDigits < MaxFracDigits {
		// multipleOf 10^-k: at most k decimals.
		frac = c.b.opt(seq(c.b.lit("."), c.b.repeat([]item{c.b.class(digitClass('0', '9'))}, 1, fracDigits)))
	}
	if unbounded {
		return seq([]item{c.b.opt(c.b.lit("-"))}, c.intPart(), []item{frac})
	}
	// A magnitude within [a, b] (integers): an integer part in [a, b-1]
	// with any fraction, or b with a zero fraction.
	zero := c.b.opt(seq(c.b.lit("."), c.b.repeat([]item{c.b.byteItem('0')}, 1, MaxFracDigits)))
	mag := func(a, b int64) [][]item {
		var out [][]item
		if a <= b-1 {
			for _, x := range c.uintRange(uint64(a), uint64(b-1)) {
				out = append(out, seq(x, []item{frac}))
			}
		}
		return append(out, seq(c.b.lit(strconv.FormatInt(b, 10)), []item{zero}))
	}
	var alts [][]item
	if lo < 0 {
		for _, a := range mag(int64(max(-hi, 0)), int64(-lo)) {
			alts = append(alts, seq(c.b.lit("-"), a))
		}
	}
	if hi >= 0 {
		alts = append(alts, mag(int64(max(lo, 0)), int64(hi))...)
	}
	return []item{ref(c.b.rule(alts...))}
}

// uintRange is the decimal numerals (no leading zeros) of [a, b].
func (c *compiler) uintRange(a, b uint64) [][]item {
	var alts [][]item
	la, lb := len(strconv.FormatUint(a, 10)), len(strconv.FormatUint(b, 10))
	for n := la; n <= lb; n++ {
		lo, hi := a, b
		if n > la {
			lo = pow10(n - 1)
		}
		if n < lb {
			hi = pow10(n) - 1
		}
		alts = append(alts, c.sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(hi, 10))...)
	}
	return alts
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLen is the numerals of the length of a and b from a to b.
func (c *compiler) sameLen(a, b string) [][]item {
	if a == "" {
		return [][]item{nil}
	}
	d := func(lo, hi byte) item { return c.b.class(digitClass(lo, hi)) }
	anyDigits := func(n int) []item {
		var out []item
		for range n {
			out = append(out, d('0', '9'))
		}
		return out
	}
	if strings.Trim(a[1:], "0") == "" && strings.Trim(b[1:], "9") == "" {
		return [][]item{seq([]item{d(a[0], b[0])}, anyDigits(len(a)-1))}
	}
	var out [][]item
	if a[0] == b[0] {
		for _, x := range c.sameLen(a[1:], b[1:]) {
			out = append(out, seq([]item{d(a[0], a[0])}, x))
		}
		return out
	}
	for _, x := range c.sameLen(a[1:], strings.Repeat("9", len(a)-1)) {
		out = append(out, seq([]item{d(a[0], a[0])}, x))
	}
	if a[0]+1 <= b[0]-1 {
		out = append(out, seq([]item{d(a[0]+1, b[0]-1)}, anyDigits(len(a)-1)))
	}
	for _, x := range c.sameLen(strings.Repeat("0", len(b)-1), b[1:]) {
		out = append(out, seq([]item{d(b[0], b[0])}, x))
	}
	return out
}

// objectOf is an object of members, each one written as member: at most
// maxP of them (< 0: no bound), and at least one unless minP is 0 (a
// grammar cannot count more: duplicate keys count once).
func (c *compiler) objectOf(member []item, minP, maxP int) []item {
	var more item
	if maxP < 0 {
		more = c.b.star(seq(c.comma(), member))
	} else {
		more = ref(c.b.rule(c.b.repeat(seq(c.comma(), member), 0, maxP-1)))
	}
	members := seq(member, []item{more})
	if minP == 0 {
		members = []item{c.b.opt(members)}
	}
	return seq(c.b.lit("{"), members, c.b.lit("}"))
}
