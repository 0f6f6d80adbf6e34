package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"sluice/internal/testenv"
)

// testVocab is a small vocabulary shaped like a byte-level BPE one: every
// printable ASCII byte, the bytes of multi-byte characters alone, whole
// multi-byte characters, and multi-character tokens that cross JSON
// structure ('{"', '":', '"}', ...). Token 0 is the end of generation and
// token 1 a control token with no piece.
func testVocab() *Vocab {
	pieces := []string{"", ""}
	for c := 0x20; c < 0x7f; c++ {
		pieces = append(pieces, string(rune(c)))
	}
	for _, b := range []byte{0xc3, 0xa9, 0xce, 0xb1, 0xe2, 0x9c, 0x93, 0x80, 0xbf} {
		pieces = append(pieces, string([]byte{b}))
	}
	pieces = append(pieces, "é", "α", "ω", "✓", "\n", "\t", "\\n", "\\\"",
		`{"`, `":`, `": `, `",`, `", "`, `"}`, `}`, `},`, `]}`, `["`, `"]`, `true`, `false`, `null`, `nu`, `ll`,
		`12`, `345`, `0.`, `-1`, `name`, `age`, ` "`, `abc`, `the`, ` the`, `hello`, `é"`, `"é`, `a"b`, `00`, `.5`, `-0`,
		"T1", "Z\"", "2024-", "12-", "@", ".com")
	return NewVocab(pieces, func(id int32) bool { return id == 0 })
}

type corpusEntry struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

func loadCorpus(t testing.TB) []corpusEntry {
	data, err := os.ReadFile("../../testdata/schemas/corpus.json")
	if err != nil {
		t.Fatal(err)
	}
	var c []corpusEntry
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// validator compiles a schema with an independent implementation
// (santhosh-tekuri/jsonschema, draft 2020-12 with format assertions).
func validator(t testing.TB, schema json.RawMessage) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// walk generates one output: at each step the mask is checked against
// Allowed for every token (the cache must agree with the exact answer),
// then a random allowed token is taken, biased toward closing tokens so
// outputs end.
func walk(t *testing.T, c *Compiled, rng *rand.Rand, steps int) (string, bool) {
	m := c.NewMatcher()
	mask := make([]uint64, c.v.Words())
	var out strings.Builder
	for range steps {
		m.Mask(mask)
		var allowed, closing []int32
		for id := int32(0); id < int32(c.v.n); id++ {
			in := mask[id>>6]&(1<<(id&63)) != 0
			if in != m.Allowed(id) {
				t.Fatalf("after %q: mask says %v for token %d (%q), Allowed says %v", out.String(), in, id, c.v.pieces[id], !in)
			}
			if in {
				allowed = append(allowed, id)
				if p := c.v.pieces[id]; id == 0 || strings.ContainsAny(p, `"]}`) || (len(p) > 0 && p[0] >= '0' && p[0] <= '9') {
					closing = append(closing, id)
				}
			}
		}
		if len(allowed) == 0 {
			t.Fatalf("after %q: nothing allowed", out.String())
		}
		pick := allowed
		if len(closing) > 0 && rng.IntN(3) > 0 {
			pick = closing
		}
		id := pick[rng.IntN(len(pick))]
		if err := m.Accept(id); err != nil {
			t.Fatalf("after %q: Accept(%d): %v", out.String(), id, err)
		}
		if id == 0 {
			return out.String(), true
		}
		out.WriteString(c.v.pieces[id])
	}
	return out.String(), false
}

func TestCorpusValidates(t *testing.T) {
	v := testVocab()
	for _, e := range loadCorpus(t) {
		t.Run(e.Name, func(t *testing.T) {
			g, err := CompileSchema(e.Schema)
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			val := validator(t, e.Schema)
			c := Bind(g, v)
			rng := rand.New(rand.NewPCG(uint64(len(e.Name)), 7))
			done := 0
			for i := range 20 {
				out, ok := walk(t, c, rng, 400)
				if !ok {
					continue
				}
				done++
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
				if err != nil {
					t.Fatalf("output %d %q is not JSON: %v", i, out, err)
				}
				if err := val.Validate(inst); err != nil {
					t.Fatalf("output %d %q does not validate: %v", i, out, err)
				}
			}
			if done == 0 {
				t.Fatalf("no output ended within the step bound")
			}
		})
	}
}

func TestJSONObject(t *testing.T) {
	c := Bind(JSONObject(), testVocab())
	rng := rand.New(rand.NewPCG(1, 2))
	for range 30 {
		out, ok := walk(t, c, rng, 300)
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%q: %v", out, err)
		}
	}
}

