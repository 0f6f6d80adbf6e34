package router

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// limitedHarness is a harness with the keys of keyFile, on a virtual clock
// that moves only when the test advances it: the limits refill on the
// server's clock, so no figure depends on how long a loaded machine took
// between two requests.
func limitedHarness(t *testing.T, keyFile string) (*harness, *vClock) {
	t.Helper()
	keys, err := ParseKeys(strings.NewReader(keyFile))
	if err != nil {
		t.Fatal(err)
	}
	clk := newVClock()
	return newHarnessAt(t, 256, func(c *Config) { c.Keys = keys }, clk), clk
}

// rpm=3: three requests pass with OpenAI's x-ratelimit-* headers counting
// down, the fourth gets 429 rate_limited with a Retry-After that says
// when a request comes back (60s / 3 = 20s), and another tenant is not
// touched by any of it. 20s later on the server's clock, one request
// passes again, and only one.
func TestRateLimitRequests(t *testing.T) {
	h, clk := limitedHarness(t, "ka alice rpm=3\nkb bob\n")
	ctx := context.Background()
	c := h.client("ka")
	for i := range 3 {
		var resp *http.Response
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}, option.WithResponseInto(&resp))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		hd := resp.Header
		if hd.Get("x-ratelimit-limit-requests") != "3" || hd.Get("x-ratelimit-remaining-requests") != strconv.Itoa(2-i) {
			t.Fatalf("request %d headers: limit %q remaining %q", i, hd.Get("x-ratelimit-limit-requests"), hd.Get("x-ratelimit-remaining-requests"))
		}
		// Full again 20s per request taken.
		if want := (time.Duration(i+1) * 20 * time.Second).String(); hd.Get("x-ratelimit-reset-requests") != want || hd.Get("x-ratelimit-limit-tokens") != "" {
			t.Fatalf("request %d: reset %q (want %s), a token limit header %q without tpm", i, hd.Get("x-ratelimit-reset-requests"), want, hd.Get("x-ratelimit-limit-tokens"))
		}
	}
	var resp *http.Response
	_, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}, option.WithResponseInto(&resp))
	apiErr(t, err, http.StatusTooManyRequests, CodeRateLimited)
	if resp.Header.Get("Retry-After") != "20" || resp.Header.Get("retry-after-ms") != "20000" || resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("429 headers: Retry-After %q retry-after-ms %q remaining %q, want 20s and 0", resp.Header.Get("Retry-After"), resp.Header.Get("retry-after-ms"), resp.Header.Get("x-ratelimit-remaining-requests"))
	}
	if got := h.eng.submitted.Load(); got != 3 {
		t.Fatalf("the engine saw %d requests, want 3: a refused one must never reach it", got)
	}
	// A moment before the Retry-After, still refused; at it, one passes.
	clk.advance(20*time.Second - time.Millisecond)
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}, option.WithResponseInto(&resp))
	apiErr(t, err, http.StatusTooManyRequests, CodeRateLimited)
	if resp.Header.Get("retry-after-ms") != "1" {
		t.Fatalf("1ms before the Retry-After: retry-after-ms %q, want 1", resp.Header.Get("retry-after-ms"))
	}
	clk.advance(time.Millisecond)
	if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}); err != nil {
		t.Fatalf("at the Retry-After: %v", err)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)})
	apiErr(t, err, http.StatusTooManyRequests, CodeRateLimited)
	// Bob has no limit and gets no rate headers.
	_, err = h.client("kb").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}, option.WithResponseInto(&resp))
	if err != nil || resp.Header.Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("bob: %v, headers %v", err, resp.Header)
	}
}

