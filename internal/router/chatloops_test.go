package router

import (
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Loops whose work grows with the tenant's messages stop at the step
// bound (lowered here from maxLoopSteps), whatever they write: a loop
// over the messages inside a loop over the messages wrote nothing, so no
// output bound saw its n*n steps (35,000 messages fit a 1 MiB body).
func TestChatTemplateLoopStepsBounded(t *testing.T) {
	msgs := func(n int, content string) []ChatMessage {
		m := make([]ChatMessage, n)
		for i := range m {
			m[i] = ChatMessage{Role: "user", Content: content}
		}
		return m
	}
	for _, c := range []struct {
		name, src string
		ok, over  []ChatMessage
	}{
		// 40 messages: 41*41 steps; 120: 121*121 > 10,000.
		{"nested loops", "{% for m in messages %}{% for n in messages %}{% if n.role == 'tool' %}t{% endif %}{% endfor %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		// The inner loop's filter drops every item: they are gone over
		// all the same.
		{"filtered inner loop", "{% for m in messages %}{% for n in messages if n.role == 'tool' %}t{% endfor %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		// A loop over a message's text goes over its characters.
		{"loop over a string", "{% for m in messages %}{% for ch in m.content %}{% endfor %}{% endfor %}x", msgs(2, strings.Repeat("a", 4000)), msgs(2, strings.Repeat("a", 6000))},
		// A filter going over the messages inside a loop over them.
		{"selectattr in a loop", "{% for m in messages %}{{ messages|selectattr('role', 'equalto', 'tool')|first }}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		{"map in a loop", "{% for m in messages %}{% if messages|map(attribute='role')|list|length > 999 %}{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		// in / not in go over the list: n*n steps with nothing built.
		{"in a list in a loop", "{% for m in messages %}{% if m in messages %}{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		{"not in a list in a loop", "{% for m in messages %}{% if m not in messages %}t{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		{"is in, tested away", "{% for m in messages %}{% if (m is in messages) is defined %}{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		// n*n*n: each `in` compares m with every message, two keys
		// listed on each side (8 messages: 8*8*(8+8*4)).
		{"select in", "{% for m in messages %}{% if messages|select('in', messages)|list|length > 999 %}{% endif %}{% endfor %}x", msgs(8, "a"), msgs(40, "a")},
		// A string: a step per inBytesPerStep bytes; 1,001 steps of the
		// loop, then 8 or 10 a step.
		{"in a string in a loop", "{% for i in range(1000) %}{% if 'z' in messages[0].content %}{% endif %}{% endfor %}x", msgs(1, strings.Repeat("a", 8*inBytesPerStep)), msgs(1, strings.Repeat("a", 10*inBytesPerStep))},
		// == and != compare two lists (or dicts) of one length item by
		// item, two strings of one length byte by byte.
		{"== on lists in a loop", "{% for m in messages %}{% if messages == messages %}{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		{"!= on lists in a loop", "{% for m in messages %}{% if messages != messages %}t{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		{"is equalto in a loop", "{% for m in messages %}{% if messages is equalto messages %}{% endif %}{% endfor %}x", msgs(40, "a"), msgs(120, "a")},
		{"== on strings in a loop", "{% for i in range(1000) %}{% if messages[0].content == messages[1].content %}{% endif %}{% endfor %}x", msgs(2, strings.Repeat("a", 8*inBytesPerStep)), msgs(2, strings.Repeat("a", 10*inBytesPerStep))},
		{"< on strings in a loop", "{% for i in range(1000) %}{% if messages[0].content < messages[1].content %}{% endif %}{% endfor %}x", msgs(2, strings.Repeat("a", 4*inBytesPerStep)), msgs(2, strings.Repeat("a", 5*inBytesPerStep))},
		// Inside a macro whose failure the template tests away.
		{"in a macro tested away", "{% macro f() %}{% for m in messages %}{% for n in messages %}{% endfor %}{% endfor %}{% endmacro %}{% if f() is defined %}{% endif %}x", msgs(40, "a"), msgs(120, "a")},
	} {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		ct.maxSteps = 10_000
		for range 2 { // the count is each rendering's own
			if out, err := ct.Render(c.ok); err != nil || out != "x" {
				t.Fatalf("%s within the bound: %q %v", c.name, out, err)
			}
		}
		if out, err := ct.Render(c.over); !errors.Is(err, ErrTemplateTooMuchWork) {
			t.Errorf("%s past the bound: %q %v, want ErrTemplateTooMuchWork", c.name, out, err)
		}
	}
}

// `in` on a dict goes over its keys: charged as its length.
func TestChatTemplateInDictBounded(t *testing.T) {
	ct, err := NewChatTemplate("{% for m in messages %}{% if 'k' in d %}{% endif %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxSteps = 10_000
	d := map[string]any{}
	for i := range 300 {
		d[strconv.Itoa(i)] = i
	}
	o := RenderOptions{Kwargs: map[string]any{"d": d}}
	if out, err := ct.RenderWith(make([]ChatMessage, 20), o); err != nil || out != "x" {
		t.Fatalf("20 messages x 300 keys: %q %v", out, err)
	}
	if out, err := ct.RenderWith(make([]ChatMessage, 40), o); !errors.Is(err, ErrTemplateTooMuchWork) {
		t.Fatalf("40 messages x 300 keys: %q %v, want ErrTemplateTooMuchWork", out, err)
	}
}

// in, not in and select('in') answer as jinja2 3.1.6 does (messages:
// one user message "ab"; ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True)).
func TestChatTemplateInAsJinja(t *testing.T) {
	rendersAsJinja(t, []jinjaCase{
		{`{{ 'a' in messages }}{{ messages[0] in messages }}{{ 'x' in 'axb' }}{{ 'k' in {'k':1} }}{{ 'k' not in {'k':1} }}`, `FalseTrueTrueTrueFalse`},
		{`{{ 'role' in messages[0] }}{{ 'b' in messages[0].content }}{{ 3 in [1, 2] }}{{ [1, 2, 3]|select('in', [2, 3])|list }}`, `TrueTrueFalse[2, 3]`},
	})
}

// A recursive loop does not parse: recursing without end behind a
// condition on the messages, it passed the start-up rendering and then
// killed the process (a fatal Go stack overflow) on the first matching
// request.
func TestChatTemplateRecursiveLoopRefused(t *testing.T) {
	_, err := NewChatTemplate("{% for m in messages recursive %}{% if m.content == 'boom' %}{{ loop(messages) }}{% endif %}{{ m.content }}{% endfor %}", "", "")
	if err == nil || !strings.Contains(err.Error(), "recursive") {
		t.Fatalf("a recursive loop: %v, want refused at parse", err)
	}
	// The word is still a name.
	ct, err := NewChatTemplate("{% set recursive = 'r' %}{% for m in messages %}{{ recursive }}{% endfor %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := ct.Render([]ChatMessage{{Role: "user", Content: "a"}}); err != nil || out != "r" {
		t.Fatalf("recursive as a name: %q %v", out, err)
	}
}

// Real templates go over each message a few times: Qwen3's (with a tool
// exchange) and Gemma 3's stay within 3 steps a message, so a 1 MiB body
// of one-character messages (about 35,000) is far inside maxLoopSteps.
func TestChatTemplateRealLoopSteps(t *testing.T) {
	const n = 600
	m := make([]ChatMessage, 0, n)
	for i := range n / 4 {
		m = append(m, ChatMessage{Role: "user", Content: "q"},
			ChatMessage{Role: "assistant", Content: "<think>r</think>a", ToolCalls: []any{map[string]any{"id": "c", "type": "function", "function": map[string]any{"name": "f", "arguments": "{}"}}}},
			ChatMessage{Role: "tool", Content: "t", ToolCallID: "c"},
			ChatMessage{Role: "assistant", Content: string(rune('a' + i%26))})
	}
	gemma := make([]ChatMessage, n)
	for i := range gemma {
		gemma[i] = ChatMessage{Role: []string{"user", "assistant"}[i%2], Content: "x"}
	}
	for _, c := range []struct {
		file string
		msgs []ChatMessage
	}{{"Qwen-Qwen3-0.6B.jinja", m}, {"google-gemma-3-it.jinja", gemma}} {
		src, err := os.ReadFile("../../testdata/templates/" + c.file)
		if err != nil {
			t.Fatal(err)
		}
		ct, err := NewChatTemplate(string(src), "<bos>", "<eos>")
		if err != nil {
			t.Fatal(err)
		}
		ct.maxSteps = 3 * n
		if _, err := ct.Render(c.msgs); err != nil {
			t.Errorf("%s, %d messages within %d steps: %v", c.file, n, 3*n, err)
		}
		if maxLoopSteps < 3*40_000 {
			t.Fatalf("maxLoopSteps %d does not hold a 1 MiB body of small messages", maxLoopSteps)
		}
	}
}

// Past the bound the request is the client's 400, naming the messages.
func TestChatTemplateTooMuchWorkIs400(t *testing.T) {
	ct, err := NewChatTemplate("{% for m in messages %}{% for n in messages %}{% endfor %}{% endfor %}x", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxSteps = 100
	s := &Server{chat: ct}
	if _, e := s.renderChat(make([]ChatMessage, 20), RenderOptions{}); e == nil || e.Status != http.StatusBadRequest || e.Code != CodeTemplate || e.Param != "messages" {
		t.Fatalf("too much work: %+v, want 400 %s on messages", e, CodeTemplate)
	}
}

// When a rendering with chat_template_kwargs fails, the look at whose
// failure it is (the same rendering without them) runs within what the
// first left of the request's budgets: a request cannot make the
// template do one rendering's work twice.
func TestChatTemplateKwargsRetrySharesBudget(t *testing.T) {
	// n*n steps, then a failure that only the kwarg x brings.
	ct, err := NewChatTemplate("{% for m in messages %}{% for n in messages %}{% endfor %}{% endfor %}{% if x is defined %}{{ x.nomethod() }}{% endif %}ok", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxSteps = 2500 // one rendering of 40 messages (41*41 + 1), not two
	s := &Server{chat: ct, log: slog.New(slog.DiscardHandler)}
	o := RenderOptions{Kwargs: map[string]any{"x": "s"}}
	if _, err := ct.RenderWith(make([]ChatMessage, 40), RenderOptions{}); err != nil {
		t.Fatalf("one rendering of 40 messages: %v", err)
	}
	if _, e := s.renderChat(make([]ChatMessage, 10), o); e == nil || e.Status != http.StatusBadRequest || e.Param != "chat_template_kwargs" {
		t.Fatalf("10 messages: %+v, want 400 on chat_template_kwargs (two renderings fit)", e)
	}
	if _, e := s.renderChat(make([]ChatMessage, 40), o); e == nil || e.Status != http.StatusBadRequest || e.Param != "messages" || !strings.Contains(e.Message, "more work") {
		t.Fatalf("40 messages: %+v, want 400 on messages: the second look is past the request's steps", e)
	}

	// The text written counts across both too.
	ct, err = NewChatTemplate("{{ messages[0].content }}{% if x is defined %}{{ x.nomethod() }}{% endif %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	ct.maxBytes = 1000
	s.chat = ct
	if _, e := s.renderChat([]ChatMessage{{Role: "user", Content: strings.Repeat("a", 400)}}, o); e == nil || e.Param != "chat_template_kwargs" {
		t.Fatalf("400 bytes written twice: %+v, want 400 on chat_template_kwargs", e)
	}
	if _, e := s.renderChat([]ChatMessage{{Role: "user", Content: strings.Repeat("a", 600)}}, o); e == nil || e.Code != CodeContextLength {
		t.Fatalf("600 bytes written twice: %+v, want 400 %s", e, CodeContextLength)
	}
}

// The look without kwargs keeps the request's tools: a template that
// fails on the tools is the template's failure (500), not the kwargs'.
func TestChatTemplateKwargsRetryKeepsTools(t *testing.T) {
	ct, err := NewChatTemplate("{% if tools %}{{ tools[0].nomethod() }}{% endif %}ok", "", "")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{chat: ct, log: slog.New(slog.DiscardHandler)}
	o := RenderOptions{Kwargs: map[string]any{"x": 1}, Tools: []any{map[string]any{"type": "function"}}}
	if _, e := s.renderChat([]ChatMessage{{Role: "user", Content: "a"}}, o); e == nil || e.Status != http.StatusInternalServerError {
		t.Fatalf("a template failing on the tools, with kwargs: %+v, want 500", e)
	}
}
