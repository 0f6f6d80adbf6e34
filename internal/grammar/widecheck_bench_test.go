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
// not a token's bytes. The schema is an anyOf of as many string patterns
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
