package router

import (
	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/engine"
)

// Load metrics: the engine's queue and schedulers, and how full each KV
// pool is. Read from the EngineStats snapshot at each scrape.
var (
	descQueueWaiting = prometheus.NewDesc("sluice_queue_waiting", "Requests waiting in the engine's queue for their turn and KV pages.", nil, nil)
	descQueueRunning = prometheus.NewDesc("sluice_queue_running", "Requests admitted from the queue and not yet finished.", nil, nil)
	descQueueWait    = prometheus.NewDesc("sluice_queue_wait_seconds", "Time from a request's arrival in the queue to its reserved KV pages, per admission (a preempted request admitted again counts again).", nil, nil)
	descQueueRefused = prometheus.NewDesc("sluice_queue_rejected_total", "Requests the queue refused, by reason (queue_full, queue_displaced: 429; queue_timeout, draining, shutdown: 503).", []string{"reason"}, nil)
	descPreemptions  = prometheus.NewDesc("sluice_preemptions_total", "Sequences preempted because the KV pool could not grow them, by role.", []string{"role"}, nil)
	descRecomputed   = prometheus.NewDesc("sluice_recomputed_tokens_total", "Positions whose KV a preemption threw away and that were computed again, by role (not in usage).", []string{"role"}, nil)
	descKVUsage      = prometheus.NewDesc("sluice_kv_usage_ratio", "Share of each role's KV pool pages not free (0..1).", []string{"role"}, nil)
	descRevoked      = prometheus.NewDesc("sluice_kv_reservations_revoked_total", "Decode KV reservations taken back before their commit because their tenant held more than its share of the decode pool while another tenant waited within its own; each request went back to the queue (not a failure).", []string{"role"}, nil)
	descOverShare    = prometheus.NewDesc("sluice_kv_reservations_refused_over_share_total", "Decode KV reservations refused with over_share: the tenant would have held more than its share of the decode pool while another tenant waited; the request waited in the queue.", []string{"role"}, nil)
	descGrammarDefer = prometheus.NewDesc("sluice_grammar_deferrals_total", "Constrained draws that waited beyond their step for their token mask (the mask work a step may do is bounded), by role.", []string{"role"}, nil)
	descGrammarBytes = prometheus.NewDesc("sluice_grammar_mask_cache_bytes", "Bytes of token masks the role's compiled grammars cache, all tenants together (bounded by --grammar-mask-cache).", []string{"role"}, nil)
	descNestedSteps  = prometheus.NewDesc("sluice_nested_steps_total", "Steps of prompts that arrived while another tenant's prompt step ran, run at one of its layer boundaries while it paused (a co-tenant's prompt not waiting for the whole step), by role.", []string{"role"}, nil)
	descNestForward  = prometheus.NewDesc("sluice_nested_forward_cost_tokens", "The fixed cost of a forward pass in prompt tokens, as the nested budget counts it (measured at start, --nest-forward-cost): a nested step costs this plus its tokens, and a paused step of T tokens lets in nested steps costing at most this plus T (docs/isolation.md), by role.", []string{"role"}, nil)
	descGrammarDrops = prometheus.NewDesc("sluice_grammar_mask_drops_total", "Compiled grammars whose cached masks were dropped to stay within --grammar-mask-cache, by role.", []string{"role"}, nil)
	descGrammarHits  = prometheus.NewDesc("sluice_grammar_cache_hits_total", "Structured-output requests whose grammar the role's per-tenant grammar cache answered without a compile of their own: kept, or compiled by a concurrent request of the same tenant and schema that they waited for (sluice_grammar_cache_waits_total counts those), by role.", []string{"role"}, nil)
	descGrammarWaits = prometheus.NewDesc("sluice_grammar_cache_waits_total", "Structured-output requests, of the grammar cache's hits, that waited for a concurrent request of the same tenant and schema to compile it, by role.", []string{"role"}, nil)
	descGrammarMiss  = prometheus.NewDesc("sluice_grammar_cache_misses_total", "Structured-output requests whose grammar the role's per-tenant grammar cache did not hold and that compiled it (a refused schema too), by role.", []string{"role"}, nil)
)

