package grammar

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkCheckWideStacks measures the one piece of constrained-decoding
// work the step's grammar budget does not bound: checking the drawn token
// (Allowed) and feeding it (Accept). Both step every stack the matcher
// follows through every byte of the token, so they cost stacks x bytes,
// not a token's bytes (the Accept of the token just checked takes the
// check's result, TestAcceptTakesTheCheck; a clone's, measured here, does
// not). The schema is an anyOf of as many string patterns
// as the stack bound allows (each "^[a-z ]*NNNN$": all alive through any
// run of letters and spaces), and the token is 128 spaces (Qwen2's
// vocabulary has one; a request's logit_bias can make it the draw every
// step). Compare ns/op with the step budget's GrammarFloor (250 us) and a
// decode step's time: the work runs on the scheduler goroutine every
// request in the batch shares. Reported: stack-bytes a check steps, and
// ns per stack-byte.
func BenchmarkCheckWideStacks(b *testing.B) {
	n := min(MaxStacks-6, 1000) // 1000: the schema compiler's anyOf bound
	var br []string
	for i := range n {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	g, err := CompileSchema([]byte(`{"anyOf":[` + strings.Join(br, ",") + `]}`))
	if err != nil {
		b.Fatal(err)
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
				b.Fatal(err)
			}
		}
	}
	if len(m.stacks) != n {
		b.Fatalf("%d stacks after the opening quote, want %d", len(m.stacks), n)
	}
	work := float64(n * 128)
	b.Run("Allowed", func(b *testing.B) {
		for b.Loop() {
			if !m.Allowed(long) {
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

// The Accept of the token a sampler just checked with Allowed takes the
// check's stack set instead of feeding the token again (one stacks x bytes
// pass a drawn token, not two), and only that: another token, a second
// Accept, or a refused token feed as before, and every state equals a
// matcher that never called Allowed.
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
	if m.fed-before != 2 {
		t.Fatalf("a refused check and its Accept: %d feeds, want 2", m.fed-before)
	}
	same("after a refused token")
	accept("digits", "00", "00", 1)
}
