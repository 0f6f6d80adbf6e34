package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

type cjob struct {
	req *engine.Request
}

type cres struct {
	toks   []int32
	finish string
	usage  engine.Usage
	err    error
}

// runReq submits r and collects its tokens and terminal event.
func runReq(e engine.Engine, r *engine.Request) cres {
	st, err := e.Submit(context.Background(), r)
	if err != nil {
		return cres{err: err}
	}
	var out cres
	for ev := range st.Events() {
		switch {
		case ev.Err != nil:
			out.err, out.usage = ev.Err, ev.Usage
		case ev.Done:
			out.finish, out.usage = ev.Finish, ev.Usage
		default:
			out.toks = append(out.toks, ev.Token)
		}
	}
	return out
}

// clusterJobs are n requests of 3 tenants: mixed prompt lengths (several
// pages), greedy and seeded sampling, and every long one runs to its
// max_tokens so it is surely mid-decode when a worker dies.
func clusterJobs(m *Model, n int) []*engine.Request {
	bases := []string{"Once upon a time", "Lily and Tom went to the park", "The little dog was sad because",
		"One day, a girl named Sue found a red ball", "Tim had a big red car. He", "The sun was hot and the bird"}
	tenants := []string{"alice", "bob", "carol"}
	var rs []*engine.Request
	for i := 0; i < n; i++ {
		p := bases[i%len(bases)]
		if i%4 == 1 {
			p = strings.Repeat(p+". ", 1+i%5)
		}
		r := &engine.Request{ID: fmt.Sprint(i), Tenant: tenants[i%3], Prompt: m.Tok.Encode(p, true, false), MaxTokens: 4 + (i*7)%20}
		if i%5 == 2 {
			r.Sampling = sample.Params{Temperature: 0.9, Seed: uint64(1000 + i)}
		}
		if i%10 == 3 {
			r.MaxTokens, r.IgnoreEOS = 120, true
		}
		rs = append(rs, r)
	}
	return rs
}

// clusterReferences serves each request alone on the colocated engine: the
// oracle every clustered output must equal.
func clusterReferences(t *testing.T, m *Model, rs []*engine.Request) []cres {
	t.Helper()
	ref, err := BuildLocal(m, LocalConfig{Colocated: true, Pools: Pools{Context: 256, PoolTokens: 512}})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close(context.Background())
	want := make([]cres, len(rs))
	for i, r := range rs {
		want[i] = runReq(ref.Engine, r)
		if want[i].err != nil {
			t.Fatalf("reference %d: %v", i, want[i].err)
		}
	}
	return want
}

// loadSize is n, or a quarter of it with -short (the race detector runs
// the same tests with -short).
func loadSize(n int) int {
	if testing.Short() {
		return n / 4
	}
	return n
}

func same(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func buildTestCluster(t *testing.T, m *Model, poolTokens int, wrap func(int, handoff.Decode) handoff.Decode, w ...Weights) *ClusterStack {
	t.Helper()
	var weights Weights
	if len(w) > 0 {
		weights = w[0]
	}
	cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: poolTokens},
		MaxConcurrency: 64, Engine: func(_ string, c *engine.Config) { c.Order = kv.LIFO }},
		PrefillWorkers: 2, DecodeWorkers: 3, Routers: 2, Probe: 100 * time.Millisecond, WrapDecode: wrap, Weights: weights})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(context.Background()) })
	return cs
}

// runAll sends every request through the routers in turn, at most par at
// once; onDone runs after each.
func runAll(cs *ClusterStack, rs []*engine.Request, par int, onDone func(i int)) []cres {
	got := make([]cres, len(rs))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			got[i] = runReq(cs.Routers[i%len(cs.Routers)], r)
			if onDone != nil {
				onDone(i)
			}
		}()
	}
	wg.Wait()
	return got
}

func waitFree(t *testing.T, pools map[string]*kv.Pool, skip string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var busy []string
		for name, p := range pools {
			if name == skip {
				continue
			}
			s := p.Stats()
			if s.Held() != 0 { // idle prefix-cache pages are not in use
				busy = append(busy, fmt.Sprintf("%s: %+v", name, s))
			}
			for k, n := range s.Violations {
				t.Fatalf("%s: %d %s violations", name, n, k)
			}
		}
		if len(busy) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools not free after drain: %v", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// 2 routers share 2 prefill and 3 decode workers over authenticated TCP;
// 210 requests of 3 tenants: every output equals the same request served
// alone on the colocated engine, every worker took traffic, and every
// pool is whole afterwards.
func TestClusterMatchesColocated(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, loadSize(210))
	want := clusterReferences(t, m, rs)
	cs := buildTestCluster(t, m, 1024, nil)
	got := runAll(cs, rs, 24, nil)
	for i := range rs {
		if got[i].err != nil || !same(got[i].toks, want[i].toks) || got[i].finish != want[i].finish || got[i].usage != want[i].usage {
			t.Fatalf("request %d (%s): got %v %q %+v %v, want %v %q %+v", i, rs[i].Tenant, got[i].toks, got[i].finish, got[i].usage, got[i].err,
				want[i].toks, want[i].finish, want[i].usage)
		}
	}
	picks := map[string]uint64{}
	for _, c := range cs.Clusters {
		ws, _, _ := c.Stats()
		for _, w := range ws {
			picks[w.Role+" "+w.Name] += w.Picks
		}
	}
	t.Logf("picks per worker: %v", picks)
	if len(picks) != 5 {
		t.Fatalf("picks %v", picks)
	}
	for w, n := range picks {
		if n == 0 {
			t.Fatalf("worker %s took no request: %v", w, picks)
		}
	}
	waitFree(t, cs.Pools(), "")
}