var loadDescs = []*prometheus.Desc{descQueueWaiting, descQueueRunning, descQueueWait, descQueueRefused, descPreemptions, descRecomputed, descKVUsage, descRevoked, descOverShare,
	descGrammarDefer, descGrammarBytes, descGrammarDrops, descGrammarHits, descGrammarWaits, descGrammarMiss, descNestedSteps, descNestForward}

func collectLoad(ch chan<- prometheus.Metric, st EngineStats) {
	if q := st.Queue; q != nil {
		ch <- prometheus.MustNewConstMetric(descQueueWaiting, prometheus.GaugeValue, float64(q.Waiting))
		ch <- prometheus.MustNewConstMetric(descQueueRunning, prometheus.GaugeValue, float64(q.Running))
		buckets := map[float64]uint64{}
		for i, b := range engine.QueueWaitBuckets {
			if i < len(q.WaitBuckets) {
				buckets[b] = q.WaitBuckets[i]
			}
		}
		ch <- prometheus.MustNewConstHistogram(descQueueWait, q.WaitCount, q.WaitSum, buckets)
		for reason, n := range q.Rejected {
			ch <- prometheus.MustNewConstMetric(descQueueRefused, prometheus.CounterValue, float64(n), string(reason))
		}
	}
	for role, s := range st.Sched {
		ch <- prometheus.MustNewConstMetric(descPreemptions, prometheus.CounterValue, float64(s.Preemptions), role)
		ch <- prometheus.MustNewConstMetric(descRecomputed, prometheus.CounterValue, float64(s.RecomputedTokens), role)
		if role == "decode" {
			// The decode worker's KV quota at reservation.
			ch <- prometheus.MustNewConstMetric(descRevoked, prometheus.CounterValue, float64(s.Revoked), role)
			ch <- prometheus.MustNewConstMetric(descOverShare, prometheus.CounterValue, float64(s.RefusedOverShare), role)
		}
		ch <- prometheus.MustNewConstMetric(descGrammarDefer, prometheus.CounterValue, float64(s.GrammarDeferrals), role)
		ch <- prometheus.MustNewConstMetric(descGrammarBytes, prometheus.GaugeValue, float64(s.GrammarMaskBytes), role)
		ch <- prometheus.MustNewConstMetric(descGrammarDrops, prometheus.CounterValue, float64(s.GrammarMaskDrops), role)
		ch <- prometheus.MustNewConstMetric(descGrammarHits, prometheus.CounterValue, float64(s.GrammarCache.Hits), role)
		ch <- prometheus.MustNewConstMetric(descGrammarWaits, prometheus.CounterValue, float64(s.GrammarCache.Waits), role)
		ch <- prometheus.MustNewConstMetric(descGrammarMiss, prometheus.CounterValue, float64(s.GrammarCache.Misses), role)
		ch <- prometheus.MustNewConstMetric(descNestedSteps, prometheus.CounterValue, float64(s.NestedSteps), role)
	}
	for role, f := range st.NestForward {
		ch <- prometheus.MustNewConstMetric(descNestForward, prometheus.GaugeValue, float64(f), role)
	}
	for _, p := range st.Pools {
		total := 0
		for _, n := range p.Pages {
			total += n
		}
		if total > 0 {
			ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, float64(total-p.Pages["free"])/float64(total), p.Role)
		}
	}
}

// LoadCollector exports only the load metrics of stats (the queue, and
// schedulers and pools when the snapshot has them): the router process
// (`sluice router`) queues requests but holds no KV pool and does no
// handoff itself, so it must not export the workers' handoff counters as
// zeros.
// With model set, the gateway names (vllm:num_requests_waiting, ...) come
// from the same snapshot.
func LoadCollector(stats func() EngineStats, model func() string) prometheus.Collector {
	return loadCollector{stats, model}
}

type loadCollector struct {
	stats func() EngineStats
	model func() string
}

func (c loadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range loadDescs {
		ch <- d
	}
	if c.model != nil {
		for _, d := range gatewayDescs {
			ch <- d
		}
	}
}

func (c loadCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	collectLoad(ch, st)
	if c.model != nil {
		collectGateway(ch, st, c.model())
	}
}
