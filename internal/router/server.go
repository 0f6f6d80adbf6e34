// Package router is sluice's OpenAI-compatible HTTP API. It authenticates
// the API key and derives the tenant from it (never from the body),
// tokenizes, checks the request against the effective context (I2), submits
// it to an engine.Engine, streams tokens back, applies the disconnect policy
// (I10) through Stream.Cancel, and reports the engine's honest usage (I9).
package router

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/engine"
	"sluice/internal/preflight"
)

// Tokenizer is what the router needs from a tokenizer.
type Tokenizer interface {
	// Encode turns text into ids; addSpecial adds BOS (and the like) when the
	// model wants it, parseSpecial turns special-token text into its id.
	Encode(text string, addSpecial, parseSpecial bool) ([]int32, error)
	// NewDecoder returns an incremental detokenizer for one response.
	NewDecoder() Decoder
	// IsEOG reports an end-of-generation token; its text is never sent.
	IsEOG(id int32) bool
}

// Decoder turns a stream of ids into text. Push returns the text that is
// complete after id (bytes of a partial UTF-8 character are held back);
// Flush returns what is still held when the stream ends.
type Decoder interface {
	Push(id int32) string
	Flush() string
}

// Config configures a Server.
type Config struct {
	Engine    engine.Engine
	Tokenizer Tokenizer
	// Chat renders chat messages; nil selects FallbackChatTemplate.
	Chat *ChatTemplate
	// BOSText is the BOS token's text; a rendered chat prompt that already
	// starts with it is not given a second BOS.
	BOSText string
	// Keys maps API keys to tenants; nil means single-tenant mode: every
	// request is tenant SingleTenant and no key is required.
	Keys *Keys
	// MaxBodyBytes bounds a request body (default 1 MiB); larger gets 413.
	MaxBodyBytes int64
	// MaxConcurrency bounds generation requests in flight; more are refused
	// with 429 at once rather than queued (default 64).
	MaxConcurrency int
	// TenantConcurrency bounds one tenant's requests in flight, so a busy
	// tenant cannot take every slot from the others (0 = no per-tenant
	// bound beyond MaxConcurrency).
	TenantConcurrency int
	// WriteTimeout bounds each write to a client, so a client that stops
	// reading cannot hold a request (default 30s).
	WriteTimeout time.Duration
	// Stats, when set, is read at every /metrics scrape.
	Stats func() EngineStats
	// Info, when set, is served at preflight.InfoPath so that
	// `sluice preflight --endpoint` can check the running server's own
	// figures (its context against every role's pool, I2).
	Info func() preflight.ServerInfo
	// Registry receives the metrics; nil creates a fresh one.
	Registry *prometheus.Registry
	Logger   *slog.Logger
}

// Server is the HTTP API.
type Server struct {
	cfg      Config
	chat     *ChatTemplate
	log      *slog.Logger
	slots    chan struct{}
	metrics  *metrics
	mux      *http.ServeMux
	draining atomic.Bool
	seq      atomic.Uint64
	idPrefix string

	tmu      sync.Mutex
	inflight map[string]int // per tenant
}

// New builds a server.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil || cfg.Tokenizer == nil {
		return nil, errors.New("router: Engine and Tokenizer are required")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = 64
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, chat: cfg.Chat, log: cfg.Logger, slots: make(chan struct{}, cfg.MaxConcurrency), inflight: map[string]int{}}
	if s.chat == nil {
		ct, err := NewChatTemplate("", "", "")
		if err != nil {
			return nil, err
		}
		s.chat = ct
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.idPrefix = hex.EncodeToString(b[:])
	m, err := newMetrics(cfg.Registry, cfg.Stats)
	if err != nil {
		return nil, err
	}
	s.metrics = m

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET "+preflight.InfoPath, s.handleInfo)
	mux.Handle("GET /metrics", m.handler(cfg.Registry))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newErr(http.StatusNotFound, CodeNotFound, "", "no route %s %s; see /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics", r.Method, r.URL.Path))
	})
	s.mux = mux
	return s, nil
}

// Handler is the server's HTTP handler with panic recovery as the last line
// of defence: a handler bug fails one request, never the server.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &trackingWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				s.metrics.requests.WithLabelValues(routeLabel(r), "500", CodeInternal).Inc()
				if !rw.wrote {
					writeError(rw, newErr(http.StatusInternalServerError, CodeInternal, "", "the server failed to complete the request"))
				}
			}
		}()
		s.mux.ServeHTTP(rw, r)
	})
}

// Drain makes /health answer 503 and refuses new generation requests with
// 503, for graceful shutdown; in-flight requests continue.
func (s *Server) Drain() { s.draining.Store(true) }

// trackingWriter remembers whether headers went out, so recovery knows if
// an error body can still be sent.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) { t.wrote = true; t.ResponseWriter.WriteHeader(code) }
func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(b)
}
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func routeLabel(r *http.Request) string {
	switch r.URL.Path {
	case "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", preflight.InfoPath:
		return r.URL.Path
	}
	return "other"
}

