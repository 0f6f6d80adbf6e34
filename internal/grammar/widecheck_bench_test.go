package grammar

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkCheckWideStacks measures checking a token (Allowed) and feeding
// it (Accept) at many stacks. Both step every stack the matcher follows
// through every byte of the token, so they cost stacks x bytes, not a
// token's bytes (the Accept of the token just checked takes the check's
// result, TestAcceptTakesTheCheck; a clone's, measured here, does not).
// A worker runs the check within the step's grammar budget
// (CheckWithin, TestCheckWithinSlices, and in the sampler
// TestSampleWithinBoundsTheTokenCheck); this is what one unbounded check
// would cost. The schema is an anyOf of as many string patterns
// as the stack bound allows (each "^[a-z ]*NNNN$": all alive through any
// run of letters and spaces), and the token is 128 spaces (Qwen2's
// vocabulary has one; a request's logit_bias can make it the draw every
// step). Compare ns/op with the step budget's GrammarFloor (250 us) and a
// decode step's time: the work runs on the scheduler goroutine every
// request in the batch shares. Reported: stack-bytes a check steps, and
// ns per stack-byte.
func BenchmarkCheckWideStacks(b *testing.B) {
	n := min(MaxStacks-6, 1000) // 1000: the schema compiler's anyOf bound
	m, long := wideMatcher(b, n)
	work := float64(n * 128)
	b.Run("Allowed", func(b *testing.B) {
		for b.Loop() {
			// A clone: the matcher remembers the checks at its position.
			if !m.Clone().Allowed(long) {
				b.Fatal("128 spaces refused")
			}
		}
		b.ReportMetric(work, "stack-bytes")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/work, "ns/stack-byte")
	})
	b.Run("Accept", func(b *testing.B) {
		for b.Loop() {
			if err := m.Clone().Accept(long); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(work, "stack-bytes")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/work, "ns/stack-byte")
	})
}

