package router

import (
	"net/http"
	"slices"

	"sluice/internal/engine"
	"sluice/internal/grammar"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// EngineStats is a snapshot of what the workers count, read at each scrape.
// The command that wires the roles fills it from the engine, pool and
// handoff Stats(); the router only exports it.
type EngineStats struct {
	// Pools is every KV pool by role ("prefill", "decode", "colocated").
	Pools []PoolStats
	// Violations counts integrity violations by kind (kv.Kind, or
	// "handoff_"+code for a handoff that failed verification), all roles.
	// Only integrity failures: refusals and aborts are counted below.
	Violations map[string]uint64
	// ReservationsRefused counts reservations the decode worker refused, by
	// reason (RefusedKVCapacity: no free pages; RefusedOther). Back-pressure,
	// never an integrity failure.
	ReservationsRefused map[string]uint64
	// HandoffsAborted counts handoffs that ended by an abort (client gone,
	// router gave up, peer failure): routine, not integrity.
	HandoffsAborted uint64
	// HandoffBytes is page bytes transferred by completed and failed handoffs.
	HandoffBytes uint64
	// HandoffPagesTransferred and HandoffPagesSkipped count the prompt
	// pages of verified handoffs that the transfer wrote, and that it did
	// not because the decode worker's prefix cache held them (decode side).
	HandoffPagesTransferred, HandoffPagesSkipped uint64
	// Handoffs and HandoffSeconds give the mean handoff latency.
	Handoffs       uint64
	HandoffSeconds float64
	// LateWritesDropped counts page writes refused because their page had
	// moved on to another generation (I6 fencing at work).
	LateWritesDropped uint64
	// Queue is the engine's queue (nil: this process has none); Sched the
	// schedulers' counters by role (see load_metrics.go).
	Queue *engine.QueueStats
	Sched map[string]engine.SchedStats
	// Phases are the first-token phases each role of this process
	// recorded (engine/phases.go), by role ("router", "prefill",
	// "colocated"), per tenant.
	Phases map[string][]engine.PhaseStat
	// NestForward is the fixed cost of a forward pass, in prompt tokens,
	// that each role's nested budget counts (engine.Config.NestForward),
	// by role ("prefill", "colocated").
	NestForward map[string]int
	// CommitAsides counts the times the prefill worker's scheduler
	// waited for a finished prompt's handoff before computing another
	// tenant's prompts (engine/aside.go), by how the wait ended
	// (AsideLanded, AsideBound); nil in a process without a prefill
	// worker.
	CommitAsides map[string]uint64
}

// Outcomes of EngineStats.CommitAsides.
const (
	AsideLanded = "landed" // the push returned (commit accepted or failed)
	AsideBound  = "bound"  // the bound (CommitAside) passed first
)

// PrefillAsides is the CommitAsides of a prefill worker's stats.
func PrefillAsides(ps engine.PrefillStats) map[string]uint64 {
	return map[string]uint64{AsideLanded: uint64(ps.Asides - ps.AsideTimeouts), AsideBound: uint64(ps.AsideTimeouts)}
}

// Reasons of EngineStats.ReservationsRefused.
const (
	RefusedKVCapacity = "kv_capacity_exhausted"
	RefusedOther      = "refused"
)

// PoolStats is one pool's pages by state ("free", "reserved", "filling",
// "sealed", "quarantined").
type PoolStats struct {
	Role  string
	Pages map[string]int
	Cache CacheStats
	// PageSize is token slots per page (the gateway metrics' block size).
	PageSize int
}

// CacheStats is one pool's prefix cache (kv/cache.go). Tokens count whole
// pages: only full prompt pages are cached.
type CacheStats struct {
	HitTokens  uint64 // prompt tokens found in the cache and handed to a request
	MissTokens uint64 // full-page prompt tokens looked up and not found
	Evictions  uint64 // idle cached pages evicted
	IdlePages  int    // cached pages nobody reads (evictable)
	ReadPages  int    // cached pages read by at least one sequence
	Readers    int    // reader shares held over all cached pages
	// PublicPages are cached pages in the operator's public scope
	// (--shared-prefix-file), readable by every tenant; included in
	// IdlePages/ReadPages.
	PublicPages int
	// Verified counts seal digests re-hashed (--kv-verify).
	Verified uint64
}

type metrics struct {
	requests         *prometheus.CounterVec
	ttft             prometheus.Histogram
	itl              prometheus.Histogram
	promptTokens     *prometheus.CounterVec
	completionTokens *prometheus.CounterVec
	inflight         prometheus.Gauge
	// tenantLabels: the token counters carry a tenant label (opt-in).
	tenantLabels bool
	// refused counts requests refused by back-pressure (concurrency limits,
	// no free KV pages, draining), by code: load, not integrity (I8).
	refused *prometheus.CounterVec
	// e2e: arrival to the last byte of every generation request that
	// reached the engine, whatever its end.
	e2e prometheus.Histogram
	// vLLM's names of the same request figures, labelled model_name as
	// vLLM labels them (dashboards and gateways built for vLLM read them).
	vE2E, vTTFT, vITL *prometheus.HistogramVec
	vPrompt, vGen     *prometheus.CounterVec
	// drainCut counts requests still running when --drain-timeout ran out,
	// ended by the server (apart from client disconnects).
	drainCut prometheus.Counter
	// phases are the HTTP path's first-token phases (role "router",
	// PhaseHTTPRead ...), exported with the engine's.
	phases engine.PhaseRecorder
}

// e2eBuckets are vLLM's for vllm:e2e_request_latency_seconds (a request
// lasts seconds to minutes, where TTFT lasts milliseconds).
var e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

// refusalCodes are the error codes that mean "not now" (retryable
// back-pressure) rather than "wrong": each has its own series in
// sluice_requests_refused_total, and none is an integrity violation.
var refusalCodes = map[string]bool{
	CodeOverloaded: true, CodeTenantLimit: true, CodeShuttingDown: true, CodeKVCapacity: true, CodeQueueTimeout: true, CodeRateLimited: true,
	CodeDraining: true,
}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

func newMetrics(reg *prometheus.Registry, stats func() EngineStats, model func() string, tenantLabels bool, schemas *grammar.Checks,
	enginePhases map[string]func() []engine.PhaseStat) (*metrics, error) {
	var tenant []string
	if tenantLabels {
		tenant = []string{"tenant"}
	}
	m := &metrics{tenantLabels: tenantLabels,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total", Help: "HTTP requests by route, status and error code (empty when successful).",
		}, []string{"route", "status", "code"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_time_to_first_token_seconds", Help: "Time from request arrival to the first generated token.", Buckets: latencyBuckets,
		}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_inter_token_latency_seconds", Help: "Time between consecutive generated tokens of one request.", Buckets: latencyBuckets,
		}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_prompt_tokens_total", Help: "Prompt tokens prefilled, as the engine accounted them (I9); by tenant only with --metrics-tenant-labels.",
		}, tenant),
		completionTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_completion_tokens_total", Help: "Generated tokens; by tenant only with --metrics-tenant-labels.",
		}, tenant),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_requests_in_flight", Help: "Generation requests being served.",
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_e2e_request_latency_seconds", Help: "Time from a generation request's arrival to its end (last token sent, error or client gone), every request that reached the engine.", Buckets: e2eBuckets,
		}),
		vE2E: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vllm:e2e_request_latency_seconds", Help: "vLLM's name of sluice_e2e_request_latency_seconds, by served model.", Buckets: e2eBuckets,
		}, []string{"model_name"}),
		vTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vllm:time_to_first_token_seconds", Help: "vLLM's name of sluice_time_to_first_token_seconds, by served model.", Buckets: latencyBuckets,
		}, []string{"model_name"}),
		vITL: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vllm:inter_token_latency_seconds", Help: "vLLM's name of sluice_inter_token_latency_seconds, by served model.", Buckets: latencyBuckets,
		}, []string{"model_name"}),
		vPrompt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_total", Help: "vLLM's name of sluice_prompt_tokens_total (never by tenant), by served model.",
		}, []string{"model_name"}),
		vGen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:generation_tokens_total", Help: "vLLM's name of sluice_completion_tokens_total (never by tenant), by served model.",
		}, []string{"model_name"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_refused_total", Help: "Requests refused by back-pressure, by reason: overloaded and tenant_concurrency_limit (429, concurrency or a full queue), kv_capacity_exhausted (503, no free KV pages), queue_timeout (503, waited --queue-timeout in the queue), draining (503, SIGTERM received), shutting_down (503). Load, not integrity.",
		}, []string{"reason"}),
	}
	m.drainCut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_requests_cut_by_drain_total", Help: "Requests still running when --drain-timeout ran out after SIGTERM, ended by the server with a drain_timeout error (not client disconnects).",
	})
	// Counters an alert or a dashboard queries exist from the start, at
	// 0, so rate() and increase() see their first event and an absent()
	// alert tells a silent target from a quiet one.
	for code := range refusalCodes {
		m.refused.WithLabelValues(code)
	}
	if !tenantLabels {
		m.promptTokens.WithLabelValues()
		m.completionTokens.WithLabelValues()
	}
	for _, c := range []prometheus.Collector{m.requests, m.ttft, m.itl, m.promptTokens, m.completionTokens, m.inflight, m.refused, m.e2e, m.vE2E, m.vTTFT, m.vITL, m.vPrompt, m.vGen, m.drainCut} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	if schemas != nil {
		hits := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_schema_check_cache_hits_total", Help: "Schemas (response_format's, tools' parameters) the router found already checked in its per-tenant cache (or being checked by a concurrent request of the same tenant, whose compile it waited for), so did not compile.",
		}, func() float64 { h, _ := schemas.Stats(); return float64(h) })
		misses := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_schema_check_cache_misses_total", Help: "Schemas (response_format's, tools' parameters) the router did not find in its per-tenant cache and compiled to check them.",
		}, func() float64 { _, m := schemas.Stats(); return float64(m) })
		waits := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_schema_check_cache_waits_total", Help: "Schema checks, of sluice_schema_check_cache_hits_total, answered by waiting for a concurrent request of the same tenant to compile the same schema.",
		}, func() float64 { return float64(schemas.Lookups().Waits) })
		for _, c := range []prometheus.Collector{hits, misses, waits} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	var c prometheus.Collector = &statsCollector{stats: stats, model: model, tenantLabels: tenantLabels, router: m.phases.FirstTokenPhases}
	if stats == nil {
		c = &phaseCollector{router: m.phases.FirstTokenPhases, engine: enginePhases, tenantLabels: tenantLabels}
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return m, nil
}

