package router

import (
	"testing"

	"sluice/internal/engine"
)

// Gateway's meaning, from one crafted snapshot: evictable cached pages
// count as free (vLLM's free queue holds them), only the serving pools
// count toward usage and size, prefix-cache tokens from every pool, and a
// worker without a queue reports its schedulers.
func TestGatewayFigures(t *testing.T) {
	st := EngineStats{
		Pools: []PoolStats{
			{Role: "prefill", PageSize: 16, Pages: map[string]int{"free": 10, "sealed": 90}, Cache: CacheStats{HitTokens: 32, MissTokens: 64, IdlePages: 5}},
			{Role: "decode", PageSize: 16, Pages: map[string]int{"free": 50, "reserved": 10, "sealed": 40}, Cache: CacheStats{HitTokens: 16, IdlePages: 20}},
		},
		Sched: map[string]engine.SchedStats{"decode": {Running: 3, Preempted: 2}},
	}
	g := Gateway(st)
	if g.Pages != 100 || g.PageSize != 16 || g.Usage != 0.3 || g.Hits != 48 || g.Queries != 112 || !g.HaveRequests || g.Running != 3 || g.Waiting != 2 {
		t.Errorf("decode worker: %+v", g)
	}
	q := engine.QueueStats{}
	q.Waiting, q.Running = 7, 4
	st.Queue = &q
	if g := Gateway(st); g.Waiting != 7 || g.Running != 4 {
		t.Errorf("with a queue: %+v", g)
	}
	// A prefill worker: its own pool is the serving one; no request
	// counts, its scheduler's prompts included.
	g = Gateway(EngineStats{Pools: st.Pools[:1], Sched: map[string]engine.SchedStats{"prefill": {Running: 4, Preempted: 1}}})
	if g.Pages != 100 || g.Usage != 0.85 || g.HaveRequests {
		t.Errorf("prefill worker: %+v", g)
	}
}
