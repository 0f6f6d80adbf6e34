package grammar

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// An anyOf of a literal object and an open object, as a oneOf branch:
// the union of their shapes kept the open side's required properties
// (or keys) for every object, so the literal object seemed to be none
// of the union's values, the oneOf was proved exclusive and compiled as
// anyOf, and {"x":1}, matching both branches, was written (a 200 whose
// body fails the client's schema). Such branches may overlap: refused.
func TestRT13OneOfUnionKeepsLiteralObjects(t *testing.T) {
	for _, s := range []string{
		`{"oneOf":[{"anyOf":[{"const":{"x":1}},{"type":"object","required":["y"]}]},{"const":{"x":1}}]}`,
		`{"oneOf":[{"anyOf":[{"type":"object","required":["y"]},{"enum":[{"x":1},2]}]},{"type":"object","properties":{"x":{"const":1}},"required":["x"]}]}`,
		`{"oneOf":[{"anyOf":[{"const":{"x":1}},{"type":"object","properties":{"y":{}},"additionalProperties":false}]},{"const":{"x":1}}]}`,
	} {
		refused(t, s, "unsupported_schema", "#/oneOf/0 and #/oneOf/1", "use anyOf")
	}
	// Still proved: a literal object beside an open one, against a
	// branch of another type.
	walkValidates(t, `{"oneOf":[{"anyOf":[{"const":{"x":1}},{"type":"object","required":["y"]}]},{"type":"string","maxLength":2}]}`, 40)
}

// The same for numbers (0477374's bounds): an anyOf of bounded numbers
// and a literal number kept the open side's bounds for every number, so
// 100 seemed no value of {"anyOf":[{"type":"integer","maximum":9},
// {"const":100}]}, and beside {"type":"integer","minimum":50} (or
// {"const":100}) the oneOf compiled and wrote 100, which matches both.
// A union's bounds now hold the literals it no longer lists.
func TestRT13OneOfUnionKeepsLiteralNumbers(t *testing.T) {
	for _, s := range []string{
		`{"oneOf":[{"anyOf":[{"type":"integer","maximum":9},{"const":100}]},{"type":"integer","minimum":50}]}`,
		`{"oneOf":[{"anyOf":[{"const":100},{"type":"integer","maximum":9}]},{"const":100}]}`,
		// a literal carried through two unions
		`{"oneOf":[{"anyOf":[{"anyOf":[{"type":"integer","maximum":9},{"const":20.5}]},{"type":"number","minimum":0,"maximum":1}]},{"type":"number","minimum":15,"maximum":30}]}`,
	} {
		refused(t, s, "unsupported_schema", "#/oneOf/0 and #/oneOf/1", "use anyOf")
	}
	// Still proved: the literal lies outside the other branch too.
	s := `{"oneOf":[{"anyOf":[{"type":"integer","maximum":9},{"const":20}]},{"type":"integer","minimum":50,"maximum":60}]}`
	g := mustCompile(t, s)
	for _, v := range []string{"20", "9", "50"} {
		if !accepts(g, v) {
			t.Errorf("%s refuses %s", s, v)
		}
	}
	walkValidates(t, s, 40)
}

// References resolve as a validator resolves them, or the schema is
// refused: an "$id" below the root moves the base of the references
// under it (a validator reads "#/$defs/A" there as that schema's own
// $defs, sluice read the root's: {"p":5} written where a string was
// due), and a fragment is percent-encoded ("#/$defs/a%20b" is the key
// "a b", sluice looked up "a%20b").
func TestRT13ReferencesResolveAsValidators(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"p":{"$id":"http://example.com/inner","$defs":{"A":{"type":"string"}},"$ref":"#/$defs/A"}},"required":["p"],"$defs":{"A":{"type":"integer"}}}`,
		// reached by a pointer into it, past the schema with the $id
		`{"type":"object","properties":{"q":{"$ref":"#/$defs/X/properties/r"}},"required":["q"],"$defs":{"Y":{"type":"integer"},"X":{"$id":"http://e.com/x","$defs":{"Y":{"type":"string"}},"properties":{"r":{"$ref":"#/$defs/Y"}}}}}`,
		// under a keyword sluice refuses, pointed into
		`{"$ref":"#/$defs/X/not/properties/r","$defs":{"Y":{"type":"integer"},"X":{"not":{"$id":"http://e.com/x","$defs":{"Y":{"type":"string"}},"properties":{"r":{"$ref":"#/$defs/Y"}}}}}}`,
		// the $ref beside the $id, deeper than the first schema with one
		`{"anyOf":[{"$id":"http://e.com/a","type":"string"},{"properties":{"q":{"$id":"http://e.com/q","$ref":"#/$defs/Y","$defs":{"Y":{"type":"string"}}}}}],"$defs":{"Y":{"type":"integer"}}}`,
	} {
		refused(t, s, "unsupported_schema", "$id is supported only at the schema's root")
	}
	// An $id over no reference changes nothing: a tool's parameters with
	// their own $id, inside the schema the router builds for several
	// tools, still compile.
	walkValidates(t, `{"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"$id":"http://e.com/f","$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"required":["name","arguments"],"additionalProperties":false},{"$id":"http://e.com/a","type":"string","maxLength":2}]}`, 20)
	// $id at the root, and "$id" as a property's name or inside data,
	// are fine.
	walkValidates(t, `{"$id":"http://e.com/root","type":"object","properties":{"$id":{"type":"string","maxLength":3},"p":{"$ref":"#/$defs/A"}},"required":["$id","p"],"$defs":{"A":{"enum":[{"$id":1},2]}}}`, 20)
	for _, s := range []string{
		`{"type":"object","properties":{"p":{"$ref":"#/$defs/a%20b"}},"required":["p"],"$defs":{"a%20b":{"type":"integer"},"a b":{"type":"string","maxLength":2}}}`,
		`{"type":"object","properties":{"p":{"$ref":"#/$defs/a~1b%25"}},"required":["p"],"$defs":{"a~1b%25":{"type":"integer"},"a/b%":{"type":"string","maxLength":2}}}`,
	} {
		walkValidates(t, s, 20)
	}
	refused(t, `{"$ref":"#/$defs/a%zz","$defs":{"a%zz":{"type":"string"}}}`, "invalid_schema")
}

