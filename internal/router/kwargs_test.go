package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testenv"
)

// qwen3Like is the part of Qwen3's chat template that chat_template_kwargs
// switches: enable_thinking false writes an empty think block after the
// generation prompt, which is how vLLM users turn thinking off.
const qwen3Like = "{%- for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{%- endfor %}" +
	"{%- if add_generation_prompt %}<|im_start|>assistant\n{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}{%- endif %}" +
	"{%- if persona is defined %}[{{ persona.upper() }}]{%- endif %}"

func TestChatTemplateKwargs(t *testing.T) {
	ct, err := NewChatTemplate(qwen3Like, "", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 512, func(c *Config) { c.Chat = ct })
	chat := func(kwargs any) (string, error) {
		opts := []option.RequestOption{}
		if kwargs != nil {
			opts = append(opts, option.WithJSONSet("chat_template_kwargs", kwargs))
		}
		r, err := h.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}, opts...)
		if err != nil {
			return "", err
		}
		return r.Choices[0].Message.Content, nil // the echo engine answers the rendered prompt
	}
	const think = "<think>\n\n</think>" // the template strips what follows
	for _, c := range []struct {
		kwargs any
		think  bool
	}{{nil, false}, {map[string]any{"enable_thinking": false}, true}, {map[string]any{"enable_thinking": true}, false}, {map[string]any{}, false}} {
		out, err := chat(c.kwargs)
		if err != nil || strings.Contains(out, think) != c.think {
			t.Errorf("kwargs %v: %q, %v; want think block %v", c.kwargs, out, err, c.think)
		}
	}
	if out, err := chat(map[string]any{"persona": "pirate"}); err != nil || !strings.Contains(out, "[PIRATE]") {
		t.Errorf("a string kwarg: %q %v", out, err)
	}
	// Refused, each naming the parameter: not an object, a variable the
	// server sets, a bad name, too deep, too many, a number out of
	// bounds, and a value the template cannot use.
	deep := map[string]any{"a": map[string]any{"b": map[string]any{"c": map[string]any{"d": map[string]any{"e": 1}}}}}
	many := map[string]any{}
	for i := range 33 {
		many[strings.Repeat("k", i+1)] = i
	}
	for _, bad := range []any{[]any{1}, "x", map[string]any{"messages": []any{}}, map[string]any{"add_generation_prompt": false},
		map[string]any{"1x": 1}, deep, many, map[string]any{"n": 1 << 30}, map[string]any{"persona": 3}} {
		_, err := chat(bad)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "chat_template_kwargs" {
			t.Errorf("kwargs %v: want 400 on chat_template_kwargs, got %v", bad, err)
		}
	}
	// A value the template cannot take is the request's fault, with the
	// template's reason.
	var ae *openai.Error
	if _, err := chat(map[string]any{"persona": 3}); !errors.As(err, &ae) || ae.Code != CodeTemplate || !strings.Contains(ae.Message, "renders without them") || !strings.Contains(ae.Message, "upper") {
		t.Errorf("unusable value: %v", err)
	}
}

// postJSON posts body and decodes the JSON answer.
func postJSON(t *testing.T, url, key, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.NewDecoder(bytes.NewReader(data)).Decode(&m); err != nil {
		t.Fatalf("%s: not JSON: %s", url, data)
	}
	return resp.StatusCode, m
}

// /tokenize and /detokenize as vLLM shapes them, authenticated as the
// other routes are, counting exactly what generation would prefill.
func TestTokenizeDetokenize(t *testing.T) {
	ct, err := NewChatTemplate("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}{% if enable_thinking is defined and enable_thinking is false %}/no_think{% endif %}", "\x01", "")
	if err != nil {
		t.Fatal(err)
	}
	keys := writeKeys(t)
	h := newHarness(t, 128, func(c *Config) { c.Chat = ct; c.BOSText = "\x01"; c.Keys = keys })
	tok, detok := h.ts.URL+"/tokenize", h.ts.URL+"/detokenize"
	for _, u := range []string{tok, detok} {
		if code, m := postJSON(t, u, "", `{"prompt":"hi","tokens":[1]}`); code != 401 {
			t.Errorf("%s without a key: %d %v", u, code, m)
		}
	}
	num := func(v any) int { f, _ := v.(float64); return int(f) }
	code, m := postJSON(t, tok, "kb", `{"model":"echo-test-double","prompt":"hi"}`)
	if code != 200 || num(m["count"]) != 3 || num(m["max_model_len"]) != 128 || len(m["tokens"].([]any)) != 3 || num(m["tokens"].([]any)[0]) != fakeBOS {
		t.Errorf("tokenize prompt: %d %v", code, m)
	}
	if _, m = postJSON(t, tok, "kb", `{"prompt":"hi","add_special_tokens":false,"return_token_strs":true}`); num(m["count"]) != 2 || len(m["token_strs"].([]any)) != 2 || m["token_strs"].([]any)[0] != "h" {
		t.Errorf("tokenize without BOS: %v", m)
	}
	// Messages: the count a chat request of the same messages prefills.
	r, err := h.client("kb").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}}, option.WithJSONSet("chat_template_kwargs", map[string]any{"enable_thinking": false}))
	if err != nil {
		t.Fatal(err)
	}
	code, m = postJSON(t, tok, "kb", `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false}}`)
	if code != 200 || num(m["count"]) != int(r.Usage.PromptTokens) || num(m["count"]) != len("\x01[user]x/no_think") {
		t.Errorf("tokenize messages: %d %v, chat prefilled %d", code, m, r.Usage.PromptTokens)
	}
	code, m = postJSON(t, detok, "kb", `{"model":"echo-test-double","tokens":[104,105,33]}`)
	if code != 200 || m["prompt"] != "hi!" || len(m) != 1 {
		t.Errorf("detokenize: %d %v", code, m)
	}
	for _, c := range []struct{ url, body, param string }{
		{detok, `{"tokens":[104,999]}`, "tokens"},
		{detok, `{"prompt":"x"}`, "prompt"},
		{tok, `{}`, "prompt"},
		{tok, `{"prompt":"x","messages":[{"role":"user","content":"x"}]}`, "messages"},
		{tok, `{"prompt":"x","chat_template_kwargs":{"a":1}}`, "add_generation_prompt"},
		{tok, `{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"messages":1}}`, "chat_template_kwargs"},
		{tok, `{"prompt":"x","model":"other"}`, "model"},
	} {
		code, m := postJSON(t, c.url, "kb", c.body)
		e, _ := m["error"].(map[string]any)
		if code < 400 || e == nil || e["param"] != c.param {
			t.Errorf("%s %s: %d %v, want an error on %s", c.url, c.body, code, m, c.param)
		}
	}
}