// Small decode pools under two routers' load: the routers' reservations
// race for the same pages, decode refuses what it cannot hold (no_room:
// the request moves once to another decode worker, or waits in the queue),
// and no page is ever booked twice: no pool records a violation, and
// every request that completes equals its reference.
func TestTwoRoutersNeverDoubleBook(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, 120)
	want := clusterReferences(t, m, rs)
	cs := buildTestCluster(t, m, 256, nil)
	got := runAll(cs, rs, 32, nil)
	var ok, refused int
	for i := range rs {
		if got[i].err != nil {
			if e, isE := got[i].err.(*engine.Error); !isE || e.Code != engine.CodeKVCapacity || len(got[i].toks) > 0 {
				t.Fatalf("request %d: %v after %d tokens", i, got[i].err, len(got[i].toks))
			}
			refused++
			continue
		}
		if !same(got[i].toks, want[i].toks) {
			t.Fatalf("request %d: wrong output", i)
		}
		ok++
	}
	var noRoom uint64
	for _, d := range cs.Decodes {
		noRoom += d.ReceiverStats().Failed["no_room"]
	}
	t.Logf("%d completed, %d refused kv_capacity, %d decode no_room refusals", ok, refused, noRoom)
	// How often decode ran out is load- and timing-dependent (pages are
	// taken on demand and sequences preempted): logged, not asserted.
	waitFree(t, cs.Pools(), "")
}

// holdAfterFirst passes each stream's first item, then holds the rest
// until the stream's context ends (the worker's connection closed).
type holdAfterFirst struct {
	handoff.Decode
	n atomic.Int64 // streams held
}

func (h *holdAfterFirst) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	ts, err := h.Decode.Stream(ctx, id, p)
	if err != nil {
		return nil, err
	}
	return &heldStream{TokenStream: ts, ctx: ctx, h: h}, nil
}

type heldStream struct {
	handoff.TokenStream
	ctx context.Context
	h   *holdAfterFirst
	n   int
}

func (s *heldStream) Recv() (handoff.Token, error) {
	if s.n == 1 {
		s.n++
		s.h.n.Add(1)
		<-s.ctx.Done()
		return handoff.Token{}, s.ctx.Err()
	}
	s.n++
	return s.TokenStream.Recv()
}

