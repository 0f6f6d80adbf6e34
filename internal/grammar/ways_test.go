package grammar

import (
	"fmt"
	"strings"
	"testing"
)

// diamondSchema is a chain of n $defs, each an anyOf of two references to
// the next, ending in the constant 1: 2^n ways from the root to the 1,
// none of which writes a byte before it.
func diamondSchema(n int) string {
	var b strings.Builder
	b.WriteString(`{"$ref":"#/$defs/d0","$defs":{`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"const":1}}}`, n)
	return b.String()
}

// TestStepMergesWaysToTheSameRule: a byte's step expands each (position,
// stack below) once, however many ways lead to it. Way by way, n = 24
// cost 134 million units for the first byte (seconds of the step every
// tenant shares) and n = 40 days; a 2 KB schema did it.
func TestStepMergesWaysToTheSameRule(t *testing.T) {
	v := testVocab()
	one := tokenOf(t, v, "1")
	for _, n := range []int{20, 60} {
		g, err := CompileSchema([]byte(diamondSchema(n)))
		if err != nil {
			t.Fatal(err)
		}
		c := Bind(g, v)
		m := c.NewMatcher()
		ok, done, used := m.CheckWithin(one, 1<<30)
		if !ok || !done {
			t.Fatalf("n=%d: \"1\" refused (ok %v, done %v)", n, ok, done)
		}
		if used > 40*n+1000 {
			t.Fatalf("n=%d: the first byte cost %d units; the ways to the same rule were not merged", n, used)
		}
		dst := make([]uint64, v.Words())
		j := m.MaskJob(dst)
		if units, done := j.Run(1 << 30); !done || j.Over() || units > 1<<16 {
			t.Fatalf("n=%d: mask done %v over %v after %d units", n, done, j.Over(), units)
		}
		if dst[one>>6]&(1<<(one&63)) == 0 {
			t.Fatalf("n=%d: the mask leaves out \"1\"", n)
		}
		if err := m.Accept(one); err != nil || !m.CanEnd() {
			t.Fatalf("n=%d: accept: %v, can end %v", n, err, m.CanEnd())
		}
	}
}

// TestByteWorkBounded: a byte whose step passes maxByteWork counts as
// over, as past MaxStacks: the token is refused, not followed at any cost.
func TestByteWorkBounded(t *testing.T) {
	defer func(n int) { maxByteWork = n }(maxByteWork)
	var b strings.Builder
	b.WriteString(`{"anyOf":[`)
	for i := range 400 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"const":"%d"}`, i)
	}
	b.WriteString(`]}`)
	g, err := CompileSchema([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	q := tokenOf(t, v, `"`)
	if ok, _, used := Bind(g, v).NewMatcher().CheckWithin(q, 1<<30); !ok || used < 400 {
		t.Fatalf("unbounded: %q allowed %v after %d units", `"`, ok, used)
	}
	maxByteWork = 300
	m := Bind(g, v).NewMatcher()
	if ok, done, used := m.CheckWithin(q, 1<<30); ok || !done || used > 4*maxByteWork {
		t.Fatalf("bounded at %d: allowed %v done %v after %d units", maxByteWork, ok, done, used)
	}
	if err := m.Accept(q); err == nil || err.(*Error).Code != "grammar_ambiguous" {
		t.Fatalf("accept past the bound: %v, want grammar_ambiguous", err)
	}
}

// tokenOf is the id of the token whose piece is p.
func tokenOf(t testing.TB, v *Vocab, p string) int32 {
	t.Helper()
	for id := range int32(v.Size()) {
		if v.Piece(id) == p {
			return id
		}
	}
	t.Fatalf("no token %q", p)
	return -1
}

// Near MaxByteWork the mask refuses exactly what a token's check refuses,
// so a token drawn from the mask is never refused by its Accept
// (grammar_ambiguous). Two ways they parted, each with a schema that
// showed it: a check builds its frames afresh where a mask's walk shares
// them, and a memo keyed by frame address merged fewer ways in the check
// (10,832 units for the '"' after "a" in the first schema against the
// walk's 8,498); and a mask of one stack at a time bounded each stack's
// step alone where the check steps them all at once (the second schema
// after "a": 25 stacks over three branches). For bounds from 20 to 20,000
// units (10% apart), along an output, every token's mask bit equals its
// check.
func TestMaskRefusesWhatCheckRefusesNearBound(t *testing.T) {
	defer func(n int) { maxByteWork = n }(maxByteWork)
	v := NewVocab([]string{"", `"`, `"a`, `"a"`, `a`, `a"`, `b`, `b"`, `ab`, `aa`, `"ab`, `ba`, `a9`, `a90`, `9`}, func(id int32) bool { return id == 0 })
	for _, schema := range []string{
		fmt.Sprintf(`{"type":"string","pattern":%q}`, "^"+nestedRepeat(6, "[ab]")+"b?$"),
		fmt.Sprintf(`{"anyOf":[{"type":"string","minLength":2,"maxLength":4},{"type":"string","pattern":%q},{"type":"string","pattern":%q}]}`,
			"^"+strings.Repeat(nestedRepeat(4, "[ab]"), 2)+"b?$", "^"+strings.Repeat(nestedRepeat(3, "a"), 2)+"b?$"),
	} {
		g, err := CompileSchema([]byte(schema))
		if err != nil {
			t.Fatal(err)
		}
		var refused int
		for bound := 20; bound < 20000; bound = bound*11/10 + 1 {
			maxByteWork = bound
			m := Bind(g, v).NewMatcher()
			mask := make([]uint64, v.Words())
			for _, next := range []string{`"`, `a`, `a`, `b`} {
				m.Mask(mask)
				for id := range int32(v.Size()) {
					ok := m.Clone().Allowed(id)
					if ok != has64(mask, id) {
						t.Fatalf("schema %s, bound %d, %d stacks: %q masked %v, checked %v", schema, bound, len(m.stacks), v.Piece(id), has64(mask, id), ok)
					}
					if !ok {
						refused++
					}
				}
				if !has64(mask, tokenOf(t, v, next)) {
					break
				}
				if err := m.Accept(tokenOf(t, v, next)); err != nil {
					t.Fatalf("schema %s, bound %d: accept %q: %v", schema, bound, next, err)
				}
			}
		}
		if refused == 0 {
			t.Fatalf("schema %s: no bound refused a token", schema)
		}
	}
}