// Qwen3's own template (testdata/templates) with enable_thinking false
// renders what Hugging Face's apply_chat_template(..., enable_thinking=
// False) renders: the generation prompt followed by an empty think block.
func TestQwen3EnableThinkingKwarg(t *testing.T) {
	b, err := os.ReadFile(testenv.Shared(t, "templates/Qwen-Qwen3-0.6B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	ct, err := NewChatTemplate(string(b), "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	kw, e := parseTemplateKwargs([]byte(`{"enable_thinking": false}`))
	if e != nil {
		t.Fatal(e)
	}
	got, err := ct.RenderWith([]ChatMessage{{Role: "user", Content: "Hi there"}}, RenderOptions{Kwargs: kw})
	if want := "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"; err != nil || got != want {
		t.Errorf("enable_thinking false:\ngot  %q (%v)\nwant %q", got, err, want)
	}
	kw, _ = parseTemplateKwargs([]byte(`{"enable_thinking": true}`))
	if got, err := ct.RenderWith([]ChatMessage{{Role: "user", Content: "Hi there"}}, RenderOptions{Kwargs: kw}); err != nil || strings.Contains(got, "<think>") {
		t.Errorf("enable_thinking true: %q %v", got, err)
	}
}

// /tokenize takes a chat request's tools, rendered by the template as
// /v1/chat/completions renders them: its count is that request's
// prompt_tokens (it counted the messages alone, fewer tokens than the
// request prefills). A prompt with tools is refused.
func TestTokenizeWithTools(t *testing.T) {
	ct, err := NewChatTemplate("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}{% if tools %}{% for t in tools %}<tool {{ t['function']['name'] }}>{% endfor %}{% endif %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 256, func(c *Config) { c.Chat = ct })
	tools := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	status, resp := postJSON(t, h.ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"x"}],"max_tokens":1,"tools":`+tools+`}`)
	usage, _ := resp["usage"].(map[string]any)
	if status != 200 || usage == nil {
		t.Fatalf("chat with tools: %d %v", status, resp)
	}
	want, _ := usage["prompt_tokens"].(float64)
	code, m := postJSON(t, h.ts.URL+"/tokenize", "", `{"messages":[{"role":"user","content":"x"}],"tools":`+tools+`}`)
	_, plain := postJSON(t, h.ts.URL+"/tokenize", "", `{"messages":[{"role":"user","content":"x"}]}`)
	without, _ := plain["count"].(float64)
	if got, _ := m["count"].(float64); code != 200 || got != want || int(got-without) != len("<tool get_weather>") {
		t.Errorf("tokenize with tools: %d %v (without tools %v); the chat request prefilled %v", code, m, without, want)
	}
	for _, c := range []struct{ body, param string }{
		{`{"prompt":"x","tools":` + tools + `}`, "tools"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"bad name"}}]}`, "tools[0].function.name"},
	} {
		code, m := postJSON(t, h.ts.URL+"/tokenize", "", c.body)
		e, _ := m["error"].(map[string]any)
		if code != 400 || e == nil || e["param"] != c.param {
			t.Errorf("%s: %d %v, want 400 on %s", c.body, code, m, c.param)
		}
	}
}

// A message's name reaches the template as message.name (agent frameworks
// set it on every message; vLLM passes it the same way), and a message
// without one renders as before.
func TestMessageNameReachesTemplate(t *testing.T) {
	ct, err := NewChatTemplate("{% for m in messages %}[{{ m['role'] }}{% if m['name'] is defined %}:{{ m['name'] }}{% endif %}]{{ m['content'] }}{% endfor %}", "", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 128, func(c *Config) { c.Chat = ct })
	code, body := postJSON(t, h.ts.URL+"/tokenize", "", `{"messages":[{"role":"user","content":"hi","name":"bob"},{"role":"assistant","content":"yo"}]}`)
	if code != http.StatusOK {
		t.Fatalf("%d %v", code, body)
	}
	var text []byte
	for _, id := range body["tokens"].([]any) {
		text = append(text, byte(id.(float64)))
	}
	if got, want := strings.TrimPrefix(string(text), "\x00"), "[user:bob]hi[assistant]yo"; got != want { // after byteTok's BOS
		t.Fatalf("rendered %q, want %q", got, want)
	}
}
