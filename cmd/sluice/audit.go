package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"sluice/internal/audit"
)

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func init() {
	register(command{name: "audit", summary: "probe a live OpenAI-compatible server for cross-tenant leaks and capacity lies",
		run: func(args []string) int { return runAudit(args, os.Stdout, os.Stderr) }})
}

func runAudit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice audit --url URL --api-key KEY_A --api-key KEY_B [flags]

Probes a running OpenAI-compatible server (sluice, vLLM, SGLang, llama.cpp
server, ...) as a black box, the way a launch test should have:
  canary       tenant A plants secret canaries; tenant B's responses
               (completions and chat, plain and streamed) must never carry them
               or runs of A's prompts
  capacity     prompts from 1/8 to 2x the context, densely at 0.85-1.15: what
               cannot fit must get a 4xx; usage.prompt_tokens must match; a
               reply must not be faster than the prefill it claims
  concurrent-capacity  prompts that each fit but not together, at once:
               errors are acceptable, a 200 with foreign or garbled text is not
  determinism  the same greedy request alone and in --trials trials under load
  side-channel does tenant B see that tenant A sent the same prompt?
               (usage.prompt_tokens_details.cached_tokens, and time to first token)
Every key is checked first; the request budget is sized from the plan.
Exit status: 0 PASS (every probe completed with its planned sample size, no
finding), 1 FAIL (any finding), 2 INCONCLUSIVE (a probe could not complete)
or the audit could not start (refused key, unknown model, budget or timeout
too small for the plan).

Flags:
`)
		fs.PrintDefaults()
	}
	var keys multiFlag
	var ro remoteOpts
	ro.register(fs)
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the server (a trailing /v1 is removed)")
	fs.Var(&keys, "api-key", "API key; give it twice: tenant A (victim) then tenant B (observer). Keys may also come from SLUICE_AUDIT_KEY_A / SLUICE_AUDIT_KEY_B")
	model := fs.String("model", "", "model id; must be listed in /v1/models (default: the first listed)")
	ctxLen := fs.Int("context", 0, "per-request context length (default: discovered from the server)")
	pool := fs.Int("pool-tokens", 0, "KV pool capacity in tokens, when known (from sluice preflight): the sweep also probes around it")
	maxReq := fs.Int("max-requests", 0, "upper bound on requests sent (default: what the plan needs; smaller is an error)")
	timeout := fs.Duration("timeout", 5*time.Minute, "upper bound on the whole run (too small for the plan is an error)")
	reqTimeout := fs.Duration("request-timeout", 60*time.Second, "upper bound on one request")
	samples := fs.Int("samples", 10, "timing samples per side for the side-channel test (at least 8)")
	trials := fs.Int("trials", 8, "determinism trials under load")
	conc := fs.Int("concurrency", 4, "requests in flight at most (at least 2)")
	rate := fs.Float64("rate", 0, "requests per second at most (0: no limit)")
	retries := fs.Int("retries", 2, "resends of a request after a transport error, each on a fresh connection")
	maxPrompt := fs.Int("max-prompt-bytes", 4<<20, "never send a prompt larger than this")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if code, ok := parseFlagsTo(fs, args, stdout); !ok {
		return code
	}
	if len(keys) == 0 {
		if a, b := os.Getenv("SLUICE_AUDIT_KEY_A"), os.Getenv("SLUICE_AUDIT_KEY_B"); a != "" || b != "" {
			keys = multiFlag{a, b}
		}
	}
	if len(keys) > 2 {
		fmt.Fprintln(stderr, "sluice audit: give --api-key at most twice (tenant A, tenant B)")
		return 2
	}
	if len(keys) == 1 {
		fmt.Fprintln(stderr, "sluice audit: one --api-key given; the cross-tenant probes need two tenants, so both roles use the same key (a single-tenant server)")
		keys = append(keys, keys[0])
	}
	if len(keys) == 0 {
		keys = multiFlag{"", ""}
	}
	if *retries < 0 {
		fmt.Fprintln(stderr, "sluice audit: --retries must be >= 0")
		return 2
	}
	hc, headers, err := ro.build(0)
	if err != nil {
		fmt.Fprintf(stderr, "sluice audit: %v\n", err)
		return 2
	}
	curlTLS := ""
	switch {
	case ro.insecure:
		curlTLS = "-k"
	case ro.caCert != "":
		curlTLS = "--cacert " + ro.caCert
	}
	r := *retries
	if r == 0 {
		r = -1 // audit.Config: 0 means the default
	}
	cfg := audit.Config{URL: *url, KeyA: keys[0], KeyB: keys[1], Model: *model, Context: *ctxLen, PoolTokens: *pool,
		MaxRequests: *maxReq, Timeout: *timeout, RequestTimeout: *reqTimeout, Samples: *samples, Trials: *trials,
		Concurrency: *conc, Rate: *rate, Retries: r, MaxPromptBytes: *maxPrompt, Headers: headers, HTTPClient: hc, CurlTLS: curlTLS}
	if !*quiet {
		cfg.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := audit.Run(ctx, cfg)
	if err != nil {
		code := "error"
		var se *audit.SetupError
		var pe *audit.PlanError
		switch {
		case errors.As(err, &se):
			code = se.Code
		case errors.As(err, &pe):
			code = pe.Code
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.Encode(map[string]string{"verdict": "ERROR", "code": code, "error": err.Error()})
		}
		fmt.Fprintf(stderr, "sluice audit: %s: %v\n", code, err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			*audit.Report
			Failed bool `json:"failed"`
		}{rep, rep.Failed()})
	} else {
		rep.WriteText(stdout)
	}
	return rep.ExitCode()
}
