package router

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/engine"
)

// The router's first-token phases mean what their names say: each is
// timed from its own start. Every part of the HTTP path takes a known,
// distinct time (the body's reading, the tokenizer, the engine's claim of
// when it sent the first token, the client's flush), so a phase timed
// from another phase's start (or not at all) is off by another part's
// time. The parts take it on the server's clock, a virtual one here that
// moves only when a part advances it: each phase must equal its part's
// time exactly, however loaded the machine (on the wall clock a loaded
// machine added 95 ms to a 60 ms read at load 13).
func TestHTTPFirstTokenPhases(t *testing.T) {
	const (
		readDelay    = 60 * time.Millisecond  // the body's reader
		promptDelay  = 120 * time.Millisecond // the tokenizer
		deliverDelay = 300 * time.Millisecond // Event.Sent that long before the handler has it (more than the path before it)
		writeDelay   = 240 * time.Millisecond // each flush to the client
	)
	clk := newVClock()
	eng := &sentEngine{echoEngine: newEcho(4096), ago: deliverDelay, clk: clk}
	var logs bytes.Buffer
	srv, err := New(Config{Engine: eng, Tokenizer: slowTok{d: promptDelay, clk: clk}, MaxBodyBytes: 4096, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.now = clk.Now
	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true}`
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", &slowReader{r: strings.NewReader(body), d: readDelay, clk: clk})
	req.Header.Set("Content-Type", "application/json")
	w := &slowFlusher{ResponseRecorder: httptest.NewRecorder(), d: writeDelay, clk: clk}
	srv.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "[DONE]") {
		t.Fatalf("HTTP %d: %s", w.Code, w.Body.String())
	}
	got := map[string]engine.PhaseStat{}
	for _, p := range srv.metrics.phases.FirstTokenPhases() {
		if p.Tenant != SingleTenant {
			t.Errorf("phase %s recorded for tenant %q, want %q", p.Phase, p.Tenant, SingleTenant)
		}
		got[p.Phase] = p
	}
	for _, c := range []struct {
		phase string
		want  time.Duration
	}{
		{PhaseHTTPRead, readDelay},
		{PhaseHTTPPrompt, promptDelay},
		{PhaseHTTPAdmit, 0},
		{PhaseFirstTokenDeliver, deliverDelay},
		// The chat stream opens with the assistant's role: two flushes.
		{PhaseFirstTokenWrite, 2 * writeDelay},
	} {
		p, ok := got[c.phase]
		if !ok || p.Count != 1 {
			t.Errorf("%s: %d requests recorded, want 1 (phases %v)", c.phase, p.Count, got)
			continue
		}
		if d := time.Duration(math.Round(p.Sum * float64(time.Second))); d != c.want {
			t.Errorf("%s = %v, want %v", c.phase, d, c.want)
		}
	}
	if len(got) != 5 {
		t.Errorf("phases recorded: %v, want the five of the HTTP path", got)
	}
	// The request's log line says the same, with the engine's part
	// (Submit called to the first token sent) and the time to first
	// token those before the write add up to.
	var line struct {
		Msg   string
		First map[string]float64 `json:"first_token_ms"`
	}
	for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		if err := json.Unmarshal([]byte(l), &line); err == nil && line.Msg == "request" {
			break
		}
	}
	for phase, p := range got {
		if ms := line.First[phase]; math.Abs(ms-1000*p.Sum) > 0.002 {
			t.Errorf("log line's %s = %.3f ms, metrics %.3f ms (line %v)", phase, ms, 1000*p.Sum, line.First)
		}
	}
	var path float64
	for _, k := range []string{PhaseHTTPRead, PhaseHTTPPrompt, PhaseHTTPAdmit, "engine", PhaseFirstTokenDeliver} {
		path += line.First[k]
	}
	if ttft, ok := line.First["ttft"]; !ok || math.Abs(ttft-path) > 0.01 || len(line.First) != 7 {
		t.Errorf("log line's first_token_ms %v: want ttft (%.3f) = the phases before the write (%.3f), 7 entries", line.First, ttft, path)
	}
}

// A first token whose text does not go out at once has no
// first_token_write: an end token, the first byte of a character (the
// detokenizer holds it), a request that is not streamed.
func TestHTTPFirstTokenWriteOnlyWhenSent(t *testing.T) {
	h := newHarness(t, 4096, nil)
	bodies := []string{
		`{"prompt":[257],"max_tokens":1,"stream":true}`,
		`{"prompt":[226,130,172],"max_tokens":3,"stream":true}`, // "€"
		`{"prompt":"ab","max_tokens":2}`,
	}
	for _, b := range bodies {
		resp, err := http.Post(h.ts.URL+"/v1/completions", "application/json", strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d", b, resp.StatusCode)
		}
	}
	got := map[string]uint64{}
	for _, p := range h.srv.metrics.phases.FirstTokenPhases() {
		got[p.Phase] += p.Count
	}
	n := uint64(len(bodies))
	if got[PhaseHTTPRead] != n || got[PhaseHTTPPrompt] != n || got[PhaseHTTPAdmit] != n {
		t.Errorf("HTTP phases %v, want %d requests each", got, n)
	}
	if got[PhaseFirstTokenWrite] != 0 {
		t.Errorf("first_token_write recorded for a first token whose text never went out: %v", got)
	}
}

// The HTTP phases are exported with the engine's under role "router",
// with and without engine stats.
func TestHTTPPhasesExported(t *testing.T) {
	engineStats := func() EngineStats {
		return EngineStats{Phases: map[string][]engine.PhaseStat{"router": {
			{Tenant: SingleTenant, Phase: engine.PhaseQueue, Count: 7, Sum: 0.5, Buckets: make([]uint64, len(engine.QueueWaitBuckets))},
		}}}
	}
	for _, stats := range []func() EngineStats{nil, engineStats} {
		h := newHarness(t, 4096, func(c *Config) { c.Stats = stats })
		resp, err := http.Post(h.ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"ab","max_tokens":2,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_, metrics := get(t, h.ts.URL+"/metrics")
		want := []string{
			`sluice_first_token_phase_seconds_count{phase="http_read",role="router"} 1`,
			`sluice_first_token_phase_seconds_count{phase="http_prompt",role="router"} 1`,
			`sluice_first_token_phase_seconds_count{phase="http_admit",role="router"} 1`,
			`sluice_first_token_phase_seconds_count{phase="first_token_write",role="router"} 1`,
		}
		if stats != nil {
			want = append(want, `sluice_first_token_phase_seconds_count{phase="queue",role="router"} 7`)
		}
		for _, w := range want {
			if !strings.Contains(metrics, w) {
				t.Errorf("stats %v: no %s in\n%s", stats != nil, w, metrics)
			}
		}
	}
}

// vClock is a virtual clock: it moves only when advanced.
type vClock struct{ ns atomic.Int64 }

func newVClock() *vClock {
	c := &vClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *vClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *vClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// sentEngine is the echo engine whose first token claims it was sent ago
// before it was (on clk).
type sentEngine struct {
	*echoEngine
	ago time.Duration
	clk *vClock
}

type sentStream struct {
	engine.Stream
	ch chan engine.Event
}

func (s *sentStream) Events() <-chan engine.Event { return s.ch }

func (e *sentEngine) Submit(ctx context.Context, r *engine.Request) (engine.Stream, error) {
	st, err := e.echoEngine.Submit(ctx, r)
	if err != nil {
		return nil, err
	}
	out := &sentStream{Stream: st, ch: make(chan engine.Event, r.MaxTokens+2)}
	go func() {
		defer close(out.ch)
		first := true
		for ev := range st.Events() {
			if first && ev.Err == nil && !ev.Done {
				first, ev.Sent = false, e.clk.Now().Add(-e.ago)
			}
			out.ch <- ev
		}
	}()
	return out, nil
}

// slowTok is byteTok whose Encode takes d on clk.
type slowTok struct {
	byteTok
	d   time.Duration
	clk *vClock
}

func (t slowTok) Encode(text string, addSpecial, parse bool) ([]int32, error) {
	t.clk.advance(t.d)
	return t.byteTok.Encode(text, addSpecial, parse)
}

// slowReader takes d on clk before its first read.
type slowReader struct {
	r    io.Reader
	d    time.Duration
	clk  *vClock
	done bool
}

func (s *slowReader) Read(p []byte) (int, error) {
	if !s.done {
		s.done = true
		s.clk.advance(s.d)
	}
	return s.r.Read(p)
}

// slowFlusher is a response recorder whose every flush takes d on clk.
type slowFlusher struct {
	*httptest.ResponseRecorder
	d   time.Duration
	clk *vClock
}

func (f *slowFlusher) Flush() {
	f.clk.advance(f.d)
	f.ResponseRecorder.Flush()
}
