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
	"sluice/internal/grammar"
	"sluice/internal/kv"
	"sluice/internal/preflight"
	"sluice/internal/ratelimit"
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
	// Ready, when set, is the readiness check behind /ready: nil when every
	// role this router drives is reachable (and, where the roles carry
	// model fingerprints, agrees on the model, I13); otherwise an error
	// whose message names the role and is fit for an operator (no secrets).
	// It is called on each probe with a deadline of a few seconds.
	Ready func(ctx context.Context) error
	// MetricsOffAPI keeps /metrics off the API handler: the command serves
	// AdminHandler on a separate (loopback by default) listener instead.
	// Set in multi-tenant mode, where the API is reachable by every tenant
	// and the metrics are the operator's.
	MetricsOffAPI bool
	// MetricsTenantLabels adds a tenant label to the per-tenant token
	// counters. Off by default: tenant names are not for every scraper to
	// read; turn it on only for a trusted one.
	MetricsTenantLabels bool
	// ReasoningFormat is auto (the default, ""): a thinking model's chat
	// answers carry its reasoning in reasoning_content, apart from
	// content, and constraints apply to the answer only (think.go); or
	// none: the reasoning stays in content, as the model wrote it.
	ReasoningFormat string
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
	// cut is closed by CutStreams: every request still running ends with
	// drain_timeout. cutOnce guards the close; drainCuts counts them.
	cut       chan struct{}
	cutOnce   sync.Once
	drainCuts atomic.Int64
	seq       atomic.Uint64
	idPrefix  string

	tmu      sync.Mutex
	inflight map[string]int // per tenant
	// limiter holds the tenants' rate limits (nil: none).
	limiter *ratelimit.Limiter
	// schemas caches the checks of the schemas tenants send
	// (response_format, tools' parameters), per tenant.
	schemas *grammar.Checks

	// admin serves /metrics, /health and /ready apart from the API;
	// endpoints are the API handler's routes (for logs and 404s).
	admin     *http.ServeMux
	endpoints []string
	// started is when the server was built: the model's "created" time.
	started time.Time
	// think are the reasoning markers of a thinking model whose answers
	// are split (think.go); nil: not split.
	think *thinkMarkers
	// thinks: the model thinks, whatever the reasoning format (think is
	// nil with none); reasoningFormat is the format in effect (auto or
	// none). Both are published (/v1/models, /sluice/info).
	thinks          bool
	reasoningFormat string
	// now is the clock of the requests' timings (first-token phases, TTFT,
	// ITL, end to end) and of the tenants' rate limits: time.Now, or a
	// virtual clock in tests.
	now func() time.Time
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
	s := &Server{cfg: cfg, chat: cfg.Chat, log: cfg.Logger, slots: make(chan struct{}, cfg.MaxConcurrency), cut: make(chan struct{}), inflight: map[string]int{}, started: time.Now(), now: time.Now}
	if s.chat == nil {
		ct, err := NewChatTemplate("", "", "")
		if err != nil {
			return nil, err
		}
		s.chat = ct
	}
	if err := checkReasoningFormat(cfg.ReasoningFormat); err != nil {
		return nil, err
	}
	markers := detectThinking(cfg.Tokenizer, s.chat)
	s.thinks, s.reasoningFormat = markers != nil, ReasoningAuto
	if cfg.ReasoningFormat == ReasoningNone {
		s.reasoningFormat = ReasoningNone
	} else {
		s.think = markers
	}
	if lim := cfg.Keys.Limits(); lim != nil {
		s.limiter = ratelimit.New(lim)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.idPrefix = hex.EncodeToString(b[:])
	s.schemas = grammar.NewChecks(0, 0)
	m, err := newMetrics(cfg.Registry, cfg.Stats, func() string { return cfg.Engine.Info().Model }, cfg.MetricsTenantLabels, s.schemas, enginePhases(cfg))
	if err != nil {
		return nil, err
	}
	s.metrics = m
	// The served model's vLLM-named series, and each tenant's token
	// counters with tenant labels, exist from the start at 0 (as vLLM
	// registers its own), so rate() sees the first request.
	model := cfg.Engine.Info().Model
	for _, v := range []*prometheus.HistogramVec{m.vE2E, m.vTTFT, m.vITL} {
		v.WithLabelValues(model)
	}
	m.vPrompt.WithLabelValues(model)
	m.vGen.WithLabelValues(model)
	if m.tenantLabels && cfg.Keys != nil {
		for tenant := range cfg.Keys.tenants {
			m.promptTokens.WithLabelValues(tenant)
			m.completionTokens.WithLabelValues(tenant)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /v1/models/{id...}", s.handleModel)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /ready", s.handleReady)
	mux.HandleFunc("GET "+preflight.InfoPath, s.handleInfo)
	s.endpoints = []string{"/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize", "/health", "/ready"}
	if !cfg.MetricsOffAPI {
		mux.Handle("GET /metrics", m.handler(cfg.Registry))
		s.endpoints = append(s.endpoints, "/metrics")
	}
	routes := strings.Join(s.endpoints, ", ")
	// The method each route takes: a route asked with another method is a
	// 405 naming the one it takes (curl without -d sends GET to
	// /v1/chat/completions), not a 404 whose list holds that very route.
	methods := map[string]string{
		"/v1/completions": "POST", "/v1/chat/completions": "POST", "/tokenize": "POST", "/detokenize": "POST",
		"/v1/models": "GET", "/health": "GET", "/ready": "GET", preflight.InfoPath: "GET",
	}
	if !cfg.MetricsOffAPI {
		methods["/metrics"] = "GET"
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		if strings.HasPrefix(path, "/v1/models/") {
			path = "/v1/models"
		}
		if m, ok := methods[path]; ok && m != r.Method {
			w.Header().Set("Allow", m)
			writeError(w, newErr(http.StatusMethodNotAllowed, CodeMethodNotAllow, "", "%s takes %s, not %s", r.URL.Path, m, r.Method))
			return
		}
		if why := elsewhere(r.URL.Path, cfg.MetricsOffAPI); why != "" {
			writeError(w, newErr(http.StatusNotFound, CodeNotFound, "", "no route %s %s: %s", r.Method, r.URL.Path, why))
			return
		}
		writeError(w, newErr(http.StatusNotFound, CodeNotFound, "", "no route %s %s; see %s", r.Method, r.URL.Path, routes))
	})
	s.mux = mux
	admin := http.NewServeMux()
	admin.Handle("GET /metrics", m.handler(cfg.Registry))
	admin.HandleFunc("GET /health", s.handleHealth)
	admin.HandleFunc("GET /ready", s.handleReady)
	s.admin = admin
	return s, nil
}

