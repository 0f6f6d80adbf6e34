package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sluice/internal/engine"
)

// TestOpenAIFieldsClientsSend: the chat fields OpenAI clients and agent
// frameworks send beside the sampling parameters. Those that change
// nothing here (store false, metadata, service_tier auto/default, user,
// safety_identifier, prediction, text-only modalities, null audio and web
// search) are accepted and leave the engine request exactly as without
// them; those that would change the output or promise what sluice does not
// do are refused naming the field, never dropped.
func TestOpenAIFieldsClientsSend(t *testing.T) {
	h := newHarness(t, 512, func(c *Config) { c.MaxBodyBytes = 1 << 16 })
	chat := h.ts.URL + "/v1/chat/completions"
	base := `"messages":[{"role":"user","content":"x"}],"seed":1,"max_tokens":4`
	submit := func(extra string) (engine.Request, bool) {
		t.Helper()
		before := len(h.eng.Requests())
		body := `{` + base + `}`
		if extra != "" {
			body = `{` + base + `,` + extra + `}`
		}
		status, e := post(t, chat, "", body)
		if status != 200 {
			t.Errorf("%.90s: %d %s %q, want 200", extra, status, e.Code, e.Message)
			return engine.Request{}, false
		}
		reqs := h.eng.Requests()
		if len(reqs) == before {
			t.Errorf("%.90s: nothing reached the engine", extra)
			return engine.Request{}, false
		}
		return reqs[before], true
	}
	want, ok := submit("")
	if !ok {
		t.Fatal("the plain request failed")
	}
	meta := func(n, keyLen, valLen int) string {
		var b []string
		for i := range n {
			b = append(b, `"`+strings.Repeat(string(rune('a'+i%26)), keyLen-1)+string(rune('a'+i/26))+`":"`+strings.Repeat("v", valLen)+`"`)
		}
		return `{` + strings.Join(b, ",") + `}`
	}
	for _, extra := range []string{
		`"store":false`, `"store":null`,
		`"metadata":{"session":"s-1","user_tier":"free"}`, `"metadata":` + meta(16, 64, 512), `"metadata":{}`, `"metadata":null`,
		`"service_tier":"auto"`, `"service_tier":"default"`, `"service_tier":null`,
		`"user":"end-user-7"`, `"safety_identifier":"hash-of-user"`,
		`"prediction":{"type":"content","content":"x"}`, `"prediction":{"type":"content","content":[{"type":"text","text":"x"}]}`, `"prediction":null`,
		`"modalities":["text"]`, `"modalities":[]`, `"modalities":null`,
		`"audio":null`, `"web_search_options":null`, `"reasoning_effort":null`,
		`"parallel_tool_calls":true`,
	} {
		got, ok := submit(extra)
		if !ok {
			continue
		}
		if !reflect.DeepEqual(got.Prompt, want.Prompt) || !reflect.DeepEqual(got.Sampling, want.Sampling) || got.MaxTokens != want.MaxTokens {
			t.Errorf("%.90s changed the engine request: %+v, want %+v", extra, got, want)
		}
	}

	before := h.eng.submitted.Load()
	for _, c := range []struct{ extra, code, param string }{
		// Would change what is done or returned: refused, naming it.
		{`"store":true`, CodeUnsupported, "store"},
		{`"service_tier":"flex"`, CodeUnsupported, "service_tier"},
		{`"service_tier":"priority"`, CodeUnsupported, "service_tier"},
		{`"service_tier":"scale"`, CodeUnsupported, "service_tier"},
		{`"modalities":["text","audio"]`, CodeUnsupported, "modalities"},
		{`"modalities":["audio"]`, CodeUnsupported, "modalities"},
		{`"audio":{"voice":"alloy","format":"wav"}`, CodeUnsupported, "audio"},
		{`"web_search_options":{}`, CodeUnsupported, "web_search_options"},
		{`"web_search_options":{"search_context_size":"low"}`, CodeUnsupported, "web_search_options"},
		// The built-in template reads no reasoning_effort and no
		// thinking switch.
		{`"reasoning_effort":"high"`, CodeUnsupported, "reasoning_effort"},
		{`"reasoning_effort":"none"`, CodeUnsupported, "reasoning_effort"},
		// Wrong values and types name the field.
		{`"store":"no"`, CodeInvalidParam, "store"},
		{`"service_tier":"fast"`, CodeInvalidParam, "service_tier"},
		{`"service_tier":1`, CodeInvalidParam, "service_tier"},
		{`"reasoning_effort":"extreme"`, CodeInvalidParam, "reasoning_effort"},
		{`"reasoning_effort":3`, CodeInvalidParam, "reasoning_effort"},
		{`"modalities":"text"`, CodeInvalidParam, "modalities"},
		{`"metadata":"x"`, CodeInvalidParam, "metadata"},
		{`"metadata":{"k":1}`, CodeInvalidParam, "metadata"},
		{`"metadata":{"k":null}`, CodeInvalidParam, "metadata"},
		{`"metadata":` + meta(17, 4, 4), CodeInvalidParam, "metadata"},
		{`"metadata":` + meta(1, 65, 4), CodeInvalidParam, "metadata"},
		{`"metadata":` + meta(1, 4, 513), CodeInvalidParam, "metadata"},
		{`"user":["u"]`, CodeInvalidParam, "user"},
		{`"safety_identifier":1`, CodeInvalidParam, "safety_identifier"},
		{`"prediction":"x"`, CodeInvalidParam, "prediction"},
		{`"prediction":{"type":"other","content":"x"}`, CodeInvalidParam, "prediction"},
		{`"prediction":{"type":"content"}`, CodeInvalidParam, "prediction"},
		{`"prediction":{"type":"content","content":[{"type":"image_url"}]}`, CodeInvalidParam, "prediction"},
		{`"prediction":{"type":"content","content":"x","extra":1}`, CodeUnsupported, "prediction.extra"},
	} {
		status, e := post(t, chat, "", `{`+base+`,`+c.extra+`}`)
		param := ""
		if e.Param != nil {
			param = *e.Param
		}
		if status != 400 || e.Code != c.code || param != c.param || !strings.Contains(e.Message, c.param) {
			t.Errorf("%.90s: got %d %s param %q (%s), want 400 %s param %q named in the message", c.extra, status, e.Code, param, e.Message, c.code, c.param)
		}
	}
	if n := h.eng.submitted.Load() - before; n != 0 {
		t.Fatalf("refused requests reached the engine %d times", n)
	}
	// These are chat parameters: on /v1/completions they are named as such.
	status, e := post(t, h.ts.URL+"/v1/completions", "", `{"prompt":"x","store":false}`)
	if status != 400 || e.Code != CodeUnsupported || !strings.Contains(e.Message, "/v1/chat/completions") {
		t.Errorf("store on /v1/completions: %d %s %q", status, e.Code, e.Message)
	}
}

