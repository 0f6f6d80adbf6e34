package sample

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"sluice/internal/grammar"
)

// spent is a Budget of a fixed number of units that also sums what was
// spent from it.
type spent struct {
	left, total int
}

func (b *spent) Left() bool  { return b.left > 0 }
func (b *spent) Spend(n int) { b.left -= n; b.total += n }

// A hostile schema must not hold up the shared step through the drawn
// token's check. An anyOf of 500 string patterns keeps 500 parses alive
// inside the string, and logit_bias makes a 128-space token the draw at
// every step: checking it steps every parse by every byte (~384,000
// units, 100-250 ms of CPU on the scheduler goroutine before the check
// took the budget). Every grammar unit a SampleWithin (or Work) call
// does, the check's and the Accept's counted where the stacks are
// stepped (Matcher.CheckWork) and the mask's as spent, stays within the
// call's budget plus the free check allowance and one slice's overshoot;
// draws are pending until the check is done and then exactly Sample's,
// greedy and at temperature 1, and when the token comes from the mask.
func TestSampleWithinBoundsTheTokenCheck(t *testing.T) {
	const n = 500
	var br []string
	for i := range n {
		br = append(br, fmt.Sprintf(`{"type":"string","pattern":"^[a-z ]*%04d$"}`, i))
	}
	g, err := grammar.CompileSchema([]byte(`{"anyOf":[` + strings.Join(br, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	base := gpt2Vocab(t)
	pieces := make([]string, base.Size())
	for i := range pieces {
		pieces[i] = base.Piece(int32(i))
	}
	long := int32(len(pieces))
	pieces = append(pieces, strings.Repeat(" ", 128))
	v := grammar.NewVocab(pieces, func(id int32) bool { return id == 50256 })
	quote, brace := int32(-1), int32(-1)
	for i, p := range pieces {
		switch p {
		case `"`:
			quote = int32(i)
		case `{`:
			brace = int32(i)
		}
	}
	const budget = 2000
	// The most one call may pass its budget by: the free check units and
	// one slice, each passed by at most one byte's step of every stack.
	probe := grammar.Bind(g, v).NewMatcher()
	if err := probe.Accept(quote); err != nil {
		t.Fatal(err)
	}
	w := probe.CheckWork()
	if !probe.Allowed(long) {
		t.Fatal("128 spaces refused")
	}
	whole := probe.CheckWork() - w
	slack := freeCheckUnits + sliceUnits + 2*whole/128
	// Third: a refused "{" is the argmax, so the long token comes from
	// the mask (greedyAllowed) and is checked after it.
	for _, p := range []Params{{Seed: 1}, {Temperature: 1, Seed: 2}, {Seed: 3, LogitBias: []Bias{{ID: brace, Bias: 40}}}} {
		p.LogitBias = append(p.LogitBias, Bias{ID: long, Bias: 30})
		slices.SortFunc(p.LogitBias, func(a, b Bias) int { return int(a.ID - b.ID) })
		free, bounded := New(p), New(p)
		c := grammar.Bind(g, v)
		free.Constrain(c.NewMatcher())
		bounded.Constrain(c.NewMatcher())
		free.Observe(quote)
		bounded.Observe(quote)
		rng := rand.New(rand.NewPCG(p.Seed, 9))
		logits := make([]float32, v.Size())
		var a, b []int32
		calls, pendings, most := 0, 0, 0
		for range 6 {
			for i := range logits {
				logits[i] = float32(rng.NormFloat64())
			}
			want, err := free.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			a = append(a, want)
			for {
				bud := &spent{left: budget}
				w0 := bounded.m.CheckWork()
				got, pending, err := bounded.SampleWithin(logits, bud)
				if err != nil {
					t.Fatal(err)
				}
				// The mask's units are spent; the checks' are counted
				// where they are done (spent too when past the free
				// units, so the larger of the two sums bounds the call).
				work := max(bud.total, bounded.m.CheckWork()-w0)
				calls++
				most = max(most, work)
				if work > budget+slack {
					t.Fatalf("%+v: one call did %d grammar units, budget %d (+%d)", p, work, budget, slack)
				}
				if !pending {
					b = append(b, got)
					break
				}
				pendings++
				bud = &spent{left: budget}
				w0 = bounded.m.CheckWork()
				bounded.Work(bud)
				if work := max(bud.total, bounded.m.CheckWork()-w0); work > budget+slack {
					t.Fatalf("%+v: one Work call did %d grammar units, budget %d (+%d)", p, work, budget, slack)
				}
			}
		}
		if !slices.Equal(a, b) {
			t.Fatalf("%+v: bounded sampler drew %v, unbounded %v", p, b, a)
		}
		if !slices.Contains(a, long) {
			t.Fatalf("%+v: the 128-space token was never drawn (%v): the test does not reach the costly check", p, a)
		}
		if pendings == 0 {
			t.Fatalf("%+v: no draw was pending", p)
		}
		t.Logf("%+v: %d tokens, %d calls, %d pending; most grammar units in one call %d (a whole check %d)", p, len(a), calls, pendings, most, whole)
	}
}
