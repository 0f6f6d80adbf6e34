package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"sluice/internal/preflight"
	"sluice/internal/sample"
)

// A thinking test double: byteTok with <think> (258) and </think> (259)
// as tokens of their own.
const (
	fakeThinkOpen  = 258
	fakeThinkClose = 259
)

type thinkTok struct{ byteTok }

func (thinkTok) Encode(text string, addSpecial, parseSpecial bool) ([]int32, error) {
	var ids []int32
	if addSpecial {
		ids = append(ids, fakeBOS)
	}
	for text != "" {
		o, c := strings.Index(text, thinkOpenText), strings.Index(text, thinkCloseText)
		switch {
		case parseSpecial && o == 0:
			ids, text = append(ids, fakeThinkOpen), text[len(thinkOpenText):]
		case parseSpecial && c == 0:
			ids, text = append(ids, fakeThinkClose), text[len(thinkCloseText):]
		default:
			ids, text = append(ids, int32(text[0])), text[1:]
		}
	}
	return ids, nil
}

func (thinkTok) TokenID(text string) (int32, bool) {
	switch text {
	case thinkOpenText:
		return fakeThinkOpen, true
	case thinkCloseText:
		return fakeThinkClose, true
	}
	return 0, false
}

func (t thinkTok) TokenText(id int32) string {
	switch id {
	case fakeThinkOpen:
		return thinkOpenText
	case fakeThinkClose:
		return thinkCloseText
	}
	return t.byteTok.TokenText(id)
}

// echoTemplate renders the last message's content alone (the echo
// engine answers it back as the "model's" output) and any
// reasoning_content of an assistant message before it; it names the
// markers, as a thinking model's template does.
const echoTemplate = `{# <think> </think> #}{% for m in messages %}{% if m.reasoning_content is defined %}[{{ m.reasoning_content }}]{% endif %}{% if loop.last %}{{ m['content'] }}{% endif %}{% endfor %}`

func thinkHarness(t *testing.T, format string) *harness {
	t.Helper()
	ct, err := NewChatTemplate(echoTemplate, "", "")
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, 512, func(c *Config) {
		c.Tokenizer, c.Chat, c.ReasoningFormat = thinkTok{}, ct, format
	})
}

