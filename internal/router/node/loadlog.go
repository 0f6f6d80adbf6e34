package node

import (
	"context"
	"log/slog"
	"time"

	"sluice/internal/router"
)

// LogLoad logs one line every interval until ctx ends, as vLLM does:
// requests running and waiting, preempted sequences, KV usage of each
// pool, and the generation throughput over the interval. It reads the
// same snapshot as /metrics.
func (s *Stack) LogLoad(ctx context.Context, log *slog.Logger, interval time.Duration) {
	LogLoad(ctx, log, interval, s.Stats)
}

// LogLoad is the load line of any process from its metrics snapshot: the
// router process (`sluice router`) has a queue but no scheduler or pool of
// its own, so the fields it has no figures for are left out rather than
// logged as zeros.
func LogLoad(ctx context.Context, log *slog.Logger, interval time.Duration, stats func() router.EngineStats) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastTokens int64
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := stats()
			attrs := []any{}
			if q := st.Queue; q != nil {
				attrs = append(attrs, "running", q.Running, "waiting", q.Waiting)
			}
			var tokens, preempted int64
			for _, sc := range st.Sched {
				tokens += sc.Generated
				preempted += int64(sc.Preempted)
			}
			if len(st.Sched) > 0 {
				attrs = append(attrs, "preempted", preempted)
			}
			for _, p := range st.Pools {
				total := 0
				for _, n := range p.Pages {
					total += n
				}
				if total > 0 {
					attrs = append(attrs, "kv_usage_pct_"+p.Role, float64(int(1000*float64(total-p.Pages["free"])/float64(total)))/10)
				}
			}
			if dt := now.Sub(last).Seconds(); dt > 0 && len(st.Sched) > 0 {
				attrs = append(attrs, "gen_tok_per_s", float64(int(10*float64(tokens-lastTokens)/dt))/10)
			}
			lastTokens, last = tokens, now
			log.Info("load", attrs...)
		}
	}
}
