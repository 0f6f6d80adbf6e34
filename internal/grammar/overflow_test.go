package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// wideAnyOf is an anyOf of n branches that all begin with the same bytes,
// so more than n parses are alive at once after the first: arrays of one
// const number, or objects with one const property.
func wideAnyOf(n int, objects bool) string {
	var br []string
	for i := 1; i <= n; i++ {
		if objects {
			br = append(br, fmt.Sprintf(`{"type":"object","properties":{"a":{"const":%d}},"required":["a"],"additionalProperties":false}`, i))
		} else {
			br = append(br, fmt.Sprintf(`{"type":"array","items":{"const":%d},"minItems":1,"maxItems":2}`, i))
		}
	}
	return `{"anyOf":[` + strings.Join(br, ",") + `]}`
}

// With hundreds of parses alive (a 300-way anyOf of arrays or objects:
// every branch starts with the same bytes), the
// mask is exact at every step (each token's bit is what Allowed says,
// the union of all stacks fed the token's bytes), every drawn token is
// accepted, and the outputs end and validate against the schema with an
// independent validator: the request is served.
func TestMaskExactWideAnyOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, schema := range []string{wideAnyOf(300, false), wideAnyOf(300, true)} {
		g, err := CompileSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		val := validator(t, json.RawMessage(schema))
		for vi, v := range []*Vocab{testVocab(), randVocab(rng, 2000)} {
			c := Bind(g, v)
			done := 0
			for range 4 {
				out, ok := walk(t, c, rng, 200)
				if !ok {
					continue
				}
				done++
				inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
				if err != nil {
					t.Fatalf("vocab %d: %q is not JSON: %v", vi, out, err)
				}
				if err := val.Validate(inst); err != nil {
					t.Fatalf("vocab %d: %q does not validate: %v", vi, out, err)
				}
			}
			if done == 0 {
				t.Fatalf("vocab %d %.40s: no output ended", vi, schema)
			}
		}
	}
}