// Hostile schemas are refused by the limit they hit, quickly and without
// building what they describe.
func TestHostileSchemas(t *testing.T) {
	deep := strings.Repeat(`{"type":"array","items":`, 70) + `{}` + strings.Repeat(`}`, 70)
	var enum strings.Builder
	enum.WriteString(`{"enum":[`)
	for i := range MaxEnum + 1 {
		if i > 0 {
			enum.WriteByte(',')
		}
		enum.WriteString(`"v` + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + `"`)
	}
	enum.WriteString(`]}`)
	props := `{"type":"object","properties":{` + strings.Repeat(`"a":{"type":"array","minItems":60000,"items":{"type":"array","minItems":60000}},`, 1) + `"z":{}}}`
	cases := []struct{ schema, code string }{
		{deep, "schema_too_deep"},
		{enum.String(), "enum_too_large"},
		{`{"type":"string","pattern":"^((a{1000}){1000}){1000}$"}`, "pattern_too_complex"},
		{`{"type":"string","pattern":"` + strings.Repeat("a", MaxPatternBytes+1) + `"}`, "pattern_too_complex"},
		{`{"type":"array","minItems":90000,"items":{"type":"array","minItems":90000}}`, "grammar_too_large"},
		{props, "grammar_too_large"},
		{`{"type":"string","minLength":100001}`, "grammar_too_large"},
		{`{"$ref":"#"}`, "schema_recursion"},
		{`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"}]},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "schema_recursion"},
		{`{"type":"object","properties":{"a":{"not":{}}}}`, "unsupported_schema"},
		{`{"oneOf":[{},{}]}`, "unsupported_schema"},
		{`{"type":"string","format":"iri"}`, "unsupported_schema"},
		{`{"type":"number","minimum":0.5}`, "unsupported_schema"},
		{`{"$ref":"http://example.com/s.json"}`, "unsupported_schema"},
		{`{"type":"integer","minimum":5,"maximum":4}`, "invalid_schema"},
		{`{"type":"integer","minimum":1e16}`, "unsupported_schema"}, // satisfiable, beyond 15 digits
		{`{"type":"integer","exclusiveMaximum":-1e300}`, "unsupported_schema"},
		{`{"type":"number","minimum":1e20}`, "unsupported_schema"},
		{`{"type":"integer","minimum":1e16,"maximum":1e15}`, "invalid_schema"},
		{`{"type":"strin"}`, "invalid_schema"},
		{`{"type":`, "invalid_schema"},
		{`false`, "invalid_schema"},
		{`"` + strings.Repeat("x", MaxSchemaBytes) + `"`, "schema_too_large"},
	}
	for _, c := range cases {
		// CPU time, not wall time: a loaded machine stretches the wall
		// time; building what a hostile schema describes costs CPU.
		cpu0 := testenv.CPUTime()
		_, err := CompileSchema([]byte(c.schema))
		var ge *Error
		if !errors.As(err, &ge) || ge.Code != c.code {
			t.Errorf("%.60s: got %v, want code %s", c.schema, err, c.code)
		}
		if d := testenv.CPUTime() - cpu0; d > time.Second {
			t.Errorf("%.60s: refused after %v of CPU", c.schema, d)
		}
	}
}

// The compiled-grammar cache is keyed by tenant (a shared one would tell
// tenant B, by a fast first request, that A sent the same schema): B's
// first use of A's schema is a miss; A's second use is a hit; one
// tenant's many schemas evict its own entries, not another's.
func TestCacheKeyedByTenant(t *testing.T) {
	c := NewCache(testVocab(), 0)
	schema := `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
	a1, hit, err := c.Get(t.Context(), "A", false, schema)
	if err != nil || hit {
		t.Fatalf("A first: hit %v err %v", hit, err)
	}
	if _, hit, _ := c.Get(t.Context(), "B", false, schema); hit {
		t.Fatal("B's first use of A's schema hit the cache: a cross-tenant timing channel")
	}
	if a2, hit, _ := c.Get(t.Context(), "A", false, schema); !hit || a2 != a1 {
		t.Fatal("A's second use missed")
	}
	if _, hit, _ := c.Get(t.Context(), "A", true, schema); hit {
		t.Fatal("json_object shares the schema's entry")
	}
	for i := range DefaultPerTenant + 5 {
		if _, _, err := c.Get(t.Context(), "flood", false, fmt.Sprintf(`{"const":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, hit, _ := c.Get(t.Context(), "A", false, schema); !hit {
		t.Fatal("another tenant's schemas evicted A's entry")
	}
	if n := c.grams.count("flood"); n != DefaultPerTenant {
		t.Fatalf("flood holds %d entries, want its cap %d", n, DefaultPerTenant)
	}
}

// Wide schemas stay within MaxStacks: a 1000-value enum whose values share
// long prefixes (a trie, one parse), an object of 200 optional properties
// (every key starts with a quote) and 60 anyOf object branches.
func TestWideSchemas(t *testing.T) {
	var enum, props, branches []string
	for i := range MaxEnum {
		enum = append(enum, fmt.Sprintf(`"value-%d"`, i))
	}
	for i := range 200 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"integer","minimum":0,"maximum":9}`, i))
	}
	for i := range 60 {
		branches = append(branches, fmt.Sprintf(`{"type":"object","properties":{"k%d":{"type":"boolean"}},"required":["k%d"],"additionalProperties":false}`, i, i))
	}
	v := testVocab()
	for _, schema := range []string{
		`{"enum":[` + strings.Join(enum, ",") + `]}`,
		`{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}`,
		`{"anyOf":[` + strings.Join(branches, ",") + `]}`,
	} {
		g, err := CompileSchema([]byte(schema))
		if err != nil {
			t.Fatalf("%.50s: %v", schema, err)
		}
		c := Bind(g, v)
		val := validator(t, json.RawMessage(schema))
		rng := rand.New(rand.NewPCG(3, 4))
		for range 5 {
			out, ok := walk(t, c, rng, 2000)
			if !ok {
				t.Fatalf("%.50s: no end", schema)
			}
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
			if err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			if err := val.Validate(inst); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
		}
	}
}

// checkMaskBytes fails unless the cache's count of mask bytes is what its
// grammars hold and within its budget.
func checkMaskBytes(t *testing.T, c *Cache) int64 {
	t.Helper()
	var sum int64
	c.mu.Lock()
	c.grams.each(func(e *lruEntry[*Compiled]) { sum += e.v.MaskBytes() })
	c.mu.Unlock()
	held, _ := c.MaskStats()
	if held != sum || held > c.maxBytes {
		t.Fatalf("the cache counts %d mask bytes, its grammars hold %d, the budget is %d", held, sum, c.maxBytes)
	}
	return held
}

// The masks of all cached grammars stay within the cache's byte budget: a
// tenant sending many schemas drops its own grammars' masks, not those of
// a tenant holding less; a grammar whose tenant holds the most and has
// nothing else to drop computes masks without keeping them; masks stay
// exact through it all (walk checks each against Allowed), and an entry
// the cache lets go returns its bytes.
func TestMaskBudget(t *testing.T) {
	v := testVocab()
	c := NewCache(v, 0)
	rng := rand.New(rand.NewPCG(11, 12))
	b, _, err := c.Get(t.Context(), "B", false, `{"type":"object","properties":{"b":{"type":"string","maxLength":6}},"required":["b"],"additionalProperties":false}`)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		walk(t, b, rng, 60)
	}
	bHeld := b.MaskBytes()
	if bHeld == 0 {
		t.Fatal("B's grammar holds no mask")
	}
	c.maxBytes = 3 * bHeld // B holds a third of the budget
	for i := range DefaultPerTenant + 8 {
		a, _, err := c.Get(t.Context(), "A", false, fmt.Sprintf(`{"type":"object","properties":{"k%d":{"type":"array","items":{"type":"string","maxLength":%d},"maxItems":3}},"required":["k%d"],"additionalProperties":false}`, i, 3+i%5, i))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			walk(t, a, rng, 80)
		}
		checkMaskBytes(t, c)
		if got := b.MaskBytes(); got != bHeld {
			t.Fatalf("after A's schema %d, B's grammar holds %d mask bytes, not %d: A's schemas took B's masks", i, got, bHeld)
		}
	}
	if _, dropped := c.MaskStats(); dropped == 0 {
		t.Fatal("no grammar's masks were dropped: the test did not fill the budget")
	}
	// One grammar alone bigger than the budget: it keeps what fits.
	big := NewCache(v, bHeld/4)
	g, _, err := big.Get(t.Context(), "A", true, "")
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		walk(t, g, rng, 80)
	}
	if held := checkMaskBytes(t, big); held == 0 {
		t.Fatal("a grammar over the budget kept no mask at all")
	}
	// Entries the cache lets go (a tenant's cap of entries) return their
	// bytes: checkMaskBytes sums only the entries still cached.
	wide := NewCache(v, 0)
	for i := range DefaultPerTenant + 4 {
		a, _, err := wide.Get(t.Context(), "A", false, fmt.Sprintf(`{"type":"array","items":{"type":"string","maxLength":%d}}`, 2+i))
		if err != nil {
			t.Fatal(err)
		}
		walk(t, a, rng, 20)
		checkMaskBytes(t, wide)
	}
}

