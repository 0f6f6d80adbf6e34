package grammar

import (
	"fmt"
	"strings"
	"testing"
)

// nestedRepeat is a pattern of d nested {0,2} repetitions of inner: every
// group may match nothing, so one byte's step follows every way through
// the groups (2 per level, each with its own stack below) before it
// knows which consumes the byte.
func nestedRepeat(d int, inner string) string {
	return strings.Repeat("(", d) + inner + strings.Repeat("){0,2}", d)
}

// patternMatcher is a matcher of a string of pattern, after its opening
// quote.
func patternMatcher(t testing.TB, v *Vocab, pattern string) *Matcher {
	t.Helper()
	g, err := CompileSchema([]byte(fmt.Sprintf(`{"type":"string","pattern":%q}`, pattern)))
	if err != nil {
		t.Fatal(err)
	}
	m := Bind(g, v).NewMatcher()
	if err := m.Accept(tokenOf(t, v, `"`)); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWalkChargesItsSteps: a trie walk's node costs what its step did
// (stackSet.n: stacks stepped and alternatives looked at), the unit a
// token's check charges for the same step, and a node's step that does
// not fit the walk's budget stops inside and resumes. It charged the
// stacks alone: in a pattern of nested repetitions a node's step of
// thousands of units passed as 2, and a mask's Run(256) took 50-60 ms of
// the shared step (Qwen2's vocabulary, 9 levels; the test vocabulary
// 30-55 ms at 8); then it charged the step whole, after doing it (a
// byte of 8 levels is thousands of units, one slice of a mask).
func TestWalkChargesItsSteps(t *testing.T) {
	v := testVocab()
	m := patternMatcher(t, v, "^"+nestedRepeat(8, "a")+"$")
	// The walk's first node is the root's first child: the stack stepped
	// by its byte, as a check steps it.
	// The position's walk (a cold mask's first work) is from the stack
	// of its one frame.
	p := m.stacks[0].pos
	b := v.nodes[1].b
	var first stackSet
	m.c.g.begin([]*frame{newFrame(p, nil)}, b, &first)
	m.c.g.run(&first, 1<<30)
	if first.n < 1000 {
		t.Fatalf("the step by %q cost %d units: the case does not fan out", b, first.n)
	}
	w, _ := m.c.posWalk(p)
	units, runs := 0, 0
	for done := false; !done; runs++ {
		var used int
		used, done = w.run(1)
		// A slice passes its budget by at most one expansion: a
		// reference's alternatives (here two) and a trie node.
		if used > 8 {
			t.Fatalf("run %d of budget 1 did %d units: a node's step was not cut", runs, used)
		}
		units += used
		if runs > 1<<22 {
			t.Fatalf("%d runs of budget 1 and the walk is not done: a cut step does not resume", runs)
		}
	}
	if units < first.n {
		t.Fatalf("the walk charged %d units in all; its first node's step alone is %d", units, first.n)
	}
	t.Logf("first node's step: %d units; the walk %d units in %d runs of budget 1", first.n, units, runs)
}

// TestStepStopsPastMaxStacks: a step that has passed MaxStacks is refused
// whatever else it would add, so it stops there: a pattern twice as long
// behind the ways that pass the bound costs the same.
func TestStepStopsPastMaxStacks(t *testing.T) {
	v := testVocab()
	a := tokenOf(t, v, "a")
	group := nestedRepeat(9, "a")
	var used [2]int
	for i, k := range []int{5, 10} {
		m := patternMatcher(t, v, "^"+strings.Repeat(group, k)+"$")
		ok, done, u := m.CheckWithin(a, 1<<30)
		if ok || !done {
			t.Fatalf("%d groups: %q allowed %v done %v; want refused past MaxStacks", k, "a", ok, done)
		}
		if err := m.Accept(a); err == nil || err.(*Error).Code != "grammar_ambiguous" {
			t.Fatalf("%d groups: accept: %v, want grammar_ambiguous", k, err)
		}
		used[i] = u
	}
	if used[1] != used[0] {
		t.Fatalf("past MaxStacks the step went on: %d units for 5 groups, %d for 10", used[0], used[1])
	}
	t.Logf("%d units for 5 groups and 10", used[0])
}

// TestByteStepBoundedInTime: one byte's step is cut into slices (the
// work list of its pending ways), and MaxByteWork is what one byte's step
// may cost in all, a safety bound. Sixty string patterns of nine nested
// {0,2} groups (37 KB) make a byte none of them takes follow about 2
// million ways, each a different stack below: at 2^21 the check of "z"
// took 1,954,980 units, 4.1 s of CPU (Intel Xeon family 6 model 167,
// load 25), and held 36 MB of memo while the request lived. (A byte that
// ends one of the patterns, "1" after the quote, is as costly and now
// refused too: the schema's fault, a 400.)
func TestByteStepBoundedInTime(t *testing.T) {
	group := nestedRepeat(9, "a")
	var br []string
	for i := range 60 {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":%q}`, "^"+strings.Repeat(group, 9)+fmt.Sprintf("%d$", i)))
	}
	br = append(br, `{"type":"integer"}`)
	g, err := CompileSchema([]byte(`{"anyOf":[` + strings.Join(br, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	m := Bind(g, v).NewMatcher()
	if err := m.Accept(tokenOf(t, v, `"`)); err != nil {
		t.Fatal(err)
	}
	z := tokenOf(t, v, "z")
	used, slices := 0, 0
	for {
		ok, done, u := m.CheckWithin(z, 256)
		used += u
		slices++
		if u > 256+64 {
			t.Fatalf("slice %d of budget 256 did %d units", slices, u)
		}
		if done {
			if ok {
				t.Fatalf("%q allowed", "z")
			}
			break
		}
	}
	if used > 1<<17 {
		t.Fatalf("one byte's step did %d units (MaxByteWork %d)", used, MaxByteWork)
	}
	// The step's memo (27,745 pairs) is not kept while the request lives.
	for _, ss := range []*stackSet{&m.tmp.sets[0], &m.tmp.sets[1], &m.chk.f.sets[0], &m.chk.f.sets[1]} {
		if ss.visits != nil {
			t.Fatalf("a set keeps the step's memo of %d pairs", len(ss.visits))
		}
	}
	// The schema's other branch is untouched: an integer goes on.
	if ok, _, _ := Bind(g, v).NewMatcher().CheckWithin(tokenOf(t, v, "1"), 1<<30); !ok {
		t.Fatalf("%q refused at the start", "1")
	}
	t.Logf("%d units in %d slices", used, slices)
}
