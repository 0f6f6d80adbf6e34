package grammar

// Think follows a thinking model's output (Qwen3 and the like: a
// reasoning between the tokens <think> and </think>, then the answer)
// one generated token at a time, so that a grammar applies to the answer
// only, and the router splits the text into reasoning_content and
// content. It is a pure state machine: the router and every worker build
// one from the prompt and step it with the same tokens, so they agree on
// where the answer begins without trusting each other's word (I14).
//
// Only the marker tokens count: "</think>" spelled by the model as
// several ordinary tokens is reasoning text, never the end of it (as
// vLLM's structured outputs end the reasoning at the end token's id).
type Think struct {
	open, close int32
	phase       ThinkPhase
	// lead is how many whitespace tokens the answer's lead took
	// (ThinkLead, at most MaxLeadSpace).
	lead int
}

// ThinkPhase is where a thinking model's output stands.
type ThinkPhase uint8

const (
	// ThinkStart: nothing generated yet, and the prompt left no
	// reasoning open. An <think> token opens one; any other token is
	// the first of the answer.
	ThinkStart ThinkPhase = iota
	// ThinkIn: inside the reasoning, until </think>. Everything is
	// free here.
	ThinkIn
	// ThinkLead: right after </think>: up to MaxLeadSpace tokens of
	// whitespace only (Qwen3 writes "\n\n") are free; the first other
	// token is the answer's.
	ThinkLead
	// ThinkAnswer: the answer. A grammar applies to every token.
	ThinkAnswer
)

// MaxLeadSpace bounds the whitespace tokens free of the grammar between
// </think> and the answer: a model must not be able to pad forever
// outside the grammar (whose own white space is one optional space).
const MaxLeadSpace = 4

// NewThink starts a Think for the markers open and close after prompt.
// The prompt decides the first phase by its last token that is not
// whitespace (space reports a whitespace-only token): <think> (a
// template that opens the reasoning itself) starts inside it, </think>
// (a template that closes an empty one: Qwen3 with enable_thinking
// false) starts at the answer's lead; anything else starts at the
// beginning. Earlier markers (a previous turn's reasoning) count for
// nothing.
func NewThink(open, close int32, prompt []int32, space func(int32) bool) *Think {
	t := &Think{open: open, close: close}
scan:
	for i := len(prompt) - 1; i >= 0; i-- {
		id := prompt[i]
		switch {
		case id == open:
			t.phase = ThinkIn
		case id == close:
			t.phase = ThinkLead
		case space != nil && space(id):
			continue
		}
		break scan
	}
	return t
}

// Phase is where the output stands before its next token.
func (t *Think) Phase() ThinkPhase { return t.phase }

// Free reports whether the next token id, if generated now, is outside
// the grammar: the <think> or </think> that opens or closes the
// reasoning, any token inside it, or a whitespace token of the answer's
// lead (space: id's text is whitespace only).
func (t *Think) Free(id int32, space bool) bool {
	switch t.phase {
	case ThinkStart:
		return id == t.open || id == t.close
	case ThinkIn:
		return true
	case ThinkLead:
		return space && t.lead < MaxLeadSpace
	}
	return false
}

// Step moves past one generated token and reports whether it was a
// marker: the <think> that opened the reasoning or the </think> that
// closed it (their text is neither reasoning nor answer). A </think> at
// the start closes a reasoning the prompt opened in a way NewThink did
// not see; a marker anywhere else is text.
func (t *Think) Step(id int32, space bool) (marker bool) {
	switch t.phase {
	case ThinkStart:
		switch id {
		case t.open:
			t.phase = ThinkIn
			return true
		case t.close:
			t.phase = ThinkLead
			return true
		}
		t.phase = ThinkAnswer
	case ThinkIn:
		if id == t.close {
			t.phase = ThinkLead
			return true
		}
	case ThinkLead:
		if space && t.lead < MaxLeadSpace {
			t.lead++
			return false
		}
		t.phase = ThinkAnswer
	}
	return false
}

// Markers are the ids of <think> and </think>.
func (t *Think) Markers() (open, close int32) { return t.open, t.close }
