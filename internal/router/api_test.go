package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.uber.org/goleak"

	"sluice/internal/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type harness struct {
	t   *testing.T
	eng *echoEngine
	srv *Server
	ts  *httptest.Server
}

func newHarness(t *testing.T, ctx int, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessAt(t, ctx, mod, nil)
}

// newHarnessAt is newHarness with the server on clk (nil: the wall clock),
// set before the server takes its first request.
func newHarnessAt(t *testing.T, ctx int, mod func(*Config), clk *vClock) *harness {
	t.Helper()
	eng := newEcho(ctx)
	cfg := Config{Engine: eng, Tokenizer: byteTok{}, MaxBodyBytes: 4096}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		srv.now = clk.Now
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &harness{t: t, eng: eng, srv: srv, ts: ts}
}

func (h *harness) client(key string) *openai.Client {
	opts := []option.RequestOption{option.WithBaseURL(h.ts.URL + "/v1/"), option.WithMaxRetries(0)}
	if key != "" {
		opts = append(opts, option.WithAPIKey(key))
	} else {
		opts = append(opts, option.WithAPIKey("unused"))
	}
	c := openai.NewClient(opts...)
	return &c
}

func prompt(s string) openai.CompletionNewParamsPromptUnion {
	return openai.CompletionNewParamsPromptUnion{OfString: openai.String(s)}
}

// apiErr asserts err is an OpenAI error with the given status and code and
// returns it.
func apiErr(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error %d %s, got %v", status, code, err)
	}
	if ae.StatusCode != status || ae.Code != code {
		t.Fatalf("want %d %s, got %d %s: %s", status, code, ae.StatusCode, ae.Code, ae.Message)
	}
	if ae.Message == "" {
		t.Fatal("error without a message")
	}
	return ae
}

func TestCompletion(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	r, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "echo-test-double", Prompt: prompt("hello"), MaxTokens: openai.Int(20), Temperature: openai.Float(0)})
	if err != nil {
		t.Fatal(err)
	}
	// The echo engine returns the prompt bytes then EOS (never shown):
	// BOS + 5 bytes in, 5 bytes + EOS out.
	if len(r.Choices) != 1 || r.Choices[0].Text != "hello" || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("got %+v", r.Choices)
	}
	if r.Usage.PromptTokens != 6 || r.Usage.CompletionTokens != 6 || r.Usage.TotalTokens != 12 {
		t.Fatalf("usage %+v", r.Usage)
	}
	if r.Object != "text_completion" || !strings.HasPrefix(r.ID, "cmpl-") || r.Model != "echo-test-double" {
		t.Fatalf("envelope %+v", r)
	}
	r, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "", Prompt: prompt("hello"), MaxTokens: openai.Int(3)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != "hel" || r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 3 {
		t.Fatalf("got %+v %+v", r.Choices, r.Usage)
	}
	// ignore_eos (vLLM's extension) reaches the engine.
	if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)}, option.WithJSONSet("ignore_eos", true)); err != nil || !h.eng.ignoreEOS.Load() {
		t.Fatalf("ignore_eos not passed on: %v", err)
	}
	// Token-id prompts are accepted as they are (no BOS added).
	r, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{'o', 'k'}}, MaxTokens: openai.Int(5)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != "ok" || r.Usage.PromptTokens != 2 {
		t.Fatalf("got %+v %+v", r.Choices, r.Usage)
	}
}

