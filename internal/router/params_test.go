package router

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/engine"
	"sluice/internal/sample"
)

// TestParameterBounds: each bound's edge values, just inside (reaches the
// engine with the value it means) and just outside (400 naming the
// parameter, nothing submitted). The harness serves vocabulary 258 and a
// context of 64.
func TestParameterBounds(t *testing.T) {
	h := newHarness(t, 64, func(c *Config) { c.MaxBodyBytes = 1 << 16 })
	comp := h.ts.URL + "/v1/completions"
	chat := h.ts.URL + "/v1/chat/completions"
	msgs := `"messages":[{"role":"user","content":"x"}]`
	ids := func(n int) string {
		var b []string
		for i := range n {
			b = append(b, fmt.Sprint(i))
		}
		return "[" + strings.Join(b, ",") + "]"
	}
	strs := func(n, size int) string {
		var b []string
		for i := range n {
			b = append(b, fmt.Sprintf("%q", strings.Repeat(string(rune('a'+i%26)), size)))
		}
		return "[" + strings.Join(b, ",") + "]"
	}
	bias := func(n int) string {
		var b []string
		for i := range n {
			b = append(b, fmt.Sprintf(`"%d":1`, i))
		}
		return "{" + strings.Join(b, ",") + "}"
	}
	type okCase struct {
		url, extra string
		check      func(r engine.Request) bool
	}
	ok := []okCase{
		{comp, `"temperature":0`, func(r engine.Request) bool { return r.Sampling.Temperature == 0 }},
		{comp, `"temperature":2`, func(r engine.Request) bool { return r.Sampling.Temperature == 2 }},
		{comp, `"top_p":1`, func(r engine.Request) bool { return r.Sampling.TopP == 1 }},
		{comp, `"top_p":1e-9`, func(r engine.Request) bool { return r.Sampling.TopP == 1e-9 }},
		{comp, `"top_k":-1`, func(r engine.Request) bool { return r.Sampling.TopK == 0 }},
		{comp, `"top_k":0`, func(r engine.Request) bool { return r.Sampling.TopK == 0 }},
		{comp, `"top_k":258`, func(r engine.Request) bool { return r.Sampling.TopK == 258 }},
		{comp, `"seed":9223372036854775807`, func(r engine.Request) bool { return r.Sampling.Seed == math.MaxInt64 }},
		{comp, `"seed":9007199254740993`, func(r engine.Request) bool { return r.Sampling.Seed == 1<<53+1 }}, // not rounded to 2^53
		{comp, `"seed":-9223372036854775808`, func(r engine.Request) bool { return r.Sampling.Seed == 1<<63 }},
		{comp, `"stop":` + strs(maxStops, maxStopBytes), nil},
		{comp, `"max_tokens":62`, func(r engine.Request) bool { return r.MaxTokens == 62 }}, // BOS + "x" + 62 = 64
		{chat, `"max_completion_tokens":1`, func(r engine.Request) bool { return r.MaxTokens == 1 }},
		{chat, `"max_tokens":2`, func(r engine.Request) bool { return r.MaxTokens == 2 }},
		{chat, `"max_completion_tokens":3,"max_tokens":3`, func(r engine.Request) bool { return r.MaxTokens == 3 }},
		{comp, `"presence_penalty":-2,"frequency_penalty":2`, func(r engine.Request) bool {
			return r.Sampling.PresencePenalty == -2 && r.Sampling.FrequencyPenalty == 2
		}},
		{comp, `"repetition_penalty":10`, func(r engine.Request) bool { return r.Sampling.RepetitionPenalty == 10 }},
		{comp, `"repetition_penalty":1e-6`, func(r engine.Request) bool { return r.Sampling.RepetitionPenalty == 1e-6 }},
		{comp, `"min_p":0`, nil},
		{comp, `"min_p":1`, func(r engine.Request) bool { return r.Sampling.MinP == 1 }},
		{comp, `"logit_bias":{"257":100,"0":-100}`, func(r engine.Request) bool {
			return slices.Equal(r.Sampling.LogitBias, []sample.Bias{{ID: 0, Bias: -100}, {ID: 257, Bias: 100}})
		}},
		{comp, `"logit_bias":` + bias(fakeVocab), func(r engine.Request) bool { return len(r.Sampling.LogitBias) == fakeVocab }}, // every token (the vocabulary is below the 300-entry bound)
		{comp, `"stop_token_ids":` + ids(maxStopTokens), nil},
		{comp, `"stop_token_ids":[257]`, nil},
		{comp, `"n":16`, nil},
		{comp, `"logprobs":0`, func(r engine.Request) bool { return r.Sampling.Logprobs && r.Sampling.TopLogprobs == 0 }},
		{comp, `"logprobs":20`, func(r engine.Request) bool { return r.Sampling.TopLogprobs == 20 }},
		{comp, `"best_of":1`, nil},
		{comp, `"n":2,"best_of":2`, nil},
		{comp, `"suffix":""`, nil},
		{comp, `"echo":true`, nil},
		{comp, `"ignore_eos":true,"user":"u"`, func(r engine.Request) bool { return r.IgnoreEOS }},
		{chat, `"logprobs":true,"top_logprobs":20`, func(r engine.Request) bool { return r.Sampling.Logprobs && r.Sampling.TopLogprobs == 20 }},
		{chat, `"logprobs":false`, func(r engine.Request) bool { return !r.Sampling.Logprobs }},
		{chat, `"response_format":{"type":"text"},"tools":[],"tool_choice":"none","parallel_tool_calls":false`, nil},
		{chat, `"response_format":{"type":"json_object"}`, func(r engine.Request) bool { return r.Sampling.Format.Kind == sample.FormatJSONObject }},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type": "object", "properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}}}`,
			func(r engine.Request) bool {
				return r.Sampling.Format.Kind == sample.FormatJSONSchema && r.Sampling.Format.Schema == `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false}`
			}},
		{chat, `"messages":[{"role":"user","content":"x","name":null,"tool_calls":[]}]`, nil},
		{comp, `"stream":true,"stream_options":{"include_usage":true}`, nil},
	}
	for _, c := range ok {
		body := `{"prompt":"x",` + c.extra + `}`
		if c.url == chat {
			body = `{` + msgs + `,` + c.extra + `}`
		}
		before := len(h.eng.Requests())
		status, e := post(t, c.url, "", body)
		if status != 200 {
			t.Errorf("%.80s: %d %s %q, want 200", c.extra, status, e.Code, e.Message)
			continue
		}
		reqs := h.eng.Requests()
		if len(reqs) == before {
			t.Errorf("%.80s: nothing reached the engine", c.extra)
			continue
		}
		if c.check != nil && !c.check(reqs[before]) {
			t.Errorf("%.80s: the engine got %+v", c.extra, reqs[before].Sampling)
		}
	}

	type badCase struct {
		url, extra, code, param string
	}
	bad := []badCase{
		{comp, `"temperature":2.0000001`, CodeInvalidParam, "temperature"},
		{comp, `"temperature":-1e-9`, CodeInvalidParam, "temperature"},
		{comp, `"top_p":0`, CodeInvalidParam, "top_p"},
		{comp, `"top_p":1.0000001`, CodeInvalidParam, "top_p"},
		{comp, `"top_p":1e-46`, CodeInvalidParam, "top_p"}, // 0 in float32, which the sampler reads as "no limit"
		{comp, `"top_k":259`, CodeInvalidParam, "top_k"},
		{comp, `"top_k":-2`, CodeInvalidParam, "top_k"},
		{comp, `"top_k":3000000000`, CodeInvalidParam, "top_k"}, // the codec-overflow value of issue 10
		{comp, `"seed":9223372036854775808`, CodeInvalidParam, "seed"},
		{comp, `"seed":-9223372036854775809`, CodeInvalidParam, "seed"},
		{comp, `"seed":1.5`, CodeInvalidParam, "seed"},
		{comp, `"stop":` + strs(maxStops+1, 1), CodeInvalidParam, "stop"},
		{comp, `"stop":` + strs(1, maxStopBytes+1), CodeInvalidParam, "stop"},
		// An empty stop string matches everywhere: refused as vLLM does,
		// never dropped (llama-server ends every choice at once with it).
		{comp, `"stop":""`, CodeInvalidParam, "stop"},
		{chat, `"stop":["a",""]`, CodeInvalidParam, "stop"},
		{comp, `"max_tokens":65`, CodeContextLength, "max_tokens"},
		{comp, `"max_tokens":9223372036854775807`, CodeContextLength, "max_tokens"},
		{comp, `"max_tokens":9223372036854775806`, CodeContextLength, "max_tokens"},
		{comp, `"max_tokens":2147483648`, CodeContextLength, "max_tokens"},
		{comp, `"max_tokens":9223372036854775808`, CodeInvalidParam, "max_tokens"},
		{comp, `"max_tokens":63`, CodeContextLength, "prompt"}, // fits alone, not with the prompt
		{chat, `"max_completion_tokens":65`, CodeContextLength, "max_completion_tokens"},
		{chat, `"max_completion_tokens":0`, CodeInvalidParam, "max_completion_tokens"},
		{chat, `"max_completion_tokens":3,"max_tokens":4`, CodeInvalidParam, "max_tokens"},
		{comp, `"presence_penalty":2.0001`, CodeInvalidParam, "presence_penalty"},
		{comp, `"frequency_penalty":-2.0001`, CodeInvalidParam, "frequency_penalty"},
		{comp, `"repetition_penalty":0`, CodeInvalidParam, "repetition_penalty"},
		{comp, `"repetition_penalty":10.001`, CodeInvalidParam, "repetition_penalty"},
		{comp, `"repetition_penalty":1e-46`, CodeInvalidParam, "repetition_penalty"}, // 0 in float32: "off"
		{comp, `"repetition_penalty":1e-40`, CodeInvalidParam, "repetition_penalty"}, // subnormal: dividing by it makes logits infinite
		{comp, `"min_p":1.0001`, CodeInvalidParam, "min_p"},
		{comp, `"min_p":-0.0001`, CodeInvalidParam, "min_p"},
		{comp, `"logit_bias":{"258":1}`, CodeInvalidParam, "logit_bias"},
		{comp, `"logit_bias":{"-1":1}`, CodeInvalidParam, "logit_bias"},
		{comp, `"logit_bias":{"x":1}`, CodeInvalidParam, "logit_bias"},
		{comp, `"logit_bias":{"1":100.01}`, CodeInvalidParam, "logit_bias"},
		{comp, `"logit_bias":{"1":1,"01":2}`, CodeInvalidParam, "logit_bias"},
		{comp, `"logit_bias":` + bias(sample.MaxLogitBias+1), CodeInvalidParam, "logit_bias"},
		{comp, `"stop_token_ids":` + ids(maxStopTokens+1), CodeInvalidParam, "stop_token_ids"},
		{comp, `"stop_token_ids":[258]`, CodeInvalidParam, "stop_token_ids"},
		{comp, `"n":17`, CodeInvalidParam, "n"},
		{comp, `"n":0`, CodeInvalidParam, "n"},
		{comp, `"logprobs":21`, CodeInvalidParam, "logprobs"},
		{comp, `"logprobs":-1`, CodeInvalidParam, "logprobs"},
		{chat, `"top_logprobs":21,"logprobs":true`, CodeInvalidParam, "top_logprobs"},
		{chat, `"top_logprobs":1`, CodeInvalidParam, "top_logprobs"},
		// Output formats: what the compiler refuses is named.
		{chat, `"response_format":{"type":"json_schema","json_schema":{}}`, CodeInvalidParam, "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"(a"}}}`, "invalid_schema", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"not":{}}}}`, "unsupported_schema", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"enum":` + ids(1001) + `}}}`, "enum_too_large", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + strings.Repeat(`{"items":`, 70) + `{}` + strings.Repeat(`}`, 70) + `}}`, "schema_too_deep", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"^((a{1000}){1000}){1000}$"}}}`, "pattern_too_complex", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","minItems":90000,"items":{"type":"array","minItems":90000}}}}`, "grammar_too_large", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"#"}}}`, "schema_recursion", "response_format.json_schema.schema"},
		{chat, `"response_format":{"type":"json_object"},"ignore_eos":true`, CodeUnsupported, "ignore_eos"},
		{chat, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{},"extra":1}}`, CodeUnsupported, "response_format.json_schema.extra"},
		// Not implemented: refused, never ignored.
		{chat, `"response_format":{"type":"text","json_schema":{}}`, CodeUnsupported, "response_format.json_schema"},
		{chat, `"tools":[{"type":"function"}]`, CodeInvalidParam, "tools[0].function.name"},
		{chat, `"tools":[{"type":"retrieval"}]`, CodeUnsupported, "tools[0].type"},
		{chat, `"tool_choice":"auto"`, CodeInvalidParam, "tool_choice"},
		{chat, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`, CodeInvalidParam, "tool_choice.function.name"},
		{chat, `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"not":{}}}}}}]`, "unsupported_schema", "tools[0].function.parameters"},
		{chat, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}`, CodeUnsupported, "response_format"},
		{chat, `"functions":[{"name":"f"}]`, CodeUnsupported, "functions"},
		{chat, `"function_call":"auto"`, CodeUnsupported, "function_call"},
		{chat, `"echo":true`, CodeUnsupported, "echo"},
		{comp, `"best_of":2`, CodeUnsupported, "best_of"},
		{comp, `"suffix":"end"`, CodeUnsupported, "suffix"},
		{comp, `"echo":true,"logprobs":0`, CodeUnsupported, "echo"},
		{comp, `"top_logprobs":2`, CodeUnsupported, "top_logprobs"},
		{comp, `"min_tokens":3`, CodeUnsupported, "min_tokens"},
		{comp, `"Temperature":0.5`, CodeUnsupported, "Temperature"},
		{chat, `"audio":{}`, CodeUnsupported, "audio"},
		{comp, `"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":true}`, CodeUnsupported, "stream_options.include_obfuscation"},
		{chat, `"messages":[{"role":"user","content":"x","name":"bo b"}]`, CodeInvalidParam, "messages[0].name"},
		{chat, `"messages":[{"role":"user","content":"x","name":"<|im_start|>"}]`, CodeInvalidParam, "messages[0].name"},
		{chat, `"messages":[{"role":"user","content":"x","name":"` + strings.Repeat("n", 65) + `"}]`, CodeInvalidParam, "messages[0].name"},
		{chat, `"messages":[{"role":"user","content":"x","name":7}]`, CodeInvalidParam, "messages"},
		{chat, `"messages":[{"role":"user","content":"x","nickname":"bob"}]`, CodeUnsupported, "messages[0].nickname"},
		{chat, `"messages":[{"role":"assistant","content":"x","tool_calls":[{"id":"1"}]}]`, CodeInvalidParam, "messages[0].tool_calls"},
		{chat, `"messages":[{"role":"user","content":"x","tool_call_id":"1"}]`, CodeInvalidParam, "messages[0].tool_call_id"},
		// A tool result must say which call it answers (OpenAI 400s too).
		{chat, `"messages":[{"role":"tool","content":"18 C"}]`, CodeMissingParam, "messages[0].tool_call_id"},
		{chat, `"messages":[{"role":"tool","content":"18 C","tool_call_id":null}]`, CodeMissingParam, "messages[0].tool_call_id"},
		{chat, `"messages":[{"role":"tool","content":"18 C","tool_call_id":""}]`, CodeMissingParam, "messages[0].tool_call_id"},
		// Wrong JSON types name their parameter.
		{comp, `"temperature":"hot"`, CodeInvalidParam, "temperature"},
		{comp, `"top_p":true`, CodeInvalidParam, "top_p"},
		{comp, `"top_k":1.5`, CodeInvalidParam, "top_k"},
		{comp, `"min_p":"0.1"`, CodeInvalidParam, "min_p"},
		{comp, `"seed":"1"`, CodeInvalidParam, "seed"},
		{comp, `"stop":[1]`, CodeInvalidParam, "stop"},
		{comp, `"stop_token_ids":"1"`, CodeInvalidParam, "stop_token_ids"},
		{comp, `"stop_token_ids":[1.5]`, CodeInvalidParam, "stop_token_ids"},
		{comp, `"n":"2"`, CodeInvalidParam, "n"},
		{comp, `"stream":"yes"`, CodeInvalidParam, "stream"},
		{comp, `"presence_penalty":[]`, CodeInvalidParam, "presence_penalty"},
		{comp, `"frequency_penalty":{}`, CodeInvalidParam, "frequency_penalty"},
		{comp, `"repetition_penalty":"1"`, CodeInvalidParam, "repetition_penalty"},
		{comp, `"logit_bias":[1]`, CodeInvalidParam, "logit_bias"},
		{comp, `"ignore_eos":1`, CodeInvalidParam, "ignore_eos"},
		{comp, `"echo":"y"`, CodeInvalidParam, "echo"},
		{comp, `"best_of":"1"`, CodeInvalidParam, "best_of"},
		{comp, `"logprobs":true`, CodeInvalidParam, "logprobs"},
		{comp, `"suffix":1`, CodeInvalidParam, "suffix"},
		{comp, `"user":5`, CodeInvalidParam, "user"},
		{comp, `"stream_options":1`, CodeInvalidParam, "stream_options"},
		{chat, `"logprobs":1`, CodeInvalidParam, "logprobs"},
		{chat, `"top_logprobs":"2"`, CodeInvalidParam, "top_logprobs"},
		{chat, `"response_format":"json"`, CodeInvalidParam, "response_format"},
		{chat, `"parallel_tool_calls":"no"`, CodeInvalidParam, "parallel_tool_calls"},
	}
	before := h.eng.submitted.Load()
	for _, c := range bad {
		body := `{"prompt":"x",` + c.extra + `}`
		if c.url == chat {
			body = `{` + msgs + `,` + c.extra + `}`
		}
		status, e := post(t, c.url, "", body)
		param := ""
		if e.Param != nil {
			param = *e.Param
		}
		if status != 400 || e.Code != c.code || !strings.HasPrefix(param, c.param) || e.Message == "" {
			t.Errorf("%.80s: got %d %s param %q (%s), want 400 %s param %q", c.extra, status, e.Code, param, e.Message, c.code, c.param)
		}
	}
	if n := h.eng.submitted.Load() - before; n != 0 {
		t.Fatalf("refused requests reached the engine %d times", n)
	}
	// A prompt list is bounded by choices: 4 prompts x n=4 pass, 17 x 1 do not.
	if status, e := post(t, comp, "", `{"prompt":["a","b","c","d"],"n":4,"max_tokens":1}`); status != 200 {
		t.Fatalf("16 choices refused: %d %s", status, e.Message)
	}
	if status, e := post(t, comp, "", `{"prompt":`+strs(17, 1)+`,"max_tokens":1}`); status != 400 || *e.Param != "prompt" {
		t.Fatalf("17 choices: %d %+v", status, e)
	}
}

