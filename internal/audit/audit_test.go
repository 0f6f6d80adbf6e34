package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeServer is an OpenAI-compatible test double written for this suite. Its
// flags each reproduce one signal of the incident's fingerprint (or one way
// a real server misbehaves), so every probe can be shown to catch exactly
// the bug it looks for. Tokenizer: one token per whitespace-separated word.
// Prefill takes perToken per token.
type fakeServer struct {
	context  int
	perToken time.Duration
	// tokensPerWord: each word is this many tokens (0: one), as a small
	// vocabulary spells a word in several.
	tokensPerWord int

	acceptOver  bool    // over-capacity prompts get 200 instead of 400
	slack       float64 // admits up to context*(1+slack) (a lenient limit)
	leak        bool    // responses carry fragments of other tenants' prompts
	chatLeak    bool    // only chat responses do
	lieTokens   bool    // usage.prompt_tokens reports a placeholder's 1 token for long prompts
	fastLong    bool    // long prompts are answered without the prefill they claim
	sharedPfx   bool    // a prompt seen before (from any tenant) skips prefill: a cross-tenant prefix cache
	cacheCounts bool    // cached_tokens counts prompts seen before (from any tenant); timing unaffected
	tenantCache bool    // an honest per-tenant prefix cache: a prompt THIS key sent before skips prefill and counts as cached
	hideCached  bool    // usage carries no prompt_tokens_details (timing is the only side channel)
	nondetEvery int     // under load, every nondetEvery-th answer of the same prompt differs (1: always)
	llamaShape  bool    // discovery as llama-server publishes it: /v1/models meta.n_ctx, /props
	sharedBuf   int     // tokens of one KV buffer shared by all in-flight requests (0: none)
	overMode    string  // when sharedBuf runs out: "refuse" (500), "foreign" (another request's text), "stale" (wrong text)
	keys        map[string]bool
	authAfter   int // after this many POSTs, key-b is refused (401)
	dropEvery   int // every dropEvery-th POST: connection closed without an answer
	failAfter   int // after this many POSTs, every POST is dropped
	slowAfter   int // after this many POSTs, every POST takes slowBy more
	slowBy      time.Duration
	// stall(n) holds the n-th POST (from 1) that long before answering: a
	// busy moment of a loaded machine, placed by count, not by clock.
	stall func(n int) time.Duration
	// stallFresh holds tenant B's first stallFresh streamed 1-token
	// requests for prompts never seen before (the side-channel probe's
	// fresh controls) stallFreshBy each: a busy moment that falls on one
	// side of a timing comparison.
	stallFresh   int
	stallFreshBy time.Duration

	mu        sync.Mutex
	history   []struct{ key, prompt string }
	seen      map[string]bool
	bufUsed   int
	loaded    map[string]int // answers given under load, by prompt
	inflight  atomic.Int32
	maxFlight atomic.Int32
	posts     atomic.Int32
	headers   []http.Header
}

func (f *fakeServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if !f.authOK(w, r) {
			return
		}
		if f.llamaShape {
			fmt.Fprintf(w, `{"object":"list","data":[{"id":"fake-model","object":"model","owned_by":"llamacpp","meta":{"n_ctx":%d,"n_ctx_train":%d}}]}`, f.context, f.context)
			return
		}
		fmt.Fprintf(w, `{"object":"list","data":[{"id":"fake-model","object":"model","context_length":%d}]}`, f.context)
	})
	if f.llamaShape {
		mux.HandleFunc("GET /props", func(w http.ResponseWriter, r *http.Request) {
			if !f.authOK(w, r) {
				return
			}
			fmt.Fprintf(w, `{"default_generation_settings":{"n_ctx":%d},"total_slots":4}`, f.context)
		})
	}
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { f.complete(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { f.complete(w, r, true) })
	return mux
}

