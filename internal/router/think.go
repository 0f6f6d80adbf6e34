package router

import (
	"fmt"
	"strings"

	"sluice/internal/grammar"
)

// Reasoning (thinking) models: Qwen3 and the like write a reasoning
// between the tokens <think> and </think> before the answer. With the
// reasoning format auto (the default, --reasoning-format) the router
// splits a chat answer of such a model into message.reasoning_content
// and message.content (streamed: delta.reasoning_content, then
// delta.content), as vLLM's and SGLang's qwen3 reasoning parsers and
// llama-server's --reasoning-format deepseek do; tool calls are read from
// the content only, and a response_format or a required or named tool
// constrains the answer only: the grammar is free until </think>
// (sample.Format.Think). The split follows the marker tokens, never their
// text (grammar.Think), so the router and the workers agree on where the
// answer begins.

// Reasoning formats (Config.ReasoningFormat, --reasoning-format).
const (
	// ReasoningAuto splits the reasoning out when the model thinks.
	ReasoningAuto = "auto"
	// ReasoningNone leaves it in content.
	ReasoningNone = "none"
)

// Reasoning markers' texts.
const (
	thinkOpenText  = "<think>"
	thinkCloseText = "</think>"
)

// tokenIDer is the optional tokenizer method finding a token by its
// text (the reasoning markers).
type tokenIDer interface {
	TokenID(text string) (int32, bool)
}

// thinkMarkers are a thinking model's <think> and </think> token ids.
type thinkMarkers struct{ open, close int32 }

// checkReasoningFormat accepts "" (auto), auto and none.
func checkReasoningFormat(f string) error {
	switch f {
	case "", ReasoningAuto, ReasoningNone:
		return nil
	}
	return fmt.Errorf("reasoning format %q: use %s or %s", f, ReasoningAuto, ReasoningNone)
}

// detectThinking finds the reasoning markers of a model that thinks: its
// vocabulary has <think> and </think> as tokens of their own and its chat
// template writes them. nil: the model does not think.
func detectThinking(tok Tokenizer, ct *ChatTemplate) *thinkMarkers {
	if ct == nil || ct.IsFallback() {
		return nil
	}
	ids, ok := tok.(tokenIDer)
	if !ok || !strings.Contains(ct.source, thinkOpenText) || !strings.Contains(ct.source, thinkCloseText) {
		return nil
	}
	open, ok1 := ids.TokenID(thinkOpenText)
	close, ok2 := ids.TokenID(thinkCloseText)
	if !ok1 || !ok2 || open == close {
		return nil
	}
	return &thinkMarkers{open: open, close: close}
}

// Thinking reports whether chat answers are split into reasoning and
// content (the model thinks and the reasoning format is auto).
func (s *Server) Thinking() bool { return s.think != nil }

// ModelThinks reports whether the model thinks, whatever the reasoning
// format.
func (s *Server) ModelThinks() bool { return s.thinks }

// spaceToken reports whether token id's text is whitespace only.
func (s *Server) spaceToken(id int32) bool { return grammar.IsSpace(s.tokenText(id)) }

// newThink follows one choice's output from its prompt, or nil when the
// generation is not split.
func (s *Server) newThink(g *generation, prompt []int32) *grammar.Think {
	if !g.chat || s.think == nil {
		return nil
	}
	return grammar.NewThink(s.think.open, s.think.close, prompt, s.spaceToken)
}

// reasoningText is one choice's reasoning as it is sent: without the
// white space at its start and end (as llama-server strips it; Qwen3
// writes "<think>\n...\n</think>"). Trailing white space is held until
// more reasoning follows it, so a stream never sends what the end drops.
type reasoningText struct {
	started bool
	// held is the trailing white space not sent yet. A Builder: a run
	// of whitespace tokens (as long as max_tokens) is appended to, never
	// copied whole per token (rt12).
	held strings.Builder
}

// push returns what of t may go out now.
func (r *reasoningText) push(t string) string {
	if !r.started {
		t = strings.TrimLeft(t, " \t\r\n")
		if t == "" {
			return ""
		}
		r.started = true
	}
	body := strings.TrimRight(t, " \t\r\n")
	if body == "" {
		r.held.WriteString(t)
		return ""
	}
	out := r.held.String() + body
	r.held.Reset()
	r.held.WriteString(t[len(body):])
	return out
}

// heldLen is how many bytes of white space are held.
func (r *reasoningText) heldLen() int { return r.held.Len() }