// Many requests masking at once through one cache, while a tenant's
// schemas come and go and the budget is small, keep the byte count right
// (run with -race).
func TestMaskBudgetConcurrent(t *testing.T) {
	v := testVocab()
	c := NewCache(v, 4096)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 13))
			mask := make([]uint64, v.Words())
			for i := range 60 {
				comp, _, err := c.Get(t.Context(), fmt.Sprint("T", w%2), false, fmt.Sprintf(`{"type":"array","items":{"type":"string","maxLength":%d},"maxItems":4}`, 1+(i*7+w)%40))
				if err != nil {
					t.Error(err)
					return
				}
				m := comp.NewMatcher()
				for range 30 {
					m.Mask(mask)
					var ids []int32
					for id := int32(0); id < int32(v.n); id++ {
						if mask[id>>6]&(1<<(id&63)) != 0 {
							ids = append(ids, id)
						}
					}
					if len(ids) == 0 || m.Accept(ids[rng.IntN(len(ids))]) != nil || m.Ended() {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	checkMaskBytes(t, c)
}

// A pattern repeating without bound something that can match empty
// ((a?)*) is refused for what it is, not as a $ref or anyOf cycle; a
// bounded repeat of it compiles, and a real cycle keeps its own code.
func TestEmptyRepeatRefusedAsSuch(t *testing.T) {
	for _, p := range []string{`^(a?)*$`, `(a?)+`, `^x(a|)*y$`, `^(a*b?){2,}$`} {
		_, err := CompileSchema([]byte(`{"type":"string","pattern":"` + p + `"}`))
		var ge *Error
		if !errors.As(err, &ge) || ge.Code != "unsupported_schema" || !strings.Contains(ge.Msg, "can match the empty string") || strings.Contains(ge.Msg, "$ref") {
			t.Errorf("%s: got %v, want unsupported_schema saying the repeated part can match empty", p, err)
		}
	}
	if _, err := CompileSchema([]byte(`{"type":"string","pattern":"^(a?){0,3}$"}`)); err != nil {
		t.Errorf("a bounded repeat of an optional part: %v", err)
	}
	_, err := CompileSchema([]byte(`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"string","pattern":"^(a?){0,3}$"}]}},"$ref":"#/$defs/a"}`))
	var ge *Error
	if !errors.As(err, &ge) || ge.Code != "schema_recursion" {
		t.Errorf("a $ref cycle beside a pattern: got %v, want schema_recursion", err)
	}
}
