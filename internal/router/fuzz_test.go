package router

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequestBody: no body makes a handler panic, hang or answer outside
// the API's two shapes (a completion, or an OpenAI error with a code).
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"prompt":"hello","max_tokens":4}`,
		`{"prompt":[1,2,3],"stop":["l"],"stream":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"prompt":"FAIL_LATE","stream":true}`,
		`{"prompt":"a","temperature":1e308,"top_p":-0,"seed":-1}`,
		`{"prompt":[[1,2]],"n":1}`, `[]`,
		`{"prompt":["ab","cd"],"n":2,"logprobs":3,"stream":true,"seed":9223372036854775807}`,
		`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":20,"n":3,"logit_bias":{"104":100}}`,
		`{"prompt":"x","echo":true,"stop_token_ids":[104],"presence_penalty":2,"repetition_penalty":1.5,"min_p":0.1}`, `null`, `"x"`, `{"prompt":"\u0000\ud800"}`,
		`{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"enable_thinking":false,"a":[1,{"b":null}],"n":1.5}}`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	eng := newEcho(96)
	close(eng.gate) // HOLD never blocks here
	srv, err := New(Config{Engine: eng, Tokenizer: byteTok{}, MaxBodyBytes: 2048})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		out := rec.Body.String()
		switch {
		case rec.Code == http.StatusOK && strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			if !strings.HasPrefix(out, "data: ") {
				t.Fatalf("stream does not start with an event: %q", out)
			}
			if !strings.HasSuffix(out, "data: [DONE]\n\n") && !strings.Contains(out, `"error":`) {
				t.Fatalf("stream ends neither with [DONE] nor an error event: %q", out)
			}
		case rec.Code == http.StatusOK:
			var v struct {
				Choices []json.RawMessage `json:"choices"`
			}
			if json.Unmarshal([]byte(out), &v) != nil || len(v.Choices) < 1 || len(v.Choices) > maxChoices {
				t.Fatalf("200 without 1..%d choices: %q", maxChoices, out)
			}
		default:
			var e struct {
				Error *struct {
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal([]byte(out), &e) != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("status %d without an OpenAI error: %q", rec.Code, out)
			}
			if rec.Code == 500 && e.Error.Code == CodeInternal {
				t.Fatalf("internal error (a handler panicked?) for %q", body)
			}
		}
	})
}