// TestChoicesAndPromptListsWithOpenAIClient: n and prompt lists give one
// choice per (prompt, sample) at index prompt*n + sample, seeds seed+j,
// usage counting each prompt once; logprobs parse in the official client.
func TestChoicesAndPromptListsWithOpenAIClient(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	r, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"ab", "xyz"}},
		N:      openai.Int(2), Seed: openai.Int(41), MaxTokens: openai.Int(10), Logprobs: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ab", "ab", "xyz", "xyz"}
	if len(r.Choices) != 4 {
		t.Fatalf("%d choices, want 4", len(r.Choices))
	}
	for i, ch := range r.Choices {
		if int(ch.Index) != i || ch.Text != want[i] || ch.FinishReason != "stop" {
			t.Fatalf("choice %d: %+v", i, ch)
		}
		lp := ch.Logprobs
		if len(lp.Tokens) != len(want[i]) || len(lp.TokenLogprobs) != len(want[i]) || len(lp.TextOffset) != len(want[i]) || len(lp.TopLogprobs) != len(want[i]) {
			t.Fatalf("choice %d logprobs %+v", i, lp)
		}
		for k := range want[i] {
			b := want[i][k]
			if lp.Tokens[k] != string(b) || lp.TokenLogprobs[k] != float64(-float32(b)/256) || lp.TextOffset[k] != int64(k) {
				t.Fatalf("choice %d token %d: %q %v offset %d", i, k, lp.Tokens[k], lp.TokenLogprobs[k], lp.TextOffset[k])
			}
			// Two alternatives plus the sampled token.
			top := lp.TopLogprobs[k]
			if len(top) != 3 || top[string(b)] != float64(-float32(b)/256) || top[string(b+1)] != float64(-float32(b+1)/256) {
				t.Fatalf("choice %d token %d top %v", i, k, top)
			}
		}
	}
	// BOS+2 and BOS+3 prompt tokens, counted once each; 3+3+4+4 generated.
	if r.Usage.PromptTokens != 7 || r.Usage.CompletionTokens != 14 {
		t.Fatalf("usage %+v", r.Usage)
	}
	var seeds []uint64
	for _, q := range h.eng.Requests() {
		seeds = append(seeds, q.Sampling.Seed)
	}
	if !slices.Equal(seeds, []uint64{41, 42, 41, 42}) {
		t.Fatalf("seeds %v, want [41 42 41 42]", seeds)
	}

	// Chat: n=3 with logprobs and top_logprobs, as the client types them.
	cr, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		N:        openai.Int(3), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(1), MaxCompletionTokens: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Choices) != 3 {
		t.Fatalf("%d chat choices", len(cr.Choices))
	}
	for i, ch := range cr.Choices {
		content := ch.Logprobs.Content
		if int(ch.Index) != i || len(content) != 3 || ch.Message.Content != "Use" {
			t.Fatalf("chat choice %d: %q %+v", i, ch.Message.Content, content)
		}
		for k, e := range content {
			b := "Use"[k]
			if e.Token != string(b) || !slices.Equal(e.Bytes, []int64{int64(b)}) || e.Logprob != float64(-float32(b)/256) ||
				len(e.TopLogprobs) != 1 || e.TopLogprobs[0].Token != string(b+1) {
				t.Fatalf("chat choice %d token %d: %+v", i, k, e)
			}
		}
	}
	if cr.Usage.CompletionTokens != 9 {
		t.Fatalf("chat usage %+v", cr.Usage)
	}
}

