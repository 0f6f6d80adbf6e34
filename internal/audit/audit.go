// Package audit probes a live OpenAI-compatible server as a black box for
// the signs of the incident in DESIGN.md: one tenant's data in another
// tenant's response, over-capacity prompts answered with HTTP 200, token
// counts and latencies that cannot be true, output that changes under load,
// and a prefix cache that lets one tenant see another's prompts.
//
// Its verdict is PASS only when every probe ran to completion with its
// planned sample size: a probe that could not complete makes the run
// INCONCLUSIVE, never a pass, because the incident's failure looked like
// success.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/preflight"
)

// Severity of a finding. Every finding fails the audit; the severity ranks them.
type Severity string

const (
	Critical Severity = "critical" // cross-tenant leak
	High     Severity = "high"     // capacity / accounting / side channel / garbled output
	Warning  Severity = "warning"  // output of one tenant changes with another's load
)

// Verdicts, and the exit codes `sluice audit` maps them to.
const (
	Pass         = "PASS"         // exit 0: every probe completed, no finding
	Fail         = "FAIL"         // exit 1: at least one finding
	Inconclusive = "INCONCLUSIVE" // exit 2: no finding, but a probe did not complete
)

// Finding is one thing the audit saw.
type Finding struct {
	Probe    string   `json:"probe"`
	Severity Severity `json:"severity"`
	Title    string   `json:"title"`
	Evidence string   `json:"evidence"`
	// Reproduce is a shell command (curl) that shows the finding again.
	Reproduce string `json:"reproduce"`
	// Fix says what to change, for the server type detected.
	Fix string `json:"fix"`
}

// ProbeResult says whether a probe ran to completion with its planned
// sample size, and if not, why.
type ProbeResult struct {
	Name     string `json:"name"`
	Planned  int    `json:"planned_requests"`
	Sent     int    `json:"sent_requests"`
	Complete bool   `json:"complete"`
	Reason   string `json:"reason,omitempty"`
}

// Config of one audit run.
type Config struct {
	URL     string
	KeyA    string // tenant A (the victim)
	KeyB    string // tenant B (the observer)
	Model   string // empty: the first model in /v1/models; else it must be listed there
	Context int    // per-request context; 0: discovered (preflight.Discover)
	// PoolTokens is the KV pool capacity when known (e.g. from preflight);
	// the sweep probes around it too.
	PoolTokens int
	// MaxRequests bounds the requests sent; 0 sizes it from the plan. A
	// bound smaller than the plan is an error before the first request.
	MaxRequests    int
	Timeout        time.Duration // bound on the whole run (default 5m); too small for the plan is an error
	RequestTimeout time.Duration // per request (default 60s)
	Samples        int           // side-channel samples per side (default 10)
	Trials         int           // determinism trials under load (default 8)
	Concurrency    int           // requests in flight at most (default 4; at least 2)
	Rate           float64       // requests per second at most (0: unbounded)
	Retries        int           // resends of a request after a transport error (default 2; -1: none)
	MaxPromptBytes int           // never send a larger prompt (default 4 MiB)
	Headers        http.Header   // added to every request
	Progress       io.Writer     // progress lines; nil = silent
	Seed           uint64        // 0: random
	HTTPClient     *http.Client  // nil: preflight.NewHTTPClient defaults
	CurlTLS        string        // TLS options for the printed curl commands (--cacert F, -k)
}

// Report is the result of a run.
type Report struct {
	URL            string        `json:"url"`
	Server         string        `json:"server"`
	Model          string        `json:"model"`
	Context        int           `json:"context"`
	ContextSource  string        `json:"context_source"`
	Slots          int           `json:"slots,omitempty"`
	KVBuffer       string        `json:"kv_buffer"`
	KVBufferSource string        `json:"kv_buffer_source"`
	Requests       int           `json:"requests"`
	Retries        int           `json:"transport_retries"`
	Duration       string        `json:"duration"`
	Verdict        string        `json:"verdict"`
	Findings       []Finding     `json:"findings"`
	Probes         []ProbeResult `json:"probes"`
	Checks         []string      `json:"checks"` // what was checked and passed
	Notes          []string      `json:"notes"`
	PrefillTS      float64       `json:"prefill_tokens_per_second,omitempty"`
	// SideChannel is the side-channel probe's positive control (within
	// tenant A beside across tenants); nil when the probe did not finish.
	SideChannel *SideChannelControl `json:"side_channel_control,omitempty"`
}