// Endpoints lists the API handler's routes, for the start-up log.
func (s *Server) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// AdminHandler serves /metrics, /health and /ready for an operator's
// listener, apart from the API (see Config.MetricsOffAPI).
func (s *Server) AdminHandler() http.Handler { return s.admin }

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

// Drain makes /ready answer 503 and refuses new generation requests with
// 503 draining, for graceful shutdown; in-flight requests continue and
// /health (the liveness probe) stays 200, so the process is not restarted
// mid-drain. The listener stays open meanwhile (the caller's part), so
// probes and late clients get an answer, not a refused connection.
func (s *Server) Drain() { s.draining.Store(true) }

// InFlight is the number of generation slots held (a request of n choices
// holds n): queued, prefilling or streaming. 0: nothing left to drain.
func (s *Server) InFlight() int { return len(s.slots) }

// CutStreams ends every request still in flight, when the drain timeout
// ran out: a stream gets an error event (code drain_timeout) then
// "data: [DONE]", a request that has sent nothing gets 503 drain_timeout.
// Each is logged and counted as cut by drain, never as a client
// disconnect. Requests that arrive later are refused by Drain.
func (s *Server) CutStreams() { s.cutOnce.Do(func() { close(s.cut) }) }

// DrainCuts is the number of requests CutStreams ended.
func (s *Server) DrainCuts() int64 { return s.drainCuts.Load() }

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
	case "/v1/completions", "/v1/chat/completions", "/v1/models", "/tokenize", "/detokenize", "/health", "/ready", "/metrics", preflight.InfoPath:
		return r.URL.Path
	}
	if strings.HasPrefix(r.URL.Path, "/v1/models/") {
		return "/v1/models"
	}
	return "other"
}