func (f *fakeServer) authOK(w http.ResponseWriter, r *http.Request) bool {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	ok := f.keys == nil || f.keys[key]
	if ok && f.authAfter > 0 && key == "key-b" && int(f.posts.Load()) > f.authAfter {
		ok = false
	}
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}`)
	}
	return ok
}

func (f *fakeServer) drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func (f *fakeServer) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	n := int(f.posts.Add(1))
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	if (f.dropEvery > 0 && n%f.dropEvery == 0) || (f.failAfter > 0 && n > f.failAfter) {
		f.drop(w)
		return
	}
	if f.slowAfter > 0 && n > f.slowAfter {
		time.Sleep(f.slowBy)
	}
	if f.stall != nil {
		time.Sleep(f.stall(n))
	}
	if !f.authOK(w, r) {
		return
	}
	fl := f.inflight.Add(1)
	defer f.inflight.Add(-1)
	for {
		m := f.maxFlight.Load()
		if fl <= m || f.maxFlight.CompareAndSwap(m, fl) {
			break
		}
	}
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	var req struct {
		Prompt   string `json:"prompt"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		MaxTokens int  `json:"max_tokens"`
		Stream    bool `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error","code":"invalid_json"}}`, 400)
		return
	}
	if chat && len(req.Messages) > 0 {
		req.Prompt = req.Messages[0].Content
	}
	words := strings.Fields(req.Prompt)
	n = len(words) * max(1, f.tokensPerWord)
	limit := float64(f.context) * (1 + f.slack)
	over := float64(n+req.MaxTokens) > limit
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
	own := f.seen[key+"\x00"+req.Prompt]
	f.seen[key+"\x00"+req.Prompt] = true
	var foreign string
	for i := len(f.history) - 1; i >= 0; i-- {
		if f.history[i].key != key {
			foreign = f.history[i].prompt
			break
		}
	}
	f.history = append(f.history, struct{ key, prompt string }{key, req.Prompt})
	short := false
	need := n + req.MaxTokens
	if f.sharedBuf > 0 {
		if f.bufUsed+need > f.sharedBuf {
			short = true
		} else {
			f.bufUsed += need
			defer func() { f.mu.Lock(); f.bufUsed -= need; f.mu.Unlock() }()
		}
	}
	underLoad := f.inflight.Load() > 1
	var stallBy time.Duration
	if f.stallFresh > 0 && key == "key-b" && req.Stream && req.MaxTokens == 1 && !cached {
		f.stallFresh--
		stallBy = f.stallFreshBy
	}
	f.mu.Unlock()
	time.Sleep(stallBy)

	if short && f.overMode == "refuse" {
		w.WriteHeader(500)
		fmt.Fprint(w, `{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`)
		return
	}
	prefill := time.Duration(n) * f.perToken
	switch {
	case over: // the incident: a placeholder was "prefilled"
		prefill = 0
	case f.fastLong && n > f.context/4:
		prefill = 0
	case f.sharedPfx && cached, f.tenantCache && own:
		prefill = 0
	}
	time.Sleep(prefill)
	// Under load when another request is in flight at arrival or once
	// this one's prefill is done, as a batching server's requests overlap
	// whichever arrives first: judged at arrival alone, the probe's
	// request, sent by a goroutine already running, often reached the
	// server before the load it waits for and saw none in all 8 trials.
	underLoad = underLoad || f.inflight.Load() > 1
	// Counted by prompt: every nondetEvery-th answer of the same prompt
	// under load differs. (Counted over all answers, which answer was the
	// nondetEvery-th depended on the order the load and the probe's
	// request finished in, which repeats from trial to trial: on a busy
	// machine the probe's answer fell on the same residue in all 8 trials
	// and no trial differed, 2 runs of 3.)
	f.mu.Lock()
	if f.loaded == nil {
		f.loaded = map[string]int{}
	}
	if underLoad {
		f.loaded[req.Prompt]++
	}
	loadedN := f.loaded[req.Prompt]
	f.mu.Unlock()

	h := fnv.New32a()
	h.Write([]byte(req.Prompt))
	text := fmt.Sprintf(" answer%08x", h.Sum32())
	if f.nondetEvery > 0 && underLoad && loadedN%f.nondetEvery == 0 {
		text += " (batched)"
	}
	if short && f.overMode == "stale" {
		text = " answer-of-stale-pages"
	}
	if (f.leak || (f.chatLeak && chat) || (short && f.overMode == "foreign")) && foreign != "" {
		fw := strings.Fields(foreign)
		if len(fw) > 12 {
			fw = fw[len(fw)-12:]
		}
		text += " " + strings.Join(fw, " ")
	}
	pt := n
	if f.lieTokens && n > 64 {
		pt = 1
	}
	ct := 0
	if (f.sharedPfx || f.cacheCounts) && cached || f.tenantCache && own {
		ct = n - 1
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`, pt, pt+1, ct)
	if f.hideCached {
		usage = fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}`, pt, pt+1)
	}
	if !req.Stream {
		if chat {
			fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"length"}],"usage":%s}`, text, usage)
			return
		}
		fmt.Fprintf(w, `{"id":"x","object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":"length"}],"usage":%s}`, text, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if chat {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", text)
	} else {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", text)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func (f *fakeServer) defaults() {
	if f.context == 0 {
		f.context = 1024
	}
	if f.perToken == 0 {
		f.perToken = 40 * time.Microsecond
	}
}

func startFake(t *testing.T, f *fakeServer) string {
	t.Helper()
	f.defaults()
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// baseConfig's --timeout is not what most tests check (those that do set
// their own): the plan's time check estimates the run from one calibration
// request, which on a loaded machine (-race beside a busy CPU) measured
// 55 prompt tokens/s and refused a 1-minute timeout for a run of seconds,
// and a 400-sample run once took 60.1 s (INCONCLUSIVE). Ten minutes stays
// under the suite's own timeout.
func baseConfig(url string) Config {
	return Config{URL: url, KeyA: "key-a", KeyB: "key-b", Seed: 42, Samples: 10, Trials: 4, Timeout: 10 * time.Minute}
}

func runWith(t *testing.T, f *fakeServer, mod func(*Config)) (*Report, error) {
	t.Helper()
	cfg := baseConfig(startFake(t, f))
	if mod != nil {
		mod(&cfg)
	}
	rep, err := Run(context.Background(), cfg)
	if rep != nil {
		var b strings.Builder
		rep.WriteText(&b)
		t.Log(b.String())
	}
	return rep, err
}

func runAudit(t *testing.T, f *fakeServer) *Report {
	t.Helper()
	rep, err := runWith(t, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func findings(r *Report, sev Severity, titleHas string) []Finding {
	var out []Finding
	for _, f := range r.Findings {
		if (sev == "" || f.Severity == sev) && strings.Contains(f.Title, titleHas) {
			out = append(out, f)
		}
	}
	return out
}

func TestHonestServerPasses(t *testing.T) {
	rep := runAudit(t, &fakeServer{})
	if rep.Verdict != Pass || rep.ExitCode() != 0 {
		t.Fatalf("an honest server got %s: %+v %+v", rep.Verdict, rep.Findings, rep.Probes)
	}
	for _, p := range rep.Probes {
		if !p.Complete || p.Sent == 0 || p.Sent > p.Planned {
			t.Errorf("probe %+v: want complete with 0 < sent <= planned", p)
		}
	}
}

// The incident's whole fingerprint: over-capacity prompt answered 200 with
// the long prompt's token count, quickly, carrying other tenants' text.
func TestIncidentFingerprintCaught(t *testing.T) {
	// Prefill at 400us a token: the short reference (128 tokens) takes
	// about 51ms, so the over-capacity reply (no prefill at all) is below
	// half of it whatever an HTTP round trip costs under -race on a busy
	// machine (at 40us, 5ms, it often was not: the finding went missing).
	rep := runAudit(t, &fakeServer{acceptOver: true, leak: true, perToken: 400 * time.Microsecond})
	if rep.Verdict != Fail || rep.ExitCode() != 1 {
		t.Fatalf("the incident's fingerprint got %s", rep.Verdict)
	}
	leaks := findings(rep, Critical, "another tenant's data")
	if len(leaks) == 0 || !strings.Contains(leaks[0].Evidence, "tenant A's") {
		t.Fatalf("no leak finding showing the leaked data: %+v", rep.Findings)
	}
	if len(findings(rep, High, "over-capacity prompt not refused")) == 0 {
		t.Errorf("over-capacity 200 not reported: %+v", rep.Findings)
	}
	if len(findings(rep, High, "too fast")) == 0 {
		t.Errorf("reply faster than its claimed prefill not reported: %+v", rep.Findings)
	}
}

// The side-channel probe's positive control: a per-tenant cache shows
// within tenant A (cached_tokens, faster first token) and not across, and
// passes; a cross-tenant cache shows both and fails; a server without a
// cache shows neither, which is a note, not a failure. Text and JSON say so.
func TestSideChannelPositiveControl(t *testing.T) {
	for _, c := range []struct {
		name           string
		srv            *fakeServer
		within, across bool
		verdict        string
		text           string
	}{
		{"per-tenant cache", &fakeServer{tenantCache: true, perToken: 20 * time.Microsecond}, true, false, Pass, "present within a tenant"},
		{"cross-tenant cache", &fakeServer{sharedPfx: true, perToken: 20 * time.Microsecond}, true, true, Fail, "and across tenants"},
		{"no cache", &fakeServer{perToken: 20 * time.Microsecond}, false, false, Pass, "informational, not a failure"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := runAudit(t, c.srv)
			sc := rep.SideChannel
			if sc == nil {
				t.Fatal("no positive control in the report")
			}
			if sc.WithinPresent != c.within || sc.CrossTenantPresent != c.across || rep.Verdict != c.verdict {
				t.Fatalf("within %v across %v verdict %s, want %v %v %s: %+v", sc.WithinPresent, sc.CrossTenantPresent, rep.Verdict, c.within, c.across, c.verdict, sc)
			}
			if c.within && sc.WithinCachedTokens <= 0 {
				t.Errorf("within-tenant cached_tokens median %v", sc.WithinCachedTokens)
			}
			var b strings.Builder
			rep.WriteText(&b)
			if !strings.Contains(b.String(), c.text) {
				t.Errorf("text report lacks %q:\n%s", c.text, b.String())
			}
			js, _ := json.Marshal(rep)
			if !strings.Contains(string(js), `"within_tenant_channel_present":`+map[bool]string{true: "true", false: "false"}[c.within]) {
				t.Errorf("JSON lacks the control: %s", js)
			}
		})
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
	}{
		{"leak only", &fakeServer{leak: true}, Critical, "another tenant's data"},
		{"leak on the chat endpoint only", &fakeServer{chatLeak: true}, Critical, "another tenant's data"},
		{"over-capacity 200 only", &fakeServer{acceptOver: true}, High, "over-capacity prompt not refused"},
		{"limit 10% above the context", &fakeServer{slack: 0.10}, High, "a request over the context was answered"},
		{"dishonest prompt_tokens only", &fakeServer{lieTokens: true}, High, "usage.prompt_tokens disagrees"},
		{"too fast only", &fakeServer{fastLong: true, perToken: 400 * time.Microsecond}, High, "too fast"},
		{"cross-tenant prefix cache", &fakeServer{sharedPfx: true}, High, "cached_tokens and the timing"},
		// Timing alone: confirmed by a second round (a shared cache shows
		// every time). Prefill at 400us a token: a fresh 256-token prompt
		// takes 102 ms against a cached one's ~0.2 ms. At 40us (10 ms) a
		// loaded machine's stalls of a cached request past 10 ms (15 in
		// 2,000 at load 12) fell twice in one round of 10 and the round's
		// p rose to 0.013 (5 failures in 150 runs beside CPU hogs and
		// -race audit runs at load 12-22); a stall must now pass 100 ms.
		{"cross-tenant prefix cache, timing only", &fakeServer{sharedPfx: true, hideCached: true, perToken: 400 * time.Microsecond}, High, "prefix cache shared across tenants: the timing reveal"},
		{"cached_tokens only (no timing difference)", &fakeServer{cacheCounts: true}, High, "prefix cache shared across tenants: cached_tokens reveal"},
		{"nondeterministic under load", &fakeServer{nondetEvery: 1}, Warning, "changes with another tenant's load"},
		{"shared KV buffer hands out another request's text", &fakeServer{sharedBuf: 1100, overMode: "foreign", perToken: 200 * time.Microsecond}, Critical, "another tenant's data"},
		{"shared KV buffer answers from stale pages", &fakeServer{sharedBuf: 1100, overMode: "stale", perToken: 200 * time.Microsecond}, High, "garbled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := runAudit(t, c.srv)
			if len(findings(rep, c.sev, c.title)) == 0 {
				t.Fatalf("variant %q not caught (want %s %q): %+v", c.name, c.sev, c.title, rep.Findings)
			}
			if rep.Verdict != Fail || rep.ExitCode() != 1 {
				t.Errorf("verdict %s exit %d, want FAIL 1", rep.Verdict, rep.ExitCode())
			}
			if !strings.Contains(c.name, "leak") && !strings.Contains(c.name, "another request") && len(findings(rep, Critical, "")) > 0 {
				t.Errorf("a leak was reported where none exists: %+v", rep.Findings)
			}
			for _, f := range rep.Findings {
				if !strings.Contains(f.Reproduce, "curl -sS "+strings.TrimRight(rep.URL, "/")) || f.Fix == "" {
					t.Errorf("finding without a curl command or a fix: %+v", f)
				}
			}
		})
	}
}

// A server whose shared KV buffer refuses concurrent prompts that each fit
// (llama-server's default) is not a finding: errors are acceptable. The
// report says the buffer was seen to be shared.
func TestConcurrentRefusalsAcceptable(t *testing.T) {
	rep := runAudit(t, &fakeServer{sharedBuf: 1100, overMode: "refuse", perToken: 200 * time.Microsecond})
	if rep.Verdict != Pass {
		t.Fatalf("verdict %s, want PASS: %+v", rep.Verdict, rep.Findings)
	}
	if rep.KVBuffer != "shared" || !strings.Contains(rep.KVBufferSource, "observed") || !strings.Contains(rep.KVBufferSource, "HTTP 500") {
		t.Errorf("KV buffer %q (%s), want shared, observed with HTTP 500", rep.KVBuffer, rep.KVBufferSource)
	}
}

// k/N over several trials, with the first differing token: a server that
// differs in one trial of three under load is caught (one trial would not).
func TestDeterminismTrials(t *testing.T) {
	// Requests that take a while (300µs a token) overlap the load even on a
	// busy machine, and every 3rd answer of the same prompt under load
	// differs: the probe's request is the same in every trial, so the
	// trials in which it met load for the 3rd and 6th time differ,
	// whatever order the answers finish in (1 in 7 with 40µs tokens missed
	// under load).
	rep, err := runWith(t, &fakeServer{nondetEvery: 3, perToken: 300 * time.Microsecond}, func(c *Config) { c.Trials = 8 })
	if err != nil {
		t.Fatal(err)
	}
	fs := findings(rep, Warning, "trials differ")
	if len(fs) == 0 {
		t.Fatalf("no determinism finding: %+v", rep.Findings)
	}
	if !strings.Contains(fs[0].Title, "/8 trials differ") || !strings.Contains(fs[0].Evidence, `first differing token #1: "" alone vs " ("`) {
		t.Errorf("finding lacks k/N or the first differing token: %+v", fs[0])
	}
}

