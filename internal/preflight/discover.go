package preflight

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// This file is the discovery layer that `sluice preflight --endpoint` and
// `sluice audit` share: one place that knows how sluice, SGLang, vLLM and
// llama.cpp's server publish their context, slots and KV buffer, so the two
// tools can never disagree about the same server.

// KV buffer layouts, as Discovery.KVBuffer reports them.
const (
	// KVShared: requests (slots) draw from one buffer, so several requests
	// that each fit can fail together.
	KVShared = "shared"
	// KVPerSlot: each slot owns a buffer of the per-request context.
	KVPerSlot = "per-slot"
	// KVOnDemand: one pool whose pages a request takes as it grows, where a
	// sequence that cannot grow is preempted and resumed, never failed
	// (sluice): requests that each fit do not fail together.
	KVOnDemand = "shared pool, pages on demand with preemption"
	// KVCannotSee: the server does not expose it.
	KVCannotSee = "cannot see"
)

// Server kinds.
const (
	ServerSluice  = "sluice"
	ServerSGLang  = "sglang"
	ServerVLLM    = "vllm"
	ServerLlama   = "llama.cpp"
	ServerOpenAI  = "openai-compatible"
	ServerUnknown = "unknown"
)

// Discovery is what a running server says about itself.
type Discovery struct {
	Endpoint string   `json:"endpoint"` // normalised: no trailing slash, no /v1
	Server   string   `json:"server"`
	Models   []string `json:"models"`
	// Context is the longest request (prompt + completion) one request may
	// use, as the server admits it (per slot for llama.cpp).
	Context    RemoteFigure `json:"context"`
	Advertised RemoteFigure `json:"advertised_context"` // what /v1/models tells clients
	Slots      RemoteFigure `json:"slots"`
	PoolTokens RemoteFigure `json:"pool_tokens"`
	// KVBuffer is KVShared, KVPerSlot, KVOnDemand or KVCannotSee;
	// KVBufferSource says how that was found (or inferred).
	KVBuffer       string `json:"kv_buffer"`
	KVBufferSource string `json:"kv_buffer_source"`
	// Figures is every number read, in order, for the report.
	Figures  []RemoteFigure `json:"figures"`
	Problems []string       `json:"problems"`
	Notes    []string       `json:"notes"`
}

// HTTPError is a non-2xx answer to a discovery request. Code is stable and
// machine-readable: "auth_required" (401/403 with no key given),
// "auth_refused" (401/403 with a key), "http_error" otherwise.
type HTTPError struct {
	Code   string
	Status int
	Path   string
	Body   string
}

func (e *HTTPError) Error() string {
	switch e.Code {
	case "auth_required":
		return fmt.Sprintf("GET %s: HTTP %d: the server wants an API key: pass --api-key", e.Path, e.Status)
	case "auth_refused":
		return fmt.Sprintf("GET %s: HTTP %d: the server refused the API key: check --api-key", e.Path, e.Status)
	}
	return fmt.Sprintf("GET %s: HTTP %d %s", e.Path, e.Status, strings.TrimSpace(e.Body))
}

// IsAuth reports whether err is an authentication refusal.
func IsAuth(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && (he.Code == "auth_required" || he.Code == "auth_refused")
}