// checkedWalk draws random tokens along a grammar, checking at every step
// that the mask (warm, and cold in random slices) is exactly Allowed for
// every token. It stops at the end of generation, after steps, or where
// the mask is empty, which it must then report as Over (too many parses,
// not a dead end of the schema). It returns the output, whether it ended,
// and how many steps' masks were union walks and refused a token for the
// bound.
func checkedWalk(t *testing.T, c *Compiled, rng *rand.Rand, steps int) (out string, ended bool, unions, overs int) {
	t.Helper()
	v := c.v
	m := c.NewMatcher()
	cold := Bind(c.g, v).NewMatcher()
	mask := make([]uint64, v.Words())
	sliced := make([]uint64, v.Words())
	var b strings.Builder
	for range steps {
		j := m.MaskJob(mask)
		if j.ph == phUnion {
			unions++
		}
		for done := false; !done; {
			_, done = j.Run(1 << 30)
		}
		if j.ph == phDone && j.uw == nil && j.i < len(m.stacks) {
			unions++ // switched to the union walk on the way
		}
		cj := cold.MaskJob(sliced)
		for done := false; !done; {
			_, done = cj.Run(1 + rng.IntN(500))
		}
		if j.Over() {
			overs++
		}
		var ids []int32
		for id := int32(0); id < int32(v.Size()); id++ {
			in := mask[id>>6]&(1<<(id&63)) != 0
			want := m.Allowed(id)
			if in != want {
				t.Fatalf("after %q: mask says %v for token %d (%q), Allowed %v", b.String(), in, id, v.Piece(id), want)
			}
			if c := sliced[id>>6]&(1<<(id&63)) != 0; c != want {
				t.Fatalf("after %q (cold, sliced): mask says %v for token %d (%q), Allowed %v", b.String(), c, id, v.Piece(id), want)
			}
			if in {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			if !j.Over() || !cj.Over() {
				t.Fatalf("after %q: no token allowed, and the mask does not say the bound refused them", b.String())
			}
			return b.String(), false, unions, overs
		}
		// Favour closing tokens so outputs end.
		id := ids[rng.IntN(len(ids))]
		for range 2 {
			if x := ids[rng.IntN(len(ids))]; x == 0 || strings.ContainsAny(v.Piece(x), "]}\"") {
				id = x
			}
		}
		if err := m.Accept(id); err != nil {
			t.Fatalf("after %q: Accept(%q) of a masked token: %v", b.String(), v.Piece(id), err)
		}
		if err := cold.Accept(id); err != nil {
			t.Fatal(err)
		}
		if m.Ended() {
			return b.String(), true, unions, overs
		}
		b.WriteString(v.Piece(id))
	}
	return b.String(), false, unions, overs
}

// constArrays is an anyOf of n one-element const arrays [lo], [lo+1], ...
func constArrays(lo, n int) []string {
	var br []string
	for i := lo; i < lo+n; i++ {
		br = append(br, fmt.Sprintf(`{"const":[%d]}`, i))
	}
	return br
}

// Past the stack bound the mask stays exact: a token that would keep
// more parses alive than the matcher follows is refused by the mask as
// Allowed and Accept refuse it, and a request with no other way on gets
// an empty mask that says so (the sampler's grammar_ambiguous). The bound
// is lowered to 64 so small schemas pass it in every way: an anyOf of
// more const arrays than the bound at the start, beside a string branch
// that stays possible, and under a property (one stack before the "[");
// after a token leaves a string (the bound passed after its closing
// quote, by the anyOf of the next property's value, from one stack whose
// own rule sees no more than one parse, or from two stacks, each below
// the bound), and the union of two stacks that
// each stay below it (two anyOf of 40
// numbers all starting with "1", after the "[" both arrays share).
// Outputs that end are validated. (belowEscapes covers the third way.)
func TestMaskExactPastMaxStacks(t *testing.T) {
	defer func(n int) { maxStacks = n }(maxStacks)
	maxStacks = 64
	cases := []struct {
		name, schema string
		// wantOver: some step refuses a token for the bound;
		// wantUnion: some step's mask is a union walk.
		wantOver, wantUnion, mustEnd bool
	}{
		{"wide-start", `{"anyOf":[` + strings.Join(constArrays(1, 100), ",") + `]}`, true, false, false},
		{"wide-or-string", `{"anyOf":[{"type":"string","maxLength":3},` + strings.Join(constArrays(1, 100), ",") + `]}`, true, false, true},
		{"wide-inside", `{"type":"object","properties":{"x":{"anyOf":[` + strings.Join(constArrays(1, 100), ",") + `]},"y":{"type":"boolean"}},"additionalProperties":false}`, true, false, true},
		{"after-string", `{"type":"object","properties":{"s":{"type":"string","maxLength":2},"y":{"anyOf":[` + strings.Join(constArrays(1, 100), ",") + `]}},"required":["s","y"],"additionalProperties":false}`, true, false, false},
		{"two-after-string", `{"anyOf":[` + objS(1) + "," + objS(1000) + `]}`, true, false, false},
		{"union-of-two", `{"anyOf":[{"type":"array","items":{"anyOf":[` + constNums(1000, 40) + `]},"maxItems":1},{"type":"array","items":{"anyOf":[` + constNums(10000, 40) + `]},"maxItems":1},{"type":"array","items":{"type":"boolean"},"maxItems":2}]}`, true, true, true},
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompileSchema([]byte(tc.schema))
			if err != nil {
				t.Fatal(err)
			}
			val := validator(t, json.RawMessage(tc.schema))
			vocabs := []*Vocab{testVocab(), randVocab(rng, 2500), extraVocab("[", "[[", "[1", "[10", "[100", "[1000", "1000", "10000", "aa", "aaa", "aaaa", "aab", "ab", "abc", "ac", `"a`, `"aa`, `c"`, `bc"`, `{"x":`, `{"x":[`, `","y":[`, `a","y":[`, `{"s":"`, `","y":`)}
			unions, overs, ended := 0, 0, 0
			for _, v := range vocabs {
				c := Bind(g, v)
				for range 6 {
					out, ok, u, o := checkedWalk(t, c, rng, 80)
					unions += u
					overs += o
					if !ok {
						continue
					}
					ended++
					inst, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
					if err != nil {
						t.Fatalf("%q is not JSON: %v", out, err)
					}
					if err := val.Validate(inst); err != nil {
						t.Fatalf("%q does not validate: %v", out, err)
					}
				}
			}
			if tc.wantOver && overs == 0 {
				t.Error("no mask refused a token for the bound: the case does not reach it")
			}
			if tc.wantUnion && unions == 0 {
				t.Error("no mask was a union walk: the case does not reach it")
			}
			if tc.mustEnd && ended == 0 {
				t.Error("no output ended")
			}
			t.Logf("%d union walks, %d masks refused tokens for the bound, %d outputs ended", unions, overs, ended)
		})
	}
}

// objS is an object of a short string "s" then "y", an anyOf of 40
// const arrays from lo.
func objS(lo int) string {
	return `{"type":"object","properties":{"s":{"type":"string","maxLength":2},"y":{"anyOf":[` + strings.Join(constArrays(lo, 40), ",") + `]}},"required":["s","y"],"additionalProperties":false}`
}