// authenticate derives the tenant from the Authorization header alone.
func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	if s.cfg.Keys == nil {
		return SingleTenant, nil
	}
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return "", newErr(http.StatusUnauthorized, CodeMissingKey, "", "no API key given; send the header \"Authorization: Bearer YOUR_KEY\"")
	}
	// The scheme is case-insensitive (RFC 9110, 11.1): "bearer KEY" is
	// what some clients send. A header in another shape is named as
	// such: "no API key given" would send its sender looking for a key
	// they did give. The message never repeats the header (it may hold a
	// key).
	scheme, key, _ := strings.Cut(h, " ")
	key = strings.TrimSpace(key)
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", newErr(http.StatusUnauthorized, CodeMissingKey, "", "the Authorization header is not of the form \"Bearer YOUR_KEY\"; send the key as \"Authorization: Bearer YOUR_KEY\"")
	}
	tenant, ok := s.cfg.Keys.Lookup(key)
	if !ok {
		return "", newErr(http.StatusUnauthorized, CodeInvalidKey, "", "the API key is not known to this server")
	}
	return tenant, nil
}

// handleHealth is liveness: 200 while the process serves HTTP, whatever
// its peers do (a liveness probe that failed on a dead peer would restart
// a healthy router). Readiness is /ready.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	status := "ok"
	if s.draining.Load() {
		status = "draining"
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": status})
}

// readyTimeout bounds one readiness check.
const readyTimeout = 3 * time.Second

// handleReady is readiness, as Kubernetes and vLLM-style probes expect:
// 200 only when the server is not draining and Config.Ready finds every
// role reachable and in agreement; 503 with the reason otherwise, so a
// load balancer stops sending traffic that could only fail.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	ReadyHandler(s.cfg.Ready)(w, r)
}

// ReadyHandler answers a readiness probe from ready (nil: always ready):
// 200 {"status":"ready"}, or 503 {"status":"not_ready","reason":...} when
// ready fails within a few seconds. The worker processes serve it too.
func ReadyHandler(ready func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
			defer cancel()
			if err := ready(ctx); err != nil {
				writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not_ready", "reason": err.Error()})
				return
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if _, e := s.authenticate(r); e != nil {
		s.fail(w, r, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{s.modelObject()}})
	s.metrics.requests.WithLabelValues("/v1/models", "200", "").Inc()
}

// handleModel is GET /v1/models/{id}: the served model, or 404
// model_not_found for any other id (ids may contain "/", as Hugging Face
// names do).
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if _, e := s.authenticate(r); e != nil {
		s.fail(w, r, e)
		return
	}
	id := r.PathValue("id")
	if served := s.cfg.Engine.Info().Model; id != served {
		s.fail(w, r, newErr(http.StatusNotFound, CodeUnknownModel, "model", "the model %q is not served here; this server serves %q (see /v1/models)", id, served))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject())
	s.metrics.requests.WithLabelValues("/v1/models", "200", "").Inc()
}

// modelObject is the served model as OpenAI's model object; "created" is
// when this server started.
func (s *Server) modelObject() map[string]any {
	info := s.cfg.Engine.Info()
	return map[string]any{
		"id":       info.Model,
		"object":   "model",
		"created":  s.started.Unix(),
		"owned_by": "sluice",
		// Both names are in use by clients (SGLang/llama.cpp and vLLM):
		// the effective context, already lowered to every pool (I2).
		"context_length": info.Context,
		"max_model_len":  info.Context,
		// Whether the model thinks (Qwen3's <think>...</think>) and
		// where its reasoning goes: auto, in reasoning_content; none,
		// in content (--reasoning-format).
		"thinking":         s.thinks,
		"reasoning_format": s.reasoningFormat,
	}
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
	info.Thinking, info.ReasoningFormat = s.thinks, s.reasoningFormat
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *apiError) {
	s.metrics.requests.WithLabelValues(routeLabel(r), fmt.Sprint(e.Status), e.Code).Inc()
	s.countRefusal(e)
	writeError(w, e)
}

// countRefusal counts a back-pressure refusal under its own metric, so load
// is visible without touching the integrity counters.
func (s *Server) countRefusal(e *apiError) {
	if e != nil && refusalCodes[e.Code] {
		s.metrics.refused.WithLabelValues(e.Code).Inc()
	}
}

