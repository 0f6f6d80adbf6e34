package router

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
)

func getStatus(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("%s: body is not JSON: %v", url, err)
	}
	return resp.StatusCode, body
}

// /health is liveness: 200 whatever the peers do and while draining.
// /ready is readiness: 503 with the check's reason while a peer is down,
// 200 again once it is back, 503 while draining.
func TestHealthIsLivenessReadyIsReadiness(t *testing.T) {
	var down atomic.Bool
	h := newHarness(t, 64, func(c *Config) {
		c.Ready = func(context.Context) error {
			if down.Load() {
				return errors.New("the decode worker is not reachable")
			}
			return nil
		}
	})
	check := func(path string, wantCode int, wantStatus string) {
		t.Helper()
		code, body := getStatus(t, h.ts.URL+path)
		if code != wantCode || body["status"] != wantStatus {
			t.Fatalf("%s: %d %v, want %d status %q", path, code, body, wantCode, wantStatus)
		}
	}
	check("/health", 200, "ok")
	check("/ready", 200, "ready")
	down.Store(true)
	check("/health", 200, "ok")
	check("/ready", 503, "not_ready")
	if _, body := getStatus(t, h.ts.URL+"/ready"); body["reason"] != "the decode worker is not reachable" {
		t.Fatalf("reason %q", body["reason"])
	}
	down.Store(false)
	check("/ready", 200, "ready")
	h.srv.Drain()
	check("/health", 200, "draining")
	check("/ready", 503, "draining")
}