func TestTextTokensAndFirstDiff(t *testing.T) {
	got := strings.Join(textTokens("Once upon, a time!"), "|")
	if got != "Once| upon|,| a| time|!" {
		t.Errorf("textTokens = %q", got)
	}
	if d := firstDiff("a big dog", "a big cat"); d != `first differing token #2: " dog" alone vs " cat"` {
		t.Errorf("firstDiff = %q", d)
	}
}

// A server that closes connections now and then (llama-server closes idle
// keep-alive connections; Go does not resend a POST) must not decide the
// verdict: the request is resent on a fresh connection and counted.
func TestTransportErrorsRetried(t *testing.T) {
	f := &fakeServer{dropEvery: 5}
	rep := runAudit(t, f)
	if rep.Verdict != Pass {
		t.Fatalf("verdict %s, want PASS despite dropped connections: %+v", rep.Verdict, rep.Probes)
	}
	if rep.Retries == 0 || rep.Retries < int(f.posts.Load())/5-1 {
		t.Errorf("retries %d for %d POSTs with every 5th dropped", rep.Retries, f.posts.Load())
	}
}

// A probe that cannot complete makes the run INCONCLUSIVE (exit 2), with
// the reason; never PASS.
func TestIncompleteProbeIsInconclusive(t *testing.T) {
	rep := runAudit(t, &fakeServer{failAfter: 40})
	if rep.Verdict != Inconclusive || rep.ExitCode() != 2 {
		t.Fatalf("verdict %s exit %d, want INCONCLUSIVE 2", rep.Verdict, rep.ExitCode())
	}
	var b strings.Builder
	rep.WriteText(&b)
	if !strings.Contains(b.String(), "DID NOT COMPLETE: ") || !strings.Contains(b.String(), "after 3 attempts") {
		t.Errorf("report does not say which probe did not complete and why:\n%s", b.String())
	}
}

