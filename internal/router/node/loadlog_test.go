package node

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/router"
	"sluice/internal/sched"
)

// The router process's load line: its queue only; no preemption, KV or
// throughput figures it does not have (never logged as zeros).
func TestLoadLineOfARouter(t *testing.T) {
	var buf syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	stats := func() router.EngineStats {
		return router.EngineStats{Queue: &engine.QueueStats{Stats: sched.Stats{Running: 3, Waiting: 2}}}
	}
	go func() { LogLoad(ctx, slog.New(slog.NewTextHandler(&buf, nil)), time.Millisecond, stats); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(buf.String(), "msg=load") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	line := strings.SplitN(buf.String(), "\n", 2)[0]
	if !strings.Contains(line, "msg=load running=3 waiting=2") {
		t.Fatalf("load line %q", line)
	}
	for _, absent := range []string{"preempted", "kv_usage", "gen_tok_per_s"} {
		if strings.Contains(line, absent) {
			t.Fatalf("the router's load line has %s: %q", absent, line)
		}
	}
}