// authenticate derives the tenant from the Authorization header alone.
func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	if s.cfg.Keys == nil {
		return SingleTenant, nil
	}
	h := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(h, "Bearer ")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return "", newErr(http.StatusUnauthorized, CodeMissingKey, "", "no API key given; send the header \"Authorization: Bearer YOUR_KEY\"")
	}
	tenant, ok := s.cfg.Keys.Lookup(key)
	if !ok {
		return "", newErr(http.StatusUnauthorized, CodeInvalidKey, "", "the API key is not known to this server")
	}
	return tenant, nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.draining.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"status":"draining"}` + "\n"))
		return
	}
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if _, e := s.authenticate(r); e != nil {
		s.fail(w, r, e)
		return
	}
	info := s.cfg.Engine.Info()
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":       info.Model,
			"object":   "model",
			"created":  0,
			"owned_by": "sluice",
			// Both names are in use by clients (SGLang/llama.cpp and vLLM):
			// the effective context, already lowered to every pool (I2).
			"context_length": info.Context,
			"max_model_len":  info.Context,
		}},
	})
	s.metrics.requests.WithLabelValues("/v1/models", "200", "").Inc()
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	if _, e := s.authenticate(r); e != nil {
		s.fail(w, r, e)
		return
	}
	info := preflight.ServerInfo{Server: "sluice"}
	if s.cfg.Info != nil {
		info = s.cfg.Info()
		info.Server = "sluice"
	}
	// The context admitted is the engine's, whatever Info says.
	ei := s.cfg.Engine.Info()
	info.Model, info.Context = ei.Model, ei.Context
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	s.metrics.requests.WithLabelValues(routeLabel(r), fmt.Sprint(e.Status), e.Code).Inc()
	writeError(w, e)
}

// acquire takes a tenant slot and a server slot or refuses at once (never
// a hang).
func (s *Server) acquire(tenant string) (func(), *apiError) {
	if s.draining.Load() {
		return nil, newErr(http.StatusServiceUnavailable, CodeShuttingDown, "", "the server is shutting down; retry on another instance")
	}
	if lim := s.cfg.TenantConcurrency; lim > 0 {
		s.tmu.Lock()
		if s.inflight[tenant] >= lim {
			s.tmu.Unlock()
			return nil, newErr(http.StatusTooManyRequests, CodeTenantLimit, "", "your API key's tenant already has %d requests in flight, its limit; retry when one finishes", lim)
		}
		s.inflight[tenant]++
		s.tmu.Unlock()
	}
	untenant := func() {
		if s.cfg.TenantConcurrency > 0 {
			s.tmu.Lock()
			if s.inflight[tenant]--; s.inflight[tenant] == 0 {
				delete(s.inflight, tenant)
			}
			s.tmu.Unlock()
		}
	}
	select {
	case s.slots <- struct{}{}:
		s.metrics.inflight.Inc()
		return func() { <-s.slots; s.metrics.inflight.Dec(); untenant() }, nil
	default:
		untenant()
		return nil, newErr(http.StatusTooManyRequests, CodeOverloaded, "", "the server is at its limit of %d concurrent requests; retry shortly", cap(s.slots))
	}
}

func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s-%s%08x", prefix, s.idPrefix, s.seq.Add(1))
}

// generation is one validated request ready for the engine.
type generation struct {
	id      string
	route   string
	chat    bool
	tenant  string
	prompt  []int32
	p       params
	model   string
	created int64
	start   time.Time
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tenant, e := s.authenticate(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	// The body is read before a concurrency slot is taken, so slow
	// uploads cannot hold the slots (the HTTP server's read timeout bounds
	// them).
	var req completionRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		s.fail(w, r, e)
		return
	}
	release, e := s.acquire(tenant)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	defer release()
	p, e := req.validate("max_tokens", nil)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	info := s.cfg.Engine.Info()
	if e := checkModel(req.Model, info.Model); e != nil {
		s.fail(w, r, e)
		return
	}
	in, e := parsePrompt(req.Prompt, info.Vocab)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	prompt := in.tokens
	if in.isText {
		ids, err := s.cfg.Tokenizer.Encode(in.text, true, true)
		if err != nil {
			s.fail(w, r, newErr(http.StatusBadRequest, CodeTokenize, "prompt", "the prompt could not be tokenized: %v", err))
			return
		}
		prompt = ids
	}
	if p.maxTokens == 0 {
		// OpenAI's default for legacy completions.
		p.maxTokens = 16
	}
	g := &generation{id: s.newID("cmpl"), route: "/v1/completions", tenant: tenant, prompt: prompt, p: p, model: info.Model, created: start.Unix(), start: start}
	s.generate(w, r, g, info.Context, "prompt")
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tenant, e := s.authenticate(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	var req chatRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		s.fail(w, r, e)
		return
	}
	release, e := s.acquire(tenant)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	defer release()
	if t := strings.TrimSpace(string(req.Tools)); t != "" && t != "null" && t != "[]" {
		s.fail(w, r, newErr(http.StatusBadRequest, CodeUnsupported, "tools", "tools are not supported by this server"))
		return
	}
	p, e := req.validate("max_completion_tokens", req.MaxCompletionTokens)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	info := s.cfg.Engine.Info()
	if e := checkModel(req.Model, info.Model); e != nil {
		s.fail(w, r, e)
		return
	}
	msgs, e := parseMessages(req.Messages)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	text, err := s.chat.Render(msgs)
	if err != nil {
		if errors.Is(err, errTemplateRaised) {
			s.fail(w, r, newErr(http.StatusBadRequest, CodeTemplate, "messages", "the model's chat template rejected the messages: %s", strings.TrimPrefix(err.Error(), errTemplateRaised.Error()+": ")))
			return
		}
		s.log.Error("chat template failed", "err", err)
		s.fail(w, r, newErr(http.StatusInternalServerError, CodeTemplate, "", "the model's chat template failed to render"))
		return
	}
	// The template usually writes BOS itself; add it only when it did not,
	// so the prompt never carries two.
	addSpecial := s.cfg.BOSText == "" || !strings.HasPrefix(text, s.cfg.BOSText)
	prompt, err := s.cfg.Tokenizer.Encode(text, addSpecial, true)
	if err != nil {
		s.fail(w, r, newErr(http.StatusBadRequest, CodeTokenize, "messages", "the messages could not be tokenized: %v", err))
		return
	}
	if p.maxTokens == 0 {
		// Chat's default is "as many as fit".
		p.maxTokens = max(info.Context-len(prompt), 1)
	}
	g := &generation{id: s.newID("chatcmpl"), route: "/v1/chat/completions", chat: true, tenant: tenant, prompt: prompt, p: p, model: info.Model, created: start.Unix(), start: start}
	s.generate(w, r, g, info.Context, "messages")
}

// checkModel accepts an empty model or the served one.
func checkModel(asked, served string) *apiError {
	if asked == "" || asked == served {
		return nil
	}
	return newErr(http.StatusNotFound, CodeUnknownModel, "model", "the model %q is not served here; this server serves %q (see /v1/models)", asked, served)
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// generate checks the context (I2), submits and answers.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, g *generation, ctxLen int, promptParam string) {
	total := len(g.prompt) + g.p.maxTokens
	if len(g.prompt) == 0 {
		s.fail(w, r, badParam(promptParam, "the prompt is empty after tokenization"))
		return
	}
	if total > ctxLen {
		// I2: rejected here, before the engine reserves anything; the
		// engine checks again (I1) so a router bug cannot let it through.
		s.fail(w, r, newErr(http.StatusBadRequest, CodeContextLength, promptParam,
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the prompt or max_tokens.",
			ctxLen, total, len(g.prompt), g.p.maxTokens))
		return
	}
	seed := g.p.seed
	if !g.p.seedGiven {
		seed = randomSeed()
	}
	req := &engine.Request{
		ID:        g.id,
		Tenant:    g.tenant,
		Prompt:    g.prompt,
		MaxTokens: g.p.maxTokens,
		IgnoreEOS: g.p.ignoreEOS,
		// The tenant comes from the API key; the scope only narrows within it.
		CacheScope: g.p.cacheScope,
	}
	req.Sampling.Temperature = float32(g.p.temperature)
	req.Sampling.TopP = float32(g.p.topP)
	req.Sampling.TopK = g.p.topK
	req.Sampling.Seed = seed
	// I10: the client's context does not reach the engine. A disconnect is
	// reported by run through Stream.Cancel, which lets the handoff end by
	// the normal path; cancelling a Reserve in flight instead leaves its
	// outcome unknown (over TCP the pages could stay reserved).
	st, err := s.cfg.Engine.Submit(context.WithoutCancel(r.Context()), req)
	if err != nil {
		e := fromEngine(err)
		if e.Status >= 500 {
			s.log.Error("engine refused request", "id", g.id, "tenant", g.tenant, "err", err)
		}
		s.fail(w, r, e)
		return
	}
	out := s.run(w, r, g, st)
	s.finishMetrics(g, out)
}

func (s *Server) finishMetrics(g *generation, out outcome) {
	status, code := "200", ""
	if out.err != nil {
		status, code = fmt.Sprint(out.err.Status), out.err.Code
	}
	if out.clientGone {
		status, code = "499", "client_disconnected"
	}
	s.metrics.requests.WithLabelValues(g.route, status, code).Inc()
	s.metrics.promptTokens.WithLabelValues(g.tenant).Add(float64(out.usage.PromptTokens))
	s.metrics.completionTokens.WithLabelValues(g.tenant).Add(float64(out.usage.CompletionTokens))
	if out.err != nil && out.err.Code == engine.CodeIntegrity {
		s.log.Error("integrity failure", "id", g.id, "tenant", g.tenant, "message", out.err.Message)
	}
	s.log.Info("request", "id", g.id, "tenant", g.tenant, "route", g.route, "status", status, "code", code,
		"prompt_tokens", out.usage.PromptTokens, "completion_tokens", out.usage.CompletionTokens,
		"finish", out.finish, "ms", time.Since(g.start).Milliseconds())
}