// The time budget running out mid-run is INCONCLUSIVE too.
func TestDeadlineMidRunIsInconclusive(t *testing.T) {
	rep, err := runWith(t, &fakeServer{slowAfter: 30, slowBy: 300 * time.Millisecond}, func(c *Config) { c.Timeout = 3 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != Inconclusive {
		t.Fatalf("verdict %s, want INCONCLUSIVE", rep.Verdict)
	}
}

func setupCode(err error) string {
	var se *SetupError
	var pe *PlanError
	switch {
	case errors.As(err, &se):
		return se.Code
	case errors.As(err, &pe):
		return pe.Code
	}
	return ""
}

// Every key is checked with a trivial request before anything else; a
// refused key stops the audit (it is never counted as a capacity refusal
// or a clean canary check).
func TestKeysChecked(t *testing.T) {
	keys := map[string]bool{"key-a": true, "key-b": true}
	cases := []struct {
		name     string
		a, b     string
		code     string
		msgHas   string
		maxPosts int32
	}{
		{"wrong key for tenant B", "key-a", "wrong", "key_refused", "tenant B's key (the second --api-key) was refused: HTTP 401", 2},
		{"no key", "", "", "auth_required", "HTTP 401", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeServer{keys: keys}
			_, err := runWith(t, f, func(cfg *Config) { cfg.KeyA, cfg.KeyB = c.a, c.b })
			if setupCode(err) != c.code || !strings.Contains(err.Error(), c.msgHas) {
				t.Fatalf("err = %v, want %s containing %q", err, c.code, c.msgHas)
			}
			if !strings.Contains(err.Error(), "pass --api-key") && c.code == "auth_required" {
				t.Errorf("no hint to pass --api-key: %v", err)
			}
			if f.posts.Load() > c.maxPosts {
				t.Errorf("%d requests sent after the refusal", f.posts.Load())
			}
		})
	}
}

// A 401 in the middle of the run is not a capacity refusal: the probe did
// not complete.
func TestMidRunAuthIsNotRefusal(t *testing.T) {
	rep := runAudit(t, &fakeServer{keys: map[string]bool{"key-a": true, "key-b": true}, authAfter: setupRequests + 4})
	if rep.Verdict == Pass {
		t.Fatal("PASS although tenant B's requests were refused with 401")
	}
	for _, c := range rep.Checks {
		if strings.Contains(c, "HTTP 401") {
			t.Errorf("a 401 counted as a passed check: %q", c)
		}
	}
}

func TestModelChecked(t *testing.T) {
	_, err := runWith(t, &fakeServer{}, func(c *Config) { c.Model = "no-such-model" })
	if setupCode(err) != "model_not_served" || !strings.Contains(err.Error(), "fake-model") {
		t.Fatalf("err = %v, want model_not_served listing fake-model", err)
	}
}

// The default budget is sized from the plan: 100 side-channel samples run
// in full (they exhausted the fixed default of 300 before).
func TestBudgetSizedFromPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("400 timing requests")
	}
	rep, err := runWith(t, &fakeServer{}, func(c *Config) { c.Samples = 100 })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != Pass {
		t.Fatalf("verdict %s: %+v", rep.Verdict, rep.Probes)
	}
	for _, p := range rep.Probes {
		if p.Name == "side-channel" && p.Sent != 400 { // A, B twice, A again (the positive control)
			t.Errorf("side-channel sent %d requests, want 400", p.Sent)
		}
	}
}

