// Package audit probes a live OpenAI-compatible server as a black box for
// the signs of the incident in DESIGN.md: one tenant's data in another
// tenant's response, over-capacity prompts answered with HTTP 200, token
// counts and latencies that cannot be true, output that changes under load,
// and a prefix cache that lets one tenant time another's prompts.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Severity of a finding. Critical and High make the audit fail.
type Severity string

const (
	Critical Severity = "critical" // cross-tenant leak
	High     Severity = "high"     // capacity / accounting / side channel
	Warning  Severity = "warning"  // determinism: not every server promises it
	Info     Severity = "info"     // what could not be checked, and why
)

// Finding is one thing the audit saw.
type Finding struct {
	Probe     string   `json:"probe"`
	Severity  Severity `json:"severity"`
	Title     string   `json:"title"`
	Evidence  string   `json:"evidence"`
	Reproduce string   `json:"reproduce,omitempty"`
}

// Config of one audit run.
type Config struct {
	URL     string
	KeyA    string // tenant A (the victim)
	KeyB    string // tenant B (the observer)
	Model   string // empty: the first model in /v1/models
	Context int    // advertised context; 0: read from /v1/models
	// PoolTokens is the KV pool capacity when known (e.g. from preflight);
	// the sweep probes around it too.
	PoolTokens     int
	MaxRequests    int           // bound on requests sent (default 300)
	Timeout        time.Duration // bound on the whole run (default 5m)
	RequestTimeout time.Duration // per request (default 60s)
	Samples        int           // timing samples per side of the side-channel test (default 10)
	MaxPromptBytes int           // the sweep never sends a larger prompt (default 4 MiB)
	Progress       io.Writer     // progress lines; nil = silent
	Seed           uint64        // 0: random
	HTTPClient     *http.Client
}

// Report is the result of a run.
type Report struct {
	URL       string    `json:"url"`
	Model     string    `json:"model"`
	Context   int       `json:"context"`
	Requests  int       `json:"requests"`
	Duration  string    `json:"duration"`
	Findings  []Finding `json:"findings"`
	Checks    []string  `json:"checks"` // what was checked and passed
	PrefillTS float64   `json:"prefill_tokens_per_second,omitempty"`
}

// Failed reports whether any leak or capacity-class finding exists.
func (r *Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Severity == Critical || f.Severity == High {
			return true
		}
	}
	return false
}

// ErrBudget: the request or time budget ran out.
var ErrBudget = errors.New("audit: request or time budget exhausted")

type auditor struct {
	cfg     Config
	c       *client
	rng     *rand.Rand
	mu      sync.Mutex
	sent    int
	rep     *Report
	deadln  time.Time
	perWord float64 // prompt tokens per pseudo-word, measured

	// A's secrets, for the leak check.
	canaries []string
	aRuns    [][]string // A's unique pseudo-word sequences
}

// Run audits the server. It returns a report even when probes failed to
// run; err is set only when nothing could be checked at all.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = 300
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 60 * time.Second
	}
	if cfg.Samples == 0 {
		cfg.Samples = 10
	}
	if cfg.MaxPromptBytes == 0 {
		cfg.MaxPromptBytes = 4 << 20
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	a := &auditor{
		cfg:    cfg,
		c:      &client{base: strings.TrimRight(cfg.URL, "/"), model: cfg.Model, http: hc},
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rep:    &Report{URL: cfg.URL},
		deadln: time.Now().Add(cfg.Timeout),
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, a.deadln)
	defer cancel()

	id, n, err := a.c.modelInfo(ctx, cfg.KeyA)
	if err != nil {
		return a.rep, fmt.Errorf("cannot read the server's models: %w", err)
	}
	if a.c.model == "" {
		a.c.model = id
	}
	a.rep.Model = a.c.model
	if cfg.Context == 0 {
		cfg.Context = n
		a.cfg.Context = n
	}
	a.rep.Context = cfg.Context

	probes := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"calibrate", a.calibrate},
		{"canary", a.canaryPlant},
		{"capacity", a.capacitySweep},
		{"canary-check", a.canaryObserve},
		{"determinism", a.determinism},
		{"side-channel", a.sideChannel},
	}
	for _, p := range probes {
		a.progress("probe %s", p.name)
		if err := p.fn(ctx); err != nil {
			a.add(Finding{Probe: p.name, Severity: Info, Title: "probe did not complete", Evidence: err.Error()})
			if errors.Is(err, ErrBudget) || ctx.Err() != nil {
				break
			}
		}
	}
	a.rep.Requests = a.sent
	a.rep.Duration = time.Since(start).Round(time.Millisecond).String()
	return a.rep, nil
}