// tenantLabel is the label values of a per-tenant counter: the tenant
// only when tenant labels are switched on.
func (m *metrics) tenantLabel(tenant string) []string {
	if m.tenantLabels {
		return []string{tenant}
	}
	return nil
}

func (m *metrics) handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

var (
	descPages      = prometheus.NewDesc("sluice_kv_pages", "KV pool pages by role and state.", []string{"role", "state"}, nil)
	descViolations = prometheus.NewDesc("sluice_integrity_violations_total", "KV integrity violations by kind (I8).", []string{"kind"}, nil)
	descHBytes     = prometheus.NewDesc("sluice_handoff_bytes_total", "KV page bytes moved by handoffs.", nil, nil)
	descHPages     = prometheus.NewDesc("sluice_handoff_pages_total", "Prompt pages of verified handoffs, by result: transferred (written by the prefill worker) or skipped (the decode worker's prefix cache already held them for this tenant, decode_prefix_len; covered by the commit digest all the same).", []string{"result"}, nil)
	descHLatency   = prometheus.NewDesc("sluice_handoff_seconds", "Handoff latency from reservation to verified commit.", nil, nil)
	descLate       = prometheus.NewDesc("sluice_late_writes_dropped_total", "Page writes dropped because the page had moved to a new generation (I6).", nil, nil)
	descRefused    = prometheus.NewDesc("sluice_handoff_reservations_refused_total", "Reservations the decode worker refused, by reason (kv_capacity_exhausted: no free pages; refused: any other). Back-pressure, not integrity.", []string{"reason"}, nil)
	descAsides     = prometheus.NewDesc("sluice_prefill_commit_asides_total", "Times the prefill worker's scheduler waited for a finished prompt's handoff (its last pages and commit) before computing another tenant's prompts, by how the wait ended: landed (the push returned) or bound (1 ms passed first: a slow decode side).", []string{"outcome"}, nil)
	descAborted    = prometheus.NewDesc("sluice_handoffs_aborted_total", "Handoffs that ended by an abort (client gone, router gave up, peer failure).", nil, nil)
	descCacheTok   = prometheus.NewDesc("sluice_prefix_cache_tokens_total", "Full-page prompt tokens looked up in the prefix cache, by role and result (hit: found and handed to the request; miss: not found, or found corrupt, so computed). Counted per lookup: a request that waits for free KV pages looks up again at each attempt, and each attempt counts.", []string{"role", "result"}, nil)
	descCacheEvict = prometheus.NewDesc("sluice_prefix_cache_evictions_total", "Idle prefix-cache pages evicted (pool pressure or invalidation), by role.", []string{"role"}, nil)
	descCachePages = prometheus.NewDesc("sluice_prefix_cache_pages", "Prefix-cache pages by role and state (idle: read by nobody, evictable; shared: read by at least one sequence).", []string{"role", "state"}, nil)
	descCacheRead  = prometheus.NewDesc("sluice_prefix_cache_readers", "Reader shares held on prefix-cache pages, by role.", []string{"role"}, nil)
	descCachePub   = prometheus.NewDesc("sluice_prefix_cache_public_pages", "Prefix-cache pages in the operator's public scope (--shared-prefix-file), readable by every tenant, by role; 0 without the flag.", []string{"role"}, nil)
	descVerified   = prometheus.NewDesc("sluice_kv_verified_pages_total", "Sealed KV pages re-hashed against their seal digest (--kv-verify: cache hits, the per-step sweep), by role; a mismatch is counted as a digest_mismatch integrity violation.", []string{"role"}, nil)
)

