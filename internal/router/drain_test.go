package router

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"sluice/internal/testenv"
)

// Drain, then the drain timeout: /ready is 503 and a new request 503
// draining while a stream is in flight; CutStreams ends that stream with
// an error event (drain_timeout) AND data: [DONE], answers a request that
// sent nothing yet with 503 drain_timeout, and logs and counts both as cut
// by drain, never as client disconnects.
func TestDrainCutsStreamsWithErrorThenDone(t *testing.T) {
	var logs testenv.Buffer
	h := newHarness(t, 64, func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	post := func(body string) *http.Response {
		resp, err := http.Post(h.ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// A stream with its first token out, then held by the engine's gate.
	streamResp := make(chan *http.Response, 1)
	go func() { streamResp <- post(`{"prompt":"HOLD me","max_tokens":20,"stream":true}`) }()
	h.eng.gate <- struct{}{}
	resp := <-streamResp
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event %q %v", line, err)
	}
	// A non-streaming request, held before its first token.
	plain := make(chan *http.Response, 1)
	go func() { plain <- post(`{"prompt":"HOLD too","max_tokens":5}`) }()
	for h.srv.InFlight() < 2 {
		time.Sleep(5 * time.Millisecond)
	}

	h.srv.Drain()
	if code, body := getStatus(t, h.ts.URL+"/ready"); code != 503 || body["status"] != "draining" {
		t.Fatalf("/ready while draining: %d %v", code, body)
	}
	late := post(`{"prompt":"hi","max_tokens":2}`)
	lateBody, _ := io.ReadAll(late.Body)
	late.Body.Close()
	if late.StatusCode != 503 || !strings.Contains(string(lateBody), `"code":"draining"`) {
		t.Fatalf("new request while draining: %d %s", late.StatusCode, lateBody)
	}

	h.srv.CutStreams()
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	n := len(events)
	if n < 2 || !strings.Contains(events[n-2], `"code":"drain_timeout"`) || events[n-1] != "data: [DONE]" {
		t.Fatalf("cut stream ends %q, want an error event with drain_timeout then data: [DONE]", rest)
	}
	pr := <-plain
	pb, _ := io.ReadAll(pr.Body)
	pr.Body.Close()
	if pr.StatusCode != 503 || !strings.Contains(string(pb), `"code":"drain_timeout"`) {
		t.Fatalf("cut non-streaming request: %d %s", pr.StatusCode, pb)
	}
	for h.srv.InFlight() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if got := h.srv.DrainCuts(); got != 2 {
		t.Errorf("DrainCuts %d, want 2", got)
	}
	mresp, err := http.Get(h.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(metrics), "sluice_requests_cut_by_drain_total 2") {
		t.Errorf("metrics lack sluice_requests_cut_by_drain_total 2:\n%s", metrics)
	}
	l := logs.String()
	if strings.Count(l, "request cut by drain") != 2 || strings.Count(l, `"code":"drain_timeout"`) != 2 || strings.Contains(l, "client_disconnected") {
		t.Errorf("log does not show two requests cut by drain (and no disconnect):\n%s", l)
	}
}