// Failed reports whether the verdict is FAIL.
func (r *Report) Failed() bool { return r.verdict() == Fail }

func (r *Report) verdict() string {
	if len(r.Findings) > 0 {
		return Fail
	}
	for _, p := range r.Probes {
		if !p.Complete {
			return Inconclusive
		}
	}
	if len(r.Probes) == 0 {
		return Inconclusive
	}
	return Pass
}

// ExitCode is the process exit status for the verdict.
func (r *Report) ExitCode() int {
	switch r.verdict() {
	case Pass:
		return 0
	case Fail:
		return 1
	}
	return 2
}

// ErrBudget: the request or time budget ran out mid-run.
var ErrBudget = errors.New("audit: request or time budget exhausted")

// PlanError is a configuration that cannot carry out the plan (budget,
// timeout, concurrency), found before any probe request. Code is stable.
type PlanError struct {
	Code string // "budget_too_small", "timeout_too_small", "concurrency_too_small"
	Msg  string
}

func (e *PlanError) Error() string { return e.Msg }

// SetupError is a refusal before the probes: a key, the model, the URL.
// Code is stable: "key_refused", "auth_required", "model_not_served",
// "unreachable", "bad_config".
type SetupError struct {
	Code string
	Msg  string
}

func (e *SetupError) Error() string { return e.Msg }

type auditor struct {
	cfg      Config
	c        *client
	disc     *preflight.Discovery
	rng      *rand.Rand
	rngMu    sync.Mutex
	mu       sync.Mutex
	sent     int
	retries  atomic.Int64
	rep      *Report
	deadln   time.Time
	sem      chan struct{}
	pace     pacer
	perWord  float64 // prompt tokens per pseudo-word, measured
	hasUsage bool
	chatOK   bool // the chat endpoint answers
	// baseLatency and prefillRate (the fastest of the key checks' and
	// calibration's samples) estimate how long the plan takes.
	baseLatency time.Duration
	prefillRate float64
	// short is the calibration prompts' replies: the capacity sweep's
	// short reference.
	short shortRef
	// deterministic is set by the determinism probe: every trial matched.
	deterministic bool

	// A's secrets, for the leak check.
	canaries []string
	aTri     map[string]bool // every run of 3 pseudo-words of A's prompts
}

// Run audits the server. It returns an error (SetupError, PlanError) when
// the audit could not start; otherwise a report whose Verdict is PASS, FAIL
// or INCONCLUSIVE.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.Samples == 0 {
		cfg.Samples = 10
	}
	if cfg.Trials == 0 {
		cfg.Trials = 8
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = 2
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.MaxPromptBytes == 0 {
		cfg.MaxPromptBytes = 4 << 20
	}
	if cfg.Samples < 8 {
		return nil, &PlanError{"samples_too_small", fmt.Sprintf("--samples %d: the side-channel test needs at least 8 samples per side", cfg.Samples)}
	}
	if cfg.Concurrency < 2 {
		return nil, &PlanError{"concurrency_too_small", fmt.Sprintf("--concurrency %d: the determinism and concurrent-capacity probes need at least 2 requests in flight", cfg.Concurrency)}
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc, _ = preflight.NewHTTPClient(preflight.TLSOptions{}, 0)
	}
	a := &auditor{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rep: &Report{URL: cfg.URL, Findings: []Finding{}, Probes: []ProbeResult{}, Checks: []string{}, Notes: []string{}},
		sem: make(chan struct{}, cfg.Concurrency),
	}
	a.pace.interval = rateInterval(cfg.Rate)
	a.c = &client{http: hc, headers: cfg.Headers, retries: cfg.Retries, onRetry: func(err error) {
		a.retries.Add(1)
		a.progress("transport error, resending on a fresh connection: %v", err)
	}}
	start := time.Now()
	a.deadln = start.Add(cfg.Timeout)
	ctx, cancel := context.WithDeadline(ctx, a.deadln)
	defer cancel()
	defer func() {
		a.rep.Requests = a.sent
		a.rep.Retries = int(a.retries.Load())
		a.rep.Duration = time.Since(start).Round(time.Millisecond).String()
		a.rep.Verdict = a.rep.verdict()
	}()

	if err := a.setup(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &PlanError{"timeout_too_small", fmt.Sprintf("--timeout %v ran out during the key check and calibration, before any probe: %v", a.cfg.Timeout, err)}
		}
		return nil, err
	}
	plan, err := a.plan()
	if err != nil {
		return nil, err
	}
	for _, p := range plan {
		a.rep.Probes = append(a.rep.Probes, ProbeResult{Name: p.name, Planned: p.requests})
	}
	for i, p := range plan {
		a.progress("probe %s (%d requests)", p.name, p.requests)
		a.mu.Lock()
		before := a.sent
		a.mu.Unlock()
		err := p.run(ctx)
		pr := &a.rep.Probes[i]
		a.mu.Lock()
		pr.Sent = a.sent - before
		a.mu.Unlock()
		if err != nil {
			pr.Reason = err.Error()
			a.progress("probe %s did not complete: %v", p.name, err)
			if errors.Is(err, ErrBudget) || ctx.Err() != nil {
				for j := i + 1; j < len(plan); j++ {
					a.rep.Probes[j].Reason = "not run: " + ErrBudget.Error()
				}
				break
			}
			continue
		}
		pr.Complete = true
	}
	return a.rep, nil
}