// TestStreamedChoicesAndLogprobs: a streamed chat with n=2 delivers each
// choice's text and logprobs under its index, and one finish per choice.
func TestStreamedChoicesAndLogprobs(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		N:        openai.Int(2), Logprobs: openai.Bool(true), MaxCompletionTokens: openai.Int(4),
	})
	text := map[int64]string{}
	var lpTokens = map[int64]string{}
	finishes := map[int64]string{}
	roles := map[int64]string{}
	for st.Next() {
		for _, ch := range st.Current().Choices {
			roles[ch.Index] += ch.Delta.Role
			text[ch.Index] += ch.Delta.Content
			for _, e := range ch.Logprobs.Content {
				lpTokens[ch.Index] += e.Token
			}
			if ch.FinishReason != "" {
				finishes[ch.Index] += ch.FinishReason
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range int64(2) {
		if text[i] != "User" || lpTokens[i] != "User" || finishes[i] != "length" || roles[i] != "assistant" {
			t.Fatalf("choice %d: text %q logprob tokens %q finish %q", i, text[i], lpTokens[i], finishes[i])
		}
	}
	// Completions stream with echo: the prompt comes first.
	cs := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Prompt: prompt("ok"), Echo: openai.Bool(true), MaxTokens: openai.Int(5)})
	var all string
	for cs.Next() {
		for _, ch := range cs.Current().Choices {
			all += ch.Text
		}
	}
	if cs.Err() != nil || all != "okok" {
		t.Fatalf("echo stream %q %v", all, cs.Err())
	}
}

