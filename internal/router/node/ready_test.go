package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"sluice/internal/handoff"
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

type checkerFunc func(context.Context) error

func (f checkerFunc) Check(ctx context.Context) error { return f(ctx) }

// The readiness reason names the role and the failure's stable code, and
// nothing a peer or the network said (the probe is unauthenticated): a
// worker of another model (I13) reads "model_mismatch", an unreachable one
// its transport code, anything else "unreachable".
func TestCheckPeersReason(t *testing.T) {
	up := checkerFunc(func(context.Context) error { return nil })
	for _, c := range []struct {
		err  error
		want string
	}{
		{handoff.ErrModelMismatch.With("this role runs stories260K (aa..), decode at 10.0.0.2:9002 runs qwen2 (bb..)"), "the decode worker is not ready (model_mismatch)"},
		{handoff.ErrTransport.With("dial tcp 10.0.0.2:9002: connection refused"), "the decode worker is not ready (transport)"},
		{errors.New("dial tcp 10.0.0.2:9002: i/o timeout"), "the decode worker is not ready (unreachable)"},
	} {
		down := checkerFunc(func(context.Context) error { return c.err })
		err := CheckPeers(context.Background(), []Peer{{Role: "prefill", Conn: up}, {Role: "decode", Conn: down}})
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: reason %v, want %q", c.err, err, c.want)
		}
	}
	if err := CheckPeers(context.Background(), []Peer{{Role: "prefill", Conn: up}}); err != nil {
		t.Errorf("all up: %v", err)
	}
}