// The Accept of a token checked at this position (Allowed) takes the
// check's stack set, or its refusal, instead of feeding the token again
// (one stacks x bytes pass a drawn token, not two), and only that: a
// token not checked here, or checked before the matcher moved on, feeds
// as before, and every state equals a matcher that never called Allowed.
func TestAcceptTakesTheCheck(t *testing.T) {
	var br []string
	for i := range 40 {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	g, err := CompileSchema([]byte(`{"anyOf":[` + strings.Join(br, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	v := testVocab()
	c := Bind(g, v)
	id := func(p string) int32 {
		for i := range int32(v.Size()) {
			if v.Piece(i) == p {
				return i
			}
		}
		t.Fatalf("no piece %q", p)
		return -1
	}
	m, ref := c.NewMatcher(), c.NewMatcher()
	same := func(step string) {
		t.Helper()
		if len(m.stacks) != len(ref.stacks) {
			t.Fatalf("%s: %d stacks, want %d", step, len(m.stacks), len(ref.stacks))
		}
		for i := range m.stacks {
			if !sameStack(m.stacks[i], ref.stacks[i]) {
				t.Fatalf("%s: stack %d differs from a matcher that never checked", step, i)
			}
		}
	}
	accept := func(step string, check, tok string, wantFeeds int) {
		t.Helper()
		before := m.fed
		if check != "" && !m.Allowed(id(check)) {
			t.Fatalf("%s: %q refused", step, check)
		}
		if err := m.Accept(id(tok)); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if err := ref.Accept(id(tok)); err != nil {
			t.Fatal(err)
		}
		if got := m.fed - before; got != wantFeeds {
			t.Fatalf("%s: %d feeds, want %d", step, got, wantFeeds)
		}
		same(step)
	}
	accept("open quote, checked", `"`, `"`, 1)
	if len(m.stacks) != 40 {
		t.Fatalf("%d stacks after the quote, want 40", len(m.stacks))
	}
	accept("checked, then accepted", "hello", "hello", 1)
	accept("checked another", "abc", "the", 2)
	accept("no check since the last accept", "", "abc", 1)
	if !m.Allowed(id("the")) {
		t.Fatal("the refused")
	}
	accept("checked before, accepted", "", "the", 0)
	accept("again, without a new check", "", "the", 1)
	before := m.fed
	if m.Allowed(id("{")) {
		t.Fatal("{ allowed in a [a-z ]* string")
	}
	if err := m.Accept(id("{")); err == nil {
		t.Fatal("{ accepted")
	}
	if m.fed-before != 1 {
		t.Fatalf("a refused check and its Accept: %d feeds, want 1", m.fed-before)
	}
	same("after a refused token")
	accept("digits", "00", "00", 1)
}

// wideMatcher is a matcher of an anyOf of n string patterns (all alive
// through any run of letters and spaces) after the opening quote, over
// testVocab plus a 128-space token (returned): n stacks, and a check of
// that token steps each of them by 128 bytes.
func wideMatcher(t testing.TB, n int) (*Matcher, int32) {
	t.Helper()
	var br []string
	for i := range n {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	g, err := CompileSchema([]byte(`{"anyOf":[` + strings.Join(br, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	base := testVocab()
	pieces := make([]string, base.Size())
	for i := range pieces {
		pieces[i] = base.Piece(int32(i))
	}
	long := int32(len(pieces))
	pieces = append(pieces, strings.Repeat(" ", 128))
	v := NewVocab(pieces, func(id int32) bool { return id == 0 })
	m := Bind(g, v).NewMatcher()
	for i := range int32(v.Size()) {
		if v.Piece(i) == `"` {
			if err := m.Accept(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(m.stacks) != n {
		t.Fatalf("%d stacks after the opening quote, want %d", len(m.stacks), n)
	}
	return m, long
}

// A token's check runs in slices of bounded work (CheckWithin): each
// slice does at most its budget plus one expansion (a reference's
// alternatives; a byte's step is cut too), the
// slices together do the work of one whole check, a slice cut short
// resumes where it stopped (another token's check in between drops it),
// the answers are Allowed's, and the Accept of the checked
// token does no work. Here a check is 500 stacks x 128 bytes, about
// 128,000 units; unsliced, it held every tenant's step for 100-250 ms.
func TestCheckWithinSlices(t *testing.T) {
	const n = 500
	m, long := wideMatcher(t, n)
	ref := m.Clone()
	w0 := ref.work
	if !ref.Allowed(long) {
		t.Fatal("128 spaces refused")
	}
	whole := ref.work - w0
	if whole < n*128 {
		t.Fatalf("a whole check did %d units, want at least stacks x bytes = %d", whole, n*128)
	}
	// One expansion: the most a slice passes its budget by.
	step := 1 + maxAlts(m.c.g)
	const budget = 1000
	var calls, sum int
	for {
		ok, done, used := m.CheckWithin(long, budget)
		calls++
		sum += used
		if used > budget+step {
			t.Fatalf("slice %d did %d units, budget %d (+ one expansion %d)", calls, used, budget, step)
		}
		if done {
			if !ok {
				t.Fatal("128 spaces refused in slices")
			}
			break
		}
		if id, ok := m.CheckPending(); !ok || id != long {
			t.Fatalf("pending check %d %v, want %d", id, ok, long)
		}
		if calls > whole/budget+2 {
			t.Fatalf("%d slices for a check of %d units: the check does not resume", calls, whole)
		}
	}
	if calls < whole/(budget+step) {
		t.Fatalf("%d slices for %d units at %d a slice", calls, whole, budget)
	}
	if sum != whole {
		t.Fatalf("slices did %d units in all, one whole check %d", sum, whole)
	}
	if _, done, used := m.CheckWithin(long, 0); !done || used != 0 {
		t.Fatalf("a finished check asked again: done %v, %d units", done, used)
	}
	// Cut short, then another token checked: the long check starts over.
	x := ref.Clone()
	if _, done, _ := x.CheckWithin(long, budget); done {
		t.Fatal("a check of 128,000 units done within 1,000")
	}
	if x.Allowed(long-1) != ref.Clone().Allowed(long-1) {
		t.Fatal("the other token's answer differs")
	}
	if _, ok := x.CheckPending(); ok {
		t.Fatal("the long check still pending after another token's check")
	}
	if ok, _, used := x.CheckWithin(long, 1<<30); !ok || used != whole {
		t.Fatalf("the long check again: %v, %d units, want a whole check's %d", ok, used, whole)
	}
	w := m.work
	if err := m.Accept(long); err != nil {
		t.Fatal(err)
	}
	if m.work != w {
		t.Fatalf("the Accept of the checked token did %d units", m.work-w)
	}
	if err := ref.Accept(long); err != nil {
		t.Fatal(err)
	}
	if len(m.stacks) != len(ref.stacks) {
		t.Fatalf("%d stacks after the sliced check, %d after a whole one", len(m.stacks), len(ref.stacks))
	}
	for i := range m.stacks {
		if !sameStack(m.stacks[i], ref.stacks[i]) {
			t.Fatalf("stack %d differs after a sliced check", i)
		}
	}
	t.Logf("%d units a whole check; %d slices of %d", whole, calls, budget)
}

// maxAlts is the most alternatives a rule of g has: a reference's
// expansion looks at each, the most work a step does between two looks
// at its budget.
func maxAlts(g *Grammar) int {
	n := 0
	for _, r := range g.rules {
		n = max(n, len(r))
	}
	return n
}

// BenchmarkUnionWalk is the time of a grammar work unit in the costliest
// mask, the union walk (MaxMaskWork's unit), on Qwen2's 151k vocabulary:
// the first mask inside a 300-way anyOf of objects (after "{") and inside
// a 500-way anyOf of string patterns (after the opening quote), each a
// whole walk, from a cold matcher every time. Reported: units a walk and
// ns a unit.
func BenchmarkUnionWalk(b *testing.B) {
	v := repoVocab(b, "ggml-vocab-qwen2.gguf")
	var br []string
	for i := range 500 {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	for _, c := range []struct{ name, schema, open string }{
		{"anyOf300objects", wideAnyOf(300, true), "{"},
		{"anyOf500patterns", `{"anyOf":[` + strings.Join(br, ",") + `]}`, `"`},
	} {
		g, err := CompileSchema([]byte(c.schema))
		if err != nil {
			b.Fatal(err)
		}
		var open int32 = -1
		for id := range int32(v.Size()) {
			if v.Piece(id) == c.open {
				open = id
			}
		}
		b.Run(c.name, func(b *testing.B) {
			mask := make([]uint64, v.Words())
			units := 0
			for b.Loop() {
				m := Bind(g, v).NewMatcher()
				if err := m.Accept(open); err != nil {
					b.Fatal(err)
				}
				j := m.MaskJob(mask)
				for done := false; !done; {
					var u int
					u, done = j.Run(1 << 30)
					units += u
				}
				if j.Over() {
					b.Fatal("the walk passed MaxMaskWork")
				}
			}
			b.ReportMetric(float64(units)/float64(b.N), "units")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(units), "ns/unit")
		})
	}
}

// A mask's work units count the stacks its trie walks step, not only the
// trie nodes: from the position before a 500-way anyOf of string
// patterns, the opening quote's node is 500 stacks, and every node below
// it steps them all. The units a MaskJob reports, slice by slice, are at
// least the stacks its walks stepped (walkStep.work), so the step's
// grammar budget sees what the walk costs.
func TestMaskUnitsCountFanOut(t *testing.T) {
	m, _ := wideMatcher(t, 500)
	start := Bind(m.c.g, m.c.v).NewMatcher() // cold: no cached position masks
	if len(start.stacks) != 1 {
		t.Fatalf("%d stacks at the start, want 1", len(start.stacks))
	}
	mask := make([]uint64, m.c.v.Words())
	j := start.MaskJob(mask)
	walks := func() []*trieWalk { return []*trieWalk{j.pw, j.xw, j.uw} }
	seen := map[*walkStep]int{} // the work each walk's stepper did
	units := 0
	for done := false; !done; {
		var u int
		u, done = j.Run(50)
		units += u
		for _, w := range walks() {
			if w != nil {
				seen[w.ws] = w.ws.work
			}
		}
	}
	stepped := 0
	for _, n := range seen {
		stepped += n
	}
	if stepped < 500 {
		t.Fatalf("the walks stepped %d stacks: the case does not fan out", stepped)
	}
	if units < stepped {
		t.Fatalf("the mask reported %d units for walks that stepped %d stacks", units, stepped)
	}
	t.Logf("%d units reported, %d stacks stepped by %d walks", units, stepped, len(seen))
}

// BenchmarkNestedByteStep is the time of a grammar work unit in one
// byte's step through nested repetitions (red team 10's case: a string
// pattern of six groups of nine nested {0,2} repetitions; "z", which none
// of them takes, follows every way through them, about 22,000 units), at
// once and cut into slices of 256 units (sample's slice) resumed until
// done: what the work list that makes the step resumable costs. Reported:
// units a check and ns a unit.
func BenchmarkNestedByteStep(b *testing.B) {
	v := testVocab()
	m := patternMatcher(b, v, "^"+strings.Repeat(nestedRepeat(9, "a"), 6)+"$")
	var z int32 = -1
	for id := range int32(v.Size()) {
		if v.Piece(id) == "z" {
			z = id
		}
	}
	for _, c := range []struct {
		name   string
		budget int
	}{{"whole", 1 << 30}, {"slices256", 256}} {
		b.Run(c.name, func(b *testing.B) {
			units := 0
			for b.Loop() {
				x := m.Clone() // no remembered check
				for done := false; !done; {
					var u int
					_, done, u = x.CheckWithin(z, c.budget)
					units += u
				}
			}
			b.ReportMetric(float64(units)/float64(b.N), "units")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(units), "ns/unit")
		})
	}
}
