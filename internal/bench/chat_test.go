package bench

import (
	"slices"
	"testing"
)

// The chat workload's prompts: every conversation starts with the same
// system prompt; turn t+1's prompt is turn t's, a reply and a new user
// turn (so a prefix cache can serve all of turn t's prompt); different
// conversations share nothing after the system prompt; every id is a
// non-special token of the vocabulary; the last turn fits the context.
func TestChatLoadPrompts(t *testing.T) {
	l := chatLoad{system: 40, user: 7, reply: 5, turns: 4, inflight: 3, vocab: 100}
	for c := range 3 {
		for turn := range l.turns {
			p := l.prompt(c, turn)
			if want := l.system + (turn+1)*l.user + turn*l.reply; len(p) != want {
				t.Fatalf("conv %d turn %d: %d tokens, want %d", c, turn, len(p), want)
			}
			if !slices.Equal(p[:l.system], l.prompt(0, 0)[:l.system]) {
				t.Fatalf("conv %d turn %d: the system prompt differs", c, turn)
			}
			for _, id := range p {
				if id < 3 || id >= l.vocab {
					t.Fatalf("token %d outside [3, %d)", id, l.vocab)
				}
			}
			if turn > 0 {
				prev := l.prompt(c, turn-1)
				if !slices.Equal(p[:len(prev)], prev) {
					t.Fatalf("conv %d turn %d does not extend turn %d", c, turn, turn-1)
				}
			}
		}
		if c > 0 && slices.Equal(l.prompt(c, 0)[l.system:], l.prompt(0, 0)[l.system:]) {
			t.Fatalf("conversations %d and 0 share their first user turn", c)
		}
	}
	if last := len(l.prompt(0, l.turns-1)) + l.reply; last != l.context() {
		t.Fatalf("context %d, the last turn needs %d", l.context(), last)
	}
}