func TestCompletionStream(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	st := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Prompt: prompt("héllo wörld"), MaxTokens: openai.Int(40),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var text strings.Builder
	var finish string
	var usage *openai.CompletionUsage
	chunks := 0
	for st.Next() {
		ch := st.Current()
		chunks++
		if len(ch.Choices) == 0 {
			u := ch.Usage
			usage = &u
			continue
		}
		if usage != nil {
			t.Fatal("a chunk followed the usage chunk")
		}
		text.WriteString(ch.Choices[0].Text)
		if ch.Choices[0].FinishReason != "" {
			finish = string(ch.Choices[0].FinishReason)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != "héllo wörld" || finish != "stop" {
		t.Fatalf("text %q finish %q", text.String(), finish)
	}
	// 13 bytes: 1 BOS + 13 in; 13 + EOS out.
	if usage == nil || usage.PromptTokens != 14 || usage.CompletionTokens != 14 {
		t.Fatalf("usage %+v", usage)
	}
	if chunks < 5 {
		t.Fatalf("only %d chunks: not streamed", chunks)
	}
}

func TestChat(t *testing.T) {
	h := newHarness(t, 256, nil)
	c := h.client("")
	r, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be kind."), openai.UserMessage("Hi")},
		MaxCompletionTokens: openai.Int(100),
		Seed:                openai.Int(7),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The fallback template renders this prompt, which the echo engine
	// sends back.
	want := "Be kind.\n\nUser: Hi\nAssistant:"
	if r.Choices[0].Message.Content != want || r.Choices[0].FinishReason != "stop" || r.Choices[0].Message.Role != "assistant" {
		t.Fatalf("got %+v", r.Choices[0])
	}
	if r.Usage.PromptTokens != int64(1+len(want)) || r.Usage.CompletionTokens != int64(len(want)+1) {
		t.Fatalf("usage %+v", r.Usage)
	}
	if r.Object != "chat.completion" || !strings.HasPrefix(r.ID, "chatcmpl-") {
		t.Fatalf("envelope %+v", r)
	}
}

func TestChatTemplateFromModelAndBOS(t *testing.T) {
	ct, err := NewChatTemplate("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}", "\x01", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 128, func(c *Config) { c.Chat = ct; c.BOSText = "\x01" })
	r, err := h.client("").Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	if err != nil {
		t.Fatal(err)
	}
	// The template wrote BOS text itself, so no second BOS id was added:
	// 1 + len("[user]x") prompt tokens, all echoed.
	if r.Choices[0].Message.Content != "\x01[user]x" || r.Usage.PromptTokens != 8 {
		t.Fatalf("got %q, usage %+v", r.Choices[0].Message.Content, r.Usage)
	}
}

func TestChatStream(t *testing.T) {
	h := newHarness(t, 128, nil)
	st := h.client("").Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Yo")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var roles []string
	var finish string
	var usage openai.CompletionUsage
	first := true
	for st.Next() {
		ch := st.Current()
		if ch.Object != "chat.completion.chunk" {
			t.Fatalf("object %q", ch.Object)
		}
		if len(ch.Choices) == 0 {
			usage = ch.Usage
			continue
		}
		d := ch.Choices[0].Delta
		if first && d.Role != "assistant" {
			t.Fatalf("first chunk must carry the assistant role: %+v", d)
		}
		first = false
		if d.Role != "" {
			roles = append(roles, d.Role)
		}
		text.WriteString(d.Content)
		if ch.Choices[0].FinishReason != "" {
			finish = ch.Choices[0].FinishReason
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	want := "User: Yo\nAssistant:"
	if text.String() != want || finish != "stop" || len(roles) != 1 {
		t.Fatalf("text %q finish %q roles %v", text.String(), finish, roles)
	}
	if usage.PromptTokens != int64(len(want)+1) || usage.TotalTokens != usage.PromptTokens+usage.CompletionTokens {
		t.Fatalf("usage %+v", usage)
	}
}

func TestStopStrings(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	r, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello world"), MaxTokens: openai.Int(20),
		Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String(" wo")}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != "hello" || r.Choices[0].FinishReason != "stop" {
		t.Fatalf("got %+v", r.Choices[0])
	}
	// The client received 8 tokens ("hello wo") before the match.
	if r.Usage.CompletionTokens != 8 {
		t.Fatalf("usage %+v", r.Usage)
	}
	// Earliest match of several; a held-back prefix ("wx" of "wxyz") is
	// released when it does not complete.
	st := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Prompt: prompt("awxb cd ef"), MaxTokens: openai.Int(20),
		Stop: openai.CompletionNewParamsStopUnion{OfStringArray: []string{"ef", "wxyz", " c"}}})
	var got strings.Builder
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			if strings.Contains(ch.Choices[0].Text, " c") {
				t.Fatalf("a chunk carried the stop string: %q", ch.Choices[0].Text)
			}
			got.WriteString(ch.Choices[0].Text)
		}
	}
	if st.Err() != nil || got.String() != "awxb" {
		t.Fatalf("got %q, %v", got.String(), st.Err())
	}
}

