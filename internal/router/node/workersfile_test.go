package node

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

func TestParseWorkers(t *testing.T) {
	wl, err := ParseWorkers(strings.NewReader("# the pools\nprefill 10.0.0.1:9001\n\n  decode  decode.sluice.svc:9002 # headless\ndecode 10.0.0.3:9002\nprefill 10.0.0.1:9001\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := WorkerLists{Prefill: []string{"10.0.0.1:9001"}, Decode: []string{"decode.sluice.svc:9002", "10.0.0.3:9002"}}
	if !reflect.DeepEqual(wl, want) {
		t.Fatalf("got %+v, want %+v", wl, want)
	}
	for _, bad := range []string{
		"router 10.0.0.1:9001",       // no such role
		"decode 10.0.0.1",            // no port
		"decode 10.0.0.1:0",          // port out of range
		"decode 10.0.0.1:65536",      // port out of range
		"decode :9002",               // no host
		"decode 10.0.0.1:x",          // port not a number
		"decode 10.0.0.1:9002 extra", // three fields
		"decode",                     // one field
		strings.Repeat("# long\n", maxWorkersFile/7+1),
	} {
		if _, err := ParseWorkers(strings.NewReader(bad)); err == nil {
			t.Errorf("%.40q parsed", bad)
		}
	}
}

// A workers file reloaded (what SIGHUP does in `sluice router`): a decode
// worker added to the file gets traffic without a restart; one removed
// from it takes no new request while its request in flight finishes
// exactly; a file that does not parse, or lists no decode worker, changes
// nothing.
func TestReloadWorkersFile(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, 30)
	long := rs[3] // max_tokens 120, ignore_eos
	if long.MaxTokens != 120 {
		t.Fatalf("job 3 is not the long one: %+v", long)
	}
	want := clusterReferences(t, m, rs)
	pause := &pauseAfterFirst{held: make(chan struct{}), release: make(chan struct{})}
	cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 1024}},
		PrefillWorkers: 1, DecodeWorkers: 1, Routers: 1, Probe: 100 * time.Millisecond,
		WrapDecode: func(_ int, d handoff.Decode) handoff.Decode { pause.Decode = d; return pause }})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	first := cs.DecodeAddrs[0]
	second, err := cs.StartDecode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "workers")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := &Discovery{Resolver: DNS{}, Add: cs.JoinDecode, Remove: cs.LeaveDecode}
	write("decode " + first + "\n")
	if err := Reload(context.Background(), path, nil, d); err != nil {
		t.Fatal(err)
	}
	picks := func(addr string) (n uint64) {
		ws, _, _ := cs.Clusters[0].Stats()
		for _, w := range ws {
			if w.Name == addr {
				n += w.Picks
			}
		}
		return
	}
	check := func(got []cres, from int) {
		t.Helper()
		for i, g := range got {
			if g.err != nil || !same(g.toks, want[from+i].toks) {
				t.Fatalf("request %d: %v %v, want %v", from+i, g.toks, g.err, want[from+i].toks)
			}
		}
	}
	check(runAll(cs, rs[:8], 4, nil), 0)
	if picks(second) != 0 {
		t.Fatal("a worker not in the file took traffic")
	}
	write("decode " + first + "\ndecode " + second + "\n")
	if err := Reload(context.Background(), path, nil, d); err != nil {
		t.Fatal(err)
	}
	check(runAll(cs, rs[8:16], 4, nil), 8)
	if picks(second) == 0 {
		t.Fatal("the worker added to the file took no request")
	}

	// Bad files keep both workers.
	for _, bad := range []string{"decode " + first + "\nbogus line here\n", "# nothing\n", "prefill 127.0.0.1:1\n"} {
		write(bad)
		if err := Reload(context.Background(), path, nil, d); err == nil {
			t.Fatalf("%q reloaded", bad)
		}
		if ws, _, _ := cs.Clusters[0].Stats(); len(ws) != 3 {
			t.Fatalf("a bad file changed the pool: %+v", ws)
		}
	}

	// Only the second one stays: a long request on the first (alone in the
	// file again) is held past its first token while the first is removed.
	write("decode " + first + "\n")
	if err := Reload(context.Background(), path, nil, d); err != nil {
		t.Fatal(err)
	}
	pause.armed.Store(true)
	st, err := cs.Routers[0].Submit(context.Background(), long)
	if err != nil {
		t.Fatal(err)
	}
	ev := <-st.Events()
	if ev.Err != nil || ev.Done {
		t.Fatalf("first event of the long request: %+v", ev)
	}
	write("decode " + second + "\n")
	if err := Reload(context.Background(), path, nil, d); err != nil {
		t.Fatal(err)
	}
	<-pause.held
	before := picks(first)
	check(runAll(cs, rs[16:], 4, nil), 16)
	close(pause.release)
	toks := []int32{ev.Token}
	var end error
	for ev := range st.Events() {
		if ev.Err != nil {
			end = ev.Err
		} else if !ev.Done {
			toks = append(toks, ev.Token)
		}
	}
	if end != nil || !same(toks, want[3].toks) {
		t.Fatalf("the request in flight on the removed worker: %v after %d tokens", end, len(toks))
	}
	if after := picks(first); after != before {
		t.Fatalf("the worker removed from the file took %d more requests", after-before)
	}
	waitFree(t, cs.Pools(), "")
}

// pauseAfterFirst holds the first stream opened while armed after its
// first item, until release is closed.
type pauseAfterFirst struct {
	handoff.Decode
	armed         atomic.Bool
	held, release chan struct{}
}

func (p *pauseAfterFirst) Stream(ctx context.Context, id kv.ID, sp handoff.StreamParams) (handoff.TokenStream, error) {
	ts, err := p.Decode.Stream(ctx, id, sp)
	if err != nil || !p.armed.CompareAndSwap(true, false) {
		return ts, err
	}
	return &pausedStream{TokenStream: ts, p: p}, nil
}

type pausedStream struct {
	handoff.TokenStream
	p *pauseAfterFirst
	n int
}

func (s *pausedStream) Recv() (handoff.Token, error) {
	if s.n++; s.n == 2 {
		close(s.p.held)
		<-s.p.release
	}
	return s.TokenStream.Recv()
}

// The signal path itself: SIGHUP sent to this test process reaches the
// reload (signal.Notify keeps the signal from ending the process).
func TestReloadOnSIGHUP(t *testing.T) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGHUP)
	defer signal.Stop(sig)
	reloaded := make(chan struct{}, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { OnSignal(ctx, sig, func() { reloaded <- struct{}{} }); close(done) }()
	for range 2 {
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case <-reloaded:
		case <-time.After(10 * time.Second):
			t.Fatal("SIGHUP did not reach the reload")
		}
	}
	cancel()
	<-done
}
