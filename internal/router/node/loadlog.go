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
// same snapshot as /metrics. Like vLLM's, a line is logged at debug level
// once the process has been idle (nothing running, waiting or generated)
// for this interval and the one before: an idle server's log stays quiet,
// and the first idle line after work still shows at info.
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
	lastIdle := false
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
			idle := tokens == lastTokens
			if q := st.Queue; q != nil {
				idle = idle && q.Running == 0 && q.Waiting == 0
			}
			lastTokens, last = tokens, now
			level := slog.LevelInfo
			if idle && lastIdle {
				level = slog.LevelDebug
			}
			lastIdle = idle
			log.Log(ctx, level, "load", attrs...)
		}
	}
}
