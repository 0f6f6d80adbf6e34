package node

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"sluice/internal/engine"
	"sluice/internal/router"
)

// requestLines are the first_token_ms of a server's request log lines.
func requestLines(t *testing.T, logs string) []map[string]float64 {
	t.Helper()
	var out []map[string]float64
	for l := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var line struct {
			Msg   string
			First map[string]float64 `json:"first_token_ms"`
		}
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if line.Msg == "request" {
			out = append(out, line.First)
		}
	}
	return out
}

// disaggPath is a disaggregated request's engine phases in order: the
// router's queue, the workers' parts of the handoff (decode sends them
// with the first token) and the rest.
var disaggPath = []string{"queue", "prefill_queue", "prefill_wait", "prefill_compute", "push", "decode_wait", router.PhaseEngineOther}

// checkAddsUp checks that one request's first_token_ms phases add up:
// the engine's phases (path) to "engine", and the HTTP path, "engine"
// and the first token's delivery to "ttft", within the log's rounding
// (each figure cut to the microsecond).
func checkAddsUp(t *testing.T, first map[string]float64, path []string) {
	t.Helper()
	var sum float64
	for _, k := range path {
		v, ok := first[k]
		if !ok || v < 0 {
			t.Fatalf("first_token_ms %v: no %s (want %v)", first, k, path)
		}
		sum += v
	}
	if first["prefill_compute"] <= 0 {
		t.Fatalf("first_token_ms %v: prefill_compute not timed", first)
	}
	if e := first["engine"]; math.Abs(sum-e) > 0.001*float64(len(path)+1) {
		t.Fatalf("first_token_ms %v: the engine's phases add up to %.3f ms, engine %.3f ms", first, sum, e)
	}
	var total float64
	for _, k := range []string{router.PhaseHTTPRead, router.PhaseHTTPPrompt, router.PhaseHTTPAdmit, "engine", router.PhaseFirstTokenDeliver} {
		total += first[k]
	}
	if ttft := first["ttft"]; math.Abs(total-ttft) > 0.006 {
		t.Fatalf("first_token_ms %v: the path adds up to %.3f ms, ttft %.3f ms", first, total, ttft)
	}
}

