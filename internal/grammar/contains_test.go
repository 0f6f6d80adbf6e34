package grammar

import (
	"math/rand/v2"
	"testing"
)

// arrayCands is every array of at most n items over vals.
func arrayCands(vals []string, n int) []string {
	out := []string{"[]"}
	level := []string{""}
	for range n {
		var next []string
		for _, p := range level {
			for _, v := range vals {
				if p == "" {
					next = append(next, v)
				} else {
					next = append(next, p+","+v)
				}
			}
		}
		for _, x := range next {
			out = append(out, "["+x+"]")
		}
		level = next
	}
	return out
}

// contains/minContains/maxContains: exact against the validator over
// every array of up to three items, where the grammar can tell which
// items match contains (what it accepts always validates).
func TestContains(t *testing.T) {
	cands := arrayCands([]string{"1", "2", "3", `"a"`, `"b"`, "true", "null"}, 3)
	for _, c := range []struct {
		schema string
		exact  bool
		min    int
	}{
		{`{"type":"array","contains":{"const":2}}`, true, 100},
		{`{"type":"array","items":{"type":["integer","string"]},"contains":{"type":"integer","minimum":2},"minContains":2}`, true, 20},
		{`{"type":"array","items":{"enum":[1,2,"a","b"]},"contains":{"type":"string"},"maxContains":1}`, true, 20},
		{`{"type":"array","items":{"anyOf":[{"type":"integer"},{"type":"string"}]},"contains":{"type":"string"},"minContains":0,"maxContains":1}`, true, 20},
		{`{"type":"array","items":{"type":"integer"},"contains":{"type":"string"},"minContains":0,"maxContains":0}`, true, 20},
		{`{"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"contains":{"const":2}}`, true, 20},
		{`{"type":"array","prefixItems":[{"type":"integer"}],"items":false,"contains":{"const":2}}`, true, 1},
		{`{"type":"array","contains":{"type":"boolean"},"minContains":2,"maxItems":3}`, true, 5},
		{`{"type":"array","items":{"enum":[1,2,3,null]},"contains":{"type":"integer","minimum":2},"minContains":1,"maxContains":2,"minItems":2}`, true, 20},
		{`{"type":"array","contains":{"type":"integer"},"minContains":0,"maxItems":2}`, true, 50},
		// maxContains where the misses are not provable: a valid subset
		{`{"type":"array","items":{"type":"integer"},"contains":{"minimum":2},"maxContains":1}`, false, 2},
		// merged: the same contains on both sides, counts tightened
		{`{"allOf":[{"type":"array","contains":{"type":"integer"}},{"contains":{"type":"integer"},"minContains":2},{"maxContains":0}]}`, true, 20},
	} {
		var w func(string) bool
		if !c.exact {
			w = func(string) bool { return false }
		}
		if n := exactOver(t, c.schema, cands, w); n < c.min {
			t.Errorf("%s: only %d accepted", c.schema, n)
		}
		walkValidates(t, c.schema, 15)
	}
	// A $ref first met in a match that accepts nothing is compiled again
	// where it is used next (not left matching nothing, or empty):
	// properties compile from the last, so a's match comes first.
	refused(t, `{"$defs":{"Y":{"type":"integer","minimum":5,"maximum":3}},"type":"object","properties":{"b":{"$ref":"#/$defs/Y"},"a":{"type":"array","items":{"type":"object"},"contains":{"properties":{"y":{"$ref":"#/$defs/Y"}},"required":["y"]},"minContains":0,"maxContains":0,"maxItems":3}},"required":["b"]}`, "invalid_schema", "no integer")
	// Beside enum: values checked against contains and its counts.
	g := mustCompile(t, `{"enum":[[1],["a"],["a","a"],[]],"contains":{"type":"string"},"maxContains":1}`)
	if !accepts(g, `["a"]`) || accepts(g, `[1]`) || accepts(g, `["a","a"]`) || accepts(g, `[]`) {
		t.Error("enum values against contains")
	}
	refused(t, `{"type":"array","items":{"type":"integer"},"contains":{"minimum":2},"maxContains":1,"minItems":2}`, "unsupported_schema", "maxContains", "prove")
	refused(t, `{"type":"array","items":{"enum":["a","b"]},"contains":{"type":"string"},"uniqueItems":true}`, "unsupported_schema", "uniqueItems")
	refused(t, `{"type":"array","contains":{"type":"string"},"minContains":3,"maxItems":2}`, "invalid_schema", "minContains 3")
	refused(t, `{"type":"array","contains":{"type":"string"},"minContains":3,"maxContains":2}`, "invalid_schema", "below")
	refused(t, `{"type":"array","items":{"type":"integer"},"contains":{"type":"string"}}`, "invalid_schema", "contains")
	refused(t, `{"type":"array","contains":false}`, "invalid_schema", "contains")
	refused(t, `{"type":"array","contains":{},"minContains":65}`, "unsupported_schema", "at most 64")
	refused(t, `{"type":"array","contains":{},"minContains":60,"maxItems":100}`, "unsupported_schema", "counting states")
	refused(t, `{"type":"array","contains":{"type":"string","pattern":"a"},"items":{"pattern":"b"}}`, "unsupported_schema", "contains", "pattern")
	refused(t, `{"allOf":[{"type":"array","contains":{"const":"a"}},{"contains":{"const":"b"}}]}`, "unsupported_schema", "contains")
	// Large but within bounds: quickly.
	mustCompile(t, `{"type":"array","contains":{"type":"integer"},"minContains":30,"maxContains":40,"maxItems":90}`)
}

