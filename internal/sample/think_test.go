package sample

import (
	"math"
	"testing"

	"sluice/internal/grammar"
)

// A thinking model's vocabulary: <think>, </think>, whitespace, JSON and
// text, and an end-of-generation token.
const (
	thOpen, thClose, thSpace, thBrace, thEnd, thText, thEOS = 0, 1, 2, 3, 4, 5, 6
)

func thinkVocab() *grammar.Vocab {
	return grammar.NewVocab([]string{"<think>", "</think>", "\n\n", "{", "}", "hello", ""}, func(id int32) bool { return id == thEOS })
}

// favour is logits whose argmax is id (and second best second, if >= 0).
func favour(id, second int32) []float32 {
	l := []float32{0, 0, 0, 0, 0, 0, 0}
	l[id] = 10
	if second >= 0 {
		l[second] = 5
	}
	return l
}

func thinkSampler(t *testing.T, p Params, prompt []int32) *Sampler {
	t.Helper()
	v := thinkVocab()
	m := grammar.Bind(grammar.JSONObject(), v).NewMatcher()
	s := New(p)
	s.ConstrainThinking(m, grammar.NewThink(thOpen, thClose, prompt, v.Space))
	return s
}

// TestThinkingThenGrammar: the reasoning is free (text the grammar
// refuses is drawn), the grammar applies from the answer's first token,
// after at most grammar.MaxLeadSpace whitespace tokens.
func TestThinkingThenGrammar(t *testing.T) {
	s := thinkSampler(t, Params{}, nil)
	draws := []struct{ favour, want int32 }{
		{thOpen, thOpen}, {thText, thText}, {thText, thText}, {thClose, thClose},
		{thSpace, thSpace}, {thSpace, thSpace}, {thSpace, thSpace}, {thSpace, thSpace},
		// The fifth space: the grammar's, which refuses it.
		{thSpace, thBrace},
		// Text in the answer: refused.
		{thText, thEnd},
		{thEOS, thEOS},
	}
	// The markers and the lead's whitespace cost the grammar nothing:
	// no check, no mask.
	if id, err := s.Sample(favour(thOpen, -1)); err != nil || id != thOpen || s.gm.CheckWork() != 0 {
		t.Fatalf("<think>: %d, %v, %d units of grammar work", id, err, s.gm.CheckWork())
	}
	draws = draws[1:]
	for i, d := range draws {
		l := favour(d.favour, -1)
		// Behind the favourite, the grammar's tokens in order of need.
		l[thBrace], l[thEnd], l[thEOS] = max(l[thBrace], 3), max(l[thEnd], 2), max(l[thEOS], 1)
		id, err := s.Sample(l)
		if err != nil || id != d.want {
			t.Fatalf("draw %d: %d, %v; want %d", i, id, err, d.want)
		}
		if i < 7 && s.gm.CheckWork() != 0 {
			t.Fatalf("draw %d (reasoning, </think> or the lead's whitespace) cost %d units of grammar work", i, s.gm.CheckWork())
		}
	}
}

// TestThinkingEndsAtEOS: an end-of-generation token inside the reasoning
// is free: the output ends there (finish stop, no answer).
func TestThinkingEndsAtEOS(t *testing.T) {
	s := thinkSampler(t, Params{}, []int32{thOpen})
	for i, want := range []int32{thText, thEOS} {
		if id, err := s.Sample(favour(want, -1)); err != nil || id != want {
			t.Fatalf("draw %d: %d, %v; want %d", i, id, err, want)
		}
	}
}

// TestWithoutThinkingTheGrammarStartsAtOnce: the same sampler without
// the reasoning refuses <think> (today's behaviour for a format without
// Think), and a prompt that closed the reasoning (enable_thinking false)
// starts at the answer's lead.
func TestWithoutThinkingTheGrammarStartsAtOnce(t *testing.T) {
	v := thinkVocab()
	s := New(Params{})
	s.Constrain(grammar.Bind(grammar.JSONObject(), v).NewMatcher())
	if id, _ := s.Sample(favour(thOpen, thBrace)); id != thBrace {
		t.Fatalf("plain constraint drew %d, want {", id)
	}
	s = thinkSampler(t, Params{}, []int32{thOpen, thSpace, thClose, thSpace})
	if id, _ := s.Sample(favour(thOpen, thBrace)); id != thBrace {
		t.Fatalf("after a closed reasoning <think> was drawn (%d), want {", id)
	}
}

// TestThinkingMaskedDraw: a sampled draw refused in the lead is redrawn
// over the grammar's tokens and the lead's whitespace; inside the
// reasoning no mask is made.
func TestThinkingMaskedDraw(t *testing.T) {
	inf := float32(math.Inf(-1))
	s := thinkSampler(t, Params{Temperature: 1, Seed: 7}, []int32{thOpen})
	// Reasoning: only text has weight; it is drawn.
	l := []float32{inf, inf, inf, inf, inf, 0, inf}
	if id, err := s.Sample(l); err != nil || id != thText {
		t.Fatalf("reasoning draw %d, %v", id, err)
	}
	if s.job != nil || s.maskOK {
		t.Fatal("a mask was made inside the reasoning")
	}
	if id, _ := s.Sample([]float32{inf, 0, inf, inf, inf, inf, inf}); id != thClose {
		t.Fatalf("close draw %d", id)
	}
	// Lead: text (refused) or space; the redraw takes space.
	id, err := s.Sample([]float32{inf, inf, 0, inf, inf, 10, inf})
	if err != nil || (id != thSpace) {
		// Text may win the first draw; it is refused and the redraw
		// is over what is left: the space.
		t.Fatalf("lead draw %d, %v; want the space", id, err)
	}
}

// TestThinkingSendsThePrompt: a decode worker is sent the prompt's ids
// for a format after thinking (it reads where the prompt left the
// reasoning), as for the repetition penalty.
func TestThinkingSendsThePrompt(t *testing.T) {
	f := Format{Kind: FormatJSONObject, Think: true, ThinkOpen: 1, ThinkClose: 2}
	if !(Params{Format: f}).UsesPrompt() || (Params{Format: Format{Kind: FormatJSONObject}}).UsesPrompt() {
		t.Fatal("UsesPrompt does not follow Format.Think")
	}
	for _, bad := range []Format{
		{Kind: FormatText, Think: true, ThinkOpen: 1, ThinkClose: 2},
		{Kind: FormatJSONObject, Think: true, ThinkOpen: 1, ThinkClose: 1},
		{Kind: FormatJSONObject, Think: true, ThinkOpen: 1, ThinkClose: 7},
		{Kind: FormatJSONObject, Think: true, ThinkOpen: -1, ThinkClose: 2},
	} {
		if err := (Params{Format: bad}).Validate(7); err == nil {
			t.Errorf("format %+v validated", bad)
		}
	}
	if err := (Params{Format: f}).Validate(7); err != nil {
		t.Fatal(err)
	}
}
