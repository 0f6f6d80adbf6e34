package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// exactOver checks the grammar of schema against the independent
// validator over candidate JSON texts: every candidate the grammar
// accepts validates (the grammar never writes an invalid value), and
// every candidate that validates and that the grammar is meant to write
// (writable: keys in the order it writes them, from the names it
// writes) is accepted. It returns how many the grammar accepted.
func exactOver(t *testing.T, schema string, cands []string, writable func(string) bool) int {
	t.Helper()
	g := mustCompile(t, schema)
	val := validator(t, json.RawMessage(schema))
	n := 0
	for _, s := range cands {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(s))
		if err != nil {
			t.Fatalf("candidate %s: %v", s, err)
		}
		valid := val.Validate(inst) == nil
		got := accepts(g, s)
		if got {
			n++
		}
		switch {
		case got && !valid:
			t.Errorf("%.200s: %s accepted but does not validate", schema, s)
		case !got && valid && (writable == nil || writable(s)):
			t.Errorf("%.200s: %s validates but is refused", schema, s)
		}
	}
	return n
}

// objectCands is every object of at most two members over the keys
// (distinct, in every order) and values.
func objectCands(keys, vals []string) []string {
	out := []string{"{}"}
	for _, k := range keys {
		for _, v := range vals {
			out = append(out, fmt.Sprintf(`{%q:%s}`, k, v))
		}
	}
	for _, k1 := range keys {
		for _, k2 := range keys {
			if k1 == k2 {
				continue
			}
			for _, v1 := range vals {
				for _, v2 := range vals {
					out = append(out, fmt.Sprintf(`{%q:%s,%q:%s}`, k1, v1, k2, v2))
				}
			}
		}
	}
	return out
}

// objKeys is the keys of a JSON object text, in order.
func objKeys(t *testing.T, s string) []string {
	d := json.NewDecoder(strings.NewReader(s))
	var keys []string
	depth := 0
	expectKey := false
	for {
		tok, err := d.Token()
		if err != nil {
			return keys
		}
		switch x := tok.(type) {
		case json.Delim:
			if x == '{' || x == '[' {
				depth++
				expectKey = x == '{' && depth == 1
			} else {
				depth--
			}
			continue
		case string:
			if depth == 1 && expectKey {
				keys = append(keys, x)
				expectKey = false
				continue
			}
		}
		if depth == 1 {
			expectKey = true
		}
	}
}

