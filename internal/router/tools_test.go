package router

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"sluice/internal/sample"
	"sluice/internal/testenv"
)

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false}}},
{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}}}]`

// Qwen3's own template renders the tools (its <tools> system block), an
// assistant turn's tool calls as <tool_call> JSON and a tool message as a
// <tool_response>: the multi-turn exchange reaches the model as its
// template writes it.
func TestToolsRenderThroughQwen3Template(t *testing.T) {
	b, err := os.ReadFile(testenv.Shared(t, "templates/Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	ct, err := NewChatTemplate(string(b), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	spec, _, e := parseTools(json.RawMessage(weatherTools), nil, schemaCheck{})
	if e != nil {
		t.Fatal(e)
	}
	msgs, e := parseMessages(json.RawMessage(`[{"role":"user","content":"Weather in Paris?"},
		{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"18 C, sunny"}]`))
	if e != nil {
		t.Fatal(e)
	}
	out, err := ct.RenderTools(msgs, spec.render)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// Hugging Face's tojson: ", " and ": ", the client's key
		// order (TestChatTemplateToolsAsHF has the whole text).
		"<tools>", `{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object"`, `"name": "get_time"`, "</tools>",
		"<|im_start|>user\nWeather in Paris?<|im_end|>",
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
		"<tool_response>\n18 C, sunny\n</tool_response>",
		"<|im_start|>assistant\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, out)
		}
	}
}

// The model's own formats are read back as calls (auto), constrained
// output as the one call it must be (required, named), and anything else
// stays content.
func TestToolCallsParsed(t *testing.T) {
	auto, _, e := parseTools(json.RawMessage(weatherTools), nil, schemaCheck{})
	if e != nil || auto.mode != toolModeAuto {
		t.Fatal(e, auto.mode)
	}
	req, f, e := parseTools(json.RawMessage(weatherTools), json.RawMessage(`"required"`), schemaCheck{})
	if e != nil || req.mode != toolModeReq || f.Kind != sample.FormatJSONSchema || !strings.Contains(f.Schema, `"anyOf"`) {
		t.Fatal(e, req.mode, f)
	}
	named, f, e := parseTools(json.RawMessage(weatherTools), json.RawMessage(`{"type":"function","function":{"name":"get_time"}}`), schemaCheck{})
	if e != nil || named.mode != toolModeNamed || f.Schema != `{"type":"object","properties":{"tz":{"type":"string"}},"required":["tz"]}` {
		t.Fatal(e, named.mode, f)
	}
	cases := []struct {
		spec    *toolSpec
		text    string
		names   []string
		args    []string
		content string
	}{
		{&auto, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"CET\"}}</tool_call>",
			[]string{"get_weather", "get_time"}, []string{`{"city": "Paris", "unit": "c"}`, `{"tz":"CET"}`}, "Let me check.\n"},
		{&auto, `<|python_tag|>{"name": "get_time", "parameters": {"tz": "UTC"}}`, []string{"get_time"}, []string{`{"tz": "UTC"}`}, ""},
		{&auto, `{"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}`, []string{"get_time"}, []string{`{"tz": "UTC"}`}, ""},
		{&auto, "It is sunny.", nil, nil, ""},
		{&auto, `<tool_call>{"name":"rm_rf","arguments":{}}</tool_call>`, nil, nil, ""}, // not a declared tool
		{&req, `{"name":"get_weather","arguments":{"city":"Oslo","unit":"f"}}`, []string{"get_weather"}, []string{`{"city":"Oslo","unit":"f"}`}, ""},
		{&named, `{"tz": "PST"}`, []string{"get_time"}, []string{`{"tz": "PST"}`}, ""},
		{&named, `{"tz": "PS`, nil, nil, ""}, // cut by max_tokens: content, finish length
	}
	for i, c := range cases {
		calls, content, ok := c.spec.toolCalls(c.text)
		if ok != (len(c.names) > 0) || len(calls) != len(c.names) {
			t.Fatalf("case %d: %d calls (ok %v), want %v", i, len(calls), ok, c.names)
		}
		for j, tc := range calls {
			if tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") || tc.Function.Name != c.names[j] || tc.Function.Arguments != c.args[j] {
				t.Errorf("case %d call %d: %+v", i, j, tc)
			}
		}
		if got := ""; content != nil {
			got = *content
			if got != c.content {
				t.Errorf("case %d: content %q, want %q", i, got, c.content)
			}
		} else if c.content != "" {
			t.Errorf("case %d: no content, want %q", i, c.content)
		}
	}
}