// statsCollector turns an EngineStats snapshot into metrics at scrape time,
// so the counts are the workers' own, never a copy that can drift. With
// model set it also exports the gateway names (gateway_metrics.go) from
// the same snapshot, so one scrape's vllm:* and sluice_* figures agree.
type statsCollector struct {
	stats func() EngineStats
	model func() string
	// tenantLabels: the first-token phases by tenant too.
	tenantLabels bool
	// router, if set, adds the HTTP path's first-token phases to role
	// "router".
	router func() []engine.PhaseStat
}

// phaseCollector exports the HTTP path's first-token phases of a server
// without engine stats, with the engine's own by role (engine: nil when
// it records none).
type phaseCollector struct {
	router       func() []engine.PhaseStat
	engine       map[string]func() []engine.PhaseStat
	tenantLabels bool
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) {
	if c.tenantLabels {
		ch <- descPhaseTen
	} else {
		ch <- descPhase
	}
}

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ps := map[string][]engine.PhaseStat{"router": c.router()}
	for role, f := range c.engine {
		ps[role] = append(ps[role], f()...)
	}
	collectPhases(ch, EngineStats{Phases: ps}, c.tenantLabels)
}

// The router's first-token phases (role "router", beside the
// disaggregated engine's queue and handoff): the HTTP path before the
// engine's Submit and after its first token. A request's first three
// and the engine's phases (queue ...) follow each other without a gap;
// the first token's two follow the engine's last (handoff, or the
// colocated prefill_compute).
const (
	// PhaseHTTPRead: from the handler's start (the request's headers
	// read) to its body read and decoded; authentication and the
	// tenant's request rate included.
	PhaseHTTPRead = "http_read"
	// PhaseHTTPPrompt: from the decoded body to the prompt's tokens: a
	// concurrency slot, validation, the chat template, the tokenizer.
	PhaseHTTPPrompt = "http_prompt"
	// PhaseHTTPAdmit: from the tokens to the engine's Submit called (the
	// context check, the tenant's token rate).
	PhaseHTTPAdmit = "http_admit"
	// PhaseFirstTokenDeliver: from the engine putting the request's
	// first token on its stream to the handler receiving it (the
	// handler's goroutine waking and running).
	PhaseFirstTokenDeliver = "first_token_deliver"
	// PhaseFirstTokenWrite: from the handler receiving the first token
	// to its text written and flushed to the client; only streamed
	// requests whose first token's text goes out at once (not held by a
	// stop string, a partial character, a tool call or an end token).
	PhaseFirstTokenWrite = "first_token_write"
	// PhaseEngineOther: the engine's time to the first token (its
	// Submit called to the token on the stream) outside the phases the
	// engine timed for the request, so that the request's phases add
	// up. Disaggregated: the calls' ways between the router and the
	// workers (the stream's opening, the prompt to the prefill worker,
	// the commit to decode, the first token back) beside the workers'
	// own parts; colocated, about nothing.
	PhaseEngineOther = "engine_other"
)