func TestContextLengthExceeded(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	long := strings.Repeat("a", 50)
	_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Prompt: prompt(long), MaxTokens: openai.Int(20)})
	ae := apiErr(t, err, 400, CodeContextLength)
	// 1 BOS + 50 prompt + 20 = 71 > 64.
	for _, n := range []string{"64", "71", "51", "20"} {
		if !strings.Contains(ae.Message, n) {
			t.Errorf("message %q lacks %s", ae.Message, n)
		}
	}
	if ae.Param != "prompt" || ae.Type != "invalid_request_error" {
		t.Errorf("param %q type %q", ae.Param, ae.Type)
	}
	// I2/I1: rejected before the engine saw it.
	if n := h.eng.submitted.Load(); n != 0 {
		t.Fatalf("engine saw %d submissions", n)
	}
	// Exactly at the limit passes: 1+43+20 = 64.
	if _, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Prompt: prompt(long[:43]), MaxTokens: openai.Int(20)}); err != nil {
		t.Fatal(err)
	}
	// Chat without max tokens: the prompt alone must leave room.
	_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("b", 70))}})
	ae = apiErr(t, err, 400, CodeContextLength)
	if ae.Param != "messages" {
		t.Errorf("param %q", ae.Param)
	}
}

// post sends a raw body and decodes the error shape.
func post(t *testing.T, url, key, body string) (int, errorFields) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var eb struct {
		Error *errorFields `json:"error"`
	}
	if err := json.Unmarshal(data, &eb); err != nil || eb.Error == nil {
		if resp.StatusCode >= 400 {
			t.Fatalf("status %d with a body not in OpenAI's error shape: %s", resp.StatusCode, data)
		}
		return resp.StatusCode, errorFields{}
	}
	return resp.StatusCode, *eb.Error
}