// NormalizeEndpoint turns what an operator typed into the server's base URL:
// a scheme is required (http or https), trailing slashes and a trailing
// /v1 (the OpenAI base URL clients are given) are removed.
func NormalizeEndpoint(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("endpoint %q: want an http:// or https:// URL", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("endpoint %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("endpoint %q: no query or fragment expected", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	p = strings.TrimSuffix(p, "/v1")
	u.Path, u.RawPath = strings.TrimRight(p, "/"), ""
	return u.String(), nil
}

// TLSOptions configure HTTPS to the server.
type TLSOptions struct {
	CACert   string // PEM file of the CA that signed the server's certificate
	Insecure bool   // skip certificate verification (testing only)
}

// NewHTTPClient builds the client both tools use. Its transport is a fresh
// one (no connection shared with the process default) with keep-alives, so
// callers can drop idle connections after a transport error.
func NewHTTPClient(o TLSOptions, timeout time.Duration) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if o.CACert != "" || o.Insecure {
		cfg := &tls.Config{InsecureSkipVerify: o.Insecure} //nolint:gosec // operator asked for it with --insecure
		if o.CACert != "" {
			pem, err := os.ReadFile(o.CACert)
			if err != nil {
				return nil, fmt.Errorf("--ca-cert: %v", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--ca-cert %s: no PEM certificate in the file", o.CACert)
			}
			cfg.RootCAs = pool
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}

// Prober is how discovery reaches the server: the key and extra headers go
// on every request.
type Prober struct {
	HTTP    *http.Client
	APIKey  string
	Headers http.Header
}

func (p *Prober) get(ctx context.Context, base, path string) (map[string]any, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, 0, err
	}
	for k, vs := range p.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if p.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.APIKey)
	}
	hc := p.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("GET %s: %v", path, err)
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		code := "auth_required"
		if p.APIKey != "" {
			code = "auth_refused"
		}
		return nil, resp.StatusCode, &HTTPError{Code: code, Status: resp.StatusCode, Path: path, Body: clipS(string(body), 200)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, resp.StatusCode, nil
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("GET %s: response is not a JSON object: %v", path, err)
	}
	return m, resp.StatusCode, nil
}

func clipS(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Discover reads a running server's own figures. An authentication refusal
// on /v1/models is an error (IsAuth): every later figure would be a guess.
// A /v1/models that is not served is a note: some servers hide it.
func (p *Prober) Discover(ctx context.Context, endpoint string) (*Discovery, error) {
	base, err := NormalizeEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	d := &Discovery{Endpoint: base, Server: ServerUnknown, Models: []string{}, Figures: []RemoteFigure{},
		Problems: []string{}, Notes: []string{}, KVBuffer: KVCannotSee}
	models, st, err := p.get(ctx, base, "/v1/models")
	if err != nil {
		return nil, err
	}
	var m0 map[string]any
	if models == nil {
		d.Notes = append(d.Notes, fmt.Sprintf("GET /v1/models: HTTP %d", st))
	} else if data, ok := models["data"].([]any); ok {
		for i, x := range data {
			m, ok := x.(map[string]any)
			if !ok {
				continue
			}
			if id, ok := m["id"].(string); ok {
				d.Models = append(d.Models, id)
			}
			if i == 0 {
				m0 = m
			}
		}
	}
	ownedBy := ""
	var llamaMeta map[string]any
	if m0 != nil {
		ownedBy, _ = m0["owned_by"].(string)
		for _, k := range []string{"context_length", "max_model_len"} {
			if v, ok := num(m0[k]); ok {
				d.Advertised = RemoteFigure{Name: "advertised context", Value: v, Known: true, Source: "/v1/models data[0]." + k}
				break
			}
		}
		if meta, ok := m0["meta"].(map[string]any); ok {
			llamaMeta = meta
		}
	}

	// sluice
	if info, _, err := p.get(ctx, base, InfoPath); err != nil && IsAuth(err) {
		return nil, err
	} else if err == nil && info != nil && info["server"] == "sluice" {
		var si ServerInfo
		b, _ := json.Marshal(info)
		if err := json.Unmarshal(b, &si); err != nil {
			return nil, fmt.Errorf("GET %s: %v", InfoPath, err)
		}
		d.Server = ServerSluice
		d.Context = d.fig("context", si.Context, true, InfoPath+" context")
		minPool := 0
		for _, role := range si.Roles {
			d.fig(role.Role+" pool tokens", role.PoolTokens, true, InfoPath+" roles[].pool_tokens")
			if minPool == 0 || role.PoolTokens < minPool {
				minPool = role.PoolTokens
			}
			if role.PoolTokens < si.Context {
				d.Problems = append(d.Problems, fmt.Sprintf("the %s role's KV pool holds %d tokens but the server admits requests up to %d tokens: lower the context to %d or give the pool more memory", role.Role, role.PoolTokens, si.Context, role.PoolTokens))
			}
		}
		if minPool > 0 {
			d.PoolTokens = RemoteFigure{Name: "pool tokens", Value: minPool, Known: true, Source: InfoPath + " smallest roles[].pool_tokens"}
		}
		d.KVBuffer, d.KVBufferSource = KVOnDemand, "sluice admits a request that fits the context with its prompt's pages and grows it page by page; when the pool runs dry the newest sequence is preempted and later resumed exactly, and a request that finds no room waits in the queue (503 queue_timeout after --queue-timeout) instead of failing"
		d.checkAdvertised(si.Context, "the context sluice admits against")
		return d, nil
	}

	// SGLang
	for _, path := range []string{"/get_server_info", "/server_info"} {
		info, _, err := p.get(ctx, base, path)
		if err != nil && IsAuth(err) {
			return nil, err
		}
		if err != nil || info == nil {
			continue
		}
		pool, pOK := lookupNum(info, "max_total_num_tokens")
		ctxLen, cOK := lookupNum(info, "context_length")
		reqLen, rOK := lookupNum(info, "max_req_input_len")
		if !pOK && !cOK && !rOK {
			continue
		}
		d.Server = ServerSGLang
		d.PoolTokens = d.fig("KV pool tokens", pool, pOK, path+" max_total_num_tokens")
		if !cOK && d.Advertised.Known {
			ctxLen, cOK = d.Advertised.Value, true
			d.Context = d.fig("context length", ctxLen, true, d.Advertised.Source+" (server_info has none)")
		} else {
			d.Context = d.fig("context length", ctxLen, cOK, path+" context_length")
		}
		d.fig("max request input length", reqLen, rOK, path+" max_req_input_len")
		switch {
		case pOK && cOK && pool < ctxLen:
			d.Problems = append(d.Problems, fmt.Sprintf("the KV pool holds %d tokens but the context length is %d: a request between the two is admitted and cannot fit (the incident's precondition); set --context-length <= %d or give the pool more memory", pool, ctxLen, pool))
		case !pOK || !cOK:
			d.Notes = append(d.Notes, "the server does not expose both the pool size and the context length; the two could not be compared")
		}
		if pOK && rOK && reqLen > pool {
			d.Problems = append(d.Problems, fmt.Sprintf("the request-length limit (%d) exceeds the KV pool (%d tokens)", reqLen, pool))
		}
		d.KVBuffer, d.KVBufferSource = KVShared, "SGLang's token pool (max_total_num_tokens) is one buffer for all running requests"
		d.checkAdvertised(ctxLen, "the server's context_length")
		return d, nil
	}

	// llama.cpp's server: /props, or /v1/models data[0].meta when /props is off.
	props, _, err := p.get(ctx, base, "/props")
	if err != nil && IsAuth(err) {
		return nil, err
	}
	nctx, nOK := 0, false
	src := ""
	if props != nil {
		if nctx, nOK = lookupNum(props, "n_ctx"); nOK {
			src = "/props default_generation_settings.n_ctx"
		}
	}
	if !nOK && llamaMeta != nil {
		if nctx, nOK = num(llamaMeta["n_ctx"]); nOK {
			src = "/v1/models data[0].meta.n_ctx"
		}
	}
	if nOK || ownedBy == "llamacpp" {
		d.Server = ServerLlama
		d.Context = d.fig("n_ctx (per slot)", nctx, nOK, src)
		if llamaMeta != nil {
			if v, ok := num(llamaMeta["n_ctx"]); ok && src != "/v1/models data[0].meta.n_ctx" {
				d.fig("n_ctx (/v1/models)", v, true, "/v1/models data[0].meta.n_ctx")
				if nOK && v != nctx {
					d.Problems = append(d.Problems, fmt.Sprintf("/v1/models says n_ctx %d but /props says %d", v, nctx))
				}
			}
			if v, ok := num(llamaMeta["n_ctx_train"]); ok {
				d.fig("n_ctx_train", v, true, "/v1/models data[0].meta.n_ctx_train")
			}
		}
		slots, sOK := 0, false
		if props != nil {
			slots, sOK = num(props["total_slots"])
		}
		d.Slots = d.fig("slots", slots, sOK, "/props total_slots")
		switch {
		case sOK && slots == 1:
			d.KVBuffer, d.KVBufferSource = KVPerSlot, "one slot: its buffer holds n_ctx"
		case sOK && slots == 4:
			d.KVBuffer, d.KVBufferSource = KVShared, "inferred: 4 slots is llama-server's default (-np auto), which runs every slot over ONE unified KV buffer of -c tokens (kv_unified); /props exposes neither the buffer's size nor the flag. Concurrent prompts that each fit can fail together (HTTP 500)"
			d.Notes = append(d.Notes, fmt.Sprintf("llama-server's %d slots each admit up to %d tokens but share one KV buffer of -c tokens; for a buffer per slot start it with -np N --no-kv-unified (each slot then gets -c/N)", slots, nctx))
		case sOK && slots > 1:
			d.KVBuffer, d.KVBufferSource = KVPerSlot, fmt.Sprintf("inferred: -np %d was given explicitly, which splits -c into one buffer per slot unless --kv-unified was also given; /props does not expose the flag", slots)
		default:
			d.KVBufferSource = "/props does not expose the slot count"
		}
		d.checkAdvertised(nctx, "the per-slot n_ctx")
		return d, nil
	}

	if ownedBy == "vllm" && d.Advertised.Known {
		d.Server = ServerVLLM
		d.Context = d.fig("context (max_model_len)", d.Advertised.Value, true, d.Advertised.Source)
		d.KVBuffer, d.KVBufferSource = KVShared, "vLLM's paged KV cache is one pool for all requests; its size is not exposed (vLLM refuses to start when it cannot hold max_model_len once)"
		d.Notes = append(d.Notes, "the server publishes no KV pool size; vLLM refuses to start when its KV cache cannot hold max_model_len, so the advertised figure is the checked one")
		return d, nil
	}
	if d.Advertised.Known {
		d.Server = ServerOpenAI
		d.Context = d.fig("advertised context", d.Advertised.Value, true, d.Advertised.Source)
		d.KVBufferSource = "the server exposes no slot or pool figure"
		d.Notes = append(d.Notes, "the server publishes no KV pool size (vLLM refuses to start when its KV cache cannot hold max_model_len; other servers: check the pool size by hand)")
		return d, nil
	}
	d.KVBufferSource = "the server exposes no slot or pool figure"
	d.Notes = append(d.Notes, "the server exposes neither a context length nor a pool size at any endpoint preflight knows")
	return d, nil
}

func (d *Discovery) fig(name string, v int, known bool, src string) RemoteFigure {
	if !known {
		v = 0
		src = "not exposed at " + src
	}
	f := RemoteFigure{Name: name, Value: v, Known: known, Source: src}
	d.Figures = append(d.Figures, f)
	return f
}

// checkAdvertised compares what /v1/models tells clients with what the
// server admits against.
func (d *Discovery) checkAdvertised(actual int, what string) {
	if !d.Advertised.Known {
		d.Notes = append(d.Notes, "/v1/models advertises no context length")
		return
	}
	d.Figures = append(d.Figures, d.Advertised)
	if actual > 0 && d.Advertised.Value > actual {
		d.Problems = append(d.Problems, fmt.Sprintf("clients are told the context is %d (%s) but %s is %d", d.Advertised.Value, d.Advertised.Source, what, actual))
	}
}