// patternProperties: a map's keys follow the patterns, each value valid
// against every pattern its key matches; declared properties get the
// schemas of the patterns their names match; exact against the
// validator over objects of up to two members.
func TestPatternProperties(t *testing.T) {
	keys := []string{"a", "bc", "S_x", "I_y", "Z", "S_", "a\"b", "ab", "abb"}
	vals := []string{"1", `"s"`, "2.5", "true", "-3"}
	cands := objectCands(keys, vals)
	// writes: keys with names the patterns match only.
	only := func(ok func(k string) bool) func(string) bool {
		return func(s string) bool {
			for _, k := range objKeys(t, s) {
				if !ok(k) {
					return false
				}
			}
			return true
		}
	}
	lower := func(k string) bool { return k != "" && strings.Trim(k, "abcdefghijklmnopqrstuvwxyz") == "" }
	si := func(k string) bool { return strings.HasPrefix(k, "S_") || strings.HasPrefix(k, "I_") }
	for _, c := range []struct {
		schema   string
		writable func(string) bool
		min      int
	}{
		// Pydantic 2: Dict[constr(pattern=r"^[a-z]+$"), int]
		{`{"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"}}}`, only(lower), 6},
		// the JSON Schema spec's example: two patterns apart, others false
		{`{"type":"object","patternProperties":{"^S_":{"type":"string"},"^I_":{"type":"integer"}},"additionalProperties":false}`, only(si), 4},
		{`{"type":"object","patternProperties":{"^S_":{"type":"string"},"^I_":{"type":"integer"}},"maxProperties":1,"minProperties":1}`, only(si), 3},
		// lengths from propertyNames (Pydantic: constr(pattern, max_length) keys)
		{`{"type":"object","patternProperties":{"^[a-z]*b$":{"type":"number","minimum":0}},"propertyNames":{"maxLength":2}}`, only(func(k string) bool { return lower(k) && strings.HasSuffix(k, "b") && len(k) <= 2 }), 3},
	} {
		if n := exactOver(t, c.schema, cands, c.writable); n < c.min {
			t.Errorf("%s: only %d candidates accepted", c.schema, n)
		}
		walkValidates(t, c.schema, 15)
	}
	// Declared properties meet the patterns their names match; the
	// grammar writes declared properties only, in order.
	declared := `{"type":"object","properties":{"a":{"type":"number"},"S_x":{},"Z":{"type":"integer"}},"patternProperties":{"^[a-z]+$":{"type":"integer","maximum":1},"^S_":{"type":"string"}},"required":["S_x"]}`
	inOrder := func(s string) bool {
		ks := objKeys(t, s)
		order := map[string]int{"a": 1, "S_x": 2, "Z": 3}
		for i, k := range ks {
			if order[k] == 0 || i > 0 && order[ks[i-1]] > order[k] {
				return false
			}
		}
		return true
	}
	if n := exactOver(t, declared, cands, inOrder); n < 3 {
		t.Errorf("declared: only %d accepted", n)
	}
	walkValidates(t, declared, 15)
	// Patterns that may match one key: a key of either gets a value
	// valid against both (stricter than needed, never invalid).
	overlap := `{"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"},"b":{"minimum":0}}}`
	if n := exactOver(t, overlap, cands, func(string) bool { return false }); n < 3 {
		t.Errorf("overlap: only %d accepted", n)
	}
	g := mustCompile(t, overlap)
	if !accepts(g, `{"bc":1}`) || accepts(g, `{"bc":-3}`) || accepts(g, `{"a":-3}`) {
		t.Error("overlapping patterns: a key's value must satisfy both")
	}
	// Apart or not: a shared literal beginning, a pattern of few names
	// one of which the other matches.
	for _, c := range []struct{ schema, in, out string }{
		{`{"type":"object","patternProperties":{"^S":{"type":"integer"},"^S_":{"minimum":0}}}`, `{"S_x":1}`, `{"Sx":-3}`},
		{`{"type":"object","patternProperties":{"^(en|fr)$":{"type":"integer"},"^[a-z]+$":{"minimum":0}}}`, `{"en":1}`, `{"en":-3}`},
		{`{"type":"object","patternProperties":{"^(en|fr)$":{"type":"integer"},"^[A-Z]+$":{"type":"string"}}}`, `{"en":1,"AB":"x"}`, `{"en":"x"}`},
		{`{"type":"object","patternProperties":{"^S_":{"type":"integer"},"^I_":{"type":"string"}}}`, `{"S_1":1,"I_1":"x"}`, `{"S_1":"x"}`},
	} {
		g := mustCompile(t, c.schema)
		if !accepts(g, c.in) || accepts(g, c.out) {
			t.Errorf("%s: %s accepted %v (want true), %s accepted %v (want false)", c.schema, c.in, accepts(g, c.in), c.out, accepts(g, c.out))
		}
		walkValidates(t, c.schema, 10)
	}
	// A required name no property declares: the patterns it matches.
	g = mustCompile(t, `{"type":"object","patternProperties":{"^I_":{"type":"integer"}},"required":["I_n"],"additionalProperties":false}`)
	if !accepts(g, `{"I_n":3}`) || accepts(g, `{"I_n":"x"}`) || accepts(g, `{}`) {
		t.Error("a required name matching a pattern")
	}
	// propertyNames enum: the names with the patterns' schemas, or
	// additionalProperties'.
	g = mustCompile(t, `{"type":"object","propertyNames":{"enum":["I_a","b"]},"patternProperties":{"^I_":{"type":"integer"}},"additionalProperties":{"type":"string"}}`)
	if !accepts(g, `{"I_a":1,"b":"x"}`) || accepts(g, `{"I_a":"x"}`) || accepts(g, `{"b":1}`) {
		t.Error("enum names with patterns")
	}
	// Merged: the same patternProperties on both sides, or one side's
	// beside nothing the other says about other names.
	for _, s := range []string{
		`{"allOf":[{"type":"object","patternProperties":{"^I_":{"type":"integer"}}},{"properties":{"I_a":{"minimum":5},"x":{"type":"string"}}}]}`,
		`{"$defs":{"M":{"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"}}}},"$ref":"#/$defs/M","maxProperties":2}`,
		`{"enum":[{"I_a":1},{"I_a":"x"},{"b":2}],"patternProperties":{"^I_":{"type":"integer"}}}`,
	} {
		walkValidates(t, s, 10)
	}
	// Both sides' patterns, one side's additionalProperties: a name the
	// patterns match does not meet it.
	g = mustCompile(t, `{"allOf":[{"type":"object","patternProperties":{"^I_":{"type":"integer"}},"additionalProperties":{"type":"string"}},{"patternProperties":{"^I_":{"type":"integer"}},"properties":{"I_a":{"minimum":5},"x":{}}}]}`)
	if !accepts(g, `{"I_a":5,"x":"s"}`) || accepts(g, `{"I_a":4}`) || accepts(g, `{"x":1}`) {
		t.Error("merged patternProperties beside additionalProperties")
	}
	g = mustCompile(t, `{"enum":[{"I_a":1},{"b":2}],"patternProperties":{"^I_":{"type":"integer"}},"additionalProperties":{"type":"string"}}`)
	if !accepts(g, `{"I_a":1}`) || accepts(g, `{"b":2}`) {
		t.Error("enum values: additionalProperties applies to names no pattern matches only")
	}
	g = mustCompile(t, `{"allOf":[{"type":"object","patternProperties":{"^I_":{"type":"integer"}}},{"properties":{"I_a":{"minimum":5},"x":{"type":"string"}}}]}`)
	if accepts(g, `{"I_a":4}`) || accepts(g, `{"I_a":"s"}`) || !accepts(g, `{"I_a":5,"x":"s"}`) {
		t.Error("merged patternProperties")
	}
	if g = mustCompile(t, `{"enum":[{"I_a":1},{"I_a":"x"},{"b":2}],"patternProperties":{"^I_":{"type":"integer"}}}`); accepts(g, `{"I_a":"x"}`) || !accepts(g, `{"I_a":1}`) || !accepts(g, `{"b":2}`) {
		t.Error("enum values checked against patternProperties")
	}
	refused(t, `{"allOf":[{"type":"object","patternProperties":{"^I_":{"type":"integer"}}},{"additionalProperties":{"type":"string"}}]}`, "unsupported_schema", "patternProperties", "additionalProperties")
	refused(t, `{"type":"object","patternProperties":{"^a":{"pattern":"x"},"b":{"pattern":"y"}}}`, "unsupported_schema", "exclude each other")
	refused(t, `{"type":"object","properties":{"ab":{"type":"string","pattern":"x"}},"patternProperties":{"^a":{"pattern":"y"}}}`, "unsupported_schema", "#/properties/ab", "patternProperties")
	refused(t, `{"type":"object","patternProperties":{"(":{}}}`, "invalid_schema", "not a valid regular expression")
	refused(t, `{"type":"object","patternProperties":[]}`, "invalid_schema", "patternProperties must be")
	refused(t, `{"type":"object","patternProperties":{"^a":{}},"propertyNames":{"pattern":"^b"}}`, "unsupported_schema", "propertyNames pattern")
	refused(t, `{"type":"object","patternProperties":{"^a":{"type":"integer"}},"required":["ab"],"properties":{"ab":{"type":"string"}}}`, "invalid_schema", "required")
	refused(t, `{"type":"object","patternProperties":{"^a":false},"required":["ab"]}`, "invalid_schema", "allow no value")
	var many []string
	for i := range MaxPatternProperties + 1 {
		many = append(many, fmt.Sprintf(`"^p%d":{}`, i))
	}
	refused(t, `{"type":"object","patternProperties":{`+strings.Join(many, ",")+`}}`, "unsupported_schema", "at most 64")
	refused(t, `{"type":"object","patternProperties":{"`+strings.Repeat("a", MaxPatternBytes+1)+`":{}}}`, "pattern_too_complex")
}