// A budget or timeout too small for the plan is an error before the first
// probe request (only the key check and calibration were sent).
func TestPlanTooBigForBudget(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		f    *fakeServer
		code string
	}{
		{"max-requests", func(c *Config) { c.MaxRequests = 20 }, &fakeServer{}, "budget_too_small"},
		{"timeout", func(c *Config) { c.Timeout = 150 * time.Millisecond }, &fakeServer{perToken: 100 * time.Microsecond}, "timeout_too_small"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := runWith(t, c.f, c.mod)
			if setupCode(err) != c.code {
				t.Fatalf("err = %v, want %s", err, c.code)
			}
			// On a machine so loaded that the setup itself outlasts the
			// 150 ms, the timeout stops the setup sooner (same code).
			if n := c.f.posts.Load(); n > setupRequests || (c.name == "max-requests" && n != setupRequests) {
				t.Errorf("%d requests sent; want only the setup's %d (key check, calibration)", n, setupRequests)
			}
		})
	}
}

// setupRequests is what the key check and the calibration send before the
// plan with two keys: one 1-token request per key, calRounds pairs (a
// 1-token request and a 64-word prompt), one chat check.
const setupRequests = 2 + 2*calRounds + 1

// One stalled calibration sample (a busy moment of a loaded machine) does
// not make the plan look long: the estimate rests on the fastest of
// several. From the stalled sample alone (3 s for 64 tokens: ~21 prompt
// tokens/s) the plan's ~27k prompt tokens were refused a 60 s --timeout
// for a run of seconds.
func TestCalibrationStallDoesNotRefusePlan(t *testing.T) {
	f := &fakeServer{stall: func(n int) time.Duration {
		if n == 4 { // the first 64-word calibration prompt (after 2 key checks and a 1-token request)
			return 3 * time.Second
		}
		return 0
	}}
	rep, err := runWith(t, f, func(c *Config) { c.Timeout = time.Minute })
	if err != nil {
		t.Fatalf("the plan was refused after one stalled calibration sample: %v", err)
	}
	if rep.Verdict != Pass {
		t.Fatalf("verdict %s: %+v %+v", rep.Verdict, rep.Findings, rep.Probes)
	}
	if !slices.ContainsFunc(rep.Checks, func(c string) bool { return strings.Contains(c, "fastest of 3") }) {
		t.Errorf("the calibration check does not say what it measured: %q", rep.Checks)
	}
}