func TestInvalidRequests(t *testing.T) {
	h := newHarness(t, 64, nil)
	url := h.ts.URL + "/v1/completions"
	chat := h.ts.URL + "/v1/chat/completions"
	cases := []struct {
		url, body   string
		status      int
		code, param string
	}{
		{url, `{"prompt": "hi"`, 400, CodeInvalidJSON, ""},
		{url, ``, 400, CodeInvalidJSON, ""},
		{url, `[1,2]`, 400, CodeInvalidJSON, ""},
		{url, `{"prompt":"hi"} {"x":1}`, 400, CodeInvalidJSON, ""},
		{url, `{"prompt":"hi","max_tokens":"ten"}`, 400, CodeInvalidParam, "max_tokens"},
		{url, `{"prompt":"hi","max_tokens":0}`, 400, CodeInvalidParam, "max_tokens"},
		{url, `{"prompt":"hi","temperature":2.5}`, 400, CodeInvalidParam, "temperature"},
		{url, `{"prompt":"hi","top_p":0}`, 400, CodeInvalidParam, "top_p"},
		{url, `{"prompt":"hi","top_k":-2}`, 400, CodeInvalidParam, "top_k"},
		{url, `{"prompt":"hi","n":17}`, 400, CodeInvalidParam, "n"},
		{url, `{"prompt":"hi","stop":5}`, 400, CodeInvalidParam, "stop"},
		{url, `{"prompt":"hi","stream_options":{"include_usage":true}}`, 400, CodeInvalidParam, "stream_options"},
		{url, `{"prompt":[]}`, 400, CodeInvalidParam, "prompt"},
		{url, `{"prompt":[1,999]}`, 400, CodeInvalidParam, "prompt"},
		{url, `{"prompt":{"x":1}}`, 400, CodeInvalidParam, "prompt"},
		{url, `{}`, 400, CodeMissingParam, "prompt"},
		{url, `{"prompt":"hi","echo":true,"logprobs":1}`, 400, CodeUnsupported, "echo"},
		{url, `{"prompt":"hi","model":"gpt-9"}`, 404, CodeUnknownModel, "model"},
		{chat, `{"messages":[]}`, 400, CodeInvalidParam, "messages"},
		{chat, `{"messages":"hi"}`, 400, CodeInvalidParam, "messages"},
		{chat, `{"messages":[{"role":"wizard","content":"x"}]}`, 400, CodeInvalidParam, "messages[0].role"},
		{chat, `{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, 400, CodeUnsupported, "messages[0].content"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":-3}`, 400, CodeInvalidParam, "max_completion_tokens"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, 400, CodeInvalidParam, "tools[0].function.name"},
		{url, `{"prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, CodeBodyTooLarge, ""},
	}
	for _, c := range cases {
		status, e := post(t, c.url, "", c.body)
		param := ""
		if e.Param != nil {
			param = *e.Param
		}
		if status != c.status || e.Code != c.code || param != c.param || e.Message == "" || e.Type == "" {
			t.Errorf("%.60s: got %d %s param %q (%q), want %d %s param %q", c.body, status, e.Code, param, e.Message, c.status, c.code, c.param)
		}
	}
	if n := h.eng.submitted.Load(); n != 0 {
		t.Fatalf("invalid requests reached the engine %d times", n)
	}
	// Unknown route and method.
	resp, err := http.Get(h.ts.URL + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown route: %d", resp.StatusCode)
	}
}

func writeKeys(t *testing.T) *Keys {
	t.Helper()
	p := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(p, []byte("# tenants\nka1 alice\n\n  ka2   alice\nkb bob\n"), 0o600)
	k, err := LoadKeys(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTenantsFromKeys(t *testing.T) {
	keys := writeKeys(t)
	if keys.Tenants() != 2 {
		t.Fatalf("tenants %d", keys.Tenants())
	}
	h := newHarness(t, 64, func(c *Config) { c.Keys = keys })
	ctx := context.Background()
	p := openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)}
	// A client claiming a tenant in the body changes nothing: the tenant
	// comes from the key alone.
	for _, k := range []string{"ka1", "ka2", "kb"} {
		if _, err := h.client(k).Completions.New(ctx, p, option.WithJSONSet("user", "bob")); err != nil {
			t.Fatal(err)
		}
		// A body naming a tenant is refused, never silently ignored.
		_, err := h.client(k).Completions.New(ctx, p, option.WithJSONSet("tenant", "bob"))
		if ae := apiErr(t, err, 400, CodeUnsupported); ae.Param != "tenant" {
			t.Fatalf("param %q, want tenant", ae.Param)
		}
	}
	if got := strings.Join(h.eng.Tenants(), ","); got != "alice,alice,bob" {
		t.Fatalf("tenants seen by the engine: %s", got)
	}
	_, err := h.client("nope").Completions.New(ctx, p)
	apiErr(t, err, 401, CodeInvalidKey)
	status, e := post(t, h.ts.URL+"/v1/completions", "", `{"prompt":"x"}`)
	if status != 401 || e.Code != CodeMissingKey || e.Type != "authentication_error" {
		t.Fatalf("missing key: %d %+v", status, e)
	}
	// The scheme is case-insensitive; a header of another shape is told
	// so (never "no API key given", which misleads the one who sent it),
	// without repeating what it held.
	for _, c := range []struct {
		header string
		status int
		code   string
		says   string
	}{
		{"bearer kb", 200, "", ""},
		{"BEARER   kb ", 200, "", ""},
		{"kb", 401, CodeMissingKey, "not of the form"},
		{"Basic a2I6", 401, CodeMissingKey, "not of the form"},
		{"Bearer", 401, CodeMissingKey, "not of the form"},
		{"", 401, CodeMissingKey, "no API key given"},
		{"bearer nope", 401, CodeInvalidKey, "not known"},
	} {
		req, _ := http.NewRequest("POST", h.ts.URL+"/v1/completions", strings.NewReader(`{"prompt":"x","max_tokens":1}`))
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb struct {
			Error errorFields `json:"error"`
		}
		_ = json.Unmarshal(body, &eb)
		if resp.StatusCode != c.status || eb.Error.Code != c.code || !strings.Contains(eb.Error.Message, c.says) {
			t.Errorf("Authorization %q: %d %s, want %d %s saying %q", c.header, resp.StatusCode, body, c.status, c.code, c.says)
		}
		if c.status == 401 && len(c.header) > len("Bearer") && strings.Contains(string(body), c.header) {
			t.Errorf("Authorization %q: the answer repeats the header: %s", c.header, body)
		}
	}
	if _, err := h.client("nope").Models.List(ctx); err == nil {
		t.Fatal("/v1/models must require a key in multi-tenant mode")
	}
	// The operator info for remote preflight needs a key too.
	req, _ := http.NewRequest("GET", h.ts.URL+"/sluice/info", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req.Header.Set("Authorization", "Bearer kb")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Server  string `json:"server"`
		Context int    `json:"context"`
	}
	json.NewDecoder(resp2.Body).Decode(&info)
	resp2.Body.Close()
	if resp.StatusCode != 401 || resp2.StatusCode != 200 || info.Server != "sluice" || info.Context != 64 {
		t.Fatalf("/sluice/info: %d without key, %d with; %+v", resp.StatusCode, resp2.StatusCode, info)
	}
	if h.eng.submitted.Load() != 5 {
		t.Fatal("unauthenticated requests reached the engine")
	}
}

// A key file line may give its tenant a weight in the fair queue; old
// files (two fields) stay valid, and every tenant's weight reaches the
// engine with its requests.
func TestKeyWeightsReachTheEngine(t *testing.T) {
	keys, err := ParseKeys(strings.NewReader("ka alice weight=3\nka2 alice\nkb bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	if keys.Weight("alice") != 3 || keys.Weight("bob") != 1 || keys.Weight("nobody") != 1 || (*Keys)(nil).Weight("x") != 1 {
		t.Fatalf("weights alice %d bob %d", keys.Weight("alice"), keys.Weight("bob"))
	}
	h := newHarness(t, 64, func(c *Config) { c.Keys = keys })
	for _, key := range []string{"ka2", "kb"} {
		if _, err := h.client(key).Completions.New(context.Background(), openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}); err != nil {
			t.Fatal(err)
		}
	}
	h.eng.mu.Lock()
	got := fmt.Sprint(h.eng.tenants, h.eng.weights)
	h.eng.mu.Unlock()
	if got != "[alice bob] [3 1]" {
		t.Fatalf("engine saw %s, want [alice bob] [3 1]", got)
	}
}

func TestParseKeysErrors(t *testing.T) {
	for _, bad := range []string{"", "# only a comment\n", "k1 a extra\n", "k1\n", "k1 a\nk1 b\n",
		"k1 a weight=0\n", "k1 a weight=1001\n", "k1 a weight=x\n", "k1 a weight=2\nk2 a weight=3\n", "k1 a weight=2 more\n",
		"k1 a weight=99999999999999999999\n"} {
		if _, err := ParseKeys(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	k, err := ParseKeys(strings.NewReader("k1 a\nk1 a\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ten, ok := k.Lookup("k1"); !ok || ten != "a" {
		t.Fatal("lookup")
	}
	for _, miss := range []string{"", "k", "k1 ", "k11"} {
		if _, ok := k.Lookup(miss); ok {
			t.Errorf("%q matched", miss)
		}
	}
}

func TestEngineFailures(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("FAIL_EARLY"), MaxTokens: openai.Int(20)})
	if ae := apiErr(t, err, 502, engine.CodeHandoff); ae.Type != "server_error" {
		t.Fatalf("type %q", ae.Type)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("FAIL_LATE"), MaxTokens: openai.Int(20)})
	apiErr(t, err, 500, engine.CodeIntegrity)
	// Streaming, failure before the first token: a proper status.
	st := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Prompt: prompt("FAIL_EARLY"), MaxTokens: openai.Int(20)})
	for st.Next() {
		t.Fatal("chunk from a failed request")
	}
	apiErr(t, st.Err(), 502, engine.CodeHandoff)

	// Streaming, failure after text went out: an error event ends the
	// stream, never a finish_reason (the incident's clean 200).
	for _, chat := range []bool{false, true} {
		var text strings.Builder
		finished := false
		var serr error
		if chat {
			cs := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("FAIL_LATE")}, MaxTokens: openai.Int(20)})
			for cs.Next() {
				ch := cs.Current()
				text.WriteString(ch.Choices[0].Delta.Content)
				finished = finished || ch.Choices[0].FinishReason != ""
			}
			serr = cs.Err()
		} else {
			st = c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Prompt: prompt("FAIL_LATE"), MaxTokens: openai.Int(20)})
			for st.Next() {
				ch := st.Current()
				text.WriteString(ch.Choices[0].Text)
				finished = finished || ch.Choices[0].FinishReason != ""
			}
			serr = st.Err()
		}
		if serr == nil || !strings.Contains(serr.Error(), engine.CodeIntegrity) {
			t.Fatalf("chat=%v: want a stream error carrying %s, got %v", chat, engine.CodeIntegrity, serr)
		}
		if finished || text.Len() != 2 {
			t.Fatalf("chat=%v: finished=%v text %q", chat, finished, text.String())
		}
	}
	// Submit refusals keep the engine's status and code.
	h.eng.refuse = &engine.Error{Code: engine.CodeOverloaded, Status: 429, Message: "busy"}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)})
	apiErr(t, err, 429, engine.CodeOverloaded)
}

// The engine's queue refusals (full: 429; waited too long: 503) reach the
// client with their code and a Retry-After header.
func TestQueueRefusalsCarryRetryAfter(t *testing.T) {
	h := newHarness(t, 64, nil)
	for _, e := range []*engine.Error{
		{Code: engine.CodeOverloaded, Status: 429, Message: "the queue is full"},
		{Code: engine.CodeQueueTimeout, Status: 503, Message: "waited too long"},
	} {
		h.eng.refuse = e
		resp, err := http.Post(h.ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != e.Status || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), e.Code) {
			t.Fatalf("%s: status %d, Retry-After %q, body %s", e.Code, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
}

func TestOverloadAnswersAtOnce(t *testing.T) {
	h := newHarness(t, 64, func(c *Config) { c.MaxConcurrency = 1 })
	c := h.client("")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("HOLD"), MaxTokens: openai.Int(10)})
		done <- err
	}()
	waitFor(t, func() bool { return h.eng.Active() == 1 })
	_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)})
	apiErr(t, err, 429, CodeOverloaded)
	close(h.eng.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The slot came back.
	if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)}); err != nil {
		t.Fatal(err)
	}
}

// One tenant at its own limit is refused; another tenant is still served.
func TestTenantConcurrencyLimit(t *testing.T) {
	keys := writeKeys(t)
	h := newHarness(t, 64, func(c *Config) { c.Keys = keys; c.TenantConcurrency = 1 })
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := h.client("ka1").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("HOLD"), MaxTokens: openai.Int(10)})
		done <- err
	}()
	waitFor(t, func() bool { return h.eng.Active() == 1 })
	// alice's second key is the same tenant.
	_, err := h.client("ka2").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)})
	apiErr(t, err, 429, CodeTenantLimit)
	if _, err := h.client("kb").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)}); err != nil {
		t.Fatalf("bob was refused while alice was at her limit: %v", err)
	}
	close(h.eng.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := h.client("ka2").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)}); err != nil {
		t.Fatalf("alice's slot did not come back: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// I10: a client that disconnects mid-stream makes the router call Cancel
// and drain the stream; the handler does not hang on the dead client.
func TestDisconnectCancels(t *testing.T) {
	for _, stream := range []bool{false, true} {
		h := newHarness(t, 64, nil)
		c := h.client("")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p := openai.CompletionNewParams{Prompt: prompt("HOLD me"), MaxTokens: openai.Int(20)}
			if stream {
				st := c.Completions.NewStreaming(ctx, p)
				for st.Next() {
				}
			} else {
				c.Completions.New(ctx, p)
			}
		}()
		waitFor(t, func() bool { return h.eng.Active() == 1 })
		cancel()
		<-done
		waitFor(t, func() bool { return h.eng.cancels.Load() == 1 && h.eng.Active() == 0 })
		h.ts.Close() // waits for the handler to return
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	stats := func() EngineStats {
		return EngineStats{
			Pools:        []PoolStats{{Role: "decode", Pages: map[string]int{"free": 7, "sealed": 1}}},
			Violations:   map[string]uint64{"stale_generation": 2},
			HandoffBytes: 4096, Handoffs: 2, HandoffSeconds: 0.5, LateWritesDropped: 3,
		}
	}
	h := newHarness(t, 64, func(c *Config) { c.Stats = stats })
	c := h.client("")
	ctx := context.Background()
	resp, err := http.Get(h.ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int    `json:"context_length"`
			MaxModelLen   int    `json:"max_model_len"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "echo-test-double" || models.Data[0].ContextLength != 64 || models.Data[0].MaxModelLen != 64 {
		t.Fatalf("models %+v", models)
	}
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "echo-test-double" {
		t.Fatalf("client list: %v %+v", err, page)
	}

	c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hey"), MaxTokens: openai.Int(10)})
	c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt(strings.Repeat("z", 80)), MaxTokens: openai.Int(10)})
	c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("FAIL_LATE"), MaxTokens: openai.Int(10)})

	resp, err = http.Get(h.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`sluice_requests_total{code="",route="/v1/completions",status="200"} 1`,
		`sluice_requests_total{code="context_length_exceeded",route="/v1/completions",status="400"} 1`,
		`sluice_requests_total{code="kv_integrity_violation",route="/v1/completions",status="500"} 1`,
		`sluice_prompt_tokens_total 14`, // 4 + 10 (FAIL_LATE: BOS + 9); no tenant label by default
		`sluice_completion_tokens_total 6`,
		`sluice_time_to_first_token_seconds_count 2`,
		`sluice_inter_token_latency_seconds_count 4`,
		`sluice_kv_pages{role="decode",state="free"} 7`,
		`sluice_integrity_violations_total{kind="stale_generation"} 2`,
		`sluice_handoff_bytes_total 4096`,
		`sluice_handoff_seconds_count 2`,
		`sluice_late_writes_dropped_total 3`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", body)
	}

	resp, _ = http.Get(h.ts.URL + "/health")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health %d", resp.StatusCode)
	}
	h.srv.Drain()
	// Draining is readiness, not liveness (see TestHealthIsLivenessReadyIsReadiness).
	resp, _ = http.Get(h.ts.URL + "/ready")
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("draining ready %d", resp.StatusCode)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)})
	apiErr(t, err, 503, CodeDraining)
}

