package grammar

import (
	"slices"
	"testing"
)

// Markers of the tests: 1 <think>, 2 </think>; 3 is "\n\n", 4 is text.
const (
	tOpen, tClose, tSpace, tText = int32(1), int32(2), int32(3), int32(4)
)

func tSpaceOf(id int32) bool { return id == tSpace }

func TestNewThinkReadsThePromptsEnd(t *testing.T) {
	for _, c := range []struct {
		name   string
		prompt []int32
		want   ThinkPhase
	}{
		{"no marker", []int32{tText, tText}, ThinkStart},
		{"template opened the reasoning", []int32{tText, tOpen, tSpace}, ThinkIn},
		{"template closed an empty one (enable_thinking false)", []int32{tText, tOpen, tSpace, tClose, tSpace}, ThinkLead},
		{"a previous turn's reasoning", []int32{tOpen, tText, tClose, tSpace, tText, tSpace}, ThinkStart},
		{"empty prompt", nil, ThinkStart},
	} {
		if got := NewThink(tOpen, tClose, c.prompt, tSpaceOf).Phase(); got != c.want {
			t.Errorf("%s: phase %d, want %d", c.name, got, c.want)
		}
	}
}

// step runs ids through th and returns the phases before each token and
// which tokens were markers.
func thinkRun(th *Think, ids ...int32) (free, markers []bool) {
	for _, id := range ids {
		free = append(free, th.Free(id, tSpaceOf(id)))
		markers = append(markers, th.Step(id, tSpaceOf(id)))
	}
	return free, markers
}

func TestThinkSteps(t *testing.T) {
	// <think> text </think> \n\n text: the grammar applies from the
	// answer's first token; the markers are neither reasoning nor answer.
	th := NewThink(tOpen, tClose, nil, tSpaceOf)
	free, markers := thinkRun(th, tOpen, tText, tClose, tClose, tSpace, tSpace, tText, tSpace, tOpen)
	wantFree := []bool{true, true, true, false, false, false, false, false, false}
	wantMark := []bool{true, false, true, false, false, false, false, false, false}
	// The second </think> inside the reasoning... is not: the first one
	// closed it; the second is the answer's first token (constrained).
	for i := range wantFree {
		if free[i] != wantFree[i] || markers[i] != wantMark[i] {
			t.Fatalf("token %d: free %v marker %v, want %v %v", i, free[i], markers[i], wantFree[i], wantMark[i])
		}
	}
	if th.Phase() != ThinkAnswer {
		t.Fatalf("phase %d after the answer began", th.Phase())
	}

	// The lead: whitespace tokens free, at most MaxLeadSpace of them.
	th = NewThink(tOpen, tClose, []int32{tOpen}, tSpaceOf)
	thinkRun(th, tText, tClose)
	for i := range MaxLeadSpace {
		if !th.Free(tSpace, true) || th.Step(tSpace, true) || th.Phase() != ThinkLead {
			t.Fatalf("lead space %d not free", i)
		}
	}
	if th.Free(tSpace, true) {
		t.Fatalf("space %d after </think> is free: a model could pad outside the grammar forever", MaxLeadSpace+1)
	}

	// No <think> first: the answer begins at once, constrained.
	th = NewThink(tOpen, tClose, nil, tSpaceOf)
	if th.Free(tText, false) || th.Step(tText, false) || th.Phase() != ThinkAnswer {
		t.Fatal("a first token other than <think> is not the answer's")
	}
	// Later markers are text.
	if th.Free(tOpen, false) || th.Step(tOpen, false) || th.Free(tClose, false) || th.Step(tClose, false) {
		t.Fatal("a marker inside the answer was taken for one")
	}

	// </think> spelled as text tokens never ends the reasoning.
	th = NewThink(tOpen, tClose, []int32{tOpen}, tSpaceOf)
	thinkRun(th, tText, tText, tText)
	if th.Phase() != ThinkIn {
		t.Fatal("text ended the reasoning")
	}
	// A reasoning that never closes stays free to the end (max_tokens
	// bounds it like any generation).
}

// The whitespace-only tokens are listed when the vocabulary is made, not
// by the first Spaces call: that call comes from a sampler inside a
// shared step (the answer's lead of a thinking model), where a walk of
// the whole vocabulary would hold every tenant's step.
func TestVocabSpace(t *testing.T) {
	v := NewVocab([]string{"a", " ", "\n\n", " a", "", "\t\r\n "}, nil)
	want := []int32{1, 2, 5}
	if !slices.Equal(v.spaces, want) {
		t.Fatalf("spaces %v when the vocabulary is made, want %v", v.spaces, want)
	}
	if n := testing.AllocsPerRun(10, func() { v.Spaces() }); n != 0 {
		t.Fatalf("Spaces allocates %.0f times a call: it builds the list", n)
	}
	got := v.Spaces()
	if len(got) != len(want) {
		t.Fatalf("spaces %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("spaces %v, want %v", got, want)
		}
	}
	if v.Space(-1) || v.Space(6) || v.Space(4) || v.Space(3) {
		t.Fatal("Space out of range, empty or mixed")
	}
}
