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
func patternMatcher(t *testing.T, v *Vocab, pattern string) *Matcher {
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
// token's check charges for the same step. It charged the stacks alone:
// in a pattern of nested repetitions a node's step of thousands of units
// passed as 2, and a mask's Run(256) took 50-60 ms of the shared step
// (Qwen2's vocabulary, 9 levels; the test vocabulary 30-55 ms at 8).
func TestWalkChargesItsSteps(t *testing.T) {
	v := testVocab()
	m := patternMatcher(t, v, "^"+nestedRepeat(8, "a")+"$")
	// The walk's first node is the root's first child; a check of a
	// token beginning with its byte steps the same stack by that byte
	// (CheckWithin with budget 1 steps one byte).
	b := v.nodes[1].b
	var id int32 = -1
	for i := range int32(v.Size()) {
		if p := v.Piece(i); p != "" && p[0] == b {
			id = i
			break
		}
	}
	if id < 0 {
		t.Fatalf("no token begins with %q", b)
	}
	_, _, check := m.Clone().CheckWithin(id, 1)
	if check < 1000 {
		t.Fatalf("the check of %q cost %d units: the case does not fan out", v.Piece(id), check)
	}
	j := m.MaskJob(make([]uint64, v.Words()))
	used, _ := j.Run(1) // one node: the cold position's walk, its first child
	if used < check/2 {
		t.Fatalf("the walk charged %d units for a node whose step a check charges %d", used, check)
	}
	t.Logf("first node: %d units (a check of its byte: %d)", used, check)
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

// TestByteStepBoundedInTime: one byte's step cannot be cut into slices,
// so MaxByteWork is what a byte may hold the shared step. Sixty string
// patterns of nine nested {0,2} groups (37 KB) make a byte none of them
// takes follow about 2 million ways, each a different stack below: at
// 2^21 the check of "z" took 1,954,980 units, 4.1 s of CPU (Intel Xeon
// family 6 model 167, load 25), and held 36 MB of memo while the
// request lived. (A byte that ends one of the patterns, "1" after the
// quote, is as costly and now refused too: the schema's fault, a 400.)
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
	ok, done, used := m.CheckWithin(tokenOf(t, v, "z"), 1)
	if ok || !done {
		t.Fatalf("%q: allowed %v done %v", "z", ok, done)
	}
	if used > 1<<17 {
		t.Fatalf("one byte's step did %d units (MaxByteWork %d)", used, MaxByteWork)
	}
	// The step's memo (27,745 pairs) is not kept while the request lives.
	for _, ss := range []*stackSet{&m.tmp[0], &m.tmp[1], &m.chk.sets[0], &m.chk.sets[1]} {
		if ss.visits != nil {
			t.Fatalf("a set keeps the step's memo of %d pairs", len(ss.visits))
		}
	}
	// The schema's other branch is untouched: an integer goes on.
	if ok, _, _ := Bind(g, v).NewMatcher().CheckWithin(tokenOf(t, v, "1"), 1<<30); !ok {
		t.Fatalf("%q refused at the start", "1")
	}
	t.Logf("%d units", used)
}