// panicky is a test double whose Submit panics on a marker.
type panicky struct{ *echoEngine }

func (p panicky) Submit(ctx context.Context, r *engine.Request) (engine.Stream, error) {
	if len(r.Prompt) > 1 && r.Prompt[1] == '!' {
		panic("test double panic")
	}
	return p.echoEngine.Submit(ctx, r)
}

func TestPanicFailsOneRequestOnly(t *testing.T) {
	h := newHarness(t, 64, nil)
	srv, _ := New(Config{Engine: panicky{h.eng}, Tokenizer: byteTok{}})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	status, e := post(t, ts.URL+"/v1/completions", "", `{"prompt":"!boom"}`)
	if status != 500 || e.Code != CodeInternal {
		t.Fatalf("%d %+v", status, e)
	}
	status, _ = post(t, ts.URL+"/v1/completions", "", `{"prompt":"fine","max_tokens":3}`)
	if status != 200 {
		t.Fatalf("server did not survive: %d", status)
	}
}

// refusal is a request body sent to url, refused with 400
// unsupported_parameter naming param, its message saying says.
type refusal struct{ url, body, param, says string }

// refusedNaming sends each refusal's body and checks its answer, and that
// none reached the engine.
func refusedNaming(t *testing.T, h *harness, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		status, e := post(t, c.url, "", c.body)
		if status != 400 || e.Code != CodeUnsupported || e.Param == nil || *e.Param != c.param || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s: %d %+v, want 400 %s param %s saying %q", c.body, status, e, CodeUnsupported, c.param, c.says)
		}
	}
	if n := h.eng.submitted.Load(); n != 0 {
		t.Fatalf("refused requests reached the engine %d times", n)
	}
}