// A oneOf branch with patternProperties may write the patterns' names
// beside its declared properties (to reach minProperties): its shape
// does not bound its keys to the declared ones, so a branch requiring
// one of those names is not proven apart from it.
func TestPatternPropertiesInOneOf(t *testing.T) {
	s := `{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"patternProperties":{"^(b|c)$":{"type":"integer"}},"minProperties":2,"additionalProperties":false},{"type":"object","properties":{"b":{"type":"integer"}},"required":["b"]}]}`
	refused(t, s, "unsupported_schema", "#/oneOf/0 and #/oneOf/1", "use anyOf")
	walkValidates(t, `{"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"patternProperties":{"^(b|c)$":{"type":"integer"}},"minProperties":2,"additionalProperties":false},{"type":"string"}]}`, 10)
}

// A map needing two keys or more: from patterns of finitely many names,
// the names are optional properties, written once each, counted; from
// open patterns or any key, refused (a repeated key counts once).
func TestMapMinProperties(t *testing.T) {
	keys := []string{"en", "fr", "de", "es", "x"}
	vals := []string{"1", `"s"`}
	cands := objectCands(keys, vals)
	// three members too
	for _, k := range [][3]string{{"en", "fr", "de"}, {"en", "de", "fr"}, {"en", "fr", "x"}} {
		cands = append(cands, fmt.Sprintf(`{%q:1,%q:1,%q:1}`, k[0], k[1], k[2]))
	}
	order := func(names ...string) func(string) bool {
		return func(s string) bool {
			pos := map[string]int{}
			for i, n := range names {
				pos[n] = i + 1
			}
			ks := objKeys(t, s)
			for i, k := range ks {
				if pos[k] == 0 || i > 0 && pos[ks[i-1]] > pos[k] {
					return false
				}
			}
			return true
		}
	}
	for _, c := range []struct {
		schema string
		names  []string
	}{
		{`{"type":"object","patternProperties":{"^(en|fr|de)$":{"type":"string"}},"minProperties":2}`, []string{"en", "fr", "de"}},
		{`{"type":"object","additionalProperties":{"type":"integer"},"propertyNames":{"pattern":"^(en|fr|de|es)$"},"minProperties":2,"maxProperties":3}`, []string{"en", "fr", "de", "es"}},
		{`{"type":"object","patternProperties":{"^(en|fr)$":{"type":"string"},"^d[e]$":{"type":"integer"}},"minProperties":2,"additionalProperties":false}`, []string{"en", "fr", "de"}},
		{`{"type":"object","patternProperties":{"^[a-z]{2}$":{"type":"integer"}},"propertyNames":{"enum":["en","fr","x"]},"minProperties":2}`, []string{"en", "fr", "x"}},
	} {
		if n := exactOver(t, c.schema, cands, order(c.names...)); n < 2 {
			t.Errorf("%s: only %d accepted", c.schema, n)
		}
		walkValidates(t, c.schema, 15)
	}
	refused(t, `{"type":"object","patternProperties":{"^[a-z]+$":{}},"minProperties":2}`, "unsupported_schema", "minProperties 2", "finitely many")
	refused(t, `{"type":"object","additionalProperties":{"type":"integer"},"minProperties":2}`, "unsupported_schema", "a repeated key counts once")
	refused(t, `{"type":"object","patternProperties":{"^(a|b)$":{}},"minProperties":3}`, "invalid_schema", "minProperties 3", "2 names")
	refused(t, `{"type":"object","patternProperties":{"^[a-z]{3}$":{}},"minProperties":2}`, "unsupported_schema", "finitely many")
	// 1,000 names counted up to 64: past the grammar budget, quickly.
	refused(t, `{"type":"object","patternProperties":{"^[a-j]{3}$":{"type":"integer"}},"minProperties":64}`, "grammar_too_large")
	// Hostile: a pattern of 1000^k names is cut at the count, quickly.
	refused(t, `{"type":"object","patternProperties":{"^([a-j]{3}){300}$":{}},"minProperties":2}`, "unsupported_schema", "finitely many")
	refused(t, `{"type":"object","patternProperties":{"^(a?){900}(b?){900}$":{}},"minProperties":2}`, "unsupported_schema", "finitely many")
}

