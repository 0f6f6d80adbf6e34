package router

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// While loading, probes get a state and requests a 503 the official client
// reads as model_loading, all with Retry-After.
func TestLoadingHandler(t *testing.T) {
	ts := httptest.NewServer(LoadingHandler())
	defer ts.Close()
	for _, p := range []string{"/health", "/ready"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != loadingRetryAfter || err != nil || body["status"] != "loading" || body["reason"] != CodeModelLoading {
			t.Errorf("%s: %d Retry-After %q %v %v", p, resp.StatusCode, resp.Header.Get("Retry-After"), body, err)
		}
	}
	cl := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 503 || ae.Code != CodeModelLoading || ae.Response.Header.Get("Retry-After") != loadingRetryAfter {
		t.Fatalf("chat while loading: %v", err)
	}
}