// The first-token phases (engine/phases.go and the router's above):
// where requests' time to first token went, by role and phase; by
// tenant only with --metrics-tenant-labels.
var (
	phaseHelp    = "Parts of the time to first token of requests (their first handoff), by role (router, prefill: each prefill worker in the process that runs it, colocated) and phase: queue (router or colocated queue until the pages are reserved), handoff (router: reservation to first token), push and decode_wait (router, as the workers reported them with the first token: the prefill worker's last chunk computed to its commit sent; decode's commit arrival to the first token sent), engine_other (router: the engine's time to the first token outside the engine's phases of the request; disaggregated, the calls' ways between router and workers), prefill_queue (prefill worker: the call's arrival, its output format's grammar, then waiting for prefill pages), prefill_wait (pages to the first step running a chunk of the prompt), prefill_compute (that step to the prompt computed; colocated: to the first token), prefill_push (prefill worker: last chunk to the accepted commit); prefill_wait/<how> and prefill_compute/<how> are prefill_wait and prefill_compute again by how the prompt's first chunk started (nested, after_nested, next_step, after_last_pause, budget, in_step, same_tenant, share, quota, grow, plan: docs/operations.md); the router's HTTP path: http_read (arrival to the body decoded), http_prompt (to the prompt's tokens: validation, template, tokenizer), http_admit (to the engine's submit), first_token_deliver (the engine's first token to the handler receiving it), first_token_write (to its text written and flushed, streamed requests)."
	descPhase    = prometheus.NewDesc("sluice_first_token_phase_seconds", phaseHelp, []string{"role", "phase"}, nil)
	descPhaseTen = prometheus.NewDesc("sluice_first_token_phase_seconds", phaseHelp+" By tenant (--metrics-tenant-labels).", []string{"role", "phase", "tenant"}, nil)
)

