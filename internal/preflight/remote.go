package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ServerInfo is what a sluice server publishes at InfoPath so that remote
// preflight can check it: the advertised context and each role's pool.
type ServerInfo struct {
	Server string `json:"server"` // "sluice"
	Model  string `json:"model"`
	// Context is the context the server admits requests against.
	Context int        `json:"context"`
	Roles   []RoleInfo `json:"roles"`
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
	Endpoint string         `json:"endpoint"`
	Server   string         `json:"server"` // sluice, sglang, vllm, llama.cpp, unknown
	Figures  []RemoteFigure `json:"figures"`
	Problems []string       `json:"problems"` // mismatches: each a sentence
	Notes    []string       `json:"notes"`    // what could not be checked, and why
}

// OK reports whether no mismatch was found.
func (r *RemoteReport) OK() bool { return len(r.Problems) == 0 }

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
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.OK() {
		fmt.Fprintln(w, "verdict: OK (no mismatch among the figures the server exposes)")
		return
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", p)
	}
	fmt.Fprintln(w, "verdict: FAIL")
}

// Remote reads a running server's own figures and reports mismatches
// between its KV pool capacity and the context it advertises. It knows
// sluice (InfoPath), SGLang (/get_server_info, /server_info), vLLM
// (/v1/models max_model_len) and llama.cpp's server (/props). Where a server
// does not expose a figure the report says so rather than guessing.
func Remote(ctx context.Context, endpoint, apiKey string, hc *http.Client) (*RemoteReport, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	base := strings.TrimRight(endpoint, "/")
	get := func(path string) (map[string]any, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return nil, 0, err
		}
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, resp.StatusCode, nil
		}
		var m map[string]any
		if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&m); err != nil {
			return nil, resp.StatusCode, fmt.Errorf("GET %s: response is not a JSON object: %v", path, err)
		}
		return m, resp.StatusCode, nil
	}
	r := &RemoteReport{Endpoint: endpoint, Server: "unknown"}

	// The advertised context, as OpenAI clients see it.
	models, _, err := get("/v1/models")
	if err != nil {
		return nil, err
	}
	advertised, advSrc := 0, ""
	if models != nil {
		if data, ok := models["data"].([]any); ok && len(data) > 0 {
			if m0, ok := data[0].(map[string]any); ok {
				for _, k := range []string{"context_length", "max_model_len"} {
					if v, ok := num(m0[k]); ok {
						advertised, advSrc = v, "/v1/models data[0]."+k
						break
					}
				}
			}
		}
	}

	if info, _, err := get(InfoPath); err == nil && info != nil && info["server"] == "sluice" {
		r.Server = "sluice"
		var si ServerInfo
		b, _ := json.Marshal(info)
		if err := json.Unmarshal(b, &si); err != nil {
			return nil, fmt.Errorf("GET %s: %v", InfoPath, err)
		}
		r.fig("context", si.Context, true, InfoPath+" context")
		for _, role := range si.Roles {
			r.fig(role.Role+" pool tokens", role.PoolTokens, true, InfoPath+" roles[].pool_tokens")
			if role.PoolTokens < si.Context {
				r.Problems = append(r.Problems, fmt.Sprintf("the %s role's KV pool holds %d tokens but the server admits requests up to %d tokens: lower the context to %d or give the pool more memory", role.Role, role.PoolTokens, si.Context, role.PoolTokens))
			}
		}
		r.checkAdvertised(advertised, advSrc, si.Context, "the context sluice admits against")
		return r, nil
	}

	for _, path := range []string{"/get_server_info", "/server_info"} {
		info, _, err := get(path)
		if err != nil || info == nil {
			continue
		}
		pool, pOK := lookupNum(info, "max_total_num_tokens")
		ctxLen, cOK := lookupNum(info, "context_length")
		reqLen, rOK := lookupNum(info, "max_req_input_len")
		if !pOK && !cOK && !rOK {
			continue
		}
		r.Server = "sglang"
		r.fig("KV pool tokens", pool, pOK, path+" max_total_num_tokens")
		if !cOK && advertised > 0 {
			ctxLen, cOK = advertised, true
			r.fig("context length", ctxLen, true, advSrc+" (server_info has none)")
		} else {
			r.fig("context length", ctxLen, cOK, path+" context_length")
		}
		r.fig("max request input length", reqLen, rOK, path+" max_req_input_len")
		switch {
		case pOK && cOK && pool < ctxLen:
			r.Problems = append(r.Problems, fmt.Sprintf("the KV pool holds %d tokens but the context length is %d: a request between the two is admitted and cannot fit (the incident's precondition); set --context-length <= %d or give the pool more memory", pool, ctxLen, pool))
		case !pOK || !cOK:
			r.Notes = append(r.Notes, "the server does not expose both the pool size and the context length; the two could not be compared")
		}
		if pOK && rOK && reqLen > pool {
			r.Problems = append(r.Problems, fmt.Sprintf("the request-length limit (%d) exceeds the KV pool (%d tokens)", reqLen, pool))
		}
		r.checkAdvertised(advertised, advSrc, ctxLen, "the server's context_length")
		return r, nil
	}

	if props, _, err := get("/props"); err == nil && props != nil {
		nctx, ok := lookupNum(props, "n_ctx")
		if ok {
			r.Server = "llama.cpp"
			r.fig("n_ctx (per slot)", nctx, true, "/props default_generation_settings.n_ctx")
			slots, sOK := lookupNum(props, "total_slots")
			r.fig("slots", slots, sOK, "/props total_slots")
			r.Notes = append(r.Notes, "llama.cpp's server allocates its KV cache for n_ctx per slot at start-up and refuses longer prompts itself; the pool size is not exposed separately")
			r.checkAdvertised(advertised, advSrc, nctx, "the per-slot n_ctx")
			return r, nil
		}
	}

	if advertised > 0 {
		r.Server = "openai-compatible (vLLM or other)"
		r.fig("advertised context", advertised, true, advSrc)
		r.Notes = append(r.Notes, "the server publishes no KV pool size; vLLM refuses to start when its KV cache cannot hold max_model_len, so for vLLM the advertised figure is the checked one. Other servers: check the pool size by hand")
		return r, nil
	}
	r.Notes = append(r.Notes, "the server exposes neither a context length nor a pool size at any endpoint preflight knows")
	return r, nil
}

func (r *RemoteReport) fig(name string, v int, known bool, src string) {
	if !known {
		src = "not exposed at " + src
	}
	r.Figures = append(r.Figures, RemoteFigure{Name: name, Value: v, Known: known, Source: src})
}

// checkAdvertised compares what /v1/models tells clients with what the
// server admits against.
func (r *RemoteReport) checkAdvertised(advertised int, src string, actual int, what string) {
	if advertised == 0 {
		r.Notes = append(r.Notes, "/v1/models advertises no context length")
		return
	}
	r.fig("advertised context", advertised, true, src)
	if actual > 0 && advertised > actual {
		r.Problems = append(r.Problems, fmt.Sprintf("clients are told the context is %d (%s) but %s is %d", advertised, src, what, actual))
	}
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
