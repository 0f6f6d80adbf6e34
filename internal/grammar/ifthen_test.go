package grammar

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/testenv"
)

// orderedObjects is every object of the keys in their order (each
// present or not), each present key taking each of its values.
func orderedObjects(keys []string, vals map[string][]string) []string {
	out := []string{""}
	for _, k := range keys {
		var next []string
		for _, p := range out {
			next = append(next, p)
			for _, v := range vals[k] {
				m := fmt.Sprintf("%q:%s", k, v)
				if p != "" {
					m = p + "," + m
				}
				next = append(next, m)
			}
		}
		out = next
	}
	for i, p := range out {
		out[i] = "{" + p + "}"
	}
	return out
}

// if/then/else of a discriminator: exact against the validator over
// every object of the declared properties in order (and, for a typed
// if, values of other types).
func TestIfThenElse(t *testing.T) {
	vals := map[string][]string{"kind": {`"a"`, `"b"`, `"c"`, `"d"`, "1"}, "x": {"1", `"s"`}, "y": {"1", `"s"`}}
	cands := orderedObjects([]string{"kind", "x", "y"}, vals)
	cands = append(cands, `"str"`, `"s"`, "1", "null", "[]")
	for _, c := range []struct {
		schema string
		min    int
	}{
		// a const discriminator, then/else requiring different properties
		{`{"type":"object","properties":{"kind":{"enum":["a","b","c"]},"x":{"type":"integer"},"y":{"type":"string"}},"required":["kind"],"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]},"else":{"required":["y"]}}`, 6},
		// required in if, enum test, else listing the values
		{`{"type":"object","properties":{"kind":{},"x":{},"y":{}},"if":{"properties":{"kind":{"enum":["a","b"]}},"required":["kind"]},"then":{"properties":{"x":{"type":"string"}}},"else":{"properties":{"kind":{"enum":["c","d"]}},"required":["kind"]}}`, 6},
		// only presence: a card needs an address
		{`{"type":"object","properties":{"kind":{"type":"string"},"x":{"type":"integer"},"y":{}},"if":{"required":["kind"]},"then":{"required":["x"]}}`, 5},
		// a typed if: values of other types take else
		{`{"type":["object","string","integer"],"properties":{"kind":{"enum":["a","b"]},"x":{},"y":{}},"required":["kind"],"if":{"type":"object","properties":{"kind":{"const":"a"}}},"then":{"required":["x"]},"else":{"type":["object","string"]}}`, 3},
		// a test that is not a const: values of the schema's enum it refuses
		{`{"type":"object","properties":{"kind":{"enum":[1,"a","b"]},"x":{},"y":{"type":"string"}},"required":["kind"],"if":{"properties":{"kind":{"type":"string","maxLength":0}}},"then":{"required":["y"]},"else":{"properties":{"y":false}}}`, 3},
		// no else; then false: values if accepts are never written
		{`{"type":"object","properties":{"kind":{"enum":["a","b"]},"x":{},"y":{}},"required":["kind"],"if":{"properties":{"kind":{"const":"b"}}},"then":false}`, 3},
		// if does not require the property: objects without it match if
		{`{"type":"object","properties":{"kind":{"enum":["a","b"]},"x":{},"y":{}},"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]},"else":{"required":["y"]}}`, 6},
		// an untyped if: values of other types match it, so take then
		{`{"type":["object","string"],"properties":{"kind":{"enum":["a","b"]},"x":{},"y":{}},"required":["kind"],"if":{"properties":{"kind":{"const":"a"}}},"then":{"maxLength":1},"else":{"minLength":3}}`, 6},
		// beside a $ref and merged
		{`{"$defs":{"K":{"type":"object","properties":{"kind":{"enum":["a","b"]},"x":{"type":"integer"},"y":{}},"required":["kind"]}},"$ref":"#/$defs/K","if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]}}`, 3},
		{`{"allOf":[{"type":"object","properties":{"kind":{"enum":["a","b","c"]},"x":{},"y":{}},"required":["kind"]},{"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]}},{"if":{"properties":{"kind":{"const":"b"}}},"then":{"required":["y"]}}]}`, 6},
	} {
		if n := exactOver(t, c.schema, cands, nil); n < c.min {
			t.Errorf("%s: only %d accepted", c.schema, n)
		}
		walkValidates(t, c.schema, 15)
	}
	// Inside oneOf: the rewritten anyOf's shapes still prove exclusion.
	walkValidates(t, `{"oneOf":[{"type":"string"},{"type":"object","properties":{"kind":{"enum":["a","b"]},"x":{}},"required":["kind"],"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]}}]}`, 10)
	// Beside enum: each value checked, else taken only when if surely
	// refuses it.
	g := mustCompile(t, `{"enum":[{"kind":"a","x":1},{"kind":"a"},{"kind":"b"}],"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]},"else":{"maxProperties":0}}`)
	if !accepts(g, `{"kind":"a","x":1}`) || accepts(g, `{"kind":"a"}`) || accepts(g, `{"kind":"b"}`) {
		t.Error("enum values against if/then/else")
	}
	// A test the value check cannot decide exactly (format: its check
	// is the grammar's stricter subset, 2024-02-29 is a date it never
	// writes): such values are on neither side.
	g = mustCompile(t, `{"type":"object","properties":{"d":{"enum":["2024-02-29","x","2024-01-01"]},"y":{}},"required":["d"],"if":{"properties":{"d":{"format":"date"}}},"then":{"required":["y"]},"else":{"properties":{"y":false}}}`)
	if accepts(g, `{"d":"2024-02-29"}`) || !accepts(g, `{"d":"2024-01-01","y":1}`) {
		t.Error("a value if may accept was written from else")
	}
	g = mustCompile(t, `{"enum":[{"d":"2024-02-29"},{"d":"2024-01-01","y":1}],"if":{"properties":{"d":{"format":"date"}}},"then":{"required":["y"]}}`)
	if accepts(g, `{"d":"2024-02-29"}`) || !accepts(g, `{"d":"2024-01-01","y":1}`) {
		t.Error("an enum value if may accept was taken as refused by if")
	}
	// then/else without if, if alone: no constraint.
	g = mustCompile(t, `{"type":"integer","then":{"minimum":5},"else":false}`)
	if !accepts(g, "1") {
		t.Error("then/else without if constrained")
	}
	const say = "tests one property"
	refused(t, `{"type":"object","properties":{"kind":{"type":"string"}},"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]}}`, "unsupported_schema", "list them", `"kind"`)
	refused(t, `{"type":"object","if":{"properties":{"a":{"const":1},"b":{"const":2}}},"then":{"required":["x"]}}`, "unsupported_schema", say, "exactly one")
	refused(t, `{"type":"object","if":{"minProperties":2},"then":{"required":["x"]}}`, "unsupported_schema", say, `"minProperties"`)
	refused(t, `{"type":"object","if":{"type":"string"},"then":{"required":["x"]}}`, "unsupported_schema", say, "type")
	refused(t, `{"type":"object","if":{"required":["a","b"]},"then":{"required":["x"]}}`, "unsupported_schema", say)
	refused(t, `{"type":"object","properties":{"kind":{"enum":["a","b"]}},"if":{"properties":{"kind":{"const":"a"}}},"then":{"required":["x"]},"else":{"oneOf":[{"required":["y"]},{"required":["z"]}]}}`, "unsupported_schema", "choice")
	refused(t, `{"if":5,"then":{}}`, "unsupported_schema", "if must be a schema")
	// Nested if/then/else in then and else: bounded by the merges.
	nested := `{"type":"integer"}`
	for i := range 40 {
		next := fmt.Sprintf(`{"type":"object","properties":{"k":{"enum":["a","b"]},"v":%s},"required":["k"],"if":{"properties":{"k":{"const":"a"}}},"then":{"properties":{"v%d":%s}},"else":{"properties":{"w":%s}}}`, nested, i, nested, nested)
		if len(next) > MaxSchemaBytes {
			break
		}
		nested = next
	}
	cpu0 := testenv.CPUTime()
	_, err := CompileSchema([]byte(nested))
	if d := testenv.CPUTime() - cpu0; d > 2*time.Second {
		t.Errorf("nested if/then/else: %v of CPU (%v)", d, err)
	}
	t.Logf("nested if/then/else (%d bytes): %v", len(nested), err)
	// Chained: each if doubles the branches, the merge budget bounds them.
	var chain []string
	for i := range 30 {
		chain = append(chain, fmt.Sprintf(`{"if":{"properties":{"k%d":{"const":1}}},"then":{"required":["x%d"]}}`, i, i))
	}
	props := `"x":{}`
	for i := range 30 {
		props += fmt.Sprintf(`,"k%d":{"enum":[1,2]},"x%d":{}`, i, i)
	}
	cpu0 = testenv.CPUTime()
	_, err = CompileSchema([]byte(`{"allOf":[{"type":"object","properties":{` + props + `}},` + strings.Join(chain, ",") + `]}`))
	if d := testenv.CPUTime() - cpu0; d > 2*time.Second {
		t.Errorf("chained if/then/else: %v of CPU (%v)", d, err)
	}
	t.Logf("30 chained if/then/else: %v", err)
}