// One decode worker dies mid-load (its service and every connection to it
// close). Every request either completes exactly, fails after its first
// token with a clear error (its tokens so far a prefix of the reference),
// or was retried before its first token and completes; no output is
// wrong. The routers mark the worker down and send it nothing more; the
// surviving pools are whole after the drain.
func TestClusterDecodeDiesMidLoad(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, 210)
	want := clusterReferences(t, m, rs)
	// The victim holds every stream after its first token until it dies,
	// so the requests it has past their first token are surely mid-decode
	// when it is killed.
	held := &holdAfterFirst{}
	cs := buildTestCluster(t, m, 1024, func(i int, d handoff.Decode) handoff.Decode {
		if i == 1 {
			held.Decode = d
			return held
		}
		return d
	}, Weights{DecodeQueue: 1, PrefillQueue: 1}) // queue only: ties rotate, so the victim surely takes traffic
	victim := cs.DecodeAddrs[1]
	// Killed once it holds 3 streams, or once every other request has
	// ended (a small load may give it fewer): it always holds at least one.
	var done atomic.Int64
	var atKill int64
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for {
			h := held.n.Load()
			if h >= 3 || done.Load()+h >= int64(len(rs)) {
				atKill = h
				t.Logf("killing the victim with %d streams past their first token", h)
				cs.KillDecode(1)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	got := runAll(cs, rs, 24, func(int) { done.Add(1) })
	<-killed
	if atKill == 0 {
		ws, _, _ := cs.Clusters[0].Stats()
		t.Fatalf("the victim never held a stream past its first token: %+v", ws)
	}
	var exact, failedAfterFirst int
	for i := range rs {
		g, w := got[i], want[i]
		if g.err == nil {
			if !same(g.toks, w.toks) || g.usage != w.usage {
				t.Fatalf("request %d completed with a wrong output: %v, want %v", i, g.toks, w.toks)
			}
			exact++
			continue
		}
		e, isE := g.err.(*engine.Error)
		if !isE || e.Code == "" || e.Message == "" {
			t.Fatalf("request %d: unclear error %v", i, g.err)
		}
		if len(g.toks) == 0 {
			t.Fatalf("request %d failed before its first token and was not retried: %v", i, g.err)
		}
		if !same(g.toks, w.toks[:min(len(g.toks), len(w.toks))]) || len(g.toks) > len(w.toks) {
			t.Fatalf("request %d: tokens before the failure are not the reference's prefix", i)
		}
		failedAfterFirst++
	}
	var retries uint64
	for _, c := range cs.Clusters {
		_, r, _ := c.Stats()
		retries += r
	}
	t.Logf("%d exact, %d failed after their first token, %d retried before it", exact, failedAfterFirst, retries)
	if int64(failedAfterFirst) < atKill {
		t.Fatalf("%d requests failed after their first token; the %d held on the victim must", failedAfterFirst, atKill)
	}

	// Marked down, then never picked again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		down := true
		for _, c := range cs.Clusters {
			ws, _, _ := c.Stats()
			for _, w := range ws {
				if w.Name == victim && w.Up {
					down = false
				}
			}
		}
		if down {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead decode worker was never marked down")
		}
		time.Sleep(20 * time.Millisecond)
	}
	picksOf := func() (n uint64) {
		for _, c := range cs.Clusters {
			ws, _, _ := c.Stats()
			for _, w := range ws {
				if w.Name == victim {
					n += w.Picks
				}
			}
		}
		return
	}
	before := picksOf()
	more := runAll(cs, rs[:30], 8, nil)
	for i, g := range more {
		if g.err != nil || !same(g.toks, want[i].toks) {
			t.Fatalf("after the death, request %d: %v", i, g.err)
		}
	}
	if after := picksOf(); after != before {
		t.Fatalf("the dead worker was picked %d more times", after-before)
	}
	waitFree(t, cs.Pools(), "decode-1")
}

// fakeDNS answers each spec with the addresses the test sets.
type fakeDNS struct {
	mu    sync.Mutex
	addrs map[string][]string
}

func (f *fakeDNS) Resolve(_ context.Context, spec string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.addrs[spec]
	if !ok {
		return nil, fmt.Errorf("no such host %s", spec)
	}
	return append([]string(nil), a...), nil
}

func (f *fakeDNS) set(spec string, a ...string) {
	f.mu.Lock()
	f.addrs[spec] = a
	f.mu.Unlock()
}

// A decode worker that appears in DNS gets traffic without a restart, and
// one that leaves it gets no new request; a failed lookup changes nothing.
// Every output stays the reference's.
func TestDiscoveredDecodeWorkerGetsTraffic(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, 36)
	want := clusterReferences(t, m, rs)
	cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 1024}},
		PrefillWorkers: 1, DecodeWorkers: 1, Routers: 1, Probe: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	const spec = "decode.sluice.svc.cluster.local:9002"
	dns := &fakeDNS{addrs: map[string][]string{}}
	dns.set(spec, cs.DecodeAddrs[0])
	d := &Discovery{Specs: []string{spec}, Resolver: dns, Add: cs.JoinDecode, Remove: cs.LeaveDecode}
	d.Sync(context.Background()) // the known worker: no change
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
	check(runAll(cs, rs[:12], 4, nil), 0)

	second, err := cs.StartDecode()
	if err != nil {
		t.Fatal(err)
	}
	if picks(second) != 0 {
		t.Fatal("a worker nobody resolved took traffic")
	}
	dns.set(spec, cs.DecodeAddrs[0], second)
	d.Sync(context.Background())
	check(runAll(cs, rs[12:24], 4, nil), 12)
	if picks(second) == 0 {
		t.Fatalf("the worker that appeared in DNS took no request")
	}

	// A lookup failure keeps both; then the first leaves DNS.
	dns.mu.Lock()
	delete(dns.addrs, spec)
	dns.mu.Unlock()
	d.Sync(context.Background())
	if ws, _, _ := cs.Clusters[0].Stats(); len(ws) != 3 {
		t.Fatalf("a failed lookup changed the pool: %+v", ws)
	}
	dns.set(spec, second)
	d.Sync(context.Background())
	before := picks(cs.DecodeAddrs[0])
	check(runAll(cs, rs[24:], 4, nil), 24)
	if after := picks(cs.DecodeAddrs[0]); after != before {
		t.Fatalf("the worker that left DNS took %d more requests", after-before)
	}
	waitFree(t, cs.Pools(), "")
}