// TestStopTokenIDsAndEcho: a stop token ends its choice with "stop", its
// text withheld and its token counted; echo prepends the prompt.
func TestStopTokenIDsAndEcho(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	r, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(20)},
		option.WithJSONSet("stop_token_ids", []int{'l'}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != "he" || r.Choices[0].FinishReason != "stop" || r.Usage.CompletionTokens != 3 {
		t.Fatalf("stop token: %q %s %+v", r.Choices[0].Text, r.Choices[0].FinishReason, r.Usage)
	}
	r, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), Echo: openai.Bool(true), MaxTokens: openai.Int(20)})
	if err != nil || r.Choices[0].Text != "hihi" {
		t.Fatalf("echo: %+v %v", r, err)
	}
	// Token-id prompts echo their text too.
	r, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokenArrays: [][]int64{{'a'}, {'b', 'c'}}}, Echo: openai.Bool(true), MaxTokens: openai.Int(20)})
	if err != nil || len(r.Choices) != 2 || r.Choices[0].Text != "aa" || r.Choices[1].Text != "bcbc" {
		t.Fatalf("token echo: %+v %v", r, err)
	}
	waitFor(t, func() bool { return h.eng.Active() == 0 })
}

// TestOneChoiceFailsTheRequest: a failing choice fails the whole request
// (I8), and a refused choice cancels the admitted ones; nothing is left
// running in the engine either way.
func TestOneChoiceFailsTheRequest(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	// The held choice ends only when cancelled; the timeout turns a
	// missing cancel into a failure instead of a hang.
	_, err := c.Completions.New(ctx, openai.CompletionNewParams{
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"HOLD", "xFAIL_LATE"}}, MaxTokens: openai.Int(20)},
		option.WithRequestTimeout(20*time.Second))
	apiErr(t, err, 500, engine.CodeIntegrity)
	waitFor(t, func() bool { return h.eng.Active() == 0 })

	h.eng.refuseAfter = h.eng.submitted.Load() + 2
	// The cancelled choices take a while to end: the answer must wait
	// for them (drain), not only cancel them.
	h.eng.cancelDelay = 50 * time.Millisecond
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("HOLD"), N: openai.Int(3), MaxTokens: openai.Int(20)})
	apiErr(t, err, 503, engine.CodeOverloaded)
	if h.eng.Active() != 0 {
		t.Fatalf("%d choices still running after the refusal", h.eng.Active())
	}
	if h.eng.cancels.Load() < 2 {
		t.Fatalf("the two admitted choices were not cancelled (%d cancels)", h.eng.cancels.Load())
	}
}

