package sample

import (
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/internal/grammar"
	"sluice/internal/tokenizer"
)

// units is a Budget of a fixed number of grammar work units.
type units int

func (u *units) Left() bool   { return *u > 0 }
func (u *units) Spend(n int)  { *u -= units(n) }
func (u *units) refill(n int) { *u = units(n) }
func gpt2Vocab(t testing.TB) *grammar.Vocab {
	tok, err := tokenizer.Load("../../testdata/vocab/ggml-vocab-gpt-2.gguf")
	if err != nil {
		t.Fatal(err)
	}
	pieces := make([]string, tok.Size())
	for i := range pieces {
		if !tok.IsControl(int32(i)) {
			pieces[i] = tok.TokenText(int32(i))
		}
	}
	return grammar.NewVocab(pieces, tok.IsEOG)
}

// SampleWithin draws exactly what Sample draws, whatever its budget: a
// draw whose mask the budget cannot finish reports pending and changes
// nothing but the mask work done, and is called again with the same
// logits. Flat random logits over GPT-2's 50k vocabulary make most draws
// refused, so most tokens need a mask, each grammar is bound twice so the
// bounded sampler meets every position cold, and the budgets are small
// enough that cold masks take many calls.
func TestSampleWithinDrawsWhatSampleDraws(t *testing.T) {
	v := gpt2Vocab(t)
	g, err := grammar.CompileSchema([]byte(`{"type":"object","properties":{"name":{"type":"string","maxLength":12},"n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","bb","ccc"]},"maxItems":3}},"required":["name","n","tags"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Params{{Temperature: 1, Seed: 7}, {Temperature: 0.7, TopK: 40, Seed: 8}, {}} {
		free, bounded := New(p), New(p)
		free.Constrain(grammar.Bind(g, v).NewMatcher())
		bounded.Constrain(grammar.Bind(g, v).NewMatcher())
		rng := rand.New(rand.NewPCG(p.Seed, 1))
		logits := make([]float32, v.Size())
		var a, b []int32
		pendings := 0
		var budget units
		for range 60 {
			for i := range logits {
				logits[i] = float32(rng.NormFloat64())
			}
			want, err := free.Sample(logits)
			if err != nil {
				t.Fatal(err)
			}
			a = append(a, want)
			for {
				budget.refill(1 + rng.IntN(3000))
				got, pending, err := bounded.SampleWithin(logits, &budget)
				if err != nil {
					t.Fatal(err)
				}
				if pending {
					pendings++
					continue
				}
				b = append(b, got)
				break
			}
			if want == 50256 { // GPT-2's end of text
				break
			}
		}
		if !slices.Equal(a, b) {
			t.Fatalf("%+v: bounded sampler drew %v, unbounded %v", p, b, a)
		}
		if pendings == 0 {
			t.Fatalf("%+v: no draw was ever pending: the budget was not exercised", p)
		}
		t.Logf("%+v: %d tokens, %d pending calls", p, len(a), pendings)
	}
}