// finiteMatches lists exactly the matches of a pattern with finitely
// many: each is matched by the pattern, and every string of a small
// alphabet up to a length that the pattern matches is listed.
func TestFiniteMatches(t *testing.T) {
	for _, p := range []string{`^(en|fr|de)$`, `^[a-c]{1,2}$`, `^(?i:ab)$`, `^a?b?c?$`, `^(x|y(z|w)?)$`, `^$`, `^[α-γ]\d$`} {
		ms, ok := finiteMatches(p, MaxEnum)
		if !ok {
			t.Errorf("%s: not listed", p)
			continue
		}
		set := map[string]bool{}
		re := mustRe(t, p)
		for _, m := range ms {
			if !re.MatchString(m) || set[m] {
				t.Errorf("%s: %q listed (match %v, twice %v)", p, m, re.MatchString(m), set[m])
			}
			set[m] = true
		}
		rng := rand.New(rand.NewPCG(1, 2))
		alpha := []rune("abcdefrnxyzwABαβγ01")
		for range 20000 {
			var b strings.Builder
			for range rng.IntN(4) {
				b.WriteRune(alpha[rng.IntN(len(alpha))])
			}
			if s := b.String(); re.MatchString(s) && !set[s] {
				t.Errorf("%s: %q matches but is not listed", p, s)
			}
		}
	}
	for _, p := range []string{`^a+$`, `^[a-z]{4}$`, `a`, `^.$`, `^a$|^b$`} {
		if _, ok := finiteMatches(p, MaxEnum); ok {
			t.Errorf("%s: listed", p)
		}
	}
}