// reasoning_effort reaches a template that reads it as the variable
// reasoning_effort (as SGLang and gpt-oss's template take it); on a
// template that only switches thinking (Qwen3's enable_thinking), "none"
// turns thinking off and any other effort is refused with the way to
// switch it; chat_template_kwargs may not contradict it.
func TestReasoningEffortReachesTemplate(t *testing.T) {
	const effortTmpl = "{%- for m in messages %}{{ m['content'] }}{%- endfor %}[effort={{ reasoning_effort | default('medium') }}]"
	ct, err := NewChatTemplate(effortTmpl, "", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, 512, func(c *Config) { c.Chat = ct })
	chat := h.ts.URL + "/v1/chat/completions"
	rendered := func(extra string) string {
		t.Helper()
		before := len(h.eng.Requests())
		if status, e := post(t, chat, "", `{"messages":[{"role":"user","content":"x"}],"max_tokens":4`+extra+`}`); status != 200 {
			t.Fatalf("%s: %d %s %s", extra, status, e.Code, e.Message)
		}
		var b strings.Builder
		for _, id := range h.eng.Requests()[before].Prompt {
			if id < 256 {
				b.WriteByte(byte(id))
			}
		}
		return b.String()
	}
	if got := rendered(""); !strings.HasSuffix(got, "[effort=medium]") {
		t.Errorf("without reasoning_effort: %q", got)
	}
	for _, eff := range []string{"none", "minimal", "low", "high", "xhigh"} {
		if got := rendered(`,"reasoning_effort":"` + eff + `"`); !strings.HasSuffix(got, "[effort="+eff+"]") {
			t.Errorf("reasoning_effort %s: rendered %q", eff, got)
		}
	}
	if got := rendered(`,"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"low"}`); !strings.HasSuffix(got, "[effort=low]") {
		t.Errorf("agreeing kwargs: %q", got)
	}
	for _, kw := range []string{`"high"`, `{"a":1}`, `["low"]`, `null`} {
		status, e := post(t, chat, "", `{"messages":[{"role":"user","content":"x"}],"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":`+kw+`}}`)
		if status != 400 || e.Code != CodeInvalidParam || e.Param == nil || *e.Param != "reasoning_effort" {
			t.Errorf("disagreeing kwargs %s: %d %+v", kw, status, e)
		}
	}

	// A thinking switch only.
	qt, err := NewChatTemplate(qwen3Like, "", "")
	if err != nil {
		t.Fatal(err)
	}
	hq := newHarness(t, 512, func(c *Config) { c.Chat = qt })
	qchat := hq.ts.URL + "/v1/chat/completions"
	before := len(hq.eng.Requests())
	if status, e := post(t, qchat, "", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"reasoning_effort":"none"}`); status != 200 {
		t.Fatalf("reasoning_effort none on a thinking switch: %d %s %s", status, e.Code, e.Message)
	}
	var b strings.Builder
	for _, id := range hq.eng.Requests()[before].Prompt {
		if id < 256 {
			b.WriteByte(byte(id))
		}
	}
	if !strings.Contains(b.String(), "<think>\n\n</think>") {
		t.Errorf("reasoning_effort none did not switch thinking off: %q", b.String())
	}
	for _, body := range []string{
		`"reasoning_effort":"high"`,
		`"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}`,
	} {
		status, e := post(t, qchat, "", `{"messages":[{"role":"user","content":"hi"}],`+body+`}`)
		if status != 400 || e.Param == nil || *e.Param != "reasoning_effort" || !strings.Contains(e.Message, "enable_thinking") {
			t.Errorf("%s: %d %+v; want 400 on reasoning_effort naming enable_thinking", body, status, e)
		}
	}
}