// TestChoicesCountAgainstConcurrency: each choice holds a concurrency slot,
// so n cannot take more of the engine than the tenant's limit. A request
// with more choices than the limit can never be admitted: it is a 400
// naming the parameter, not a 429 its client would retry for ever.
func TestChoicesCountAgainstConcurrency(t *testing.T) {
	h := newHarness(t, 64, func(c *Config) { c.TenantConcurrency = 3 })
	c := h.client("")
	ctx := context.Background()
	if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), N: openai.Int(3), MaxTokens: openai.Int(2)}); err != nil {
		t.Fatalf("n=3 within a limit of 3: %v", err)
	}
	_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), N: openai.Int(4), MaxTokens: openai.Int(2)})
	ae := apiErr(t, err, 400, CodeInvalidParam)
	if ae.Param != "n" {
		t.Fatalf("param %q, want n", ae.Param)
	}
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, N: openai.Int(4)})
	apiErr(t, err, 400, CodeInvalidParam)
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b", "c", "d"}}, MaxTokens: openai.Int(2)})
	if ae := apiErr(t, err, 400, CodeInvalidParam); ae.Param != "prompt" {
		t.Fatalf("param %q, want prompt", ae.Param)
	}
	// The server's limit likewise.
	hs := newHarness(t, 64, func(c *Config) { c.MaxConcurrency = 2 })
	_, err = hs.client("").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), N: openai.Int(3), MaxTokens: openai.Int(2)})
	apiErr(t, err, 400, CodeInvalidParam)
	if n := len(h.eng.Requests()) + len(hs.eng.Requests()); n != 3 {
		t.Fatalf("%d engine requests, want the first request's 3", n)
	}
	// Slots come back: the limit admits n=3 again.
	if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b", "c"}}, MaxTokens: openai.Int(2)}); err != nil {
		t.Fatalf("3 prompts after refusals: %v", err)
	}
}