type thinkAnswer struct {
	Choices []struct {
		Message struct {
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		CompletionTokens        int `json:"completion_tokens"`
		CompletionTokensDetails *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	} `json:"usage"`
}

func chatBody(content string, extra string) string {
	b, _ := json.Marshal(content)
	return `{"messages":[{"role":"user","content":` + string(b) + `}]` + extra + `}`
}

func postThink(t *testing.T, h *harness, body string) (int, thinkAnswer, string) {
	t.Helper()
	resp, err := http.Post(h.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&raw)
	var a thinkAnswer
	if resp.StatusCode == 200 {
		if err := json.Unmarshal([]byte(raw.String()), &a); err != nil {
			t.Fatalf("%v: %s", err, raw.String())
		}
	}
	return resp.StatusCode, a, raw.String()
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// TestThinkingSplit: the reasoning goes to reasoning_content without its
// markers and the white space around it, the answer to content without
// the white space after </think>; reasoning_tokens count the reasoning's
// tokens, markers included.
func TestThinkingSplit(t *testing.T) {
	h := thinkHarness(t, "")
	out := "<think>\nI reason.\n</think>\n\nThe answer."
	code, a, raw := postThink(t, h, chatBody(out, ""))
	if code != 200 || len(a.Choices) != 1 {
		t.Fatalf("%d %s", code, raw)
	}
	m := a.Choices[0].Message
	if str(m.ReasoningContent) != "I reason." || str(m.Content) != "The answer." || a.Choices[0].FinishReason != "stop" {
		t.Fatalf("reasoning %q content %q finish %q", str(m.ReasoningContent), str(m.Content), a.Choices[0].FinishReason)
	}
	d := a.Usage.CompletionTokensDetails
	if want := 1 + len("\nI reason.\n") + 1; d == nil || d.ReasoningTokens != want {
		t.Fatalf("usage %+v, want %d reasoning tokens", a.Usage, want)
	}
	if a.Usage.CompletionTokens != 2+len("\nI reason.\n\n\nThe answer.")+1 {
		t.Fatalf("completion tokens %d", a.Usage.CompletionTokens)
	}

	// Cut by max_tokens inside the reasoning: no answer at all.
	code, a, raw = postThink(t, h, chatBody(out, `,"max_tokens":6`))
	m = a.Choices[0].Message
	if code != 200 || str(m.ReasoningContent) != "I re" || m.Content != nil || a.Choices[0].FinishReason != "length" {
		t.Fatalf("cut: %d reasoning %q content %q: %s", code, str(m.ReasoningContent), str(m.Content), raw)
	}

	// No <think> first: the whole output is the answer, and reasoning_content absent.
	code, a, raw = postThink(t, h, chatBody("plain answer", ""))
	m = a.Choices[0].Message
	if code != 200 || m.ReasoningContent != nil || str(m.Content) != "plain answer" || strings.Contains(raw, `"reasoning_content"`) {
		t.Fatalf("plain: %s", raw)
	}
	if a.Usage.CompletionTokensDetails == nil || a.Usage.CompletionTokensDetails.ReasoningTokens != 0 {
		t.Fatalf("plain usage: %s", raw)
	}
}

// TestThinkingFormatNone: --reasoning-format none leaves the output as
// it is (today's behaviour), with no reasoning fields.
func TestThinkingFormatNone(t *testing.T) {
	h := thinkHarness(t, ReasoningNone)
	code, a, raw := postThink(t, h, chatBody("<think>\nI reason.\n</think>\n\nThe answer.", ""))
	m := a.Choices[0].Message
	if code != 200 || m.ReasoningContent != nil || !strings.Contains(str(m.Content), "I reason.") || strings.Contains(raw, "reasoning") {
		t.Fatalf("%s", raw)
	}
	if h.srv.Thinking() {
		t.Fatal("format none still splits")
	}
	if _, err := New(Config{Engine: newEcho(8), Tokenizer: thinkTok{}, ReasoningFormat: "deepseek"}); err == nil {
		t.Fatal("an unknown reasoning format was taken")
	}
	// A template that never writes the markers: the model does not think.
	if h2 := newHarness(t, 64, func(c *Config) { c.Tokenizer = thinkTok{} }); h2.srv.Thinking() {
		t.Fatal("the fallback template was taken for a thinking model's")
	}
	plain, err := NewChatTemplate(`{{ messages[0]['content'] }}`, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if h3 := newHarness(t, 64, func(c *Config) { c.Tokenizer, c.Chat = thinkTok{}, plain }); h3.srv.Thinking() {
		t.Fatal("a template that never writes <think> was taken for a thinking model's")
	}
}

// sseChunks reads a stream's chunks' first choice deltas, in order.
func sseChunks(t *testing.T, h *harness, body string) (reasoning, content []string, finish string) {
	t.Helper()
	resp, err := http.Post(h.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content          *string `json:"content"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(line), &ch); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if len(ch.Choices) == 0 {
			continue
		}
		d := ch.Choices[0].Delta
		if d.ReasoningContent != nil {
			if len(content) > 0 {
				t.Fatalf("reasoning after content: %q", *d.ReasoningContent)
			}
			reasoning = append(reasoning, *d.ReasoningContent)
		}
		if d.Content != nil && *d.Content != "" {
			content = append(content, *d.Content)
		}
		if f := ch.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	return reasoning, content, finish
}

// TestThinkingStream: delta.reasoning_content chunks, then
// delta.content; the same texts as the whole answer.
func TestThinkingStream(t *testing.T) {
	h := thinkHarness(t, "")
	r, c, f := sseChunks(t, h, chatBody("<think>\nI reason.  \n</think>\n\nThe answer.", `,"stream":true`))
	if strings.Join(r, "") != "I reason." || strings.Join(c, "") != "The answer." || f != "stop" {
		t.Fatalf("reasoning %q content %q finish %q", r, c, f)
	}
	// Cut inside the reasoning: reasoning chunks only.
	r, c, f = sseChunks(t, h, chatBody("<think>\nI reason.\n</think>\n\nThe answer.", `,"stream":true,"max_tokens":8`))
	if strings.Join(r, "") != "I reas" || len(c) != 0 || f != "length" {
		t.Fatalf("cut: reasoning %q content %q finish %q", r, c, f)
	}
}

// TestThinkingTools: a call written inside the reasoning is no call;
// one in the answer is.
func TestThinkingTools(t *testing.T) {
	h := thinkHarness(t, "")
	tools := `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`
	call := `<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>`
	code, a, raw := postThink(t, h, chatBody("<think>\nmaybe "+call+"\n</think>\n\nNo call.", tools))
	m := a.Choices[0].Message
	if code != 200 || len(m.ToolCalls) != 0 || str(m.Content) != "No call." || !strings.Contains(str(m.ReasoningContent), call) {
		t.Fatalf("call in the reasoning: %s", raw)
	}
	code, a, raw = postThink(t, h, chatBody("<think>\nI call.\n</think>\n\n"+call, tools))
	m = a.Choices[0].Message
	if code != 200 || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "f" || str(m.ReasoningContent) != "I call." || a.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("call in the answer: %s", raw)
	}
	// Streamed: the same.
	r, c, _ := sseChunks(t, h, chatBody("<think>\nmaybe "+call+"\n</think>\n\nNo call.", tools+`,"stream":true`))
	if !strings.Contains(strings.Join(r, ""), call) || strings.Join(c, "") != "No call." {
		t.Fatalf("streamed: reasoning %q content %q", r, c)
	}
}

// TestThinkingFormatReachesTheEngine: a response_format or a required
// tool of a thinking model constrains the answer after </think>: the
// engine is told the markers.
func TestThinkingFormatReachesTheEngine(t *testing.T) {
	h := thinkHarness(t, "")
	postThink(t, h, chatBody("{}", `,"response_format":{"type":"json_object"}`))
	postThink(t, h, chatBody("hi", ""))
	reqs := h.eng.Requests()
	want := sample.Format{Kind: sample.FormatJSONObject, Think: true, ThinkOpen: fakeThinkOpen, ThinkClose: fakeThinkClose}
	if len(reqs) != 2 || reqs[0].Sampling.Format != want || reqs[1].Sampling.Format != (sample.Format{}) {
		t.Fatalf("formats %+v", reqs)
	}
	h = thinkHarness(t, ReasoningNone)
	postThink(t, h, chatBody("{}", `,"response_format":{"type":"json_object"}`))
	if f := h.eng.Requests()[0].Sampling.Format; f.Think {
		t.Fatalf("format none: %+v", f)
	}
}

// TestReasoningContentInput: an assistant message's reasoning_content
// reaches the template; on another role it is refused.
func TestReasoningContentInput(t *testing.T) {
	h := thinkHarness(t, "")
	body := `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":"R1"},{"role":"user","content":"next"}]}`
	code, a, raw := postThink(t, h, body)
	if code != 200 || !strings.HasPrefix(str(a.Choices[0].Message.Content), "[R1]") {
		t.Fatalf("%d %s", code, raw)
	}
	code, _, raw = postThink(t, h, `{"messages":[{"role":"user","content":"q","reasoning_content":"x"}]}`)
	if code != 400 || !strings.Contains(raw, "messages[0].reasoning_content") {
		t.Fatalf("%d %s", code, raw)
	}
}

// TestThinkingNamedToolStream: a named tool's call streams from the
// answer after </think>: the reasoning goes out as reasoning chunks, the
// call's head and arguments after it, never the reasoning as arguments.
func TestThinkingNamedToolStream(t *testing.T) {
	h := thinkHarness(t, "")
	tools := `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}`
	out := "<think>\nI call f.\n</think>\n\n{\"a\": 1}"
	code, a, raw := postThink(t, h, chatBody(out, tools))
	m := a.Choices[0].Message
	if code != 200 || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"a": 1}` || str(m.ReasoningContent) != "I call f." {
		t.Fatalf("whole: %s", raw)
	}
	resp, err := http.Post(h.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(out, tools+`,"stream":true`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reasoning, args strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					ReasoningContent *string `json:"reasoning_content"`
					ToolCalls        []struct {
						Function struct{ Arguments string } `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(line), &ch) != nil || len(ch.Choices) == 0 {
			continue
		}
		d := ch.Choices[0].Delta
		if d.ReasoningContent != nil {
			if args.Len() > 0 {
				t.Fatal("reasoning after the call's arguments")
			}
			reasoning.WriteString(*d.ReasoningContent)
		}
		for _, tc := range d.ToolCalls {
			args.WriteString(tc.Function.Arguments)
		}
	}
	if reasoning.String() != "I call f." || args.String() != `{"a": 1}` {
		t.Fatalf("streamed: reasoning %q arguments %q", reasoning.String(), args.String())
	}
}

// TestThinkingStopInReasoning: a stop string applies to the reasoning
// too; matched there, the choice ends without an answer.
func TestThinkingStopInReasoning(t *testing.T) {
	h := thinkHarness(t, "")
	code, a, raw := postThink(t, h, chatBody("<think>\nabc STOP def\n</think>\n\nanswer", `,"stop":["STOP"]`))
	m := a.Choices[0].Message
	if code != 200 || str(m.ReasoningContent) != "abc" || m.Content != nil || a.Choices[0].FinishReason != "stop" {
		t.Fatalf("%s", raw)
	}
}

// Whether the model thinks, and where its reasoning goes, are published
// where clients and operators look, not only in the start-up log: each
// /v1/models entry (beside OpenAI's fields, which the official client
// still reads, the extras in its ExtraFields) and /sluice/info. A thinking
// model served with --reasoning-format none still thinks: its reasoning
// goes to content.
func TestThinkingPublished(t *testing.T) {
	for _, c := range []struct {
		name     string
		h        *harness
		thinking bool
		format   string
	}{
		{"auto", thinkHarness(t, ReasoningAuto), true, ReasoningAuto},
		{"default", thinkHarness(t, ""), true, ReasoningAuto},
		{"none", thinkHarness(t, ReasoningNone), true, ReasoningNone},
		{"plain", newHarness(t, 64, nil), false, ReasoningAuto},
	} {
		if c.h.srv.ModelThinks() != c.thinking {
			t.Fatalf("%s: ModelThinks %v, want %v", c.name, c.h.srv.ModelThinks(), c.thinking)
		}
		m, err := c.h.client("").Models.Get(t.Context(), "echo-test-double")
		if err != nil {
			t.Fatal(err)
		}
		page, err := c.h.client("").Models.List(t.Context())
		if err != nil || len(page.Data) != 1 {
			t.Fatalf("%s: list %v %+v", c.name, err, page)
		}
		for _, o := range []struct {
			id, object, owner string
			extra             map[string]string
		}{
			{m.ID, string(m.Object), m.OwnedBy, map[string]string{"thinking": m.JSON.ExtraFields["thinking"].Raw(), "reasoning_format": m.JSON.ExtraFields["reasoning_format"].Raw()}},
			{page.Data[0].ID, string(page.Data[0].Object), page.Data[0].OwnedBy, map[string]string{"thinking": page.Data[0].JSON.ExtraFields["thinking"].Raw(), "reasoning_format": page.Data[0].JSON.ExtraFields["reasoning_format"].Raw()}},
		} {
			want := map[string]string{"thinking": fmt.Sprint(c.thinking), "reasoning_format": `"` + c.format + `"`}
			if o.id != "echo-test-double" || o.object != "model" || o.owner != "sluice" || o.extra["thinking"] != want["thinking"] || o.extra["reasoning_format"] != want["reasoning_format"] {
				t.Fatalf("%s: model %s %s %s %v, want thinking %v reasoning_format %s", c.name, o.id, o.object, o.owner, o.extra, c.thinking, c.format)
			}
		}
		code, body := get(t, c.h.ts.URL+preflight.InfoPath)
		var info preflight.ServerInfo
		if err := json.Unmarshal([]byte(body), &info); code != 200 || err != nil || info.Thinking != c.thinking || info.ReasoningFormat != c.format || !strings.Contains(body, `"thinking":`) {
			t.Fatalf("%s: %s: %d %s", c.name, preflight.InfoPath, code, body)
		}
	}
}