// A busy moment over the whole calibration and the sweep's smallest point
// (every short reference 150 ms slower) must not make the sweep's long
// prompts "too fast for their prefill": the suspicion is checked against
// fresh short prompts, which are fast again, and the honest server passes.
// (With the short references alone, each long reply, 20-38 ms of real
// prefill, was under half of 150 ms.) The capacity probe sent its
// confirmation prompts: the suspicion did arise.
func TestLoadBurstIsNoTooFastFinding(t *testing.T) {
	burst := setupRequests + 4 + 1 // the setup, the canary probe's 4, the sweep's first (smallest) point
	f := &fakeServer{stall: func(n int) time.Duration {
		if n <= burst {
			return 150 * time.Millisecond
		}
		return 0
	}}
	rep := runAudit(t, f)
	if fs := findings(rep, High, "too fast"); len(fs) > 0 || rep.Verdict != Pass {
		t.Fatalf("verdict %s; an honest server slow only while the short references were measured: %+v", rep.Verdict, rep.Findings)
	}
	for _, p := range rep.Probes {
		if p.Name == "capacity" && p.Sent != p.Planned {
			t.Errorf("capacity sent %d of %d planned: the confirmation prompts were not sent, so the burst did not test them", p.Sent, p.Planned)
		}
	}
}

