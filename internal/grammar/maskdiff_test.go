package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// randSchema builds a random schema of the supported keywords, small
// enough that random outputs finish, adversarial in the places the mask's
// shortcuts care about: bounded strings (whose last characters make most
// tokens uncertain), nesting (stacks below a position), alternatives
// (several stacks), property names and enum values with escapes.
func randSchema(rng *rand.Rand, depth int) map[string]any {
	kinds := []string{"string", "boundedString", "integer", "number", "boolean", "null", "enum", "pattern"}
	if depth > 0 {
		kinds = append(kinds, "object", "object", "array", "array", "anyOf")
	}
	switch kinds[rng.IntN(len(kinds))] {
	case "string":
		return map[string]any{"type": "string"}
	case "boundedString":
		lo := rng.IntN(3)
		return map[string]any{"type": "string", "minLength": lo, "maxLength": lo + rng.IntN(3)}
	case "integer":
		s := map[string]any{"type": "integer"}
		if rng.IntN(2) == 0 {
			lo := rng.IntN(30) - 10
			s["minimum"], s["maximum"] = lo, lo+rng.IntN(200)
		}
		return s
	case "number":
		return map[string]any{"type": "number"}
	case "boolean":
		return map[string]any{"type": "boolean"}
	case "null":
		return map[string]any{"type": "null"}
	case "enum":
		vals := []any{"a", "ab", `q"`, "b\\", 1, 12, true, nil, "é"}
		rng.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
		return map[string]any{"enum": vals[:1+rng.IntN(4)]}
	case "pattern":
		pats := []string{"^[a-c]{1,3}$", "^a+b?$", "^(ab|c)*$", "^[0-9]{2}-[a-z]$"}
		return map[string]any{"type": "string", "pattern": pats[rng.IntN(len(pats))]}
	case "object":
		names := []string{"a", "b", "ab", "c\"d", "e\\", "x y"}
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		props := map[string]any{}
		var req []string
		for _, n := range names[:1+rng.IntN(3)] {
			props[n] = randSchema(rng, depth-1)
			if rng.IntN(2) == 0 {
				req = append(req, n)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(req) > 0 {
			s["required"] = req
		}
		return s
	case "array":
		lo := rng.IntN(2)
		return map[string]any{"type": "array", "items": randSchema(rng, depth-1), "minItems": lo, "maxItems": lo + rng.IntN(3)}
	default: // anyOf
		return map[string]any{"anyOf": []any{randSchema(rng, depth-1), randSchema(rng, depth-1)}}
	}
}

// randVocab is a vocabulary of n pieces over JSON's bytes: every single
// byte the outputs use, then random strings heavy in quotes, escapes and
// punctuation, with duplicates, control tokens (no piece), a lone UTF-8
// lead byte and two end-of-generation tokens.
func randVocab(rng *rand.Rand, n int) *Vocab {
	const alpha = `{}[]":,\ -.0123456789eEabcdlnrstufxyq"""",,::\\`
	pieces := []string{"", ""} // end of generation (eog below)
	for i := 0; i < len(alpha); i++ {
		pieces = append(pieces, alpha[i:i+1])
	}
	pieces = append(pieces, "\xc3", "\xa9", "é", "é\"", "", "true", "false", "null", `\"`, `\\`, `\u00e9`, `":"`, `","`, `"}`, `"]`)
	for len(pieces) < n {
		var b strings.Builder
		for k := 2 + rng.IntN(5); k > 0; k-- {
			b.WriteByte(alpha[rng.IntN(len(alpha))])
		}
		pieces = append(pieces, b.String())
		if rng.IntN(20) == 0 {
			pieces = append(pieces, b.String()) // a duplicate piece
		}
	}
	return NewVocab(pieces, func(id int32) bool { return id < 2 })
}

// The mask is exact against the naive check on small random vocabularies
// and random schemas: at every step every token's bit is what Allowed
// (the token's bytes fed to the matcher; no trie, no memo, no position
// cache) says. Masks come from a binding shared by all the walks of a
// schema (warm position cache, filled by other matchers' paths) and from
// a fresh binding computed in slices of random budgets (cold walks cut
// and resumed). The vocabulary is large enough (> maxUncertain tokens
// leaving a string) that positions are settled by the restricted walk
// from the whole stack as well as token by token.
func TestMaskExactRandomSchemas(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	exact, steps := 0, 0
	for s := 0; s < 60; s++ {
		v := randVocab(rng, 1500+rng.IntN(1500))
		schema, err := json.Marshal(randSchema(rng, 3))
		if err != nil {
			t.Fatal(err)
		}
		g, err := CompileSchema(schema)
		if err != nil {
			t.Fatalf("schema %s: %v", schema, err)
		}
		warm := Bind(g, v)
		mask := make([]uint64, v.Words())
		sliced := make([]uint64, v.Words())
		for walk := 0; walk < 3; walk++ {
			m := warm.NewMatcher()
			cold := Bind(g, v).NewMatcher()
			var out strings.Builder
			for step := 0; step < 60 && !m.Ended(); step++ {
				steps++
				m.Mask(mask)
				for _, f := range m.stacks {
					if f != nil {
						if pm := warm.cachedPos(f.pos); pm != nil && len(pm.uncertain) > maxUncertain {
							exact++
						}
					}
				}
				j := cold.MaskJob(sliced)
				for done := false; !done; {
					_, done = j.Run(1 + rng.IntN(300))
				}
				var ids []int32
				for id := int32(0); id < int32(v.Size()); id++ {
					in := mask[id>>6]&(1<<(id&63)) != 0
					want := m.Allowed(id)
					if in != want {
						t.Fatalf("schema %s after %q: mask says %v for token %d (%q), Allowed %v", schema, out.String(), in, id, v.Piece(id), want)
					}
					if c := sliced[id>>6]&(1<<(id&63)) != 0; c != want {
						t.Fatalf("schema %s after %q (cold, sliced): mask says %v for token %d (%q), Allowed %v", schema, out.String(), c, id, v.Piece(id), want)
					}
					if in {
						ids = append(ids, id)
					}
				}
				if len(ids) == 0 {
					t.Fatalf("schema %s after %q: no token allowed", schema, out.String())
				}
				id := ids[rng.IntN(len(ids))]
				if err := m.Accept(id); err != nil {
					t.Fatalf("schema %s after %q: %v", schema, out.String(), err)
				}
				if err := cold.Accept(id); err != nil {
					t.Fatal(err)
				}
				out.WriteString(v.Piece(id))
			}
		}
	}
	if exact == 0 {
		t.Fatal("no step settled its uncertain tokens by a walk from the whole stack; the test does not reach that path")
	}
	t.Logf("%d steps, %d walked the trie from the whole stack", steps, exact)
}