// acquire takes a tenant slot and a server slot or refuses at once (never
// a hang).
func (s *Server) acquire(tenant string) (func(), *apiError) {
	if s.draining.Load() {
		return nil, newErr(http.StatusServiceUnavailable, CodeDraining, "", "the server is shutting down (draining) and takes no new requests; retry on another instance")
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
	prompts []genPrompt // one or more (a completions prompt list)
	p       params
	model   string
	created int64
	start   time.Time
	// read, prompted and submitted: the body decoded, the prompt's
	// tokens ready, the engine's Submit called (the router's first-token
	// phases: PhaseHTTPRead ...).
	read, prompted, submitted time.Time
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	tenant, e := s.authenticate(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if e := s.overRate(w, tenant); e != nil {
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
	read := s.now()
	release, e := s.acquire(tenant)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	defer release()
	info := s.cfg.Engine.Info()
	p, e := req.validate(limits{vocab: info.Vocab, context: info.Context, schemas: schemaCheck{s.schemas, tenant, r.Context()}})
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if e := checkModel(req.Model, info.Model); e != nil {
		s.fail(w, r, e)
		return
	}
	ins, e := parsePrompts(req.Prompt, info.Vocab)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if len(ins)*p.n > maxChoices {
		s.fail(w, r, badParam("prompt", "%d prompts x n=%d make %d choices; at most %d are allowed per request", len(ins), p.n, len(ins)*p.n, maxChoices))
		return
	}
	var prompts []genPrompt
	for _, in := range ins {
		gp := genPrompt{tokens: in.tokens, echo: in.text}
		if in.isText {
			ids, err := s.cfg.Tokenizer.Encode(in.text, true, true)
			if err != nil {
				s.fail(w, r, newErr(http.StatusBadRequest, CodeTokenize, "prompt", "the prompt could not be tokenized: %v", err))
				return
			}
			gp.tokens = ids
		} else if p.echo {
			d := s.cfg.Tokenizer.NewDecoder()
			var b strings.Builder
			for _, id := range in.tokens {
				b.WriteString(d.Push(id))
			}
			b.WriteString(d.Flush())
			gp.echo = b.String()
		}
		prompts = append(prompts, gp)
	}
	if p.maxTokens == 0 {
		// OpenAI's default for legacy completions.
		p.maxTokens, p.maxDefaulted = min(16, info.Context), true
	}
	param := "prompt"
	if p.n > 1 {
		param = "n"
	}
	more, e := s.acquireMore(tenant, len(prompts)*p.n-1, param)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	defer more()
	g := &generation{id: s.newID("cmpl"), route: "/v1/completions", tenant: tenant, prompts: prompts, p: p, model: info.Model, created: start.Unix(),
		start: start, read: read, prompted: s.now()}
	s.generate(w, r, g, info.Context, "prompt")
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	tenant, e := s.authenticate(r)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if e := s.overRate(w, tenant); e != nil {
		s.fail(w, r, e)
		return
	}
	var req chatRequest
	if e := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); e != nil {
		s.fail(w, r, e)
		return
	}
	read := s.now()
	release, e := s.acquire(tenant)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	defer release()
	info := s.cfg.Engine.Info()
	p, e := req.validate(limits{vocab: info.Vocab, context: info.Context, schemas: schemaCheck{s.schemas, tenant, r.Context()}})
	if e != nil {
		s.fail(w, r, e)
		return
	}
	if e := checkModel(req.Model, info.Model); e != nil {
		s.fail(w, r, e)
		return
	}
	text, addSpecial, e := s.chatText(req.Messages, req.ChatTemplateKwargs, req.ReasoningEffort, RenderOptions{Tools: p.tools.render})
	if e != nil {
		s.fail(w, r, e)
		return
	}
	prompt, err := s.cfg.Tokenizer.Encode(text, addSpecial, true)
	if err != nil {
		s.fail(w, r, newErr(http.StatusBadRequest, CodeTokenize, "messages", "the messages could not be tokenized: %v", err))
		return
	}
	if f := &p.sampling.Format; s.think != nil && f.Constrained() {
		// The grammar applies to the answer after the reasoning.
		f.Think, f.ThinkOpen, f.ThinkClose = true, s.think.open, s.think.close
	}
	if p.maxTokens == 0 {
		// Chat's default is "as many as fit".
		p.maxTokens, p.maxDefaulted = max(info.Context-len(prompt), 1), true
	}
	more, e := s.acquireMore(tenant, p.n-1, "n")
	if e != nil {
		s.fail(w, r, e)
		return
	}
	defer more()
	g := &generation{id: s.newID("chatcmpl"), route: "/v1/chat/completions", chat: true, tenant: tenant, prompts: []genPrompt{{tokens: prompt}}, p: p, model: info.Model, created: start.Unix(),
		start: start, read: read, prompted: s.now()}
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

// generate checks the context (I2), submits every choice and answers.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, g *generation, ctxLen int, promptParam string) {
	for _, gp := range g.prompts {
		if len(gp.tokens) == 0 {
			s.fail(w, r, badParam(promptParam, "the prompt is empty after tokenization"))
			return
		}
		// I2: rejected here, before the engine reserves anything; the
		// engine checks again (I1) so a router bug cannot let it through.
		// Compared as a difference so no sum can wrap (kv.TokensFit).
		if !kv.TokensFit(len(gp.tokens), g.p.maxTokens, ctxLen) {
			s.fail(w, r, newErr(http.StatusBadRequest, CodeContextLength, promptParam,
				"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d for the completion). Please reduce the prompt or max_tokens.",
				ctxLen, uint64(len(gp.tokens))+uint64(max(g.p.maxTokens, 0)), len(gp.tokens), g.p.maxTokens))
			return
		}
	}
	charged, e := s.admitRate(w, g)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	g.submitted = s.now()
	s.httpPhases(g)
	streams, err := s.submit(r, g)
	if err != nil {
		e := fromEngine(err)
		if e.Status >= 500 {
			s.log.Error("engine refused request", "id", g.id, "tenant", g.tenant, "err", err)
		}
		s.settleRate(g, charged, outcome{})
		s.fail(w, r, e)
		return
	}
	out := s.run(w, r, g, streams)
	s.settleRate(g, charged, out)
	s.finishMetrics(g, out)
}

// httpPhases records g's HTTP path to the engine's Submit: the router's
// first-token phases PhaseHTTPRead, PhaseHTTPPrompt and PhaseHTTPAdmit.
func (s *Server) httpPhases(g *generation) {
	for _, p := range g.httpPath() {
		s.metrics.phases.Observe(g.tenant, p.Phase, p.D)
	}
}

// httpPath is g's HTTP path to the engine's Submit by phase (nil before
// the Submit).
func (g *generation) httpPath() []engine.PhaseTime {
	if g.read.IsZero() || g.prompted.IsZero() || g.submitted.IsZero() {
		return nil
	}
	return []engine.PhaseTime{{Phase: PhaseHTTPRead, D: g.read.Sub(g.start)}, {Phase: PhaseHTTPPrompt, D: g.prompted.Sub(g.read)},
		{Phase: PhaseHTTPAdmit, D: g.submitted.Sub(g.prompted)}}
}

// firstTiming is where g's time to first token went, for its request log
// line: the HTTP path, the engine's phases (as far as the engine times
// them per request) and engine_other (engineOther), "engine" (Submit
// called to the first token on the stream), first_token_deliver, and
// "ttft" (arrival to the first token at the handler,
// sluice_time_to_first_token_seconds); first_token_write is added when
// the token's text went out.
func firstTiming(g *generation, ev engine.Event, received time.Time) []engine.PhaseTime {
	ps := append(g.httpPath(), ev.Phases...)
	if d, ok := engineOther(g, ev); ok {
		ps = append(ps, engine.PhaseTime{Phase: PhaseEngineOther, D: d})
	}
	if !ev.Sent.IsZero() {
		if !g.submitted.IsZero() {
			ps = append(ps, engine.PhaseTime{Phase: "engine", D: ev.Sent.Sub(g.submitted)})
		}
		ps = append(ps, engine.PhaseTime{Phase: PhaseFirstTokenDeliver, D: received.Sub(ev.Sent)})
	}
	return append(ps, engine.PhaseTime{Phase: "ttft", D: received.Sub(g.start)})
}

// enginePhases is the engine's first-token phases by role for a server
// without engine stats (`sluice router`: its queue, handoff and the
// workers' parts the first tokens carried, which no other process
// exports); nil with stats (they hold the engine's phases already) or
// an engine that records none.
func enginePhases(cfg Config) map[string]func() []engine.PhaseStat {
	p, ok := cfg.Engine.(engine.FirstTokenPhases)
	if cfg.Stats != nil || !ok {
		return nil
	}
	role := "router"
	if _, ok := cfg.Engine.(*engine.Colocated); ok {
		role = "colocated"
	}
	return map[string]func() []engine.PhaseStat{role: p.FirstTokenPhases}
}

// engineOther is the part of the engine's time to g's first token (its
// Submit called to the token on the stream) that the engine's phases of
// the request (ev.Phases) leave: so the engine's phases and it add up to
// "engine". ok is false when the engine timed no phases of the request.
func engineOther(g *generation, ev engine.Event) (time.Duration, bool) {
	if len(ev.Phases) == 0 || ev.Sent.IsZero() || g.submitted.IsZero() {
		return 0, false
	}
	d := ev.Sent.Sub(g.submitted)
	for _, p := range ev.Phases {
		d -= p.D
	}
	return max(d, 0), true
}

func (s *Server) finishMetrics(g *generation, out outcome) {
	status, code := "200", ""
	if out.err != nil {
		status, code = fmt.Sprint(out.err.Status), out.err.Code
	}
	switch {
	case out.drainCut:
		// Cut by the server at --drain-timeout, whatever became of the
		// connection after the error event.
		status, code = fmt.Sprint(http.StatusServiceUnavailable), CodeDrainTimeout
		s.drainCuts.Add(1)
		s.metrics.drainCut.Inc()
		s.log.Warn("request cut by drain: still running when --drain-timeout ran out", "id", g.id, "tenant", g.tenant,
			"completion_tokens", out.usage.CompletionTokens)
	case out.clientGone:
		status, code = fmt.Sprint(statusClientGone), CodeClientGone
	}
	s.metrics.requests.WithLabelValues(g.route, status, code).Inc()
	if !out.clientGone && !out.drainCut {
		s.countRefusal(out.err)
	}
	s.metrics.promptTokens.WithLabelValues(s.metrics.tenantLabel(g.tenant)...).Add(float64(out.prefilled))
	s.metrics.completionTokens.WithLabelValues(s.metrics.tenantLabel(g.tenant)...).Add(float64(out.usage.CompletionTokens))
	s.metrics.vPrompt.WithLabelValues(g.model).Add(float64(out.prefilled))
	s.metrics.vGen.WithLabelValues(g.model).Add(float64(out.usage.CompletionTokens))
	e2e := s.now().Sub(g.start).Seconds()
	s.metrics.e2e.Observe(e2e)
	s.metrics.vE2E.WithLabelValues(g.model).Observe(e2e)
	if out.err != nil && out.err.Code == engine.CodeIntegrity {
		s.log.Error("integrity failure", "id", g.id, "tenant", g.tenant, "message", out.err.Message)
	}
	args := []any{"id", g.id, "tenant", g.tenant, "route", g.route, "status", status, "code", code,
		"prompt_tokens", out.usage.PromptTokens, "completion_tokens", out.usage.CompletionTokens,
		"finish", out.finish, "ms", s.now().Sub(g.start).Milliseconds()}
	if len(out.first) > 0 {
		ms := make([]any, 0, 2*len(out.first))
		for _, p := range out.first {
			ms = append(ms, p.Phase, float64(p.D.Microseconds())/1000)
		}
		args = append(args, slog.Group("first_token_ms", ms...))
	}
	s.log.Info("request", args...)
}

// elsewhere says where a path a user of llama-server, vLLM or OpenAI may
// try is served instead ("" for any other path): /metrics moved to the
// admin listener, llama-server's own routes, what is not served at all.
func elsewhere(path string, metricsOffAPI bool) string {
	switch path {
	case "/metrics":
		if metricsOffAPI {
			return "with API keys, /metrics is served on the admin listener (--metrics-listen), not on the API listener every tenant reaches"
		}
	case "/completion", "/completions":
		return "llama-server's completion route; this server's is POST /v1/completions (OpenAI's shape)"
	case "/chat/completions":
		return "this server's chat route is POST /v1/chat/completions"
	case "/v1/embeddings", "/embedding", "/embeddings":
		return "embeddings are not served; this server generates text (/v1/completions, /v1/chat/completions)"
	case "/v1/responses":
		return "the Responses API is not served; send the conversation to POST /v1/chat/completions"
	case "/props", "/slots":
		return "llama-server's route; this server's model and context are at GET /v1/models"
	}
	return ""
}
