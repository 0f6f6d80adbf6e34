package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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

// /ready is unauthenticated: while the decode worker is down and dials to
// it hang (a host that does not answer; here the dial ends only when the
// test lets it), a flood of concurrent probes all return 503 within their
// own bound, without one dial each, and a tenant's request waits for at
// most its connection's one shared dial, not behind the probes. Before,
// each probe held the redialer's lock for a whole dial of its own: the
// first probe here never returned, and every later probe and call queued
// behind it. The waits below are hang guards; what is asserted is that the
// probes returned while the dials were still blocked, and the dial count.
func TestReadyFloodWhileDecodeIsDown(t *testing.T) {
	m := loadStories(t)
	var down atomic.Bool
	var dials atomic.Int32
	release := make(chan struct{})
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !down.Load() {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		dials.Add(1)
		<-release
		return nil, errors.New("connection refused (test dialer)")
	}
	st, err := BuildLocal(m, LocalConfig{Transport: TransportTCP, Pools: Pools{Context: 128, PoolTokens: 256}, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(context.Background())
	keys, err := router.ParseKeys(strings.NewReader("key-a alice\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := router.New(router.Config{Engine: st.Engine, Tokenizer: m.Tokenizer(), Keys: keys, Stats: st.Stats, Ready: st.Ready})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	// Before ts.Close, which waits for handlers still blocked in a dial.
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	status := func() int {
		resp, err := http.Get(ts.URL + "/ready")
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// guard fails the test when f does not return within a minute (it
	// would hang there if probes queued behind a blocked dial).
	guard := func(what string, f func()) {
		t.Helper()
		done := make(chan struct{})
		go func() { defer close(done); f() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: still waiting after 60s behind a blocked dial (%d dials)", what, dials.Load())
		}
	}
	if got := status(); got != 200 {
		t.Fatalf("ready with every role up: %d", got)
	}

	down.Store(true)
	st.decodeSrv.Close() // the decode worker goes away; dials to it hang
	guard("probing until /ready reports the dead peer", func() {
		for status() != 503 {
			time.Sleep(20 * time.Millisecond)
		}
	})
	if dials.Load() == 0 {
		t.Fatal("/ready reports 503 without having tried to reach the worker")
	}

	const probes = 100
	codes := make([]int, probes)
	guard("a flood of probes", func() {
		var wg sync.WaitGroup
		for i := range probes {
			wg.Add(1)
			go func() { defer wg.Done(); codes[i] = status() }()
		}
		wg.Wait()
	})
	for i, c := range codes {
		if c != 503 {
			t.Fatalf("probe %d: %d, want 503", i, c)
		}
	}
	// Still blocked: at most one dial per connection to decode (the
	// prefill worker's and the router's), shared by every probe.
	if n := dials.Load(); n > 2 {
		t.Fatalf("%d dials under way for %d probes: want one per connection", n, probes)
	}

	tenant := make(chan error, 1)
	go func() {
		_, err := complete(context.Background(), clientFor(&served{ts: ts}, "key-a"), job{prompt: "Once upon a time", max: 4})
		tenant <- err
	}()
	close(release) // the dials fail now
	guard("a tenant's request", func() {
		if err := <-tenant; err == nil {
			t.Error("a request succeeded with the decode worker down")
		}
	})
	t.Logf("%d probes, one request: %d dials", probes, dials.Load())
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
