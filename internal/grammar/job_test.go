package grammar

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/internal/tokenizer"
)

// repoVocab is a committed vocabulary (testdata/vocab) as the engine
// builds it: control tokens have no piece.
func repoVocab(t testing.TB, file string) *Vocab {
	t.Helper()
	tok, err := tokenizer.Load("../../testdata/vocab/" + file)
	if err != nil {
		t.Fatal(err)
	}
	pieces := make([]string, tok.Size())
	for i := range pieces {
		if !tok.IsControl(int32(i)) {
			pieces[i] = tok.TokenText(int32(i))
		}
	}
	return NewVocab(pieces, tok.IsEOG)
}

// A mask computed in slices of any size, resumed across calls, is the mask
// computed at once. Two grammars are bound separately so the sliced one
// meets every position cold (its walks are the ones cut into slices), on
// GPT-2's 50k vocabulary, along random outputs of corpus schemas.
func TestMaskJobSlicedEqualsWhole(t *testing.T) {
	v := repoVocab(t, "ggml-vocab-gpt-2.gguf")
	rng := rand.New(rand.NewPCG(9, 10))
	whole := make([]uint64, v.Words())
	sliced := make([]uint64, v.Words())
	for _, e := range loadCorpus(t) {
		switch e.Name {
		case "nested", "openai_weather", "format_datetime", "unbounded_strings", "openai_ui_recursive":
		default:
			continue
		}
		g, err := CompileSchema(e.Schema)
		if err != nil {
			t.Fatal(err)
		}
		ref, cut := Bind(g, v).NewMatcher(), Bind(g, v).NewMatcher()
		for step := 0; step < 30 && !ref.Ended(); step++ {
			ref.Mask(whole)
			j := cut.MaskJob(sliced)
			runs := 0
			for {
				budget := 1 + rng.IntN(400)
				used, done := j.Run(budget)
				runs++
				if done {
					break
				}
				if used < budget {
					t.Fatalf("%s step %d: a run stopped at %d of its budget %d without finishing", e.Name, step, used, budget)
				}
			}
			if !slices.Equal(whole, sliced) {
				t.Fatalf("%s step %d: the mask computed in %d slices differs from the whole one", e.Name, step, runs)
			}
			var ids []int32
			for w, x := range whole {
				for x != 0 {
					ids = append(ids, int32(w*64+bits.TrailingZeros64(x)))
					x &= x - 1
				}
			}
			id := ids[rng.IntN(len(ids))]
			if err := ref.Accept(id); err != nil {
				t.Fatal(err)
			}
			if err := cut.Accept(id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A cold mask on Qwen2's 151k vocabulary at a JSON string's character
// (nearly every token continues a string) is a long walk; a job given a
// small budget stops within it (plus one token's check) instead.
func TestMaskJobStopsAtBudget(t *testing.T) {
	v := repoVocab(t, "ggml-vocab-qwen2.gguf")
	g, err := CompileSchema([]byte(`{"type":"object","properties":{"s":{"type":"string"}},"required":["s"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	c := Bind(g, v)
	m := c.NewMatcher()
	for _, p := range []string{`{"`, `s`, `":"`} {
		fed := false
		for id := int32(0); id < int32(v.Size()); id++ {
			if v.Piece(id) == p && m.Allowed(id) {
				if err := m.Accept(id); err != nil {
					t.Fatal(err)
				}
				fed = true
				break
			}
		}
		if !fed {
			t.Fatalf("no token %q", p)
		}
	}
	dst := make([]uint64, v.Words())
	j := m.MaskJob(dst)
	total, runs := 0, 0
	for {
		used, done := j.Run(1000)
		if used > 1000+512 {
			t.Fatalf("a run of budget 1000 used %d units", used)
		}
		total += used
		runs++
		if done {
			break
		}
	}
	if runs < 50 {
		t.Fatalf("the cold string mask took %d units in %d runs; expected a long walk", total, runs)
	}
	n := 0
	for _, x := range dst {
		n += bits.OnesCount64(x)
	}
	if n < v.Size()/2 {
		t.Fatalf("%d tokens may continue a string of %d", n, v.Size())
	}
	t.Logf("cold string mask: %d units in %d runs, %d tokens allowed", total, runs, n)
}

// On a large vocabulary the mask is exact at every step: each token's bit
// is what Allowed (the matcher fed the token's bytes, no trie, no cache)
// says, including at the positions whose many uncertain tokens are
// settled by a trie walk from the whole stack restricted to them (near
// the end of a fixed-length string, where most tokens may close it).
// GPT-2's 50k vocabulary, outputs of bench-grammar's schema, overlapping
// anyOf strings and a nested corpus schema.
func TestMaskExactOnLargeVocab(t *testing.T) {
	v := repoVocab(t, "ggml-vocab-gpt-2.gguf")
	rng := rand.New(rand.NewPCG(5, 6))
	mask := make([]uint64, v.Words())
	schemas := []string{`{"type":"object","additionalProperties":false,"required":["items"],"properties":{"items":{"type":"array","minItems":3,"maxItems":3,"items":{"type":"string","minLength":24,"maxLength":24}}}}`,
		// Overlapping branches: several stacks alive at once inside the
		// string, so walks step sets of many stacks.
		`{"type":"array","items":{"anyOf":[{"type":"string","maxLength":12},{"type":"string","format":"email"},{"type":"string","pattern":"^[a-z ]+$"},{"type":"string","format":"hostname"}]},"maxItems":3}`}
	for _, e := range loadCorpus(t) {
		if e.Name == "nested" {
			schemas = append(schemas, string(e.Schema))
		}
	}
	exact := 0
	for _, schema := range schemas {
		g, err := CompileSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		c := Bind(g, v)
		m := c.NewMatcher()
		for step := 0; step < 40 && !m.Ended(); step++ {
			m.Mask(mask)
			for _, f := range m.stacks {
				if f != nil {
					if pm := c.cachedPos(f.pos); pm != nil && len(pm.uncertain) > maxUncertain {
						exact++
					}
				}
			}
			var ids []int32
			for id := int32(0); id < int32(v.Size()); id++ {
				in := mask[id>>6]&(1<<(id&63)) != 0
				if in != m.Allowed(id) {
					t.Fatalf("step %d: mask says %v for token %d (%q), Allowed the opposite", step, in, id, v.Piece(id))
				}
				if in {
					ids = append(ids, id)
				}
			}
			// Favour long tokens so strings reach their last characters.
			id := ids[rng.IntN(len(ids))]
			for range 3 {
				if x := ids[rng.IntN(len(ids))]; len(v.Piece(x)) > len(v.Piece(id)) {
					id = x
				}
			}
			if err := m.Accept(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if exact == 0 {
		t.Fatal("no step settled its uncertain tokens by a walk from the whole stack; the test does not reach that path")
	}
	t.Logf("%d steps walked the trie from the whole stack", exact)
}

// A walk whose state is a set of several stacks (overlapping anyOf
// branches, alive together inside one token) memoises its steps by the
// whole set: every token of a vocabulary of all 1-4 byte strings over a
// small alphabet gets the bit Allowed gives it, along random outputs.
func TestMaskManyStacks(t *testing.T) {
	alpha := []string{`"`, "a", "b", ".", "@", "]", ","}
	pieces := []string{"", "["}
	var grow func(p string, n int)
	grow = func(p string, n int) {
		if n == 0 {
			return
		}
		for _, c := range alpha {
			pieces = append(pieces, p+c)
			grow(p+c, n-1)
		}
	}
	grow("", 4)
	v := NewVocab(pieces, func(id int32) bool { return id == 0 })
	g, err := CompileSchema([]byte(`{"type":"array","items":{"anyOf":[{"type":"string","maxLength":1},{"type":"string","format":"email"},{"type":"string","pattern":"^[ab.]+$"},{"type":"string","format":"hostname"}]},"maxItems":4}`))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	mask := make([]uint64, v.Words())
	for run := range 30 {
		c := Bind(g, v) // cold each run: every mask is walked
		m := c.NewMatcher()
		for step := 0; step < 30 && !m.Ended(); step++ {
			m.Mask(mask)
			var ids []int32
			for id := int32(0); id < int32(v.Size()); id++ {
				in := mask[id>>6]&(1<<(id&63)) != 0
				if in != m.Allowed(id) {
					t.Fatalf("run %d step %d: mask says %v for %q, Allowed the opposite", run, step, in, v.Piece(id))
				}
				if in {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				t.Fatalf("run %d step %d: nothing allowed", run, step)
			}
			if err := m.Accept(ids[rng.IntN(len(ids))]); err != nil {
				t.Fatal(err)
			}
		}
	}
}
