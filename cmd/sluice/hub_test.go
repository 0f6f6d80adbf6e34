package main

import (
	"context"
	"os"
	"strings"
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