// A disaggregated request's time to first token is split by where it
// went, and the parts add up: 2 routers' engines over authenticated TCP
// to 2 prefill and 3 decode workers, one router behind the HTTP API with
// its request log. Each request's log line has the router's queue, the
// prefill worker's queue, wait, compute and push, decode's wait (the
// workers' own clocks, sent with the first token) and the rest, which
// add up to the engine's part and, with the HTTP path, to the time to
// first token. The same request's phases never reach the client; the
// router's metrics (no engine stats, as `sluice router`) export them.
func TestClusterFirstTokenPhasesAddUp(t *testing.T) {
	m := loadStories(t)
	cs := buildTestCluster(t, m, 1024, nil)
	var logs syncBuffer
	srv, err := router.New(router.Config{Engine: cs.Routers[0], Tokenizer: m.Tokenizer(), BOSText: m.BOSText(), MaxConcurrency: 64,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	const n = 8
	var wg sync.WaitGroup
	bodies := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt":"Once upon a time %d","max_tokens":4,"stream":%v}`, i, i%2 == 0)
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("HTTP %d: %s", resp.StatusCode, b)
			}
			bodies[i] = string(b)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	lines := requestLines(t, logs.String())
	if len(lines) != n {
		t.Fatalf("%d request log lines, want %d:\n%s", len(lines), n, logs.String())
	}
	t.Logf("one request's first_token_ms: %v", lines[0])
	for _, first := range lines {
		checkAddsUp(t, first, disaggPath)
	}
	for _, b := range bodies {
		for _, k := range []string{"decode_wait", "prefill_queue", "engine_other", "first_token_ms"} {
			if strings.Contains(b, k) {
				t.Fatalf("a response carries %q: %s", k, b)
			}
		}
	}
	// A router without engine stats (`sluice router`) exports its
	// engine's phases too: the queue, the handoff and the workers' two
	// parts only it learns of, beside its own rest.
	metrics := scrape(t, ts.URL)
	for _, p := range []string{engine.PhaseQueue, engine.PhaseHandoff, engine.PhasePush, engine.PhaseDecodeWait, router.PhaseEngineOther} {
		if l := fmt.Sprintf(`sluice_first_token_phase_seconds_count{phase=%q,role="router"} %d`, p, n); !strings.Contains(metrics, l) {
			t.Errorf("no %s in the metrics:\n%s", l, grepLines(metrics, "sluice_first_token_phase_seconds_count"))
		}
	}
}

// The same phases in `sluice serve`'s layouts: disaggregated over TCP,
// the router's metrics export the parts only it learns of (push and
// decode_wait as the workers sent them, engine_other) next to its queue
// and handoff, each request once; colocated, the log line's engine
// phases are the colocated engine's and engine_other, adding up alike.
func TestServeFirstTokenPhases(t *testing.T) {
	m := loadStories(t)
	for _, c := range []struct {
		mode LocalConfig
		path []string
	}{
		{LocalConfig{Transport: TransportTCP}, disaggPath},
		{LocalConfig{Colocated: true}, []string{"queue", "prefill_wait", "prefill_compute", router.PhaseEngineOther}},
	} {
		name := c.mode.Transport
		if c.mode.Colocated {
			name = "colocated"
		}
		t.Run(name, func(t *testing.T) {
			c.mode.Pools = Pools{Context: 256, PoolTokens: 512}
			st, err := BuildLocal(m, c.mode)
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			srv, err := router.New(router.Config{Engine: st.Engine, Tokenizer: m.Tokenizer(), BOSText: m.BOSText(), MaxConcurrency: 64,
				Stats: st.Stats, Info: st.Info, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv.Handler())
			defer func() {
				ts.Close()
				if err := st.Close(t.Context()); err != nil {
					t.Error(err)
				}
			}()
			const n = 3
			for i := range n {
				resp, err := http.Post(ts.URL+"/v1/completions", "application/json",
					strings.NewReader(fmt.Sprintf(`{"prompt":"Lily and Tom %d","max_tokens":3,"stream":true}`, i)))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("HTTP %d", resp.StatusCode)
				}
			}
			lines := requestLines(t, logs.String())
			if len(lines) != n {
				t.Fatalf("%d request log lines, want %d", len(lines), n)
			}
			for _, first := range lines {
				checkAddsUp(t, first, c.path)
			}
			metrics := scrape(t, ts.URL)
			want := []string{router.PhaseEngineOther}
			if !c.mode.Colocated {
				want = append(want, engine.PhaseQueue, engine.PhaseHandoff, engine.PhasePush, engine.PhaseDecodeWait)
			}
			for _, p := range want {
				if l := fmt.Sprintf(`sluice_first_token_phase_seconds_count{phase=%q,role="router"} %d`, p, n); !strings.Contains(metrics, l) {
					t.Errorf("no %s in the metrics:\n%s", l, grepLines(metrics, "sluice_first_token_phase_seconds_count"))
				}
			}
		})
	}
}

// Each worker's grammar cache exports its lookups by role, as the
// requests hit and missed: two requests with one schema and one with
// another compile twice and hit once in every role that draws tokens
// (colocated; the prefill and the decode worker, each its own cache), and
// the router's schema checks count the same.
func TestGrammarCacheMetrics(t *testing.T) {
	m := loadStories(t)
	for _, c := range []struct {
		mode  LocalConfig
		roles []string
	}{
		{LocalConfig{Transport: TransportTCP}, []string{"prefill", "decode"}},
		{LocalConfig{Colocated: true}, []string{"colocated"}},
	} {
		t.Run(c.roles[0], func(t *testing.T) {
			c.mode.Pools = Pools{Context: 256, PoolTokens: 512}
			s := serve(t, m, c.mode, nil)
			for _, schema := range []string{`{"type":"integer"}`, `{"type":"integer"}`, `{"type":"boolean"}`} {
				body := `{"messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":` + schema + `}}}`
				resp, err := http.Post(s.ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
				}
			}
			metrics := scrape(t, s.ts.URL)
			var want []string
			for _, role := range c.roles {
				want = append(want, fmt.Sprintf(`sluice_grammar_cache_hits_total{role=%q} 1`, role), fmt.Sprintf(`sluice_grammar_cache_waits_total{role=%q} 0`, role),
					fmt.Sprintf(`sluice_grammar_cache_misses_total{role=%q} 2`, role))
			}
			want = append(want, "sluice_schema_check_cache_hits_total 1", "sluice_schema_check_cache_waits_total 0", "sluice_schema_check_cache_misses_total 2")
			for _, w := range want {
				if !strings.Contains(metrics, w+"\n") {
					t.Errorf("no %s in the metrics:\n%s", w, grepLines(metrics, "sluice_grammar_cache")+"\n"+grepLines(metrics, "sluice_schema_check"))
				}
			}
		})
	}
}
