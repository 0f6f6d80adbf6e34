package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"sluice/internal/audit"
)

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func init() {
	register(command{name: "audit", summary: "probe a live OpenAI-compatible server for cross-tenant leaks and capacity lies", run: runAudit})
}

func runAudit(args []string) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice audit --url URL --api-key KEY_A --api-key KEY_B [flags]

Probes a running OpenAI-compatible server (sluice, vLLM, SGLang, llama.cpp
server, ...) as a black box, the way a launch test should have:
  canary      tenant A plants secret canaries; tenant B's responses must never
              contain them or runs of A's prompts
  capacity    prompts around the advertised context: what cannot fit must get
              a 4xx; usage.prompt_tokens must match the prompt; a reply must not
              be faster than the prefill it claims
  determinism the same greedy request alone and under load (a warning only)
  side-channel  does tenant B's time-to-first-token reveal tenant A's prompt?
Exit status: 0 no leak or capacity finding, 1 findings, 2 the audit could not run.

Flags:
`)
		fs.PrintDefaults()
	}
	var keys multiFlag
	url := fs.String("url", "http://127.0.0.1:8080", "base URL of the server (without /v1)")
	fs.Var(&keys, "api-key", "API key; give it twice: tenant A (victim) then tenant B (observer). Keys may also come from SLUICE_AUDIT_KEY_A / SLUICE_AUDIT_KEY_B")
	model := fs.String("model", "", "model id (default: the first in /v1/models)")
	ctxLen := fs.Int("context", 0, "advertised context length (default: read from /v1/models)")
	pool := fs.Int("pool-tokens", 0, "KV pool capacity in tokens, when known (from sluice preflight): the sweep also probes around it")
	maxReq := fs.Int("max-requests", 300, "upper bound on requests sent")
	timeout := fs.Duration("timeout", 5*time.Minute, "upper bound on the whole run")
	reqTimeout := fs.Duration("request-timeout", 60*time.Second, "upper bound on one request")
	samples := fs.Int("samples", 10, "timing samples per side for the side-channel test")
	maxPrompt := fs.Int("max-prompt-bytes", 4<<20, "never send a prompt larger than this")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if len(keys) == 0 {
		if a, b := os.Getenv("SLUICE_AUDIT_KEY_A"), os.Getenv("SLUICE_AUDIT_KEY_B"); a != "" || b != "" {
			keys = multiFlag{a, b}
		}
	}
	if len(keys) == 1 {
		fmt.Fprintln(os.Stderr, "sluice audit: one --api-key given; the cross-tenant probes need two tenants, so both roles use the same key (a single-tenant server)")
		keys = append(keys, keys[0])
	}
	if len(keys) == 0 {
		keys = multiFlag{"", ""}
	}
	cfg := audit.Config{URL: *url, KeyA: keys[0], KeyB: keys[1], Model: *model, Context: *ctxLen, PoolTokens: *pool,
		MaxRequests: *maxReq, Timeout: *timeout, RequestTimeout: *reqTimeout, Samples: *samples, MaxPromptBytes: *maxPrompt}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := audit.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice audit: %v\n", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			*audit.Report
			Failed bool `json:"failed"`
		}{rep, rep.Failed()})
	} else {
		rep.WriteText(os.Stdout)
	}
	if rep.Failed() {
		return 1
	}
	return 0
}