// tpm: a request is charged its prompt plus max_tokens for every choice
// up front and given back what it did not use; one that alone needs more
// than the whole minute's tokens is a 400 (no retry would help).
func TestRateLimitTokens(t *testing.T) {
	h, _ := limitedHarness(t, "ka alice tpm=100\n")
	ctx := context.Background()
	c := h.client("ka")
	var resp *http.Response
	// "hello": BOS + 5 prompt tokens; the echo engine answers 5 bytes +
	// EOS: 12 used of the 6 + 50 charged.
	r, err := c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(50)}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if used := r.Usage.TotalTokens; used != 12 {
		t.Fatalf("usage %d, want 12", used)
	}
	if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != "44" {
		t.Fatalf("remaining tokens right after the charge %q, want 44 (100 - 56)", got)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(2)}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	// The first request's unused 44 came back: 100 - 12 - 8 (BOS + 5 + 2);
	// none refilled (the server's clock did not move).
	if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != "80" {
		t.Fatalf("remaining tokens %q, want 80 (the unused part given back)", got)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(95)})
	apiErr(t, err, http.StatusBadRequest, CodeRateTooSmall)
	// n choices are charged n times.
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hello"), MaxTokens: openai.Int(20), N: openai.Int(4)})
	apiErr(t, err, http.StatusBadRequest, CodeRateTooSmall)
}

// The official client's retry: it reads retry-after-ms, waits, and the
// retried request passes (rpm=60: one request a second refills).
//
// On the server's virtual clock: exactly 60 requests pass, the 61st is
// refused with retry-after-ms 1000, and the clock moves that second when
// the client has the 429 in hand (a middleware sees every attempt), so the
// client's attempt after its wait is the one that passes, however long a
// loaded machine takes in between.
func TestRateLimitOfficialClientRetries(t *testing.T) {
	h, clk := limitedHarness(t, "ka alice rpm=60\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := h.client("ka")
	params := openai.CompletionNewParams{Prompt: prompt("x"), MaxTokens: openai.Int(1)}
	for i := range 60 {
		if _, err := c.Completions.New(ctx, params, option.WithMaxRetries(0)); err != nil {
			t.Fatalf("request %d of the 60 a minute allows: %v", i, err)
		}
	}
	_, err := c.Completions.New(ctx, params, option.WithMaxRetries(0))
	apiErr(t, err, http.StatusTooManyRequests, CodeRateLimited)
	var statuses []int
	var retryAfter time.Duration
	seen := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if err == nil {
			statuses = append(statuses, resp.StatusCode)
			if ms, _ := strconv.Atoi(resp.Header.Get("retry-after-ms")); ms > 0 && resp.StatusCode == http.StatusTooManyRequests {
				retryAfter = time.Duration(ms) * time.Millisecond
				clk.advance(retryAfter)
			}
		}
		return resp, err
	})
	start := time.Now()
	_, err = c.Completions.New(ctx, params, option.WithMaxRetries(2), seen)
	waited := time.Since(start)
	if err != nil {
		t.Fatalf("the retried request: %v (attempts %v)", err, statuses)
	}
	if len(statuses) != 2 || statuses[0] != http.StatusTooManyRequests || statuses[1] != http.StatusOK || retryAfter != time.Second {
		t.Fatalf("attempts %v, retry-after-ms %v: want a 429 saying 1s, then 200", statuses, retryAfter)
	}
	// The client waited what the server asked before the attempt that
	// passed (a lower bound on the wall clock holds on a loaded machine).
	if waited < retryAfter/2 {
		t.Fatalf("passed after %v with retry-after-ms %v: the client did not wait", waited, retryAfter)
	}
}