// TestStreamedLogprobsEqualNonStreamed: streamed, each token's logprobs come
// once, with the chunk carrying its text or, for text a stop string
// withheld, with the finish chunk; together they are the non-streamed list.
func TestStreamedLogprobsEqualNonStreamed(t *testing.T) {
	h := newHarness(t, 64, nil)
	c := h.client("")
	ctx := context.Background()
	p := openai.CompletionNewParams{Prompt: prompt("hello world"), MaxTokens: openai.Int(20), Logprobs: openai.Int(1),
		Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String("o w")}}
	r, err := c.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if r.Choices[0].Text != "hell" || strings.Join(r.Choices[0].Logprobs.Tokens, "") != "hello w" {
		t.Fatalf("non-streamed %q, logprob tokens %q", r.Choices[0].Text, r.Choices[0].Logprobs.Tokens)
	}
	st := c.Completions.NewStreaming(ctx, p)
	var text string
	var toks []string
	var offs []int64
	for st.Next() {
		for _, ch := range st.Current().Choices {
			text += ch.Text
			toks = append(toks, ch.Logprobs.Tokens...)
			offs = append(offs, ch.Logprobs.TextOffset...)
		}
	}
	if st.Err() != nil || text != "hell" || !slices.Equal(toks, r.Choices[0].Logprobs.Tokens) || !slices.Equal(offs, r.Choices[0].Logprobs.TextOffset) {
		t.Fatalf("streamed %q %q %v, non-streamed %q %v", text, toks, offs, r.Choices[0].Logprobs.Tokens, r.Choices[0].Logprobs.TextOffset)
	}
}