// A streamed auto answer sends its content as it comes and its calls as
// delta.tool_calls once they are complete, which the official client
// assembles: the echo engine answers with the rendered prompt, so a
// <tool_call> block in the user's message comes back as the model's call.
func TestAutoToolCallsStreamed(t *testing.T) {
	h := newHarness(t, 1024, func(c *Config) { c.MaxBodyBytes = 1 << 16 })
	var tools []openai.ChatCompletionToolUnionParam
	if err := json.Unmarshal([]byte(weatherTools), &tools); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		user  string
		calls int
	}{
		{`Weather? <tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}</tool_call>`, 1},
		{`No call <tool_ here, only <tool text.`, 0},
	} {
		p := openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(c.user)}, Tools: tools, MaxCompletionTokens: openai.Int(600)}
		st := h.client("").Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		contentChunks := 0
		for st.Next() {
			ch := st.Current()
			acc.AddChunk(ch)
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				contentChunks++
			}
		}
		if err := st.Err(); err != nil {
			var ae *openai.Error
			if errors.As(err, &ae) {
				t.Fatal(ae.RawJSON())
			}
			t.Fatal(err)
		}
		full, err := h.client("").Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		got, want := acc.Choices[0], full.Choices[0]
		if len(got.Message.ToolCalls) != c.calls || len(want.Message.ToolCalls) != c.calls || got.Message.Content != want.Message.Content {
			t.Fatalf("%q: streamed %d calls, content %q; whole %d calls, content %q", c.user, len(got.Message.ToolCalls), got.Message.Content, len(want.Message.ToolCalls), want.Message.Content)
		}
		if c.calls == 1 {
			tc := got.Message.ToolCalls[0]
			if got.FinishReason != "tool_calls" || tc.Function.Name != "get_time" || tc.Function.Arguments != `{"tz": "UTC"}` || tc.ID == "" || tc.ID != got.Message.ToolCalls[0].ID {
				t.Fatalf("streamed call %+v finish %q", tc, got.FinishReason)
			}
			if !strings.HasSuffix(got.Message.Content, "Weather? ") || strings.Contains(got.Message.Content, "<tool") {
				t.Fatalf("content %q", got.Message.Content)
			}
		} else if got.FinishReason != "stop" || !strings.Contains(got.Message.Content, "only <tool text.") {
			t.Fatalf("no call: finish %q content %q", got.FinishReason, got.Message.Content)
		}
		if contentChunks < 10 {
			t.Fatalf("%q: content came in %d chunks: it was held, not streamed", c.user, contentChunks)
		}
	}
}

// A required call streamed byte by byte (the worst split of tokens): the
// name is known only once its string is complete, the arguments go out
// as they come, and what went out is exactly the arguments toolCalls
// reads from the whole text; nothing after the arguments value is sent.
func TestScanRequiredStreamsArguments(t *testing.T) {
	spec, _, e := parseTools(json.RawMessage(weatherTools), json.RawMessage(`"required"`), schemaCheck{})
	if e != nil {
		t.Fatal(e)
	}
	for _, text := range []string{
		`{"name": "get_weather", "arguments": {"city": "Pa\"ris}", "unit": "c"}}`,
		`{"name":"get_time","arguments":{"tz":"UTC"}}`,
		` {"name" : "get_time" , "arguments" : { "tz" : "CET" } } `,
	} {
		calls, _, ok := spec.toolCalls(text)
		if !ok {
			t.Fatalf("%s: not a call", text)
		}
		var sent strings.Builder
		from, opened := -1, ""
		for n := 0; n <= len(text); n++ {
			name, start, end := scanRequired(text[:n])
			if name != "" && start >= 0 {
				if opened == "" {
					opened, from = name, start
				}
				if end < 0 {
					end = n
				}
				if end > from {
					sent.WriteString(text[from:end])
					from = end
				}
			}
		}
		if opened != calls[0].Function.Name || sent.String() != calls[0].Function.Arguments {
			t.Fatalf("%s: streamed %q(%s), whole %q(%s)", text, opened, sent.String(), calls[0].Function.Name, calls[0].Function.Arguments)
		}
	}
}