// allOf of two objects whose property b has types no value shares: the
// merge dropped b from properties, so b became an additional property
// and the grammar wrote {"b":1} (or any value). b now stays declared,
// as false: never written.
func TestRT13MergedFalsePropertyNeverWritten(t *testing.T) {
	conflict := `{"type":"object","properties":{"b":{"type":"string"}}},{"type":"object","properties":{"b":{"type":"integer"}}}`
	for _, c := range []struct {
		schema  string
		yes, no []string
	}{
		{`{"allOf":[` + conflict + `]}`, []string{`{}`}, []string{`{"b":1}`, `{"b":"x"}`, `{"c":1}`}},
		{`{"allOf":[` + conflict + `,{"properties":{"a":{"type":"integer"}}}]}`, []string{`{}`, `{"a":1}`}, []string{`{"b":1}`, `{"a":1,"b":1}`}},
		{`{"allOf":[` + conflict + `,{"propertyNames":{"enum":["a","b"]}}]}`, []string{`{}`}, []string{`{"b":1}`, `{"b":"x"}`}},
		{`{"type":"object","properties":{"b":false,"a":{"const":1}}}`, []string{`{}`, `{"a":1}`}, []string{`{"b":1}`}},
	} {
		inOut(t, c.schema, c.yes, c.no, 20)
	}
	refused(t, `{"allOf":[`+conflict+`,{"minProperties":1}]}`, "unsupported_schema", "minProperties 1")
	refused(t, `{"allOf":[`+conflict+`,{"required":["b"]}]}`, "unsupported_schema", `"b"`)
	refused(t, `{"type":"object","properties":{"b":false},"required":["b"]}`, "invalid_schema", `"b"`)
}

func rtLeaf(rng *rand.Rand) any {
	vals := []any{1, 2, "x", nil, true, 2.5, 100}
	switch rng.IntN(12) {
	case 9:
		return map[string]any{"type": "integer", "maximum": []any{1, 2, 9}[rng.IntN(3)]}
	case 10:
		return map[string]any{"type": "number", "minimum": []any{2, 3, 50}[rng.IntN(3)], "maximum": []any{3, 100, 200}[rng.IntN(3)]}
	case 11:
		return map[string]any{"type": "integer", "exclusiveMinimum": []any{1, 2, 50}[rng.IntN(3)]}
	case 0:
		return map[string]any{"const": vals[rng.IntN(len(vals))]}
	case 1:
		return map[string]any{"enum": []any{vals[rng.IntN(len(vals))], vals[rng.IntN(len(vals))]}}
	case 2:
		return map[string]any{"type": "integer"}
	case 3:
		return map[string]any{"type": "string"}
	case 4:
		return map[string]any{}
	case 5:
		return map[string]any{"type": "integer", "minimum": 2}
	case 6:
		return map[string]any{"const": map[string]any{"a": 1}}
	case 7:
		return map[string]any{"type": []any{"integer", "null"}}
	}
	return map[string]any{"type": "null"}
}

