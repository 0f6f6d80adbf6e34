package grammar

import (
	"runtime"
	"strings"
	"testing"
)

// allocOf is the bytes f allocates (the test runs alone: not parallel).
func allocOf(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// A schema combined through allOf that reaches itself again through a
// $ref (a property whose schema is allOf[$ref back, {...}]) compiled its
// merged copy again at every level, forever: a 122-byte schema held 2.3
// GB after 10 s (the path of each level kept live). It is now one
// recursive rule, like a $ref's target.
func TestRT14MergedSchemaReachingItselfIsOneRule(t *testing.T) {
	s := `{"$defs":{"m":{"type":"object","properties":{"a":{"allOf":[{"$ref":"#/$defs/m"},{"type":"object"}]}}}},"$ref":"#/$defs/m"}`
	var g *Grammar
	n := allocOf(func() { g = mustCompile(t, s) })
	if n > 16<<20 {
		t.Errorf("compiling allocated %d MB", n>>20)
	}
	for _, x := range []string{`{}`, `{"a":{}}`, `{"a":{"a":{"a":{}}}}`} {
		if !accepts(g, x) {
			t.Errorf("refuses %s", x)
		}
	}
	for _, x := range []string{`{"a":1}`, `{"a":{"a":[]}}`} {
		if accepts(g, x) {
			t.Errorf("writes %s", x)
		}
	}
	walkValidates(t, s, 20)
}

// Schemas merged afresh at each use (a patternProperties key's value
// merged with the overlapping patterns', items merged with contains)
// that reach themselves through a $ref nest one level deeper per use,
// until the 4096 merges: each level kept its path (O(depth^2) bytes, 563
// MB allocated, 1-1.7 s for a 125-byte schema). The nesting is bounded
// and each level's path is cut.
func TestRT14FreshMergeRecursionBounded(t *testing.T) {
	for _, s := range []string{
		`{"$defs":{"m":{"type":"object","patternProperties":{"^a":{"$ref":"#/$defs/m"},"b":{"$ref":"#/$defs/m"}}}},"$ref":"#/$defs/m"}`,
		`{"$defs":{"m":{"type":"object","patternProperties":{"^a":{"$ref":"#/$defs/m"},"` + strings.Repeat("b", 900) + `":{"$ref":"#/$defs/m"}}}},"$ref":"#/$defs/m"}`,
		`{"$defs":{"m":{"type":"array","items":{"$ref":"#/$defs/m"},"contains":{"$ref":"#/$defs/m"},"maxItems":2}},"$ref":"#/$defs/m"}`,
	} {
		n := allocOf(func() { refused(t, s, "unsupported_schema", "levels deep") })
		t.Logf("%.60s: %d MB", s, n>>20)
		if n > 64<<20 {
			t.Errorf("%.80s: refusing allocated %d MB", s, n>>20)
		}
	}
	if p := shortPath(strings.Repeat("/items", 1000)); len(p) > maxPathBytes+8 {
		t.Errorf("a path of 6000 bytes is kept as %d", len(p))
	}
}

// A recursive schema whose required property (or the schema merged into
// it) leads back to itself has no finite value there: the grammar let the
// model enter it and never end ({"a":{"a":... to the token limit, a 200
// with broken JSON). Such ways are dropped; a schema with no finite value
// at all is refused.
func TestRT14NoWayThatCannotEnd(t *testing.T) {
	for _, s := range []string{
		`{"$defs":{"m":{"type":"object","properties":{"a":{"$ref":"#/$defs/m","required":["a"]}}}},"$ref":"#/$defs/m"}`,
		`{"$defs":{"m":{"type":"object","properties":{"a":{"allOf":[{"$ref":"#/$defs/m"},{"required":["a"]}]},"b":{"type":"integer"}}}},"$ref":"#/$defs/m"}`,
		`{"$defs":{"m":{"type":"array","items":{"$ref":"#/$defs/m","minItems":1}}},"$ref":"#/$defs/m"}`,
	} {
		g := mustCompile(t, s)
		for _, x := range []string{`{"a":`, `[[`, `{"b":1,"a":`} {
			m := Bind(g, byteVocab).NewMatcher()
			ok := true
			for i := 0; i < len(x) && ok; i++ {
				ok = m.Accept(1+int32(x[i])) == nil
			}
			if ok {
				t.Errorf("%.90s: enters %s, which cannot end", s, x)
			}
		}
		walkValidates(t, s, 20)
	}
	refused(t, `{"$defs":{"m":{"type":"object","properties":{"a":{"$ref":"#/$defs/m"}},"required":["a"]}},"$ref":"#/$defs/m"}`, "schema_recursion", "no finite value")
	refused(t, `{"$defs":{"m":{"type":"array","items":{"$ref":"#/$defs/m"},"minItems":1}},"$ref":"#/$defs/m"}`, "schema_recursion", "no finite value")
}