// parallel_tool_calls false: at most one call, as OpenAI promises (the
// first the model wrote); streamed too. The echo engine answers the
// rendered prompt, so a user message holding two calls is an answer with
// two.
func TestParallelToolCallsFalseKeepsOneCall(t *testing.T) {
	h := newHarness(t, 1024, func(c *Config) { c.MaxBodyBytes = 1 << 16 })
	chat := h.ts.URL + "/v1/chat/completions"
	const two = `<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1}}</tool_call><tool_call>{\"name\":\"g\",\"arguments\":{}}</tool_call>`
	tools := `"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}]`
	for _, c := range []struct {
		parallel string
		want     []string
	}{{"", []string{"f", "g"}}, {`,"parallel_tool_calls":true`, []string{"f", "g"}}, {`,"parallel_tool_calls":false`, []string{"f"}}} {
		for _, stream := range []bool{false, true} {
			body := `{"messages":[{"role":"user","content":"` + two + `"}],` + tools + c.parallel + `,"stream":` + fmt.Sprint(stream) + `}`
			resp, err := http.Post(chat, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream %v: %d %s", c.parallel, stream, resp.StatusCode, data)
			}
			var names []string
			for _, m := range regexp.MustCompile(`"name":"([fg])"`).FindAllStringSubmatch(string(data), -1) {
				names = append(names, m[1])
			}
			if !slices.Equal(names, c.want) {
				t.Errorf("%q stream %v: calls %v, want %v\n%s", c.parallel, stream, names, c.want, data)
			}
		}
	}
}