// A busy moment that falls on one side of the side-channel comparison
// (tenant B's 10 fresh control prompts of the first round each 200 ms
// slower) makes the timing test fire on a server with no cache at all;
// the confirmation round of fresh prompts shows nothing, so there is no
// finding, and the side-channel probe sent that round. (With the first
// round alone the honest server failed: "prefix cache shared across
// tenants: the timing reveal another tenant's prompt".) 200 ms is far
// above a loaded machine's noise: with 40 ms the first round did not fire
// once in 20 -race runs beside CPU hogs.
func TestSideChannelTimingConfirmed(t *testing.T) {
	f := &fakeServer{stallFresh: 10, stallFreshBy: 200 * time.Millisecond}
	rep := runAudit(t, f)
	if rep.Verdict != Pass {
		t.Fatalf("verdict %s; a server without a cache, slow only on one side of the first round: %+v", rep.Verdict, rep.Findings)
	}
	for _, p := range rep.Probes {
		if p.Name == "side-channel" && p.Sent != 7*10 {
			t.Errorf("side-channel sent %d requests, want 70 (40 and the 30 of the confirmation round): the stall did not make the first round fire", p.Sent)
		}
	}
}

// The judgement itself, with no clock: a prompt 4x the short samples'
// largest count answered in under half the fastest sample's time is too
// fast; 3.9x, or just over half, is not; a slow sample changes nothing,
// and more samples only lower the bar a long reply must beat.
func TestTooFastJudgement(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	var none shortRef
	if none.tooFast(1000, 0) {
		t.Fatal("no short sample: nothing can be judged too fast")
	}
	var s shortRef
	s.add(100, ms(40))
	s.add(124, ms(50)) // the largest count counts, with the fastest time
	s.add(64, ms(900)) // a stalled sample: ignored by the fastest time
	s.add(0, ms(1))    // no usage: not a sample
	if s.n != 3 || s.tokens != 124 || s.latency != ms(40) {
		t.Fatalf("shortRef %+v, want 3 samples, 124 tokens, 40ms", s)
	}
	for _, c := range []struct {
		tokens int
		lat    float64
		want   bool
	}{
		{496, 19.9, true},   // 4x, under half
		{496, 20, false},    // exactly half: not under it
		{495, 1, false},     // under 4x, however fast
		{100000, 19, true},  // the incident: an over-capacity prompt answered at once
		{100000, 21, false}, // as long, but just over half the fastest short reply
	} {
		if got := s.tooFast(c.tokens, ms(c.lat)); got != c.want {
			t.Errorf("tooFast(%d tokens, %vms) = %v, want %v (reference %+v)", c.tokens, c.lat, got, c.want, s)
		}
	}
	s.add(124, ms(30)) // a faster short sample lowers the bar
	if s.tooFast(496, ms(19.9)) || !s.tooFast(496, ms(14.9)) {
		t.Errorf("after a 30ms sample: %+v", s)
	}
}

// The audit finds llama-server's context where llama-server publishes it
// (/props, /v1/models meta.n_ctx), so the capacity probes run.
func TestLlamaServerContextDiscovered(t *testing.T) {
	rep := runAudit(t, &fakeServer{llamaShape: true, context: 768})
	if rep.Context != 768 || rep.Server != "llama.cpp" || rep.Slots != 4 {
		t.Fatalf("context %d server %q slots %d, want 768 llama.cpp 4", rep.Context, rep.Server, rep.Slots)
	}
	if rep.Verdict != Pass {
		t.Fatalf("verdict %s: %+v", rep.Verdict, rep.Probes)
	}
}

