package grammar

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
	data, err := os.ReadFile("testdata/schemas.json")
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