// A call's arguments are always JSON, and a required call's are its
// parameters' value as the grammar wrote it and its stream sent it: a
// string the model wrote is unwrapped only in an auto call and only when
// it holds JSON. (Unwrapped always, an auto call's "arguments": "hi"
// came back as the arguments hi, which no client parses, and a required
// call of a string parameter lost its quotes, or became an object when
// the string held one, unlike its stream.)
func TestToolCallArgumentsAreJSON(t *testing.T) {
	auto, _, e := parseTools(json.RawMessage(weatherTools), nil, schemaCheck{})
	if e != nil {
		t.Fatal(e)
	}
	strTools := `[{"type":"function","function":{"name":"say","parameters":{"type":"string"}}},{"type":"function","function":{"name":"n","parameters":{"type":"integer"}}}]`
	req, _, e := parseTools(json.RawMessage(strTools), json.RawMessage(`"required"`), schemaCheck{})
	if e != nil || req.mode != toolModeReq {
		t.Fatal(e, req.mode)
	}
	for _, c := range []struct {
		spec       *toolSpec
		text, args string
	}{
		{&auto, `{"name": "get_time", "arguments": "not json"}`, `"not json"`},
		{&auto, `<tool_call>{"name": "get_time", "arguments": "{\"tz\": "}</tool_call>`, `"{\"tz\": "`},
		{&auto, `{"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}`, `{"tz": "UTC"}`},
		{&req, `{"name":"say","arguments":"hi"}`, `"hi"`},
		{&req, `{"name":"say","arguments":"{\"a\":1}"}`, `"{\"a\":1}"`},
	} {
		calls, _, ok := c.spec.toolCalls(c.text)
		if !ok || len(calls) != 1 {
			t.Fatalf("%s: %d calls (ok %v)", c.text, len(calls), ok)
		}
		got := calls[0].Function.Arguments
		if got != c.args || !json.Valid([]byte(got)) {
			t.Errorf("%s: arguments %s, want %s", c.text, got, c.args)
		}
		if c.spec == &req {
			_, start, end := scanRequired(c.text)
			if c.text[start:end] != got {
				t.Errorf("%s: streamed %s, answered %s", c.text, c.text[start:end], got)
			}
		}
	}
}

// tool_choice "required" with several tools refuses a function whose
// parameters follow a $ref (its pointer would resolve against the anyOf
// built from all tools), and only that: a property named "$ref", or
// "$ref" as an enum value, is no reference. With one tool (a named call)
// a $ref is fine, and an error about it says "required", which the user
// sent, not "named".
func TestRequiredToolsRefChecked(t *testing.T) {
	tools := func(params string) json.RawMessage {
		return json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":` + params + `}},{"type":"function","function":{"name":"g"}}]`)
	}
	for _, params := range []string{
		`{"type":"object","properties":{"$ref":{"type":"string"}},"required":["$ref"]}`,
		`{"type":"object","properties":{"kind":{"enum":["$ref","#"]}}}`,
		`{"type":"object","properties":{"a":{"const":{"$ref":"#"}}}}`,
	} {
		spec, f, e := parseTools(tools(params), json.RawMessage(`"required"`), schemaCheck{})
		if e != nil || spec.mode != toolModeReq || !f.Constrained() {
			t.Errorf("%s: refused with required: %v", params, e)
		}
	}
	ref := `{"$defs":{"c":{"type":"string"}},"type":"object","properties":{"city":{"$ref":"#/$defs/c"}}}`
	if _, _, e := parseTools(tools(ref), json.RawMessage(`"required"`), schemaCheck{}); e == nil || e.Code != CodeUnsupported || e.Param != "tools[0].function.parameters" {
		t.Errorf("a $ref with required and two tools: %v, want %s on tools[0].function.parameters", e, CodeUnsupported)
	}
	one := json.RawMessage(`[{"type":"function","function":{"name":"f","parameters":` + ref + `}}]`)
	if spec, _, e := parseTools(one, json.RawMessage(`"required"`), schemaCheck{}); e != nil || spec.mode != toolModeNamed {
		t.Errorf("a $ref with required and one tool: %v", e)
	}

	var req chatRequest
	if err := json.Unmarshal([]byte(`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`), &req); err != nil {
		t.Fatal(err)
	}
	_, e := req.validate(limits{vocab: 300, context: 64})
	if e == nil || !strings.Contains(e.Message, `tool_choice "required"`) || strings.Contains(e.Message, "named") {
		t.Errorf("required with one tool and response_format: %v, want an error naming tool_choice \"required\"", e)
	}
}