func TestConcurrencyBounded(t *testing.T) {
	f := &fakeServer{}
	rep, err := runWith(t, f, func(c *Config) { c.Concurrency = 3 })
	if err != nil {
		t.Fatal(err)
	}
	if m := f.maxFlight.Load(); m > 3 || m < 2 {
		t.Errorf("max in flight %d with --concurrency 3", m)
	}
	if rep.Verdict != Pass {
		t.Errorf("verdict %s", rep.Verdict)
	}
	if _, err := runWith(t, &fakeServer{}, func(c *Config) { c.Concurrency = 1 }); setupCode(err) != "concurrency_too_small" {
		t.Errorf("--concurrency 1: err %v", err)
	}
}

func TestHeadersSent(t *testing.T) {
	f := &fakeServer{}
	_, err := runWith(t, f, func(c *Config) { c.Headers = http.Header{"X-Tenant-Route": {"blue"}} })
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.headers {
		if h.Get("X-Tenant-Route") != "blue" {
			t.Fatalf("a request without the --header: %v", h)
		}
	}
}

// JSON has empty lists, never null.
func TestReportJSONEmptyLists(t *testing.T) {
	rep := runAudit(t, &fakeServer{})
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"findings":[]`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("JSON lacks %s: %s", k, b)
		}
	}
	if strings.Contains(string(b), "null") {
		t.Errorf("JSON has a null: %s", b)
	}
}

func TestFixLines(t *testing.T) {
	fix := fixFor("side-channel", "llama.cpp")
	if !strings.Contains(fix, "--no-cache-prompt") || !strings.Contains(fix, "--cache-ram 0 does not") {
		t.Errorf("llama.cpp side-channel fix: %q", fix)
	}
	for _, p := range []string{"side-channel", "capacity", "canary", "concurrent-capacity", "determinism"} {
		for _, s := range []string{"llama.cpp", "vllm", "sglang", "sluice", "unknown"} {
			if fixFor(p, s) == "" {
				t.Errorf("no fix line for %s on %s", p, s)
			}
		}
	}
}

func TestPacer(t *testing.T) {
	if rateInterval(0) != 0 || rateInterval(4) != 250*time.Millisecond {
		t.Fatalf("rateInterval: %v %v", rateInterval(0), rateInterval(4))
	}
	p := pacer{interval: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.wait(ctx); err != nil { // the first is immediate
		t.Fatal(err)
	}
	cancel()
	if err := p.wait(ctx); err == nil { // the second waits an hour, cancelled
		t.Fatal("second request was not held back by the pacer")
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

// The concurrency bound holds whatever a probe asks for: six requests at
// once through an auditor with --concurrency 2 never have more than two in
// flight at the server.
func TestConcurrencySemaphore(t *testing.T) {
	f := &fakeServer{perToken: 2 * time.Millisecond}
	url := startFake(t, f)
	hc := &http.Client{}
	a := &auditor{cfg: Config{RequestTimeout: time.Minute, MaxRequests: 100}, sem: make(chan struct{}, 2), deadln: time.Now().Add(time.Minute),
		c: &client{base: url, http: hc, model: "fake-model"}}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := a.send(context.Background(), call{path: pathCompletions, prompt: strings.Repeat("word ", 20), maxTokens: 1}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if m := f.maxFlight.Load(); m != 2 {
		t.Errorf("max in flight %d, want 2", m)
	}
}

// A server that claims an enormous context (or counts tokens absurdly) must
// not make the auditor build enormous prompts: over --max-prompt-bytes the
// points are not sent and the probes that need them do not complete.
func TestHugeClaimedContext(t *testing.T) {
	rep, err := runWith(t, &fakeServer{context: 1 << 50}, func(c *Config) { c.MaxPromptBytes = 1 << 20 })
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != Inconclusive {
		t.Fatalf("verdict %s, want INCONCLUSIVE", rep.Verdict)
	}
	for _, p := range rep.Probes {
		if (p.Name == "capacity" || p.Name == "concurrent-capacity") && (p.Complete || !strings.Contains(p.Reason, "max-prompt-bytes")) {
			t.Errorf("probe %+v: want incomplete over --max-prompt-bytes", p)
		}
	}
}

// A server with a small context and a tokenizer that spells a word in
// several tokens (sluice serving stories260K at --context 256: 5.4 tokens a
// word) is audited: the calibration prompt is sized from the context. It
// was a fixed 64 words, 320 tokens here, refused with a 400, and the audit
// ended "unreachable" before any probe.
func TestSmallContextCalibrates(t *testing.T) {
	rep := runAudit(t, &fakeServer{context: 256, tokensPerWord: 5})
	if rep.Verdict != Pass || rep.ExitCode() != 0 {
		t.Fatalf("an honest server with a 256-token context got %s: %+v %+v", rep.Verdict, rep.Findings, rep.Probes)
	}
}