// constNums is n anyOf branches {"const":lo}, {"const":lo+1}, ...
func constNums(lo, n int) string {
	var s []string
	for i := lo; i < lo+n; i++ {
		s = append(s, fmt.Sprintf(`{"const":%d}`, i))
	}
	return strings.Join(s, ",")
}

// extraVocab is testVocab with more pieces.
func extraVocab(extra ...string) *Vocab {
	v := testVocab()
	pieces := append([]string(nil), v.pieces...)
	return NewVocab(append(pieces, extra...), func(id int32) bool { return id == 0 })
}

func seqNums(lo, n int) string {
	var s []string
	for i := lo; i < lo+n; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return strings.Join(s, ",")
}

// The third way past the bound: a stack whose top rule both goes on and
// ends on the same byte, where the frames below take that byte too and
// fan out: (a|b)* then one of 70 alternatives "a" + another byte. After
// "b" the matcher holds the one stack [(a|b)* | rest]; from its own rule
// "a" goes on, but on the real stack "a" also starts the 70 alternatives
// below: 71 parses, past a bound of 64, so Allowed refuses "a" and the
// mask must too (the per-stack mask from the position's cache alone would
// allow it). The grammar is built directly: the schema compiler factors
// such alternatives into one.
func TestMaskExactBelowEscapes(t *testing.T) {
	defer func(n int) { maxStacks = n }(maxStacks)
	maxStacks = 64
	b := newBuilder(1 << 20)
	var ab byteSet
	ab.add('a')
	ab.add('b')
	loop := b.star([]item{b.class(ab)})
	var alts [][]item
	pieces := []string{"", "a", "b", "aa", "ab", "ba", "bb", "!"}
	for i := range 70 {
		c := byte('0' + i)
		alts = append(alts, []item{b.byteItem('a'), b.byteItem(c), b.byteItem('!')})
		pieces = append(pieces, string([]byte{'a', c}), string([]byte{'a', c, '!'}), string([]byte{'b', 'a', c}), string(c))
	}
	rest := b.rule(alts...)
	g, err := b.finish(b.rule([]item{loop, ref(rest)}))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(25, 26))
	unions, overs, ended := 0, 0, 0
	// With tokens "a0".."a~" the uncertain tokens' checks pass the bound
	// too; with only "a", "b", "!" and their pairs nothing but the frames
	// below tells that "a" passes it.
	for _, v := range []*Vocab{NewVocab(pieces, func(id int32) bool { return id == 0 }), NewVocab(pieces[:8], func(id int32) bool { return id == 0 })} {
		for range 6 {
			_, ok, u, o := checkedWalk(t, Bind(g, v), rng, 20)
			unions += u
			overs += o
			if ok {
				ended++
			}
		}
	}
	if unions == 0 || overs == 0 {
		t.Fatalf("%d union walks, %d masks refused tokens for the bound: the case does not reach them", unions, overs)
	}
	t.Logf("%d union walks, %d masks refused tokens for the bound, %d outputs ended", unions, overs, ended)
}

// A union walk that would pass its work bound stops there: its mask is
// empty and says the schema is at fault (Over), whether it runs at once
// or in slices; within the bound the same walk is the exact mask.
func TestMaskWorkBound(t *testing.T) {
	g, err := CompileSchema([]byte(wideAnyOf(300, true)))
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	var open int32 = -1
	for id := range int32(v.Size()) {
		if v.Piece(id) == "{" {
			open = id
		}
	}
	// After "{" the 300 branches are 300 stacks: a union walk.
	after := func() *Matcher {
		m := Bind(g, v).NewMatcher()
		if err := m.Accept(open); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := after()
	mask := make([]uint64, v.Words())
	j := m.MaskJob(mask)
	total := 0
	for done := false; !done; {
		u, d := j.Run(97)
		total, done = total+u, d
	}
	if j.Over() || j.work == 0 {
		t.Fatalf("the 300-way anyOf's first mask: over %v after %d units of union walk", j.Over(), j.work)
	}
	defer func(n int) { maxMaskWork = n }(maxMaskWork)
	maxMaskWork = j.work - 1
	for _, budget := range []int{1 << 30, 97} {
		j := after().MaskJob(mask)
		for done := false; !done; {
			_, done = j.Run(budget)
		}
		for _, w := range mask {
			if w != 0 {
				t.Fatalf("budget %d: a union walk past its work bound left tokens in the mask", budget)
			}
		}
		if !j.Over() {
			t.Fatalf("budget %d: a union walk past its work bound does not say so", budget)
		}
	}
}