func (a *auditor) progress(format string, args ...any) {
	if a.cfg.Progress != nil {
		fmt.Fprintf(a.cfg.Progress, "audit: "+format+"\n", args...)
	}
}

func (a *auditor) add(f Finding) {
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

// send is the only way probes reach the server: it enforces the budgets.
func (a *auditor) send(ctx context.Context, key, prompt string, maxTokens int, stream bool) (reply, error) {
	a.mu.Lock()
	if a.sent >= a.cfg.MaxRequests || time.Now().After(a.deadln) {
		a.mu.Unlock()
		return reply{}, ErrBudget
	}
	a.sent++
	a.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	return a.c.complete(rctx, key, prompt, maxTokens, stream)
}

// pseudoWords returns n random pronounceable non-words: they do not occur
// in ordinary model output, so seeing a run of them elsewhere is evidence.
func (a *auditor) pseudoWords(n int) []string {
	const cons, vow = "bdfgklmnprstvz", "aeiou"
	w := make([]string, n)
	for i := range w {
		var b strings.Builder
		for j := 0; j < 3; j++ {
			b.WriteByte(cons[a.rng.IntN(len(cons))])
			b.WriteByte(vow[a.rng.IntN(len(vow))])
		}
		w[i] = b.String()
	}
	return w
}

// promptOfTokens builds a prompt of about n tokens from fresh pseudo-words.
func (a *auditor) promptOfTokens(n int) string {
	words := int(math.Ceil(float64(n) / a.perWord))
	if words < 1 {
		words = 1
	}
	return strings.Join(a.pseudoWords(words), " ")
}

// calibrate measures prompt tokens per pseudo-word, so the sweep can aim at
// token lengths without knowing the server's tokenizer.
func (a *auditor) calibrate(ctx context.Context) error {
	a.perWord = 3 // a guess until measured
	const words = 64
	r, err := a.send(ctx, a.cfg.KeyB, strings.Join(a.pseudoWords(words), " "), 1, false)
	if err != nil {
		return err
	}
	if r.Status != http.StatusOK {
		return fmt.Errorf("a 64-word prompt got HTTP %d (%s %s)", r.Status, r.ErrCode, r.ErrMessage)
	}
	if !r.HasUsage || r.PromptTokens <= 0 {
		a.add(Finding{Probe: "calibrate", Severity: Info, Title: "server reports no usage.prompt_tokens", Evidence: "token accounting cannot be checked; prompt lengths are estimated at 3 tokens per word"})
		return nil
	}
	a.perWord = float64(r.PromptTokens) / words
	a.pass(fmt.Sprintf("calibrate: %.2f prompt tokens per word", a.perWord))
	return nil
}

// canaryPlant: tenant A sends prompts carrying secret canaries and asks the
// model to repeat them; their KV now sits in the server's pool.
func (a *auditor) canaryPlant(ctx context.Context) error {
	for i := 0; i < 4; i++ {
		canary := fmt.Sprintf("CANARY-%012x", a.rng.Uint64()&0xffffffffffff)
		run := a.pseudoWords(24)
		a.canaries = append(a.canaries, canary)
		a.aRuns = append(a.aRuns, run)
		prompt := fmt.Sprintf("The secret code is %s. %s. Repeat the secret code: %s", canary, strings.Join(run, " "), canary)
		if _, err := a.send(ctx, a.cfg.KeyA, prompt, 16, false); err != nil {
			return err
		}
	}
	return nil
}

// leakIn reports evidence of tenant A's data in text.
func (a *auditor) leakIn(text string) string {
	for _, c := range a.canaries {
		if strings.Contains(text, c) || strings.Contains(text, c[len("CANARY-"):]) {
			return "contains tenant A's canary " + c
		}
	}
	words := strings.Fields(text)
	for _, run := range a.aRuns {
		for i := 0; i+3 <= len(run); i++ {
			needle := run[i : i+3]
			for j := 0; j+3 <= len(words); j++ {
				if words[j] == needle[0] && words[j+1] == needle[1] && words[j+2] == needle[2] {
					return fmt.Sprintf("contains a run of tenant A's prompt: %q", strings.Join(needle, " "))
				}
			}
		}
	}
	return ""
}

func (a *auditor) checkLeak(probe, prompt string, r reply) {
	if ev := a.leakIn(r.Text); ev != "" {
		a.add(Finding{Probe: probe, Severity: Critical, Title: "tenant B's response carries tenant A's data",
			Evidence:  fmt.Sprintf("HTTP %d, %s; response text %q", r.Status, ev, clip(r.Text, 300)),
			Reproduce: fmt.Sprintf("as tenant A send the canary prompts, then as tenant B POST /v1/completions with a %d-byte prompt", len(prompt))})
	}
}

// capacitySweep sends tenant B prompts at lengths around the advertised
// context (and pool capacity): what cannot fit must get a 4xx; what fits
// must report honest usage and take plausible time.
func (a *auditor) capacitySweep(ctx context.Context) error {
	C := a.cfg.Context
	if C <= 0 {
		a.add(Finding{Probe: "capacity", Severity: Info, Title: "context length unknown", Evidence: "the server does not advertise a context length and --context was not given; the over-capacity sweep was skipped"})
		return nil
	}
	const maxTok = 4
	type point struct {
		tokens int
		fits   bool
	}
	var pts []point
	add := func(n int) {
		if n < 8 {
			return
		}
		// A margin around the boundary: the word-based length is an estimate.
		switch {
		case float64(n+maxTok) < 0.85*float64(C):
			pts = append(pts, point{n, true})
		case float64(n+maxTok) > 1.15*float64(C):
			pts = append(pts, point{n, false})
		}
	}
	add(C / 8)
	add(C / 2)
	add(C * 3 / 4)
	add(C * 5 / 4)
	add(C * 2)
	if p := a.cfg.PoolTokens; p > 0 && p < C {
		add(p * 3 / 2)
	}
	type result struct {
		pt     point
		prompt string
		r      reply
	}
	var results []result
	for _, pt := range pts {
		prompt := a.promptOfTokens(pt.tokens)
		if len(prompt) > a.cfg.MaxPromptBytes {
			a.add(Finding{Probe: "capacity", Severity: Info, Title: "sweep point skipped", Evidence: fmt.Sprintf("a prompt of ~%d tokens needs %d bytes, over --max-prompt-bytes", pt.tokens, len(prompt))})
			continue
		}
		r, err := a.send(ctx, a.cfg.KeyB, prompt, maxTok, false)
		if err != nil {
			return err
		}
		results = append(results, result{pt, prompt, r})
	}
	// The server's own prefill rate: the slowest rate seen on prompts that
	// fit. A reply that skipped its prefill looks fast, so it cannot raise
	// the reference it is judged against.
	var rate float64
	for _, x := range results {
		if x.pt.fits && x.r.Status == http.StatusOK && x.r.PromptTokens > 0 {
			if tps := float64(x.r.PromptTokens) / x.r.Latency.Seconds(); rate == 0 || tps < rate {
				rate = tps
			}
		}
	}
	for _, x := range results {
		pt, prompt, r := x.pt, x.prompt, x.r
		a.checkLeak("capacity", prompt, r)
		repro := fmt.Sprintf("POST /v1/completions as tenant B with a prompt of %d pseudo-words (~%d tokens) and max_tokens %d", len(strings.Fields(prompt)), pt.tokens, maxTok)
		if !pt.fits {
			if r.Status >= 400 && r.Status < 500 {
				a.pass(fmt.Sprintf("capacity: ~%d-token prompt (context %d) refused with HTTP %d", pt.tokens, C, r.Status))
			} else {
				a.add(Finding{Probe: "capacity", Severity: High, Title: "over-capacity prompt not refused with a 4xx",
					Evidence:  fmt.Sprintf("a ~%d-token prompt with context %d got HTTP %d, usage.prompt_tokens=%d, %v, text %q", pt.tokens, C, r.Status, r.PromptTokens, r.Latency.Round(time.Millisecond), clip(r.Text, 120)),
					Reproduce: repro})
			}
		} else if r.Status != http.StatusOK {
			a.add(Finding{Probe: "capacity", Severity: Warning, Title: "a prompt that fits was refused",
				Evidence: fmt.Sprintf("a ~%d-token prompt with context %d got HTTP %d %s", pt.tokens, C, r.Status, r.ErrMessage), Reproduce: repro})
			continue
		}
		if r.Status != http.StatusOK || !r.HasUsage {
			continue
		}
		// Honest accounting (I9): the reported prompt size must match what was sent.
		est := float64(len(strings.Fields(prompt))) * a.perWord
		if ratio := float64(r.PromptTokens) / est; ratio < 0.5 || ratio > 2 {
			a.add(Finding{Probe: "capacity", Severity: High, Title: "usage.prompt_tokens disagrees with the prompt's length",
				Evidence:  fmt.Sprintf("sent ~%.0f tokens, server reported prompt_tokens=%d", est, r.PromptTokens),
				Reproduce: repro})
		}
		// A reply far faster than the prefill it claims never prefilled it.
		if claimed := float64(r.PromptTokens); rate > 0 && claimed >= 256 {
			need := time.Duration(claimed / rate * float64(time.Second))
			if r.Latency < need/5 {
				a.add(Finding{Probe: "capacity", Severity: High, Title: "reply too fast for the prefill it claims",
					Evidence:  fmt.Sprintf("prompt_tokens=%d answered in %v; at the server's measured %.0f prompt tokens/s the prefill alone takes ~%v", r.PromptTokens, r.Latency.Round(time.Millisecond), rate, need.Round(time.Millisecond)),
					Reproduce: repro})
			}
		}
	}
	a.rep.PrefillTS = rate
	return nil
}

// canaryObserve: tenant B sends ordinary requests after A's; none may carry A's data.
func (a *auditor) canaryObserve(ctx context.Context) error {
	clean := true
	for i := 0; i < 6; i++ {
		prompt := "Tell me a story about " + strings.Join(a.pseudoWords(3), " ")
		r, err := a.send(ctx, a.cfg.KeyB, prompt, 32, i%2 == 1)
		if err != nil {
			return err
		}
		before := len(a.rep.Findings)
		a.checkLeak("canary", prompt, r)
		clean = clean && len(a.rep.Findings) == before
	}
	if clean {
		a.pass("canary: no tenant-A canary or prompt run in tenant B's responses")
	}
	return nil
}

// determinism: the same greedy request alone and under concurrent load.
func (a *auditor) determinism(ctx context.Context) error {
	prompt := "Once upon a time " + strings.Join(a.pseudoWords(8), " ")
	alone, err := a.send(ctx, a.cfg.KeyB, prompt, 24, false)
	if err != nil {
		return err
	}
	if alone.Status != http.StatusOK {
		return fmt.Errorf("greedy request got HTTP %d", alone.Status)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		p := a.promptOfTokens(16 + 24*i)
		go func() {
			defer wg.Done()
			a.send(ctx, a.cfg.KeyA, p, 24, false) //nolint:errcheck // background load only
		}()
	}
	loaded, err := a.send(ctx, a.cfg.KeyB, prompt, 24, false)
	wg.Wait()
	if err != nil {
		return err
	}
	if loaded.Text != alone.Text {
		a.add(Finding{Probe: "determinism", Severity: Warning, Title: "greedy output changes under concurrent load",
			Evidence:  fmt.Sprintf("alone: %q; under load: %q (servers that do not promise batch-invariant kernels may differ)", clip(alone.Text, 120), clip(loaded.Text, 120)),
			Reproduce: "send the same temperature-0 request alone and while 4 others run"})
	} else {
		a.pass("determinism: greedy output identical alone and under load")
	}
	return nil
}

// sideChannel: does tenant B's time-to-first-token reveal that tenant A
// sent the same prompt (a prefix cache shared across tenants, I11)?
func (a *auditor) sideChannel(ctx context.Context) error {
	n := 256
	if a.cfg.Context > 0 && n > a.cfg.Context/4 {
		n = a.cfg.Context / 4
	}
	var same, control []float64
	for i := 0; i < a.cfg.Samples; i++ {
		p := a.promptOfTokens(n)
		q := a.promptOfTokens(n)
		if _, err := a.send(ctx, a.cfg.KeyA, p, 1, false); err != nil {
			return err
		}
		order := []struct {
			prompt string
			dst    *[]float64
		}{{p, &same}, {q, &control}}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, o := range order {
			r, err := a.send(ctx, a.cfg.KeyB, o.prompt, 1, true)
			if err != nil {
				return err
			}
			if r.Status != http.StatusOK {
				return fmt.Errorf("timing request got HTTP %d", r.Status)
			}
			*o.dst = append(*o.dst, r.TTFT.Seconds())
		}
	}
	pv := mannWhitneyLess(same, control)
	ms, mc := median(same), median(control)
	ev := fmt.Sprintf("TTFT median %.2f ms when tenant A sent the same prompt vs %.2f ms for a fresh prompt (n=%d each, one-sided Mann-Whitney p=%.2g)", ms*1e3, mc*1e3, len(same), pv)
	if pv < 0.01 && ms < 0.8*mc {
		a.add(Finding{Probe: "side-channel", Severity: High, Title: "prefix cache shared across tenants: TTFT reveals another tenant's prompt",
			Evidence: ev, Reproduce: "as tenant A send a prompt; as tenant B time the first token of the same prompt and of a fresh one of equal length"})
	} else {
		a.pass("side-channel: " + ev)
	}
	return nil
}

// mannWhitneyLess is the one-sided p-value that x tends to be smaller than
// y (normal approximation with tie correction; fine for n >= 8).
func mannWhitneyLess(x, y []float64) float64 {
	type obs struct {
		v float64
		x bool
	}
	all := make([]obs, 0, len(x)+len(y))
	for _, v := range x {
		all = append(all, obs{v, true})
	}
	for _, v := range y {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	n1, n2 := float64(len(x)), float64(len(y))
	var rx, tie float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // mean of ranks i+1..j
		t := float64(j - i)
		tie += t*t*t - t
		for k := i; k < j; k++ {
			if all[k].x {
				rx += rank
			}
		}
		i = j
	}
	u := rx - n1*(n1+1)/2
	mu := n1 * n2 / 2
	n := n1 + n2
	sigma := math.Sqrt(n1 * n2 / 12 * ((n + 1) - tie/(n*(n-1))))
	if sigma == 0 {
		return 1
	}
	z := (u - mu + 0.5) / sigma // continuity correction toward the null
	return 0.5 * math.Erfc(-z/math.Sqrt2)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "sluice audit of %s (model %s, context %d): %d requests in %s\n", r.URL, r.Model, r.Context, r.Requests, r.Duration)
	if len(r.Findings) == 0 {
		fmt.Fprintln(w, "No findings.")
	}
	for i, f := range r.Findings {
		fmt.Fprintf(w, "\n%d. [%s] %s: %s\n   evidence: %s\n", i+1, strings.ToUpper(string(f.Severity)), f.Probe, f.Title, f.Evidence)
		if f.Reproduce != "" {
			fmt.Fprintf(w, "   reproduce: %s\n", f.Reproduce)
		}
	}
	if len(r.Checks) > 0 {
		fmt.Fprintln(w, "\nPassed checks:")
		for _, c := range r.Checks {
			fmt.Fprintf(w, "  - %s\n", c)
		}
	}
	if r.Failed() {
		fmt.Fprintln(w, "\nVERDICT: FAIL (leak or capacity findings)")
	} else {
		fmt.Fprintln(w, "\nVERDICT: PASS")
	}
}