// setup discovers the server and checks the model and every key with a
// trivial request before anything else.
func (a *auditor) setup(ctx context.Context) error {
	base, err := preflight.NormalizeEndpoint(a.cfg.URL)
	if err != nil {
		return &SetupError{"bad_config", err.Error()}
	}
	a.c.base = base
	a.rep.URL = base
	pr := &preflight.Prober{HTTP: a.c.http, APIKey: a.cfg.KeyA, Headers: a.cfg.Headers}
	dctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	d, err := pr.Discover(dctx, base)
	cancel()
	if err != nil {
		if preflight.IsAuth(err) {
			return &SetupError{"auth_required", err.Error() + " (tenant A's key)"}
		}
		return &SetupError{"unreachable", err.Error()}
	}
	a.disc = d
	a.rep.Server, a.rep.KVBuffer, a.rep.KVBufferSource = d.Server, d.KVBuffer, d.KVBufferSource
	if d.Slots.Known {
		a.rep.Slots = d.Slots.Value
	}
	switch {
	case a.cfg.Model != "" && len(d.Models) > 0 && !slices.Contains(d.Models, a.cfg.Model):
		return &SetupError{"model_not_served", fmt.Sprintf("--model %q is not served: /v1/models lists %s", a.cfg.Model, strings.Join(d.Models, ", "))}
	case a.cfg.Model != "":
		a.c.model = a.cfg.Model
	case len(d.Models) > 0:
		a.c.model = d.Models[0]
	default:
		return &SetupError{"model_not_served", "/v1/models lists no model; pass --model"}
	}
	a.rep.Model = a.c.model
	if a.cfg.Context > 0 {
		a.rep.Context, a.rep.ContextSource = a.cfg.Context, "--context"
	} else if d.Context.Known {
		a.cfg.Context = d.Context.Value
		a.rep.Context, a.rep.ContextSource = d.Context.Value, d.Context.Source
	} else {
		a.rep.ContextSource = "unknown: the server does not publish it (" + d.Context.Source + "); pass --context"
	}
	if a.cfg.PoolTokens == 0 && d.PoolTokens.Known {
		a.cfg.PoolTokens = d.PoolTokens.Value
	}

	// Every key, with a trivial request: a refused key stops the audit, so
	// that a 401 is never mistaken for a capacity refusal or a clean canary.
	keys := []struct{ role, key, flag string }{{"A", a.cfg.KeyA, "the first --api-key"}, {"B", a.cfg.KeyB, "the second --api-key"}}
	for i, k := range keys {
		if i == 1 && k.key == keys[0].key {
			break
		}
		r, err := a.sendRaw(ctx, call{key: k.key, path: pathCompletions, prompt: "Hello", maxTokens: 1})
		if err != nil {
			return &SetupError{"unreachable", fmt.Sprintf("tenant %s's key check: %v", k.role, err)}
		}
		switch {
		case (r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden) && k.key == "":
			return &SetupError{"auth_required", fmt.Sprintf("HTTP %d: pass --api-key (twice: tenant A, then tenant B): %s", r.Status, clip(r.ErrMessage, 200))}
		case r.Status == http.StatusUnauthorized || r.Status == http.StatusForbidden:
			return &SetupError{"key_refused", fmt.Sprintf("tenant %s's key (%s) was refused: HTTP %d %s", k.role, k.flag, r.Status, clip(r.ErrMessage, 200))}
		case r.Status != http.StatusOK:
			return &SetupError{"unreachable", fmt.Sprintf("tenant %s's 1-token request got HTTP %d %s", k.role, r.Status, clip(r.ErrMessage, 200))}
		}
		if a.baseLatency == 0 || r.Latency < a.baseLatency {
			a.baseLatency = r.Latency
		}
	}
	return a.calibrate(ctx)
}

