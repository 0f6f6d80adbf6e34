package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/preflight"
)

func init() {
	register(command{
		name:    "preflight",
		summary: "check before launch that every role's KV pool holds the configured context",
		run:     func(args []string) int { return runPreflight(args, os.Stdout, os.Stderr) },
	})
}

// remotePreflight, when set by the remote-mode file of this command, runs
// `sluice preflight --endpoint URL`. Local mode does not need it.
var remotePreflight func(endpoint, apiKey string, jsonOut bool, stdout, stderr io.Writer) int

// remotePreflightFlags, when set, adds remote mode's own flags (headers, TLS).
var remotePreflightFlags func(fs *flag.FlagSet)

func runPreflight(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o        roleOpts
		role     string
		jsonOut  bool
		endpoint string
		apiKey   string
	)
	fs.StringVar(&o.model, "model", "", "GGUF model: a file path or hf://ORG/REPO[:QUANT | /FILE.gguf] (fetched into the Hugging Face cache, see sluice serve -hf); empty checks the built-in default model")
	fs.StringVar(&o.hf, "hf", "", hfUsage)
	fs.StringVar(&o.context, "context", "auto", "the context the roles will be started with, in tokens, or \"auto\"")
	fs.StringVar(&o.kvMemory, "kv-memory", defaultKVMemory, kvMemoryUsage+"; the same default as sluice serve and the workers (auto here counts every --role checked as a pool of one process, as sluice serve runs them)")
	fs.IntVar(&o.poolTokens, "kv-pool-tokens", 0, "KV pool size per role in token slots (rounded up to whole pages); overrides --kv-memory")
	fs.IntVar(&o.pageSize, "page-size", preflight.DefaultPageSize, "token slots per KV page")
	fs.StringVar(&o.kvType, "kv-type", preflight.KVF16, "element type of KV pages the roles will be started with: f16 (2 bytes an element), f32 (4) or q8_0 (34 bytes per 32)")
	fs.StringVar(&role, "role", "both", "which role(s) to check: prefill, decode, both (prefill and decode) or colocated")
	fs.BoolVar(&jsonOut, "json", false, "print the report as JSON")
	fs.StringVar(&endpoint, "endpoint", "", "remote mode: URL of a running OpenAI-compatible server to read its own figures from")
	fs.StringVar(&apiKey, "api-key", "", "remote mode: API key for --endpoint")
	if remotePreflightFlags != nil {
		remotePreflightFlags(fs)
	}
	usageFor(fs, `Usage: sluice preflight --model PATH --context N [--kv-memory BYTES | --kv-pool-tokens N] [--page-size P] [--kv-type f16|f32|q8_0] [--role prefill|decode|both|colocated] [--json]

Prints, per role: weight bytes, KV bytes per token and type (layers x KV
heads x head dim x 2 x 2 bytes for f16, the default, 4 for f32, 34/32 for
q8_0), page size, pool capacity in tokens, configured and effective context,
and a verdict. Exits 0 when every role's pool holds the
context; otherwise exits 1 with a sentence naming the role, both numbers
and what to change. The servers run exactly this check at start (I2).
`)
	if code, ok := parseFlagsTo(fs, args, stdout); !ok {
		return code
	}
	if endpoint != "" {
		if remotePreflight == nil {
			fmt.Fprintln(stderr, "preflight: remote mode (--endpoint) is not built into this binary")
			return 2
		}
		return remotePreflight(endpoint, apiKey, jsonOut, stdout, stderr)
	}
	if flagSet(fs, "kv-memory") && o.poolTokens != 0 {
		fmt.Fprintln(stderr, "preflight: give either --kv-memory or --kv-pool-tokens, not both")
		return 2
	}
	var roles []string
	switch role {
	case "both":
		roles = []string{preflight.RolePrefill, preflight.RoleDecode}
	case preflight.RolePrefill, preflight.RoleDecode, preflight.RoleColocated:
		roles = []string{role}
	default:
		fmt.Fprintf(stderr, "preflight: --role %q: use prefill, decode, both or colocated\n", role)
		return 2
	}
	// The step budget does not change what a pool holds; the roles'
	// defaults pass pools()'s check.
	o.chunk, o.stepTokens = engine.DefaultChunkTokens, engine.DefaultStepTokens
	o.maxConc = 64 // the roles' default --max-concurrency caps an auto pool
	pools, err := o.pools()
	if err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 2
	}
	// Preflight computes nothing with the weights: the shared mapping.
	m, err := loadModel(nil, o.model, o.hf, gguf.MemoryMap)
	if err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 2
	}
	defer m.Close()
	pools = o.sizeAutoKV(nil, m, pools, len(roles))
	rep := m.Preflight(pools, roles...)
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printPreflight(stdout, rep)
	}
	if !rep.OK {
		if jsonOut {
			for _, p := range rep.Problems {
				fmt.Fprintln(stderr, "preflight: FAIL:", p)
			}
		}
		return 1
	}
	return 0
}

func printPreflight(w io.Writer, rep preflight.Report) {
	fmt.Fprintf(w, "model: %s\n", rep.Model)
	ctx := "auto"
	if rep.ConfiguredContext > 0 {
		ctx = fmt.Sprint(rep.ConfiguredContext)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tWEIGHTS\tKV/TOKEN\tPAGE\tPAGES\tPOOL BYTES\tPOOL TOKENS\tCONTEXT\tEFFECTIVE\tVERDICT")
	for _, r := range rep.Roles {
		fmt.Fprintf(tw, "%s\t%s\t%d B %s\t%d\t%d\t%s\t%d\t%s\t%d\t%s\n", r.Role, preflight.FormatBytes(r.WeightBytes), r.KVBytesPerToken, r.KVType,
			r.PageSize, r.Pages, preflight.FormatBytes(r.PoolBytes), r.PoolTokens, ctx, r.EffectiveContext, r.Verdict)
	}
	tw.Flush()
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, n := range rep.Warnings {
		fmt.Fprintln(w, "warning:", n)
	}
	if rep.OK {
		for _, r := range rep.Roles {
			fmt.Fprintf(w, "%s: KV cache: %d tokens, context %d, max concurrency %.2fx at full context (%s)\n", r.Role, r.PoolTokens, r.EffectiveContext, r.MaxConcurrency, r.Sizing)
		}
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "FAIL:", p)
	}
	if rep.OK {
		fmt.Fprintf(w, "OK: every role holds the context (%d tokens)\n", rep.EffectiveContext)
	}
}