func TestParseKeysLimits(t *testing.T) {
	k, err := ParseKeys(strings.NewReader("k1 a rpm=10\nk2 a tpm=500 weight=2\nk3 b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := k.Limits(); len(l) != 1 || l["a"].RPM != 10 || l["a"].TPM != 500 || k.Weight("a") != 2 {
		t.Fatalf("limits %+v weight %d", l, k.Weight("a"))
	}
	for _, bad := range []string{"k1 a rpm=0\n", "k1 a tpm=-1\n", "k1 a rpm=10\nk2 a rpm=11\n", "k1 a rps=3\n", "k1 a rpm=1000000001\n", "k1 a rpm\n"} {
		if _, err := ParseKeys(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// countingTok counts the encodings the router asks for.
type countingTok struct {
	byteTok
	n *atomic.Int64
}

func (c countingTok) Encode(text string, addSpecial, parse bool) ([]int32, error) {
	c.n.Add(1)
	return c.byteTok.Encode(text, addSpecial, parse)
}

// A tenant over its rate limit is refused before the router reads, renders
// or tokenizes its body (red team: an over-limit tenant still cost the
// router a tokenization per request, and /tokenize none at all): the 429
// comes even for a body that does not parse, no route tokenizes for it,
// and another tenant is served as before. Within the limit, /tokenize is
// not charged.
func TestOverLimitRefusedBeforeTokenizing(t *testing.T) {
	var enc atomic.Int64
	keys, err := ParseKeys(strings.NewReader("ka alice rpm=2\nkb bob\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessAt(t, 256, func(c *Config) { c.Keys = keys; c.Tokenizer = countingTok{n: &enc} }, newVClock())
	ctx := context.Background()
	for i := range 3 {
		if code, body := postJSON(t, h.ts.URL+"/tokenize", "ka", `{"prompt":"hi"}`); code != http.StatusOK {
			t.Fatalf("tokenize %d within the limit: %d %v", i, code, body)
		}
	}
	for i := range 2 {
		if _, err := h.client("ka").Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt("hi"), MaxTokens: openai.Int(2)}); err != nil {
			t.Fatalf("request %d of 2 (tokenize must not have been charged): %v", i, err)
		}
	}
	before := enc.Load()
	for _, c := range []struct{ route, body string }{
		{"/v1/completions", `{"prompt":"hi","max_tokens":2}`},
		{"/v1/completions", `{"prompt":`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`},
		{"/tokenize", `{"prompt":"hi"}`},
		{"/detokenize", `{"tokens":[104,105]}`},
	} {
		code, body := postJSON(t, h.ts.URL+c.route, "ka", c.body)
		e, _ := body["error"].(map[string]any)
		if code != http.StatusTooManyRequests || e == nil || e["code"] != CodeRateLimited {
			t.Fatalf("%s %s over the limit: %d %v, want 429 %s", c.route, c.body, code, body, CodeRateLimited)
		}
	}
	if got := enc.Load(); got != before {
		t.Fatalf("the router tokenized %d times for a tenant over its limit", got-before)
	}
	if code, body := postJSON(t, h.ts.URL+"/v1/completions", "kb", `{"prompt":"hi","max_tokens":2}`); code != http.StatusOK {
		t.Fatalf("bob: %d %v", code, body)
	}
}

// A request too large for the tenant's whole tpm is told the largest
// max_tokens that fits; a chat request that gave no max_tokens is told it
// defaulted to the rest of the context ("lower max_tokens" sent a client
// that never set it looking for a value to lower); a prompt that alone
// does not fit is told to shorten.
func TestRateTooSmallSaysWhatFits(t *testing.T) {
	h, _ := limitedHarness(t, "ka alice tpm=100\n")
	chat := h.ts.URL + "/v1/chat/completions"
	comp := h.ts.URL + "/v1/completions"
	long := strings.Repeat("x", 150)
	for _, c := range []struct{ url, body, says, not string }{
		// The context is 256: a chat request without max_tokens may use all of it.
		{chat, `{"messages":[{"role":"user","content":"hi"}]}`, "max_tokens was not given, so it defaults to", ""},
		{chat, `{"messages":[{"role":"user","content":"hi"}]}`, "(the rest of the context): set max_tokens to at most", ""},
		// BOS + 5 prompt tokens: 100 - 6 = 94 fit.
		{comp, `{"prompt":"hello","max_tokens":95}`, "set max_tokens to at most 94", "was not given"},
		// 4 choices: (100 - 4 x 6) / 4 = 19.
		{comp, `{"prompt":"hello","max_tokens":20,"n":4}`, "set max_tokens to at most 19", ""},
		{comp, `{"prompt":"` + long + `","max_tokens":1}`, "the prompts alone are 151 tokens; shorten them", "at most"},
	} {
		status, e := post(t, c.url, "ka", c.body)
		if status != 400 || e.Code != CodeRateTooSmall || !strings.Contains(e.Message, c.says) || (c.not != "" && strings.Contains(e.Message, c.not)) {
			t.Errorf("%s: %d %s %q, want 400 %s saying %q", c.body, status, e.Code, e.Message, CodeRateTooSmall, c.says)
		}
	}
	// The largest that fits is admitted.
	if status, e := post(t, comp, "ka", `{"prompt":"hello","max_tokens":94}`); status != 200 {
		t.Errorf("max_tokens 94: %d %+v", status, e)
	}
}
