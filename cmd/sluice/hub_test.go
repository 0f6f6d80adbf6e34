package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/hub/hubtest"
	"sluice/internal/testenv"
)

// sluice serve --model hf://ORG/REPO against a fake Hub (HF_ENDPOINT)
// downloads the model into HF_HUB_CACHE, verifies it and serves a
// request; a second start with -hf and HF_HUB_OFFLINE=1, the Hub gone,
// serves from the cache.
func TestServeFromHub(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	b, err := os.ReadFile(testenv.Shared(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.New(map[string]*hubtest.Repo{"test-org/stories260K-GGUF": {Commit: "89abcdef0123456789abcdef0123456789abcdef",
		Files: map[string][]byte{"stories260K-F32.gguf": b, "README-not-a-model.txt": []byte("x")}}})
	defer h.Close()
	cache := t.TempDir()
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")

	serveOnce := func(args ...string) *proc {
		p := startProc(t, "serve", append(args, "--listen", "127.0.0.1:0")...)
		addr := p.waitAddr(t)
		cl := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0))
		r, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K-F32",
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
		if err != nil || len(r.Choices) != 1 || r.Choices[0].Text == "" {
			t.Fatalf("completion: %v %+v\n%s", err, r, p.log())
		}
		p.stop(t)
		return p
	}
	// --kv-memory auto (the default), capped at 64 sequences of 512 tokens.
	p := serveOnce("--model", "hf://test-org/stories260K-GGUF", "--context", "512")
	if !strings.Contains(p.log(), "KV cache: 32768 tokens, context 512, max concurrency 64.00x at full context") || !strings.Contains(p.log(), "--kv-memory auto: 50% of") {
		t.Errorf("no auto KV banner:\n%s", p.log())
	}
	if got := p.field("model from Hugging Face", "sha256"); got != hubtest.SHA256(b) {
		t.Fatalf("logged sha256 %q, want %s\n%s", got, hubtest.SHA256(b), p.log())
	}
	if h.Downloads.Load() != 1 {
		t.Fatalf("%d downloads, want 1", h.Downloads.Load())
	}
	if !strings.Contains(p.log(), "100.0%") {
		t.Errorf("no progress on stderr:\n%s", p.log())
	}
	h.Close()
	t.Setenv("HF_HUB_OFFLINE", "1")
	p = serveOnce("-hf", "test-org/stories260K-GGUF:f32", "--context", "512", "--kv-pool-tokens", "2048")
	if p.field("model from Hugging Face", "path") == "" || !strings.HasPrefix(p.field("model from Hugging Face", "path"), cache) {
		t.Fatalf("offline start did not use the cache:\n%s", p.log())
	}
}

// A --model path that does not exist says how to get a model, and a
// repository id typed as vLLM takes it points at hf://.
func TestMissingModelSaysHowToFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	code, _, errOut := runBin(t, "serve", "--model", "Qwen/Qwen2.5-0.5B-Instruct", "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "hf://Qwen/Qwen2.5-0.5B-Instruct") || strings.Contains(errOut, "stat ") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	code, _, errOut = runBin(t, "serve", "--model", "/nonexistent/m.gguf", "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "--model hf://ORG/REPO[:QUANT]") {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	code, _, errOut = runBin(t, "serve", "--model", "x.gguf", "-hf", "a/b", "--listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(errOut, "not both") {
		t.Errorf("--model and -hf: exit %d, stderr:\n%s", code, errOut)
	}
}

// The tools that read a model file take hf:// as serve does: inspect,
// tokenize and generate on a model from a fake Hub (HF_ENDPOINT) answer as
// on the file; they said "no such file" before.
func TestToolsTakeHubModels(t *testing.T) {
	b, err := os.ReadFile("../../testdata/models/stories260K.gguf")
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.New(map[string]*hubtest.Repo{"test-org/stories260K-GGUF": {Commit: "89abcdef0123456789abcdef0123456789abcdef",
		Files: map[string][]byte{"stories260K-F32.gguf": b}}})
	defer h.Close()
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	spec := "hf://test-org/stories260K-GGUF"
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"inspect", "--model", spec}, `general.architecture                          string  "llama"`},
		{[]string{"tokenize", "--model", spec, "--text", "Once upon", "--json"}, `{"token_ids":[1,403,407]}`},
		{[]string{"generate", "--model", spec, "--prompt", "Once upon a time", "--max-tokens", "8", "--temperature", "0"}, ", there was a little girl"},
	} {
		code, out, errb := runBin(t, c.args...)
		if code != 0 || !strings.Contains(out, c.says) {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want it to print %q", strings.Join(c.args, " "), code, head(out), head(errb), c.says)
		}
	}
}