// TestStopOfOneChoiceDoesNotTimeOutTheOthers: the grace for a cancelled
// choice (here one ended by its stop string) bounds that choice only; a
// sibling still generating past the grace ends normally.
func TestStopOfOneChoiceDoesNotTimeOutTheOthers(t *testing.T) {
	defer func(g time.Duration) { cancelGrace = g }(cancelGrace)
	cancelGrace = 20 * time.Millisecond
	h := newHarness(t, 64, nil)
	c := h.client("")
	type res struct {
		r   *openai.Completion
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
			Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"xyz", "HOLD"}}, MaxTokens: openai.Int(10),
			Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String("y")}})
		done <- res{r, err}
	}()
	waitFor(t, func() bool { return h.eng.cancels.Load() == 1 })
	// The held choice outlives the stopped one's grace many times over.
	time.Sleep(20 * cancelGrace)
	close(h.eng.gate)
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if ch := got.r.Choices; ch[0].Text != "x" || ch[0].FinishReason != "stop" || ch[1].Text != "HOLD" || ch[1].FinishReason != "stop" {
		t.Fatalf("choices %+v", ch)
	}
}

// TestLogprobsContract: a token reported without the logprobs the client
// asked for, or with more alternatives than top_logprobs, fails the
// request (I8: fail closed), never a 200 whose logprobs silently lack an
// entry or hold others than asked.
func TestLogprobsContract(t *testing.T) {
	ctx := context.Background()
	for _, fault := range []string{"missing", "extra"} {
		h := newHarness(t, 64, nil)
		h.eng.lpFault = fault
		c := h.client("")
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(5), Logprobs: openai.Int(2)})
		apiErr(t, err, 500, CodeInternal)
		st := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(5), Logprobs: openai.Int(2)})
		for st.Next() {
		}
		if st.Err() == nil {
			t.Errorf("%s: the stream ended cleanly", fault)
		}
		// Without logprobs the same engine behaviour is no fault.
		if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(5)}); err != nil {
			t.Errorf("%s without logprobs: %v", fault, err)
		}
		waitFor(t, func() bool { return h.eng.Active() == 0 })
	}
}