func mustRe(t *testing.T, p string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return re
}

// randObjectSchema is a random object schema of patternProperties beside
// properties, required, additionalProperties, propertyNames and counts,
// over randSchema's leaves.
func randObjectSchema(rng *rand.Rand) map[string]any {
	pats := []string{"^[a-z]+$", "^S_", "^I_", "b", "^(en|fr|de)$", "^[a-c]{1,2}$", "^x"}
	s := map[string]any{"type": "object"}
	pp := map[string]any{}
	for range 1 + rng.IntN(3) {
		pp[pats[rng.IntN(len(pats))]] = randSchema(rng, 1)
	}
	s["patternProperties"] = pp
	if rng.IntN(2) == 0 {
		props := map[string]any{}
		for _, k := range []string{"a", "S_x", "en", "Z"}[:1+rng.IntN(4)] {
			props[k] = randSchema(rng, 0)
		}
		s["properties"] = props
	}
	if rng.IntN(3) == 0 {
		s["required"] = []string{[]string{"a", "S_q", "en", "fr"}[rng.IntN(4)]}
	}
	switch rng.IntN(4) {
	case 0:
		s["additionalProperties"] = false
	case 1:
		s["additionalProperties"] = randSchema(rng, 0)
	}
	switch rng.IntN(5) {
	case 0:
		s["propertyNames"] = map[string]any{"maxLength": 2}
	case 1:
		s["propertyNames"] = map[string]any{"enum": []string{"a", "en", "S_1", "zz"}}
	}
	if rng.IntN(2) == 0 {
		lo := rng.IntN(4)
		s["minProperties"] = lo
		if rng.IntN(2) == 0 {
			s["maxProperties"] = lo + rng.IntN(3)
		}
	}
	if rng.IntN(4) == 0 { // merged with another object schema
		other := map[string]any{"properties": map[string]any{"a": randSchema(rng, 0)}}
		if rng.IntN(2) == 0 {
			other["patternProperties"] = pp
		}
		return map[string]any{"allOf": []any{s, other}}
	}
	return s
}

// Random object schemas with patternProperties: every candidate object
// the grammar accepts validates, and every walked output does.
func TestPatternPropertiesRandom(t *testing.T) {
	cands := objectCands([]string{"a", "S_x", "I_1", "en", "fr", "b", "ab", "Z", "x"}, []string{"1", `"a"`, "true", "null"})
	n := 400
	if testing.Short() {
		n = 100
	}
	rng := rand.New(rand.NewPCG(21, 1))
	compiled, accepted, outputs := randomSchemasValid(t, n, rng, func() any { return randObjectSchema(rng) }, cands)
	if compiled < n/3 || outputs < n/3 {
		t.Fatalf("%d of %d compiled, %d outputs: too few to tell", compiled, n, outputs)
	}
	t.Logf("%d of %d compiled; %d candidates accepted, %d outputs, all valid", compiled, n, accepted, outputs)
}
