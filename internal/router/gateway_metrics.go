package router

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Gateway metrics: the names Kubernetes inference gateways scrape to pick
// a model-server pod (Gateway API Inference Extension's endpoint picker,
// llm-d), exported beside sluice's own names with the meaning vLLM and
// SGLang give them, computed from the same EngineStats snapshot at each
// scrape. They carry only model_name (vLLM's label): never a tenant.
//
// Which pool they describe: a process's "serving" pools, the decode and
// colocated ones (where running sequences hold their KV until they
// finish); a prefill worker, which has only its prefill pool, describes
// that. A prefill pool beside a decode pool (sluice serve) holds a
// prompt's KV only until its handoff, so it is left out, as vLLM's
// prefill instances are not what a decode-side picker reads.
var (
	descVWaiting = prometheus.NewDesc("vllm:num_requests_waiting", "vLLM's name, for inference gateways: requests waiting to be scheduled (queued, or preempted and waiting to resume); the same count as sluice_queue_waiting.", []string{"model_name"}, nil)
	descVRunning = prometheus.NewDesc("vllm:num_requests_running", "vLLM's name, for inference gateways: requests admitted and running (holding KV pages); the same count as sluice_queue_running.", []string{"model_name"}, nil)
	descVUsage   = prometheus.NewDesc("vllm:kv_cache_usage_perc", "vLLM's name, for inference gateways: KV cache usage, 0..1 (1 = full), over the serving (decode or colocated) pools: pages neither free nor idle in the prefix cache (vLLM counts evictable cached blocks as free) over all pages. sluice_kv_usage_ratio counts cached pages as used.", []string{"model_name"}, nil)
	descVConfig  = prometheus.NewDesc("vllm:cache_config_info", "vLLM's name, for inference gateways: the KV cache's shape in labels, value 1: block_size is sluice's page size in tokens, num_gpu_blocks the serving pools' pages (CPU memory here, not a GPU's).", []string{"model_name", "block_size", "num_gpu_blocks"}, nil)
	descVHits    = prometheus.NewDesc("vllm:prefix_cache_hits_total", "vLLM's name: prompt tokens found in the prefix cache, all pools (the sum of sluice_prefix_cache_tokens_total{result=\"hit\"}).", []string{"model_name"}, nil)
	descVQueries = prometheus.NewDesc("vllm:prefix_cache_queries_total", "vLLM's name: prompt tokens looked up in the prefix cache, all pools (hits plus misses of sluice_prefix_cache_tokens_total).", []string{"model_name"}, nil)

	descSQueue   = prometheus.NewDesc("sglang:num_queue_reqs", "SGLang's name, for inference gateways: the same count as vllm:num_requests_waiting.", []string{"model_name"}, nil)
	descSRunning = prometheus.NewDesc("sglang:num_running_reqs", "SGLang's name, for inference gateways: the same count as vllm:num_requests_running.", []string{"model_name"}, nil)
	descSUsage   = prometheus.NewDesc("sglang:token_usage", "SGLang's name, for inference gateways: the same ratio as vllm:kv_cache_usage_perc (0..1).", []string{"model_name"}, nil)
	descSConfig  = prometheus.NewDesc("sglang:cache_config_info", "SGLang's name, for inference gateways: page_size and num_pages of the serving pools in labels, value 1.", []string{"model_name", "page_size", "num_pages"}, nil)
)

var gatewayDescs = []*prometheus.Desc{descVWaiting, descVRunning, descVUsage, descVConfig, descVHits, descVQueries, descSQueue, descSRunning, descSUsage, descSConfig}

// GatewayLoad is what the gateway names report, computed from one
// snapshot (exported for tests and the load line).
type GatewayLoad struct {
	// Waiting and Running: the queue's counts where the process queues;
	// a worker without a queue reports its schedulers' sequences (running,
	// and preempted as waiting). HaveRequests is false when neither is
	// known (a prefill worker).
	Waiting, Running int
	HaveRequests     bool
	// Usage is (pages - free - idle cached) / pages over the serving
	// pools; Pages and PageSize their size (Pages 0: no pool).
	Usage         float64
	Pages         int
	PageSize      int
	Hits, Queries uint64
}

// Gateway computes GatewayLoad from a snapshot.
func Gateway(st EngineStats) GatewayLoad {
	var g GatewayLoad
	switch {
	case st.Queue != nil:
		g.Waiting, g.Running, g.HaveRequests = st.Queue.Waiting, st.Queue.Running, true
	default:
		// A prefill worker's prompts are not requests a gateway routes
		// to it (the router sends them on): only decode and colocated
		// schedulers count.
		for role, s := range st.Sched {
			if role == "prefill" {
				continue
			}
			g.Running += s.Running
			g.Waiting += s.Preempted
			g.HaveRequests = true
		}
	}
	serving := func(role string) bool { return role == "decode" || role == "colocated" }
	any := false
	for _, p := range st.Pools {
		any = any || serving(p.Role)
	}
	used := 0
	for _, p := range st.Pools {
		g.Hits += p.Cache.HitTokens
		g.Queries += p.Cache.HitTokens + p.Cache.MissTokens
		if any && !serving(p.Role) {
			continue
		}
		total := 0
		for _, n := range p.Pages {
			total += n
		}
		g.Pages += total
		used += total - p.Pages["free"] - p.Cache.IdlePages
		if p.PageSize > 0 {
			g.PageSize = p.PageSize
		}
	}
	if g.Pages > 0 {
		g.Usage = float64(max(used, 0)) / float64(g.Pages)
	}
	return g
}

// collectGateway exports the gateway names of one snapshot under
// model_name m.
func collectGateway(ch chan<- prometheus.Metric, st EngineStats, m string) {
	g := Gateway(st)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{m}, labels...)...)
	}
	if g.HaveRequests {
		gauge(descVWaiting, float64(g.Waiting))
		gauge(descVRunning, float64(g.Running))
		gauge(descSQueue, float64(g.Waiting))
		gauge(descSRunning, float64(g.Running))
	}
	if g.Pages > 0 {
		gauge(descVUsage, g.Usage)
		gauge(descSUsage, g.Usage)
		bs, n := strconv.Itoa(g.PageSize), strconv.Itoa(g.Pages)
		gauge(descVConfig, 1, bs, n)
		gauge(descSConfig, 1, bs, n)
		ch <- prometheus.MustNewConstMetric(descVHits, prometheus.CounterValue, float64(g.Hits), m)
		ch <- prometheus.MustNewConstMetric(descVQueries, prometheus.CounterValue, float64(g.Queries), m)
	}
}
