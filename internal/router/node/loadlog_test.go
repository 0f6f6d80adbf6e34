package node

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
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

// An idle process's load line goes to debug from its second idle interval,
// as vLLM's does: `make serve` left alone does not fill the console with
// zeros, and the first idle line (work just ended) and every busy line
// still show at info.
func TestIdleLoadLineIsQuiet(t *testing.T) {
	var buf syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var busy atomic.Bool
	stats := func() router.EngineStats {
		q := &engine.QueueStats{}
		if busy.Load() {
			q.Running = 1
		}
		return router.EngineStats{Queue: q}
	}
	go func() { LogLoad(ctx, slog.New(slog.NewTextHandler(&buf, nil)), time.Millisecond, stats); close(done) }()
	lines := func() int { return strings.Count(buf.String(), "msg=load") }
	wait := func(n int) {
		for deadline := time.Now().Add(10 * time.Second); lines() < n && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	wait(1)
	time.Sleep(50 * time.Millisecond) // some 50 idle intervals
	if n := lines(); n != 1 {
		t.Fatalf("idle: %d load lines at info, want 1 (the first):\n%s", n, buf.String())
	}
	busy.Store(true)
	wait(3)
	cancel()
	<-done
	if n := lines(); n < 3 || !strings.Contains(buf.String(), "running=1") {
		t.Fatalf("busy: %d load lines at info, want every interval's:\n%s", n, buf.String())
	}
}