// Issue 30 item 4: every choice of a running request holds a tenant slot
// and a server slot (acquireMore), not only the first: while a request of
// n=3 runs, the tenant (limit 3) and the server (limit 3) are full, so
// one more request is refused with 429; once it ends, both are free.
func TestRunningChoicesHoldTheirSlots(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		code string
	}{
		{"tenant", func(c *Config) { c.TenantConcurrency = 3 }, CodeTenantLimit},
		{"server", func(c *Config) { c.MaxConcurrency = 3 }, CodeOverloaded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64, tc.mod)
			// Opened on every way out, so a failure cannot leave the HOLD
			// request (and the server's Close) waiting for ever.
			var open sync.Once
			release := func() { open.Do(func() { close(h.eng.gate) }) }
			t.Cleanup(release)
			c := h.client("")
			ctx := context.Background()
			done := make(chan error, 1)
			go func() {
				_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("HOLD"), N: openai.Int(3), MaxTokens: openai.Int(2)})
				done <- err
			}()
			waitFor(t, func() bool { return h.eng.Active() == 3 })
			_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(2)})
			apiErr(t, err, 429, tc.code)
			release()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the n=3 request did not end within 30s of its gate opening")
			}
			if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("x"), N: openai.Int(3), MaxTokens: openai.Int(2)}); err != nil {
				t.Fatalf("the slots did not come back: %v", err)
			}
		})
	}
}
