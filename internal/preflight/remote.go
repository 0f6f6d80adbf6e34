package preflight

import (
	"context"
	"fmt"
	"io"
)

// ServerInfo is what a sluice server publishes at InfoPath so that remote
// preflight can check it: the advertised context and each role's pool.
type ServerInfo struct {
	Server string `json:"server"` // "sluice"
	Model  string `json:"model"`
	// Context is the context the server admits requests against.
	Context int        `json:"context"`
	Roles   []RoleInfo `json:"roles"`
	// Thinking: the model thinks (Qwen3's <think>...</think>: its
	// vocabulary has the markers as tokens and its chat template writes
	// them). ReasoningFormat is where chat answers put the reasoning:
	// auto, in reasoning_content; none, in content (--reasoning-format).
	Thinking        bool   `json:"thinking"`
	ReasoningFormat string `json:"reasoning_format,omitempty"`
}

// RoleInfo is one role's pool as it was built.
type RoleInfo struct {
	Role       string `json:"role"`
	PoolTokens int    `json:"pool_tokens"`
	PageSize   int    `json:"page_size"`
	Context    int    `json:"context"`
}

// InfoPath is where sluice serves its ServerInfo.
const InfoPath = "/sluice/info"

// RemoteFigure is one number a server published (or did not).
type RemoteFigure struct {
	Name   string `json:"name"`
	Value  int    `json:"value"`
	Known  bool   `json:"known"`
	Source string `json:"source"` // endpoint and field it came from, or why it is unknown
}

// RemoteReport is the result of checking a running server.
type RemoteReport struct {
	Endpoint       string         `json:"endpoint"`
	Server         string         `json:"server"` // sluice, sglang, vllm, llama.cpp, openai-compatible, unknown
	Figures        []RemoteFigure `json:"figures"`
	KVBuffer       string         `json:"kv_buffer"` // shared, per-slot, reserved per request, cannot see
	KVBufferSource string         `json:"kv_buffer_source"`
	Problems       []string       `json:"problems"` // mismatches: each a sentence
	Notes          []string       `json:"notes"`    // what could not be checked, and why
}

// Remote verdicts.
const (
	RemoteOK           = "OK"
	RemoteFail         = "FAIL"
	RemoteInconclusive = "INCONCLUSIVE"
)

// OK reports whether no mismatch was found.
func (r *RemoteReport) OK() bool { return len(r.Problems) == 0 }

// Verdict is FAIL on any problem, INCONCLUSIVE when the server exposed no
// figure at all (nothing was checked), OK otherwise.
func (r *RemoteReport) Verdict() string {
	if !r.OK() {
		return RemoteFail
	}
	for _, f := range r.Figures {
		if f.Known {
			return RemoteOK
		}
	}
	return RemoteInconclusive
}

// WriteText prints the report for people.
func (r *RemoteReport) WriteText(w io.Writer) {
	fmt.Fprintf(w, "preflight of %s (server: %s)\n", r.Endpoint, r.Server)
	for _, f := range r.Figures {
		if f.Known {
			fmt.Fprintf(w, "  %-28s %12d   (%s)\n", f.Name, f.Value, f.Source)
		} else {
			fmt.Fprintf(w, "  %-28s %12s   (%s)\n", f.Name, "not exposed", f.Source)
		}
	}
	fmt.Fprintf(w, "  %-28s %12s   (%s)\n", "KV buffer", r.KVBuffer, r.KVBufferSource)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	switch r.Verdict() {
	case RemoteOK:
		fmt.Fprintln(w, "verdict: OK (no mismatch among the figures the server exposes)")
	case RemoteInconclusive:
		fmt.Fprintln(w, "verdict: INCONCLUSIVE (the server exposes no figure preflight could check)")
	default:
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  PROBLEM: %s\n", p)
		}
		fmt.Fprintln(w, "verdict: FAIL")
	}
}

// Remote reads a running server's own figures (through Discover, the layer
// `sluice audit` uses too) and reports mismatches between its KV pool
// capacity and the context it advertises. Where a server does not expose a
// figure the report says so rather than guessing. An authentication refusal
// is an error (IsAuth), never a report about an "unknown" server.
func Remote(ctx context.Context, endpoint string, p *Prober) (*RemoteReport, error) {
	if p == nil {
		p = &Prober{}
	}
	d, err := p.Discover(ctx, endpoint)
	if err != nil {
		return nil, err
	}
	return &RemoteReport{Endpoint: d.Endpoint, Server: d.Server, Figures: d.Figures, KVBuffer: d.KVBuffer,
		KVBufferSource: d.KVBufferSource, Problems: d.Problems, Notes: d.Notes}, nil
}

func num(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f < 0 || f > 1<<53 {
		return 0, false
	}
	return int(f), true
}

// lookupNum finds key at the top level, in internal_states[0] (SGLang) or
// in default_generation_settings (llama.cpp).
func lookupNum(m map[string]any, key string) (int, bool) {
	if v, ok := num(m[key]); ok {
		return v, true
	}
	if is, ok := m["internal_states"].([]any); ok && len(is) > 0 {
		if s0, ok := is[0].(map[string]any); ok {
			if v, ok := num(s0[key]); ok {
				return v, true
			}
		}
	}
	if g, ok := m["default_generation_settings"].(map[string]any); ok {
		if v, ok := num(g[key]); ok {
			return v, true
		}
	}
	return 0, false
}
