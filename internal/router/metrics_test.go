package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Multi-tenant metrics: /metrics is not on the API (every tenant reaches
// the API) but on the admin handler, and no tenant name appears in any
// label unless the operator opts in for a trusted scraper.
func TestMetricsOffAPIAndWithoutTenantNames(t *testing.T) {
	keys, err := ParseKeys(strings.NewReader("key-a acme-corp\nkey-b globex\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, labels := range []bool{false, true} {
		h := newHarness(t, 64, func(c *Config) { c.Keys, c.MetricsOffAPI, c.MetricsTenantLabels = keys, true, labels })
		admin := httptest.NewServer(h.srv.AdminHandler())
		defer admin.Close()
		if _, err := h.client("key-a").Completions.New(context.Background(), openai.CompletionNewParams{Prompt: prompt("hey"), MaxTokens: openai.Int(3)}); err != nil {
			t.Fatal(err)
		}
		if code, body := get(t, h.ts.URL+"/metrics"); code != 404 || strings.Contains(body, "sluice_") || !strings.Contains(body, "--metrics-listen") {
			t.Fatalf("/metrics on the API listener: %d (want 404 naming --metrics-listen)\n%s", code, body)
		}
		code, body := get(t, admin.URL+"/metrics")
		if code != 200 || !strings.Contains(body, "sluice_requests_total") {
			t.Fatalf("admin /metrics: %d\n%s", code, body)
		}
		if got := strings.Contains(body, "acme-corp"); got != labels {
			t.Errorf("tenant labels %v: tenant name in metrics = %v\n%s", labels, got, body)
		}
		want := `sluice_prompt_tokens_total 4`
		if labels {
			want = `sluice_prompt_tokens_total{tenant="acme-corp"} 4`
		}
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
		for _, p := range []string{"/health", "/ready"} {
			if code, _ := get(t, admin.URL+p); code != 200 {
				t.Errorf("admin %s: %d", p, code)
			}
		}
	}
}

// sluice_prompt_tokens_total is what the engine prefilled: with n > 1 each
// choice is its own engine request and prefills its prompt, so the
// counter grows by n prompts, while usage.prompt_tokens counts the prompt
// once (as OpenAI bills it).
func TestPromptTokensMetricCountsEveryChoice(t *testing.T) {
	h := newHarness(t, 64, nil)
	r, err := h.client("").Completions.New(context.Background(), openai.CompletionNewParams{Prompt: prompt("hey"), N: openai.Int(3), MaxTokens: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage.PromptTokens != 4 {
		t.Fatalf("usage.prompt_tokens %d, want 4 (BOS + 3, once)", r.Usage.PromptTokens)
	}
	prefilled := 0
	for _, q := range h.eng.Requests() {
		prefilled += len(q.Prompt)
	}
	_, body := get(t, h.ts.URL+"/metrics")
	if want := fmt.Sprintf("sluice_prompt_tokens_total %d\n", prefilled); prefilled != 12 || !strings.Contains(body, want) {
		t.Fatalf("the engine prefilled %d prompt tokens; metrics lack %q:\n%s", prefilled, want, body)
	}
}

// The counters a dashboard or alert reads exist before the first request,
// at 0: the refusal reasons, the token counters (per tenant of the key
// file with tenant labels), and vLLM's names for the served model, as vLLM
// registers them at start.
func TestMetricsExistAtStart(t *testing.T) {
	keys, err := ParseKeys(strings.NewReader("key-a acme-corp\nkey-b globex\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, labels := range []bool{false, true} {
		h := newHarness(t, 64, func(c *Config) { c.Keys, c.MetricsTenantLabels = keys, labels })
		admin := httptest.NewServer(h.srv.AdminHandler())
		_, body := get(t, admin.URL+"/metrics")
		admin.Close()
		want := []string{
			`sluice_requests_refused_total{reason="rate_limited"} 0`,
			`sluice_requests_refused_total{reason="overloaded"} 0`,
			`vllm:prompt_tokens_total{model_name="echo-test-double"} 0`,
			`vllm:generation_tokens_total{model_name="echo-test-double"} 0`,
			`vllm:e2e_request_latency_seconds_count{model_name="echo-test-double"} 0`,
			`vllm:time_to_first_token_seconds_count{model_name="echo-test-double"} 0`,
		}
		if labels {
			want = append(want, `sluice_prompt_tokens_total{tenant="acme-corp"} 0`, `sluice_completion_tokens_total{tenant="globex"} 0`)
		} else {
			want = append(want, "sluice_prompt_tokens_total 0", "sluice_completion_tokens_total 0")
		}
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				t.Errorf("tenant labels %v: no %s at start", labels, w)
			}
		}
	}
}
