package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer is an OpenAI-compatible test double written for this suite. Its
// flags each reproduce one signal of the incident's fingerprint, so every
// probe can be shown to catch exactly the bug it looks for. Tokenizer: one
// token per whitespace-separated word. Prefill takes perToken per token.
type fakeServer struct {
	context  int
	perToken time.Duration

	acceptOver bool // over-capacity prompts get 200 instead of 400
	leak       bool // responses carry fragments of other tenants' prompts
	lieTokens  bool // usage.prompt_tokens reports a placeholder's 1 token for long prompts
	fastLong   bool // long prompts are answered without the prefill they claim
	sharedPfx  bool // a prompt seen before (from any tenant) skips prefill: a cross-tenant prefix cache
	nondet     bool // output depends on what else is running

	mu       sync.Mutex
	history  []struct{ key, prompt string }
	seen     map[string]bool
	inflight atomic.Int32
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"fake-model","object":"model","context_length":%d}]}`, f.context)
	})
	mux.HandleFunc("POST /v1/completions", f.complete)
	return mux
}

func (f *fakeServer) complete(w http.ResponseWriter, r *http.Request) {
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	var req struct {
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
		Stream    bool   `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error","code":"invalid_json"}}`, 400)
		return
	}
	words := strings.Fields(req.Prompt)
	n := len(words)
	over := n+req.MaxTokens > f.context
	if over && !f.acceptOver {
		w.WriteHeader(400)
		fmt.Fprintf(w, `{"error":{"message":"This model's maximum context length is %d tokens; you requested %d","type":"invalid_request_error","code":"context_length_exceeded"}}`, f.context, n+req.MaxTokens)
		return
	}
	f.mu.Lock()
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	cached := f.seen[req.Prompt]
	f.seen[req.Prompt] = true
	var foreign string
	for i := len(f.history) - 1; i >= 0; i-- {
		if f.history[i].key != key {
			foreign = f.history[i].prompt
			break
		}
	}
	f.history = append(f.history, struct{ key, prompt string }{key, req.Prompt})
	f.mu.Unlock()

	prefill := time.Duration(n) * f.perToken
	switch {
	case over: // the incident: a placeholder was "prefilled"
		prefill = 0
	case f.fastLong && n > f.context/4:
		prefill = 0
	case f.sharedPfx && cached:
		prefill = 0
	}
	time.Sleep(prefill)

	h := fnv.New32a()
	h.Write([]byte(req.Prompt))
	text := fmt.Sprintf(" answer%08x", h.Sum32())
	if f.nondet && f.inflight.Load() > 1 {
		text += " (batched)"
	}
	if f.leak && foreign != "" {
		fw := strings.Fields(foreign)
		if len(fw) > 12 {
			fw = fw[len(fw)-12:]
		}
		text += " " + strings.Join(fw, " ")
	}
	pt := n
	if over || (f.lieTokens && n > 64) {
		if f.lieTokens {
			pt = 1
		}
	}
	if !req.Stream {
		fmt.Fprintf(w, `{"id":"x","object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`, text, pt, pt+1)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", text)
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"total_tokens\":%d}}\n\n", pt, pt+1)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func runAudit(t *testing.T, f *fakeServer) *Report {
	t.Helper()
	if f.context == 0 {
		f.context = 1024
	}
	if f.perToken == 0 {
		f.perToken = 40 * time.Microsecond
	}
	srv := httptest.NewServer(f.handler())
	defer srv.Close()
	rep, err := Run(context.Background(), Config{URL: srv.URL, KeyA: "key-a", KeyB: "key-b", Seed: 42, Samples: 10, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.WriteText(&b)
	t.Log(b.String())
	return rep
}

func findings(r *Report, sev Severity, titleHas string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if f.Severity == sev && strings.Contains(f.Title, titleHas) {
			out = append(out, f)
		}
	}
	return out
}

func TestHonestServerPasses(t *testing.T) {
	rep := runAudit(t, &fakeServer{})
	if rep.Failed() {
		t.Fatalf("an honest server failed the audit: %+v", rep.Findings)
	}
	for _, f := range rep.Findings {
		if f.Severity != Info {
			t.Errorf("unexpected finding on an honest server: %+v", f)
		}
	}
	if len(rep.Checks) < 4 {
		t.Errorf("only %d checks passed; probes did not run: %v", len(rep.Checks), rep.Checks)
	}
}

// The incident's whole fingerprint: over-capacity prompt answered 200 with
// the long prompt's token count, quickly, carrying other tenants' text.
func TestIncidentFingerprintCaught(t *testing.T) {
	rep := runAudit(t, &fakeServer{acceptOver: true, leak: true})
	if !rep.Failed() {
		t.Fatal("the incident's fingerprint passed the audit")
	}
	leaks := findings(rep, Critical, "tenant A's data")
	if len(leaks) == 0 {
		t.Fatalf("no leak finding: %+v", rep.Findings)
	}
	if !strings.Contains(leaks[0].Evidence, "tenant A's") {
		t.Errorf("leak evidence does not show the leaked data: %q", leaks[0].Evidence)
	}
	if len(findings(rep, High, "over-capacity prompt not refused")) == 0 {
		t.Errorf("over-capacity 200 not reported: %+v", rep.Findings)
	}
	if len(findings(rep, High, "too fast")) == 0 {
		t.Errorf("reply faster than its claimed prefill not reported: %+v", rep.Findings)
	}
}

// Each variant breaks one signal only; the matching probe must catch it and
// the others must stay quiet.
func TestSingleSignalVariants(t *testing.T) {
	cases := []struct {
		name  string
		srv   *fakeServer
		sev   Severity
		title string
		fail  bool
	}{
		{"leak only", &fakeServer{leak: true}, Critical, "tenant A's data", true},
		{"over-capacity 200 only", &fakeServer{acceptOver: true, perToken: 40 * time.Microsecond}, High, "over-capacity prompt not refused", true},
		{"dishonest prompt_tokens only", &fakeServer{lieTokens: true}, High, "usage.prompt_tokens disagrees", true},
		{"too fast only", &fakeServer{fastLong: true}, High, "too fast", true},
		{"cross-tenant prefix cache", &fakeServer{sharedPfx: true}, High, "prefix cache", true},
		{"nondeterministic under load", &fakeServer{nondet: true}, Warning, "changes under concurrent load", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runAudit(t, c.srv)
			if len(findings(rep, c.sev, c.title)) == 0 {
				t.Fatalf("variant %q not caught (want %s %q): %+v", c.name, c.sev, c.title, rep.Findings)
			}
			if rep.Failed() != c.fail {
				t.Errorf("Failed() = %v, want %v", rep.Failed(), c.fail)
			}
			if c.name != "leak only" && len(findings(rep, Critical, "")) > 0 {
				t.Errorf("a leak was reported where none exists: %+v", rep.Findings)
			}
		})
	}
}

func TestMannWhitney(t *testing.T) {
	x := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	y := []float64{11, 12, 13, 14, 15, 16, 17, 18}
	if p := mannWhitneyLess(x, y); p > 0.001 {
		t.Errorf("separated samples: p=%g, want < 0.001", p)
	}
	if p := mannWhitneyLess(y, x); p < 0.99 {
		t.Errorf("reversed: p=%g, want ~1", p)
	}
	z := []float64{1, 12, 3, 14, 5, 16, 7, 18}
	w := []float64{11, 2, 13, 4, 15, 6, 17, 8}
	if p := mannWhitneyLess(z, w); p < 0.2 {
		t.Errorf("interleaved samples: p=%g, want large", p)
	}
}