// An anyOf branch that accepts no value is left out (it matches
// nothing); a malformed one is still refused; all empty: refused.
func TestAnyOfEmptyBranch(t *testing.T) {
	g := mustCompile(t, `{"anyOf":[{"type":"integer","minimum":5,"maximum":1},{"type":"string","maxLength":1}]}`)
	if !accepts(g, `"a"`) || accepts(g, "3") {
		t.Error("empty branch")
	}
	walkValidates(t, `{"anyOf":[{"type":"integer","minimum":5,"maximum":1},{"type":"string","maxLength":1},{"enum":[1,2],"type":"string"}]}`, 10)
	refused(t, `{"anyOf":[{"type":"foo"},{"type":"string"}]}`, "invalid_schema", "unknown type")
	refused(t, `{"anyOf":[{"type":"integer","minimum":5,"maximum":1},{"type":"string","minLength":3,"maxLength":1}]}`, "invalid_schema", "no branch")
}

// randIfSchema is a random object schema with if/then/else over a kind
// property and two others.
func randIfSchema(rng *rand.Rand) map[string]any {
	kinds := []any{"a", "b", "c", 1}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	props := map[string]any{"kind": map[string]any{"enum": kinds[:1+rng.IntN(4)]}, "x": randSchema(rng, 0), "y": randSchema(rng, 0)}
	s := map[string]any{"type": "object", "properties": props}
	if rng.IntN(3) > 0 {
		s["required"] = []string{"kind"}
	}
	tests := []map[string]any{
		{"properties": map[string]any{"kind": map[string]any{"const": kinds[0]}}},
		{"properties": map[string]any{"kind": map[string]any{"enum": kinds[:2]}}, "required": []string{"kind"}},
		{"required": []string{"kind"}},
		{"type": "object", "properties": map[string]any{"kind": map[string]any{"type": "string"}}},
		{"properties": map[string]any{"kind": map[string]any{"type": "integer"}}},
	}
	s["if"] = tests[rng.IntN(len(tests))]
	sides := []any{
		map[string]any{"required": []string{"x"}}, map[string]any{"required": []string{"y"}}, map[string]any{"maxProperties": 1},
		map[string]any{"properties": map[string]any{"x": randSchema(rng, 0)}}, false, true,
	}
	if rng.IntN(4) > 0 {
		s["then"] = sides[rng.IntN(len(sides))]
	}
	if rng.IntN(4) > 0 {
		s["else"] = sides[rng.IntN(len(sides))]
	}
	return s
}