// calRounds is how many times the calibration measures a 1-token
// request and a 64-word prompt, side by side. A loaded machine (the
// server's or the auditor's) only ever adds time to a reply, so the
// fastest of several samples is the closest to the server's own speed:
// from one sample, a single stall made a fast server look slow (a plan of
// seconds refused as needing minutes) and a short prompt look slow (a
// long one then "too fast" for its prefill).
const calRounds = 3

// calWords is the calibration prompt's length in pseudo-words.
const calWords = 64

// calWordCount is the calibration prompt's length for this server:
// calWords, or fewer when the context is small, so that the prompt fits
// at the most tokens per word calibrate accepts (16) with room to spare.
// A 64-word prompt is 350 tokens on a 512-token vocabulary, more than a
// 256-token context: the audit of such a server stopped at calibration,
// called "unreachable".
func (a *auditor) calWordCount() int {
	if c := a.cfg.Context; c > 0 {
		return max(4, min(calWords, c/32))
	}
	return calWords
}

// calibrate measures prompt tokens per pseudo-word, so prompts can aim at
// token lengths without knowing the server's tokenizer, the server's
// speed (for the plan's time check and the capacity sweep's short
// reference), and whether the chat endpoint answers.
func (a *auditor) calibrate(ctx context.Context) error {
	a.perWord = 3 // a guess until measured
	words := a.calWordCount()
	usage, tokens := true, 0
	var lats []time.Duration
	var toks []int
	for i := 0; i < calRounds; i++ {
		b, err := a.sendRaw(ctx, call{key: a.cfg.KeyB, path: pathCompletions, prompt: "Hello", maxTokens: 1})
		if err != nil {
			return &SetupError{"unreachable", "calibration: " + err.Error()}
		}
		if b.Status != http.StatusOK {
			return &SetupError{"unreachable", fmt.Sprintf("calibration: a 1-token request got HTTP %d (%s %s)", b.Status, b.ErrCode, clip(b.ErrMessage, 200))}
		}
		if a.baseLatency == 0 || b.Latency < a.baseLatency {
			a.baseLatency = b.Latency
		}
		r, err := a.sendRaw(ctx, call{key: a.cfg.KeyB, path: pathCompletions, prompt: strings.Join(a.pseudoWords(words), " "), maxTokens: 1})
		if err != nil {
			return &SetupError{"unreachable", "calibration: " + err.Error()}
		}
		if r.Status != http.StatusOK {
			return &SetupError{"unreachable", fmt.Sprintf("calibration: a %d-word prompt got HTTP %d (%s %s)", words, r.Status, r.ErrCode, clip(r.ErrMessage, 200))}
		}
		usage = usage && r.HasUsage && r.PromptTokens > 0
		tokens += r.PromptTokens
		lats, toks = append(lats, r.Latency), append(toks, r.PromptTokens)
	}
	if usage {
		a.hasUsage = true
		a.perWord = float64(tokens) / float64(calRounds*words)
		// A six-letter pseudo-word is one to a few tokens on any real
		// tokenizer; a count far outside that is the server's to explain
		// (the capacity probe checks it), not a length to build prompts from.
		if a.perWord < 0.5 || a.perWord > 16 {
			a.note(fmt.Sprintf("calibration: the server counted %d prompt tokens for %d words; prompt lengths are aimed at 3 tokens per word instead", tokens, calRounds*words))
			a.perWord = 3
		}
		for i := range lats {
			a.short.add(toks[i], lats[i])
		}
		// The most tokens over the fastest time: the highest rate the
		// samples allow, so the plan's estimate stays a lower bound.
		if d := a.short.latency - a.baseLatency; d > 0 {
			a.prefillRate = float64(a.short.tokens) / d.Seconds()
		}
		a.pass(fmt.Sprintf("calibrate: %.2f prompt tokens per word; fastest of %d: %v for a 1-token request, %v for a %d-token prompt", a.perWord, calRounds,
			a.baseLatency.Round(time.Microsecond), a.short.latency.Round(time.Microsecond), a.short.tokens))
	} else {
		a.note("the server reports no usage.prompt_tokens: token accounting cannot be checked and prompt lengths are estimated at 3 tokens per word")
	}
	cr, err := a.sendRaw(ctx, call{key: a.cfg.KeyB, path: pathChat, prompt: "Hello", maxTokens: 1})
	switch {
	case err != nil:
		return &SetupError{"unreachable", "chat check: " + err.Error()}
	case cr.Status == http.StatusOK:
		a.chatOK = true
	case cr.Status == http.StatusNotFound || cr.Status == http.StatusMethodNotAllowed:
		a.note(fmt.Sprintf("POST %s: HTTP %d: the chat endpoint is not served, so only completions are probed", pathChat, cr.Status))
	default:
		// A model without a chat template, for example: chat is served but
		// refuses; its probes are then run on completions and the report says so.
		a.note(fmt.Sprintf("POST %s answered HTTP %d %s: chat is not probed", pathChat, cr.Status, clip(cr.ErrMessage, 160)))
	}
	return nil
}