// A parameter of the other generation route is refused naming the route
// that takes it, so that a response_format sent to /v1/completions does not
// read as "this server has no structured outputs".
func TestOtherRouteParameterNamed(t *testing.T) {
	h := newHarness(t, 64, nil)
	comp, chat := h.ts.URL+"/v1/completions", h.ts.URL+"/v1/chat/completions"
	refusedNaming(t, h, []refusal{
		{comp, `{"prompt":"hi","response_format":{"type":"json_object"}}`, "response_format", "a parameter of /v1/chat/completions, not of /v1/completions"},
		{comp, `{"prompt":"hi","tools":[]}`, "tools", "a parameter of /v1/chat/completions"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"echo":true}`, "echo", "a parameter of /v1/completions, not of /v1/chat/completions"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"prompt":"x"}`, "prompt", "a parameter of /v1/completions"},
		{comp, `{"prompt":"hi","frobnicate":1}`, "frobnicate", "not a parameter this server supports"},
	})
}

// A key llama-server takes is refused with the name to send instead, so a
// user coming from llama-server is not only told to remove it.
func TestLlamaServerNamesAnswered(t *testing.T) {
	h := newHarness(t, 64, nil)
	comp, chat, tok := h.ts.URL+"/v1/completions", h.ts.URL+"/v1/chat/completions", h.ts.URL+"/tokenize"
	refusedNaming(t, h, []refusal{
		{tok, `{"content":"hi"}`, "content", `send the text as "prompt"`},
		{tok, `{"prompt":"hi","add_special":true}`, "add_special", `"add_special_tokens"`},
		{tok, `{"prompt":"hi","with_pieces":true}`, "with_pieces", `"return_token_strs"`},
		{comp, `{"prompt":"hi","n_predict":4}`, "n_predict", `send "max_tokens"`},
		{chat, `{"messages":[{"role":"user","content":"x"}],"repeat_penalty":1.1}`, "repeat_penalty", `send "repetition_penalty"`},
		{comp, `{"prompt":"hi","n_probs":2}`, "n_probs", `send "logprobs": N`},
		{chat, `{"messages":[{"role":"user","content":"x"}],"n_probs":2}`, "n_probs", `"top_logprobs": N`},
		{chat, `{"messages":[{"role":"user","content":"x"}],"cache_prompt":true}`, "cache_prompt", "the prefix cache is on"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"json_schema":{}}`, "json_schema", `"response_format": {"type": "json_schema"`},
		{tok, `{"prompt":"hi","n_predict":4}`, "n_predict", "not a parameter this server supports"},
	})
}

// A route of llama-server, or one not served, is a 404 that says where to
// go instead, not only the list of routes.
func TestNotFoundSaysWhereToGo(t *testing.T) {
	h := newHarness(t, 64, nil)
	for _, c := range []struct{ method, path, says string }{
		{"POST", "/completion", "POST /v1/completions"},
		{"POST", "/v1/embeddings", "embeddings are not served"},
		{"POST", "/v1/responses", "/v1/chat/completions"},
		{"GET", "/props", "GET /v1/models"},
		{"GET", "/v1/nothing", "see /v1/completions"},
	} {
		req, _ := http.NewRequest(c.method, h.ts.URL+c.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(body), CodeNotFound) || !strings.Contains(string(body), c.says) {
			t.Errorf("%s %s: %d %s, want 404 %s saying %q", c.method, c.path, resp.StatusCode, body, CodeNotFound, c.says)
		}
	}
}

// An integer beyond its field's range is told so, with the range; a
// fraction is still the wrong type.
func TestIntegerOutOfRangeNamed(t *testing.T) {
	h := newHarness(t, 64, nil)
	comp := h.ts.URL + "/v1/completions"
	for _, c := range []struct{ body, param, says string }{
		{`{"prompt":"hi","seed":99999999999999999999}`, "seed", "seed 99999999999999999999 is out of range: an integer from -9223372036854775808 to 9223372036854775807"},
		{`{"prompt":"hi","seed":-9223372036854775809}`, "seed", "is out of range"},
		{`{"prompt":"hi","seed":1.5}`, "seed", "must be of type integer, not a JSON number 1.5"},
		{`{"prompt":"hi","max_tokens":1e30}`, "max_tokens", "must be of type integer"},
	} {
		status, e := post(t, comp, "", c.body)
		if status != 400 || e.Code != CodeInvalidParam || e.Param == nil || *e.Param != c.param || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s: %d %+v, want 400 %s param %s saying %q", c.body, status, e, CodeInvalidParam, c.param, c.says)
		}
	}
	// The bound itself is accepted.
	if status, e := post(t, comp, "", `{"prompt":"hi","max_tokens":2,"seed":9223372036854775807}`); status != 200 {
		t.Errorf("seed 2^63-1: %d %+v", status, e)
	}
}

// A route asked with another method is a 405 naming the method it takes
// (with Allow), in OpenAI's error shape; an unknown path stays a 404.
func TestWrongMethodIs405(t *testing.T) {
	h := newHarness(t, 64, nil)
	for _, c := range []struct {
		method, path string
		status       int
		allow, code  string
	}{
		{"GET", "/v1/chat/completions", 405, "POST", CodeMethodNotAllow},
		{"GET", "/v1/completions", 405, "POST", CodeMethodNotAllow},
		{"PUT", "/tokenize", 405, "POST", CodeMethodNotAllow},
		{"POST", "/v1/models", 405, "GET", CodeMethodNotAllow},
		{"DELETE", "/v1/models/echo-test-double", 405, "GET", CodeMethodNotAllow},
		{"POST", "/health", 405, "GET", CodeMethodNotAllow},
		{"GET", "/v1/embeddings", 404, "", CodeNotFound},
		{"POST", "/v1/chat", 404, "", CodeNotFound},
	} {
		req, _ := http.NewRequest(c.method, h.ts.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var eb struct {
			Error errorFields `json:"error"`
		}
		_ = json.Unmarshal(body, &eb)
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow || eb.Error.Code != c.code {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q %s", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), body, c.status, c.allow, c.code)
		}
		if c.status == 405 && !strings.Contains(eb.Error.Message, "takes "+c.allow) {
			t.Errorf("%s %s: %q does not name the method", c.method, c.path, eb.Error.Message)
		}
	}
}