// randContainsSchema is a random array schema with contains beside
// items, prefixItems and the counts, over randSchema's leaves.
func randContainsSchema(rng *rand.Rand) map[string]any {
	leaves := []map[string]any{
		{"type": "string"}, {"type": "integer"}, {"type": "integer", "minimum": 2}, {"const": "a"}, {"enum": []any{1, "a", true}},
		{"type": "boolean"}, {"anyOf": []any{map[string]any{"type": "integer"}, map[string]any{"type": "null"}}}, {"type": "number", "maximum": 2},
	}
	leaf := func() any {
		if rng.IntN(3) == 0 {
			return randSchema(rng, 1)
		}
		return leaves[rng.IntN(len(leaves))]
	}
	s := map[string]any{"type": "array", "contains": leaf()}
	if rng.IntN(3) > 0 {
		s["items"] = leaf()
	}
	if rng.IntN(4) == 0 {
		s["prefixItems"] = []any{leaf(), leaf()}
	}
	if rng.IntN(2) == 0 {
		s["minContains"] = rng.IntN(3)
	}
	if rng.IntN(2) == 0 {
		s["maxContains"] = rng.IntN(3)
	}
	if rng.IntN(3) == 0 {
		s["minItems"] = rng.IntN(3)
	}
	if rng.IntN(3) == 0 {
		s["maxItems"] = 1 + rng.IntN(4)
	}
	return s
}

// Random contains schemas: every candidate array the grammar accepts
// validates, and every walked output does.
func TestContainsRandom(t *testing.T) {
	cands := arrayCands([]string{"1", "2", `"a"`, "true", "null", "1.5"}, 3)
	n := 400
	if testing.Short() {
		n = 100
	}
	rng := rand.New(rand.NewPCG(21, 2))
	compiled, accepted, outputs := randomSchemasValid(t, n, rng, func() any { return randContainsSchema(rng) }, cands)
	if compiled < n/3 || outputs < n/3 {
		t.Fatalf("%d of %d compiled, %d outputs: too few to tell", compiled, n, outputs)
	}
	t.Logf("%d of %d compiled; %d candidates accepted, %d outputs, all valid", compiled, n, accepted, outputs)
}