// plannedProbe is one probe with its planned sample size.
type plannedProbe struct {
	name     string
	requests int
	tokens   int // prompt tokens the probe sends in all (for the time estimate)
	run      func(context.Context) error
}

// plan lists the probes with their sample sizes, sizes the request budget
// from them and refuses a budget or timeout too small for them.
func (a *auditor) plan() ([]plannedProbe, error) {
	C := a.cfg.Context
	pts := a.capacityPoints()
	capTokens := 0
	for _, p := range pts {
		capTokens += p.tokens
	}
	m := a.concurrentWidth()
	cw := a.concurrentPromptTokens()
	sc := a.sideChannelTokens()
	plan := []plannedProbe{
		{"canary", 4, 4 * 60, a.canaryPlant},
		{"capacity", len(pts) + capConfirm, capTokens, a.capacitySweep},
		{"determinism", 1 + a.cfg.Trials*a.cfg.Concurrency, (1 + a.cfg.Trials*a.cfg.Concurrency) * 60, a.determinism},
		{"concurrent-capacity", 2 * m, 2 * m * cw, a.concurrentCapacity},
		{"canary-check", 6, 6 * 12, a.canaryObserve},
		// 4 requests a sample, and 3 more for a timing-only finding's
		// confirmation round (sideChannel).
		{"side-channel", 7 * a.cfg.Samples, 4 * a.cfg.Samples * sc, a.sideChannel},
	}
	if C <= 0 {
		// Nothing to aim at: both capacity probes cannot run, and the
		// report says so rather than passing them.
		plan[1].requests, plan[1].tokens, plan[1].run = 0, 0, func(context.Context) error {
			return errors.New("context length unknown: " + a.rep.ContextSource)
		}
		plan[3].requests, plan[3].tokens, plan[3].run = 0, 0, plan[1].run
	} else if b := a.promptBytes(cw); b > float64(a.cfg.MaxPromptBytes) {
		plan[3].requests, plan[3].tokens, plan[3].run = 0, 0, func(context.Context) error {
			return fmt.Errorf("its prompts of ~%d tokens need ~%.0f bytes each, over --max-prompt-bytes %d", cw, b, a.cfg.MaxPromptBytes)
		}
	}
	total, tokens := 0, 0
	for _, p := range plan {
		total += p.requests
		tokens += p.tokens
	}
	if a.cfg.MaxRequests == 0 {
		a.cfg.MaxRequests = a.sent + total
	} else if a.cfg.MaxRequests < a.sent+total {
		var parts []string
		for _, p := range plan {
			parts = append(parts, fmt.Sprintf("%s %d", p.name, p.requests))
		}
		return nil, &PlanError{"budget_too_small", fmt.Sprintf("--max-requests %d is too small for the plan: %d requests (%d for the key check and calibration; %s); raise it to %d or lower --samples/--trials",
			a.cfg.MaxRequests, a.sent+total, a.sent, strings.Join(parts, ", "), a.sent+total)}
	}
	// A lower bound on the time the plan takes, from the fastest of what the
	// key check and calibration measured; half of it, so only a clearly
	// short timeout is refused (a run that still runs out is INCONCLUSIVE,
	// never PASS).
	est := time.Duration(total) * a.baseLatency
	if a.prefillRate > 0 {
		est += time.Duration(float64(tokens) / a.prefillRate * float64(time.Second))
	}
	est /= 2
	if a.cfg.Rate > 0 {
		if r := time.Duration(float64(total) / a.cfg.Rate * float64(time.Second)); r > est {
			est = r
		}
	}
	if left := time.Until(a.deadln); left < est {
		return nil, &PlanError{"timeout_too_small", fmt.Sprintf("--timeout %v is too small for the plan: %d requests (%d prompt tokens) take at least ~%v here (the fastest of %d calibration samples: %v per request, %.0f prompt tokens/s); raise --timeout or lower --samples/--trials",
			a.cfg.Timeout, total, tokens, est.Round(time.Millisecond), calRounds, a.baseLatency.Round(time.Microsecond), a.prefillRate)}
	}
	a.progress("plan: %d requests (budget %d), %d prompt tokens, at least ~%v", total, a.cfg.MaxRequests, tokens, est.Round(time.Millisecond))
	return plan, nil
}