// Random if/then/else schemas: every candidate object the grammar
// accepts validates, and every walked output does.
func TestIfThenElseRandom(t *testing.T) {
	vals := map[string][]string{"kind": {`"a"`, `"b"`, `"c"`, "1"}, "x": {"1", `"a"`, "true"}, "y": {"1", `"ab"`, "null"}}
	cands := orderedObjects([]string{"kind", "x", "y"}, vals)
	n := 400
	if testing.Short() {
		n = 100
	}
	rng := rand.New(rand.NewPCG(21, 3))
	compiled, accepted, outputs := randomSchemasValid(t, n, rng, func() any { return randIfSchema(rng) }, cands)
	if compiled < n/3 || outputs < n/3 {
		t.Fatalf("%d of %d compiled, %d outputs: too few to tell", compiled, n, outputs)
	}
	t.Logf("%d of %d compiled; %d candidates accepted, %d outputs, all valid", compiled, n, accepted, outputs)
}

// Random oneOfs of branches with session 21's keywords (patternProperties
// objects, contains arrays, if/then/else objects) and plain ones: every
// oneOf sluice accepts writes values matching exactly one branch (the
// validator's verdict), every candidate it accepts too.
func TestNewKeywordsInOneOfRandom(t *testing.T) {
	cands := append(objectCands([]string{"a", "kind", "x", "b", "S_1"}, []string{"1", `"a"`}), arrayCands([]string{"1", `"a"`, "true"}, 2)...)
	n := 300
	if testing.Short() {
		n = 80
	}
	if x := os.Getenv("S21_ONEOF_N"); x != "" {
		n, _ = strconv.Atoi(x) // one-off longer runs
	}
	rng := rand.New(rand.NewPCG(21, 4))
	branch := func() any {
		switch rng.IntN(6) {
		case 0:
			return randObjectSchema(rng)
		case 1:
			return randContainsSchema(rng)
		case 2:
			return randIfSchema(rng)
		case 3:
			return map[string]any{"type": "object", "properties": map[string]any{"b": map[string]any{"type": "integer"}}, "required": []string{"b"}}
		case 4:
			return map[string]any{"type": []string{"string", "integer", "array"}[rng.IntN(3)]}
		}
		return randBranch(rng, 1)
	}
	accepted, _, outputs := randomSchemasValid(t, n, rng, func() any { return map[string]any{"oneOf": []any{branch(), branch()}} }, cands)
	if accepted < n/10 || outputs < n/10 {
		t.Fatalf("%d of %d oneOfs accepted, %d outputs: too few to tell", accepted, n, outputs)
	}
	t.Logf("%d of %d oneOfs accepted, %d outputs, all matching exactly one branch", accepted, n, outputs)
}
