package grammar

import (
	"math/rand/v2"
	"testing"
)

// The checks a matcher remembers at a position (CheckWithin's memo, the
// check cut short and resumed) never change an answer: sliced checks of
// random tokens with random budgets, interleaved, answer what a matcher
// that never checked anything (a fresh clone's Allowed) answers, a token
// is accepted exactly when that matcher accepts it, and after every
// Accept both follow the same stacks. So a stale check (from an earlier
// position, or a check cut short for another token) can never let a
// refused token through. Over the schema corpus and testVocab.
func TestRememberedChecksNeverChangeAnAnswer(t *testing.T) {
	v := testVocab()
	n := int32(v.Size())
	positions := 0
	defer func() { t.Logf("%d positions", positions) }()
	for ci, e := range loadCorpus(t) {
		g, err := CompileSchema(e.Schema)
		if err != nil {
			continue
		}
		c := Bind(g, v)
		rng := rand.New(rand.NewPCG(uint64(ci), 7))
		m := c.NewMatcher()
		for pos := 0; pos < 40 && !m.Ended(); pos++ {
			ref := m.Clone() // no memo, nothing pending
			positions++
			for range 12 {
				id := rng.Int32N(n)
				var ok, done bool
				for calls := 0; !done; calls++ {
					ok, done, _ = m.CheckWithin(id, rng.IntN(4))
					if calls > 10000 {
						t.Fatalf("%s: check of %d never ends", e.Name, id)
					}
					if !done && calls == 0 && rng.IntN(3) == 0 {
						// Another token's check in between (once: the
						// check cut short starts over, and a check cut
						// every few units would never end).
						o := rng.Int32N(n)
						if got, want := m.Allowed(o), ref.Clone().Allowed(o); got != want {
							t.Fatalf("%s pos %d: token %d (%q) %v, a fresh matcher %v", e.Name, pos, o, v.Piece(o), got, want)
						}
					}
				}
				if want := ref.Clone().Allowed(id); ok != want {
					t.Fatalf("%s pos %d: token %d (%q) %v, a fresh matcher %v", e.Name, pos, id, v.Piece(id), ok, want)
				}
			}
			// Accept a random token: refused ones must be refused by both.
			var take int32 = -1
			for range 50 {
				id := rng.Int32N(n)
				errR := ref.Clone().Accept(id)
				if mOK := m.Allowed(id); mOK != (errR == nil) {
					t.Fatalf("%s pos %d: token %d checked %v, a fresh Accept %v", e.Name, pos, id, mOK, errR)
				}
				if errR == nil && !v.isEOG(id) {
					take = id
					break
				}
			}
			if take < 0 {
				break
			}
			before := m.Clone()
			// A check cut short at the old position, resumed after the
			// move, must start over.
			// (a token of several bytes allowed there, when one is found:
			// resumed from the old stacks it would pass).
			cut := rng.Int32N(n)
			for range 40 {
				if id := rng.Int32N(n); len(v.Piece(id)) > 1 && before.Clone().Allowed(id) {
					cut = id
					break
				}
			}
			m.CheckWithin(cut, 1)
			if err := m.Accept(take); err != nil {
				t.Fatalf("%s pos %d: Accept %d: %v", e.Name, pos, take, err)
			}
			if err := ref.Accept(take); err != nil {
				t.Fatal(err)
			}
			if len(m.stacks) != len(ref.stacks) {
				t.Fatalf("%s pos %d: %d stacks, a fresh matcher %d", e.Name, pos, len(m.stacks), len(ref.stacks))
			}
			for i := range m.stacks {
				if !sameStack(m.stacks[i], ref.stacks[i]) {
					t.Fatalf("%s pos %d: stack %d differs from a fresh matcher's", e.Name, pos, i)
				}
			}
			var okCut, done bool
			for !done {
				okCut, done, _ = m.CheckWithin(cut, 1)
			}
			if want := ref.Clone().Allowed(cut); okCut != want {
				t.Fatalf("%s pos %d: token %d (%q) cut short before the move: %v, a fresh matcher %v", e.Name, pos, cut, v.Piece(cut), okCut, want)
			}
			// A refused token stays refused after the move (no memo of
			// the old position answers).
			for range 8 {
				id := rng.Int32N(n)
				if before.Allowed(id) && !ref.Clone().Allowed(id) {
					if m.Accept(id) == nil {
						t.Fatalf("%s pos %d: token %d allowed at the previous position accepted here", e.Name, pos, id)
					}
				}
			}
		}
	}
}
