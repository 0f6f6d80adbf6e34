package node

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"sluice/internal/router"
)

// In `sluice serve` the router's /ready follows its peers: 200 while the
// roles are connected, 503 soon after the decode worker's service stops
// (no request needed to find out), while /health, liveness, stays 200.
// (A peer coming back is covered where connections redial: the tcp
// package's TestCheckFollowsThePeer and cmd/sluice's process test.)
func TestReadyFollowsTheDecodePeer(t *testing.T) {
	m := loadStories(t)
	st, err := BuildLocal(m, LocalConfig{Transport: TransportTCP, Pools: Pools{Context: 128, PoolTokens: 256}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	srv, err := router.New(router.Config{Engine: st.Engine, Tokenizer: m.Tokenizer(), Stats: st.Stats, Ready: st.Ready})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	status := func(path string) int {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status("/ready"); got != 200 {
		t.Fatalf("ready with every role up: %d", got)
	}
	st.decodeSrv.Close() // the decode worker goes away
	deadline := time.Now().Add(10 * time.Second)
	for status("/ready") != 503 {
		if time.Now().After(deadline) {
			t.Fatal("/ready still 200 10s after the decode worker stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := status("/health"); got != 200 {
		t.Fatalf("liveness follows a peer: /health %d", got)
	}
}