// Reads matches a whole identifier only.
func TestTemplateReadsWholeIdentifier(t *testing.T) {
	for src, want := range map[string]bool{
		"{{ reasoning_effort }}":                          true,
		"{% if reasoning_effort is defined %}{% endif %}": true,
		"{{ my_reasoning_effort }}":                       false,
		"{{ reasoning_effort_level }}":                    false,
		"{{ x }}":                                         false,
		"{{ reasoning_effort2 }}{{ reasoning_effort }}":   true,
	} {
		ct, err := NewChatTemplate(src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if got := ct.Reads("reasoning_effort"); got != want {
			t.Errorf("%q reads reasoning_effort: %v, want %v", src, got, want)
		}
	}
}

// /tokenize renders messages as /v1/chat/completions does, reasoning_effort
// included: its tokens are the chat request's prompt, for each effort, on
// a template that reads it and on one that only switches thinking; what
// chat refuses, /tokenize refuses alike.
func TestTokenizeHonoursReasoningEffort(t *testing.T) {
	const effortTmpl = "{%- for m in messages %}{{ m['content'] }}{%- endfor %}[effort={{ reasoning_effort | default('medium') }}]"
	for _, c := range []struct {
		src     string
		efforts []string
		refused []string
	}{
		{effortTmpl, []string{"", "none", "minimal", "low", "medium", "high", "xhigh"}, nil},
		{qwen3Like, []string{"", "none"}, []string{"low", "high"}},
	} {
		ct, err := NewChatTemplate(c.src, "", "")
		if err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, 512, func(cfg *Config) { cfg.Chat = ct })
		for _, eff := range c.efforts {
			extra := ""
			if eff != "" {
				extra = `,"reasoning_effort":"` + eff + `"`
			}
			before := len(h.eng.Requests())
			if status, e := post(t, h.ts.URL+"/v1/chat/completions", "", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":4`+extra+`}`); status != 200 {
				t.Fatalf("chat %q: %d %s %s", eff, status, e.Code, e.Message)
			}
			want := h.eng.Requests()[before].Prompt
			status, m := postJSON(t, h.ts.URL+"/tokenize", "", `{"messages":[{"role":"user","content":"hi"}]`+extra+`}`)
			if status != 200 {
				t.Fatalf("/tokenize %q: %d %v", eff, status, m)
			}
			got, _ := json.Marshal(m["tokens"])
			wantJSON, _ := json.Marshal(want)
			if string(got) != string(wantJSON) || int(m["count"].(float64)) != len(want) {
				t.Errorf("/tokenize with reasoning_effort %q: %s (count %v), chat prefilled %s", eff, got, m["count"], wantJSON)
			}
		}
		for _, eff := range c.refused {
			body := `{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"` + eff + `"}`
			cs, ce := post(t, h.ts.URL+"/v1/chat/completions", "", body)
			ts, te := post(t, h.ts.URL+"/tokenize", "", body)
			if cs != 400 || ts != cs || te.Code != ce.Code || te.Param == nil || *te.Param != "reasoning_effort" {
				t.Errorf("reasoning_effort %q: chat %d %s, /tokenize %d %+v", eff, cs, ce.Code, ts, te)
			}
		}
		// Not one of OpenAI's values; a prompt has no template.
		for _, body := range []string{
			`{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"max"}`,
			`{"prompt":"hi","reasoning_effort":"low"}`,
		} {
			if status, e := post(t, h.ts.URL+"/tokenize", "", body); status != 400 || e.Code != CodeInvalidParam || e.Param == nil || *e.Param != "reasoning_effort" {
				t.Errorf("%s: %d %+v, want 400 %s on reasoning_effort", body, status, e, CodeInvalidParam)
			}
		}
	}
}