// collectPhases exports st.Phases, summed over tenants unless byTenant.
func collectPhases(ch chan<- prometheus.Metric, st EngineStats, byTenant bool) {
	for role, ps := range st.Phases {
		type key struct{ phase, tenant string }
		sum := map[key]*engine.PhaseStat{}
		var order []key
		for _, p := range ps {
			k := key{phase: p.Phase}
			if byTenant {
				k.tenant = p.Tenant
			}
			a := sum[k]
			if a == nil {
				a = &engine.PhaseStat{Buckets: make([]uint64, len(engine.QueueWaitBuckets))}
				sum[k] = a
				order = append(order, k)
			}
			a.Count += p.Count
			a.Sum += p.Sum
			for i := range a.Buckets {
				if i < len(p.Buckets) {
					a.Buckets[i] += p.Buckets[i]
				}
			}
		}
		for _, k := range order {
			a := sum[k]
			buckets := map[float64]uint64{}
			for i, b := range engine.QueueWaitBuckets {
				buckets[b] = a.Buckets[i]
			}
			if byTenant {
				ch <- prometheus.MustNewConstHistogram(descPhaseTen, a.Count, a.Sum, buckets, role, k.phase, k.tenant)
			} else {
				ch <- prometheus.MustNewConstHistogram(descPhase, a.Count, a.Sum, buckets, role, k.phase)
			}
		}
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPages
	ch <- descViolations
	ch <- descHBytes
	ch <- descHPages
	ch <- descHLatency
	ch <- descLate
	ch <- descRefused
	ch <- descAborted
	ch <- descAsides
	for _, d := range loadDescs {
		ch <- d
	}
	ch <- descCacheTok
	ch <- descCacheEvict
	ch <- descCachePages
	ch <- descCacheRead
	ch <- descCachePub
	ch <- descVerified
	if c.tenantLabels {
		ch <- descPhaseTen
	} else {
		ch <- descPhase
	}
	if c.model != nil {
		for _, d := range gatewayDescs {
			ch <- d
		}
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, p := range st.Pools {
		for state, n := range p.Pages {
			ch <- prometheus.MustNewConstMetric(descPages, prometheus.GaugeValue, float64(n), p.Role, state)
		}
		c := p.Cache
		ch <- prometheus.MustNewConstMetric(descCacheTok, prometheus.CounterValue, float64(c.HitTokens), p.Role, "hit")
		ch <- prometheus.MustNewConstMetric(descCacheTok, prometheus.CounterValue, float64(c.MissTokens), p.Role, "miss")
		ch <- prometheus.MustNewConstMetric(descCacheEvict, prometheus.CounterValue, float64(c.Evictions), p.Role)
		ch <- prometheus.MustNewConstMetric(descCachePages, prometheus.GaugeValue, float64(c.IdlePages), p.Role, "idle")
		ch <- prometheus.MustNewConstMetric(descCachePages, prometheus.GaugeValue, float64(c.ReadPages), p.Role, "shared")
		ch <- prometheus.MustNewConstMetric(descCacheRead, prometheus.GaugeValue, float64(c.Readers), p.Role)
		ch <- prometheus.MustNewConstMetric(descCachePub, prometheus.GaugeValue, float64(c.PublicPages), p.Role)
		ch <- prometheus.MustNewConstMetric(descVerified, prometheus.CounterValue, float64(c.Verified), p.Role)
	}
	for kind, n := range st.Violations {
		ch <- prometheus.MustNewConstMetric(descViolations, prometheus.CounterValue, float64(n), kind)
	}
	ch <- prometheus.MustNewConstMetric(descHBytes, prometheus.CounterValue, float64(st.HandoffBytes))
	ch <- prometheus.MustNewConstMetric(descHPages, prometheus.CounterValue, float64(st.HandoffPagesTransferred), "transferred")
	ch <- prometheus.MustNewConstMetric(descHPages, prometheus.CounterValue, float64(st.HandoffPagesSkipped), "skipped")
	ch <- prometheus.MustNewConstSummary(descHLatency, st.Handoffs, st.HandoffSeconds, nil)
	ch <- prometheus.MustNewConstMetric(descLate, prometheus.CounterValue, float64(st.LateWritesDropped))
	for reason, n := range st.ReservationsRefused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(descAborted, prometheus.CounterValue, float64(st.HandoffsAborted))
	for outcome, n := range st.CommitAsides {
		ch <- prometheus.MustNewConstMetric(descAsides, prometheus.CounterValue, float64(n), outcome)
	}
	collectLoad(ch, st)
	if c.router != nil {
		ps := map[string][]engine.PhaseStat{}
		for role, p := range st.Phases {
			ps[role] = p
		}
		ps["router"] = append(slices.Clip(ps["router"]), c.router()...)
		st.Phases = ps
	}
	collectPhases(ch, st, c.tenantLabels)
	if c.model != nil {
		collectGateway(ch, st, c.model())
	}
}

// MetricsHandler serves /metrics for a process without the HTTP API (a
// prefill or decode worker): the snapshot that stats returns at each
// scrape, under sluice's names and the gateway names (model_name model),
// and the process's own collectors (extra).
func MetricsHandler(stats func() EngineStats, model string, extra ...prometheus.Collector) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	for _, c := range append([]prometheus.Collector{&statsCollector{stats: stats, model: func() string { return model }}}, extra...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}