// While the model loads (here: its download from a Hub that holds the
// file back) the ports are already bound and every request and probe gets
// 503 model_loading with Retry-After, as llama-server answers "Loading
// model"; once loaded the same listeners serve.
func TestServeAnswersWhileLoading(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	open := heldHub(t)
	p := startProc(t, "serve", "--model", "hf://test-org/stories260K-GGUF", "--context", "512", "--listen", "127.0.0.1:0",
		"--api-key", "sk-k", "--metrics-listen", "127.0.0.1:0")
	const bound = msgBoundLoading
	if !p.waitLog(bound) {
		t.Fatalf("no %q line:\n%s", bound, p.log())
	}
	api := strings.TrimPrefix(p.field(bound, "addr"), "http://")
	admin := strings.TrimPrefix(p.field(bound, "admin"), "http://")
	for _, u := range []string{"http://" + api + "/health", "http://" + api + "/ready", "http://" + admin + "/health", "http://" + admin + "/ready", "http://" + admin + "/metrics"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("%s while loading: %v", u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "model_loading") {
			t.Errorf("%s while loading: %d Retry-After %q %s; want 503 model_loading with Retry-After", u, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	cl := openai.NewClient(option.WithBaseURL("http://"+api+"/v1/"), option.WithAPIKey("sk-k"), option.WithMaxRetries(0))
	_, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K-F32",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(4)})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 503 || ae.Code != "model_loading" {
		t.Fatalf("a completion while loading: %v; want 503 model_loading", err)
	}

	open()
	if got := p.waitAddr(t); got != api {
		t.Fatalf("serving on %s, bound %s", got, api)
	}
	r, err := cl.Completions.New(context.Background(), openai.CompletionNewParams{Model: "stories260K-F32",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(4), Temperature: openai.Float(0)})
	if err != nil || len(r.Choices) != 1 {
		t.Fatalf("completion once loaded: %v\n%s", err, p.log())
	}
	for _, u := range []string{"http://" + api + "/health", "http://" + admin + "/health", "http://" + admin + "/ready"} {
		resp, err := http.Get(u)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s once loaded: %v %v", u, resp, err)
		}
		resp.Body.Close()
	}
}

// heldHub serves stories260K as hf://test-org/stories260K-GGUF from a fake
// Hub (HF_ENDPOINT) that holds the weights back until open is called (or
// the test ends).
func heldHub(t *testing.T) (open func()) {
	t.Helper()
	b, err := os.ReadFile(testenv.Shared(t, "models/stories260K.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.New(map[string]*hubtest.Repo{"test-org/stories260K-GGUF": {Commit: "89abcdef0123456789abcdef0123456789abcdef",
		Files: map[string][]byte{"stories260K-F32.gguf": b}}})
	t.Cleanup(h.Close)
	target, _ := url.Parse(h.URL)
	release := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(release) }) }
	proxy := httputil.NewSingleHostReverseProxy(target)
	held := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/resolve/") {
			<-release // the weights come when the test says so
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(held.Close)
	t.Cleanup(open) // before held.Close: a held download must end
	t.Setenv("HF_ENDPOINT", held.URL)
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_HUB_OFFLINE", "")
	return open
}

// A worker's admin listener (probes, /metrics) is bound before its model
// loads too: 503 model_loading while loading, then served (decode: ready).
func TestWorkerAdminAnswersWhileLoading(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	open := heldHub(t)
	p := startProc(t, "decode", "--model", "hf://test-org/stories260K-GGUF", "--context", "512", "--kv-pool-tokens", "2048",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	const bound = msgBoundLoading
	if !p.waitLog(bound) {
		t.Fatalf("no %q line:\n%s", bound, p.log())
	}
	admin := strings.TrimPrefix(p.field(bound, "admin"), "http://")
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			t.Fatalf("%s: %v\n%s", path, err, p.log())
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/health", "/ready", "/metrics"} {
		if code, body := get(path); code != 503 || !strings.Contains(body, "model_loading") {
			t.Errorf("decode %s while loading: %d %s", path, code, body)
		}
	}
	open()
	if !p.waitLog(`"msg":"metrics listening"`) {
		t.Fatalf("decode never served its metrics:\n%s", p.log())
	}
	if got := strings.TrimSuffix(strings.TrimPrefix(p.field("metrics listening", "addr"), "http://"), "/metrics"); got != admin {
		t.Fatalf("metrics on %s, bound %s", got, admin)
	}
	for _, path := range []string{"/health", "/ready"} {
		if code, body := get(path); code != 200 {
			t.Errorf("decode %s once loaded: %d %s", path, code, body)
		}
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `sluice_integrity_violations_total{kind="digest_mismatch"} 0`) {
		t.Errorf("decode /metrics once loaded: %d", code)
	}
}