func (a *auditor) progress(format string, args ...any) {
	if a.cfg.Progress != nil {
		fmt.Fprintf(a.cfg.Progress, "audit: "+format+"\n", args...)
	}
}

func (a *auditor) add(f Finding) {
	if f.Fix == "" {
		f.Fix = fixFor(f.Probe, a.rep.Server)
	}
	a.mu.Lock()
	a.rep.Findings = append(a.rep.Findings, f)
	a.mu.Unlock()
	a.progress("FINDING [%s] %s: %s", f.Severity, f.Probe, f.Title)
}

func (a *auditor) pass(s string) {
	a.mu.Lock()
	a.rep.Checks = append(a.rep.Checks, s)
	a.mu.Unlock()
}

func (a *auditor) note(s string) {
	a.mu.Lock()
	a.rep.Notes = append(a.rep.Notes, s)
	a.mu.Unlock()
}

// send is the only way probes reach the server: it enforces the budgets,
// the concurrency bound and the rate.
func (a *auditor) send(ctx context.Context, c call) (reply, error) {
	if time.Now().After(a.deadln) {
		return reply{}, fmt.Errorf("%w: --timeout %v reached", ErrBudget, a.cfg.Timeout)
	}
	a.mu.Lock()
	if a.sent >= a.cfg.MaxRequests {
		a.mu.Unlock()
		return reply{}, fmt.Errorf("%w: all %d requests of --max-requests sent", ErrBudget, a.cfg.MaxRequests)
	}
	a.sent++
	a.mu.Unlock()
	return a.transmit(ctx, c)
}

// sendRaw is send without the request budget, for the setup requests
// (counted, but they precede the plan).
func (a *auditor) sendRaw(ctx context.Context, c call) (reply, error) {
	a.mu.Lock()
	a.sent++
	a.mu.Unlock()
	return a.transmit(ctx, c)
}

func (a *auditor) transmit(ctx context.Context, c call) (reply, error) {
	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return reply{}, fmt.Errorf("%w: %v", ErrBudget, ctx.Err())
	}
	defer func() { <-a.sem }()
	if err := a.pace.wait(ctx); err != nil {
		return reply{}, fmt.Errorf("%w: %v", ErrBudget, err)
	}
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	r, err := a.c.do(rctx, c)
	if err != nil && ctx.Err() != nil {
		return r, fmt.Errorf("%w: %v", ErrBudget, err)
	}
	return r, err
}

// pacer spaces requests at least interval apart (--rate).
type pacer struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
}

func rateInterval(rate float64) time.Duration {
	if rate <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / rate)
}

func (p *pacer) wait(ctx context.Context) error {
	if p.interval == 0 {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(p.interval)
	p.mu.Unlock()
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