func rtBranch(rng *rand.Rand, depth int) any {
	if depth == 0 {
		return rtLeaf(rng)
	}
	switch rng.IntN(10) {
	case 0, 1:
		props := map[string]any{}
		var req []any
		for _, k := range []string{"a", "b"} {
			if rng.IntN(3) > 0 {
				props[k] = rtBranch(rng, depth-1)
				if rng.IntN(2) == 0 {
					req = append(req, k)
				}
			}
		}
		s := map[string]any{"type": "object", "properties": props}
		if len(req) > 0 {
			s["required"] = req
		}
		switch rng.IntN(3) {
		case 0:
			s["additionalProperties"] = false
		case 1:
			s["additionalProperties"] = rtLeaf(rng)
		}
		if rng.IntN(4) == 0 {
			s["maxProperties"] = 1
		}
		return s
	case 2:
		return map[string]any{"anyOf": []any{rtBranch(rng, depth-1), rtBranch(rng, depth-1)}}
	case 3:
		return map[string]any{"oneOf": []any{rtBranch(rng, depth-1), rtBranch(rng, depth-1)}}
	case 4:
		return map[string]any{"allOf": []any{rtBranch(rng, depth-1), rtBranch(rng, depth-1)}}
	case 6:
		s := map[string]any{"type": "object", "propertyNames": map[string]any{"enum": []any{"a", "c"}}, "additionalProperties": rtLeaf(rng)}
		if rng.IntN(2) == 0 {
			s["minProperties"] = 1
		}
		return s
	case 7:
		return map[string]any{"$ref": "#/$defs/" + []string{"d1", "d2"}[rng.IntN(2)], "description": "r"}
	case 5:
		b := rtBranch(rng, depth-1).(map[string]any)
		b["required"] = []any{[]string{"a", "b"}[rng.IntN(2)]}
		return b
	}
	return rtLeaf(rng)
}

func rtUniverse() []string {
	vals := []string{"1", "2", `"x"`, "null", "true"}
	out := append([]string{}, vals...)
	out = append(out, "2.5", "3", "9", "10", "50", "100", "150", "-1", "0")
	out = append(out, "{}")
	for _, k := range []string{"a", "b", "c"} {
		for _, v := range vals {
			out = append(out, `{"`+k+`":`+v+`}`)
		}
	}
	for _, v := range vals[:3] {
		for _, w := range vals[:3] {
			out = append(out, `{"a":`+v+`,"b":`+w+`}`, `{"b":`+w+`,"a":`+v+`}`)
		}
	}
	return out
}

// Combined schemas (oneOf, anyOf, allOf, keywords beside $ref,
// properties, required, additionalProperties, maxProperties,
// propertyNames) over a small universe of values: every value of the
// universe the grammar accepts validates with the independent validator
// (oneOf as exactly one), and a walk through each (mask checked
// against Allowed at every step) never finds every token refused and
// ends in a valid value. At 20,000 schemas it found the union and merge
// bugs above; at the default 3,000 it fails with the merge fix or
// the numbers' union fix undone (the object one has its own test).
func TestRT13CombinedSchemasAgainstValidator(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 20))
	uni := rtUniverse()
	vocab := testVocab()
	wrng := rand.New(rand.NewPCG(13, 21)) // the walks', apart: the schemas stay the same
	compiled := 0
	n := 3000
	if testing.Short() {
		n = 600
	}
	for range n {
		var br []any
		for range 2 + rng.IntN(2) {
			br = append(br, rtBranch(rng, 2))
		}
		s := map[string]any{"oneOf": br}
		if rng.IntN(2) == 0 {
			s = map[string]any{"allOf": []any{rtBranch(rng, 2), rtBranch(rng, 2)}}
			if rng.IntN(2) == 0 {
				s = rtBranch(rng, 3).(map[string]any)
			}
		}
		defs := map[string]any{"d1": rtBranch(rng, 1), "d2": map[string]any{"anyOf": []any{rtLeaf(rng), map[string]any{"$ref": "#/$defs/d1"}}}}
		wrap := false
		if rng.IntN(3) == 0 {
			wrap = true
			s = map[string]any{"type": "object", "properties": map[string]any{"p": s}, "required": []any{"p"}}
		}
		s["$defs"] = defs
		raw, _ := json.Marshal(s)
		g, err := CompileSchema(raw)
		if err != nil {
			var ge *Error
			if !errors.As(err, &ge) {
				t.Fatalf("%s: %v", raw, err)
			}
			continue
		}
		compiled++
		val := validator(t, raw)
		// The mask never refuses every token along a walk (walk fails
		// the test then), and an ended walk validates.
		if out, ok := walk(t, Bind(g, vocab), wrng, 300); ok {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
			if err != nil {
				t.Fatalf("%s: %q is not JSON: %v", raw, out, err)
			}
			if err := val.Validate(inst); err != nil {
				t.Fatalf("%s: walked %q, which does not validate: %v", raw, out, err)
			}
		}
		for _, u := range uni {
			o := u
			if wrap {
				o = `{"p":` + u + `}`
			}
			if !accepts(g, o) {
				continue
			}
			inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(o))
			if err := val.Validate(inst); err != nil {
				t.Fatalf("%s: the grammar accepts %s, which does not validate: %v", raw, o, err)
			}
		}
	}
	if compiled < n/8 {
		t.Fatalf("only %d of %d schemas compiled: the test checks too little", compiled, n)
	}
	t.Logf("%d of %d schemas compiled, every value they accept validates", compiled, n)
}
