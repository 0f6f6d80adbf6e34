package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/kv"
	"sluice/internal/router"
	"sluice/internal/testenv"
)

// A burst of 24 requests from 3 tenants, each reserving up to ~170 tokens,
// against a 512-token pool (about a fifth of the demand): through HTTP, over
// TCP and shared memory and colocated, with no client retry, every request
// succeeds (no 429, no 503: the queue absorbs the burst) and its output
// equals the same request served alone by the colocated engine; every pool
// is whole afterwards. Before the queue existed this burst got immediate
// 503s ("the decode worker has no room for this request now").
func TestBurstLargerThanPoolZero503(t *testing.T) {
	m := loadStories(t)
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\nkey-b bob weight=2\nkey-c carol\n"))
	if err != nil {
		t.Fatal(err)
	}
	bases := []string{"Once upon a time", "Lily and Tom went to the park", "The little dog was sad because", "Tim had a big red car. He"}
	var js []job
	for i := 0; i < 24; i++ {
		js = append(js, job{tenant: []string{"key-a", "key-b", "key-c"}[i%3], prompt: strings.Repeat(bases[i%4]+". ", 1+i%3),
			max: 90 + (i*13)%60, stream: i%2 == 1})
	}
	ref := serve(t, m, LocalConfig{Colocated: true, Pools: Pools{Context: 256, PoolTokens: 1024}}, keys)
	want := make([]result, len(js))
	for i, j := range js {
		r, err := complete(context.Background(), clientFor(ref, j.tenant), job{prompt: j.prompt, max: j.max})
		if err != nil {
			t.Fatalf("solo %d: %v", i, err)
		}
		want[i] = r
	}
	lifo := func(_ string, c *engine.Config) { c.Order = kv.LIFO }
	for _, cfg := range []LocalConfig{
		{Transport: TransportTCP},
		{Transport: TransportSHM, ShmDir: t.TempDir()},
		{Colocated: true},
	} {
		name := cfg.Transport
		if cfg.Colocated {
			name = "colocated"
		}
		t.Run(name, func(t *testing.T) {
			cfg.Pools = Pools{Context: 256, PoolTokens: 512}
			cfg.Engine = lifo
			s := serve(t, m, cfg, keys)
			got := make([]result, len(js))
			errs := make([]error, len(js))
			var wg sync.WaitGroup
			for i, j := range js {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = complete(context.Background(), clientFor(s, j.tenant), j)
				}()
			}
			wg.Wait()
			for i := range js {
				if errs[i] != nil {
					t.Fatalf("request %d failed under the burst: %v", i, errs[i])
				}
				if got[i].text != want[i].text || got[i].usage.CompletionTokens != want[i].usage.CompletionTokens || got[i].usage.PromptTokens != want[i].usage.PromptTokens {
					t.Fatalf("request %d differs from its solo run:\n got  %q %+v\n want %q %+v", i, got[i].text, got[i].usage, want[i].text, want[i].usage)
				}
			}
			waitPoolsFree(t, s.stack)
			// The load metrics say what happened: every request waited in
			// the queue (24 admissions, more when preempted requests were
			// admitted again), none is left, the pools are empty.
			// The disaggregated router ends a request's queue ticket in its
			// run goroutine after the terminal event reached the client, so
			// the running gauge may lag the last response by a moment: wait
			// (bounded) for it, then check every figure at once.
			body := scrape(t, s.ts.URL)
			for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, "sluice_queue_running 0\n") && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				body = scrape(t, s.ts.URL)
			}
			role := "decode"
			if cfg.Colocated {
				role = "colocated"
			}
			waits := 0
			if _, err := fmt.Sscanf(grepLines(body, "sluice_queue_wait_seconds_count"), "sluice_queue_wait_seconds_count %d", &waits); err != nil || waits < 24 {
				t.Errorf("queue waits observed: %d (%v), want at least 24", waits, err)
			}
			for _, want := range []string{"sluice_queue_waiting 0\n", "sluice_queue_running 0\n",
				`sluice_kv_usage_ratio{role="` + role + `"} 0` + "\n", `sluice_preemptions_total{role="` + role + `"} `,
				`sluice_nested_steps_total{role="` + role + `"} `,
				// Not measured here (LocalConfig.MeasureNestForward off): a
				// quarter of the default chunk, by the role whose steps pause.
				`sluice_nested_forward_cost_tokens{role="` + map[bool]string{true: "colocated", false: "prefill"}[cfg.Colocated] + `"} 16` + "\n"} {
				if !strings.Contains(body, want) {
					t.Errorf("metrics lack %q:\n%s", want, grepLines(body, "sluice_queue"))
				}
			}
			// The in-process prefill worker's scheduler counters, by its role.
			if want := `sluice_nested_steps_total{role="prefill"} `; strings.Contains(body, want) == cfg.Colocated {
				t.Errorf("metrics have %q: %v, want %v:\n%s", want, !cfg.Colocated, !cfg.Colocated, grepLines(body, "sluice_nested_steps_total"))
			}
			// The prefill worker's waits for a finished prompt's handoff
			// (engine/aside.go), both outcomes from the start; none
			// without a prefill worker.
			for _, outcome := range []string{"landed", "bound"} {
				series := `sluice_prefill_commit_asides_total{outcome="` + outcome + `"} `
				if has := strings.Contains(body, series); has == cfg.Colocated {
					t.Errorf("metrics have %q: %v, want %v:\n%s", series, has, !cfg.Colocated, grepLines(body, "sluice_prefill_commit_asides_total"))
				}
			}
			t.Logf("%s: %s, %d admissions, %s", name, grepLines(body, "sluice_preemptions_total"), waits, grepLines(body, "sluice_prefill_commit_asides_total"))
		})
	}
}

// The periodic load line (as vLLM's) carries running, waiting, preempted,
// each pool's KV usage and the throughput.
func TestLoadLogLine(t *testing.T) {
	m := loadStories(t)
	s := serve(t, m, LocalConfig{Colocated: true, Pools: Pools{Context: 256, PoolTokens: 512}}, nil)
	if _, err := complete(context.Background(), s.client, job{prompt: "Once upon a time", max: 8}); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.stack.LogLoad(ctx, slog.New(slog.NewTextHandler(&buf, nil)), time.Millisecond); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(buf.String(), "msg=load") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	line := buf.String()
	for _, want := range []string{"msg=load", "running=0", "waiting=0", "preempted=0", "kv_usage_pct_colocated=0", "gen_tok_per_s="} {
		if !strings.Contains(line, want) {
			t.Fatalf("load line lacks %s: %s", want, line)
		}
	}
}

// syncBuffer is a log sink the server's goroutines write to.
type syncBuffer = testenv.Buffer
