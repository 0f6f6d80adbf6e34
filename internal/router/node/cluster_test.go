package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/gguf"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
	"sluice/internal/testenv"
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

// gateDecode records every reservation a decode worker grants and holds
// each stream's opening until open is closed. Decode starts a sequence
// only once its stream is open, so while the gate is shut every granted
// reservation keeps exactly the pages it was given: the pool's demand is
// frozen and can be compared with the reservations.
type gateDecode struct {
	handoff.Decode
	open     chan struct{}
	headroom int // decode's headroom in tokens (its page size)
	mu       sync.Mutex
	live     map[kv.ID]gated
	held     int // streams that reached the gate
	// noRevoke asks decode for reservations it never revokes for the KV
	// quota (Reserve.NoRevoke): a revoked reservation's pages go to
	// another while its router, held at the gate, still lists them.
	noRevoke bool
}

type gated struct {
	tenant string
	pages  []kv.PageRef // the prompt's pages (Reservation.Pages)
	all    int          // pages the reservation takes, headroom included
}

func (g *gateDecode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	if g.noRevoke {
		c := *r
		c.NoRevoke = true
		r = &c
	}
	// Under g.mu across the worker's Reserve: the pages it takes and the
	// record of them change together for checkBooking, which reads the
	// pool under g.mu (recorded after the call, a reservation in flight
	// made the pool look over-booked until its record landed, and on a
	// starved machine the checker could run out of time waiting for a
	// moment with none in flight).
	g.mu.Lock()
	defer g.mu.Unlock()
	res, err := g.Decode.Reserve(ctx, r)
	if err == nil {
		g.live[r.Handoff] = gated{tenant: r.Tenant, pages: res.Pages, all: kv.PagesFor(r.PromptTokens+min(r.MaxTokens, g.headroom), res.PageSize)}
	}
	return res, err
}

func (g *gateDecode) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	g.mu.Lock()
	g.held++
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Decode.Stream(ctx, id, p)
}

func (g *gateDecode) Abort(ctx context.Context, a *handoff.Abort) error {
	// Under g.mu across the worker's Abort, as Reserve.
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.live, a.Handoff)
	return g.Decode.Abort(ctx, a)
}

// checkBooking is the double-booking checker, run while the gate is
// shut: on each decode worker no prompt page (the pages a Reservation
// lists) is in two reservations of either router, and the pool's pages in
// use are exactly what the reservations took with their headroom pages
// (pool accounting: a page handed out twice, listed or not, would make the
// pool count fewer). It returns the reservations seen, or why not
// consistent. The gate records a reservation and takes its pages under
// g.mu, so one check sees them together whatever the machine's load.
func checkBooking(gs []*gateDecode, pools []*kv.Pool) (int, error) {
	n := 0
	for i, g := range gs {
		g.mu.Lock()
		owner := map[uint32]kv.ID{}
		want := 0
		for id, r := range g.live {
			want += r.all
			for _, ref := range r.pages {
				if o, dup := owner[ref.Page]; dup {
					g.mu.Unlock()
					return n, fmt.Errorf("decode %d: page %d is in reservations %s and %s", i, ref.Page, handoff.IDString(o), handoff.IDString(id))
				}
				owner[ref.Page] = id
			}
		}
		n += len(g.live)
		st := pools[i].Stats()
		g.mu.Unlock()
		if used := st.Pages - st.Free; used != want {
			return n, fmt.Errorf("decode %d: %d pages in use, the reservations took %d", i, used, want)
		}
	}
	return n, nil
}

// Two routers share three small decode pools. Every request is sent at
// once and every stream is held at decode until the pools are full, so
// the two routers' demand (120 reservations of 2-3 pages) exceeds the
// pools (3 x 16 pages) whatever the timing: decode must refuse some
// reservations with no_room (the request moves once to another decode
// worker, then waits in the queue), asserted. While held, a checker over
// the reservations and the pools finds no page in two reservations and
// the pools' use equal to what was granted. Released, every request
// completes with its colocated output and every pool is whole.
func TestTwoRoutersNeverDoubleBook(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, 120)
	want := clusterReferences(t, m, rs)
	open := make(chan struct{})
	var gs []*gateDecode
	cs := buildTestCluster(t, m, 256, func(i int, d handoff.Decode) handoff.Decode {
		// The checker's reservations are the routers' (revocation, which
		// hands pages of a reservation its router still lists to another,
		// is TestDecodeQuotaRevokesOverShareReservations's).
		g := &gateDecode{Decode: d, open: open, headroom: 16, live: map[kv.ID]gated{}, noRevoke: true}
		gs = append(gs, g)
		return g
	})
	var pools []*kv.Pool
	for _, d := range cs.Decodes {
		pools = append(pools, d.Pool())
		if ps := d.Pool().Geometry().PageSize; ps != 16 {
			t.Fatalf("page size %d: the gate's headroom assumes 16", ps)
		}
	}
	noRoom := func() (n uint64) {
		for _, d := range cs.Decodes {
			n += d.ReceiverStats().Failed["no_room"]
		}
		return
	}
	held := func() (n int) {
		for _, g := range gs {
			g.mu.Lock()
			n += g.held
			g.mu.Unlock()
		}
		return
	}
	resc := make(chan []cres, 1)
	var done atomic.Int64
	go func() { resc <- runAll(cs, rs, len(rs), func(int) { done.Add(1) }) }()
	// Shut until decode refused a reservation for lack of room, or every
	// request is held or ended (then there was no contention, and the
	// assertion below fails rather than hanging).
	for noRoom() == 0 && held()+int(done.Load()) < len(rs) {
		time.Sleep(2 * time.Millisecond)
	}
	var booked, checks int
	var berr error
	for deadline := time.Now().Add(10 * time.Second); ; {
		checks++
		if booked, berr = checkBooking(gs, pools); berr == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	refusedWhileHeld, heldAtCheck := noRoom(), held()
	close(open)
	got := <-resc
	if berr != nil {
		t.Fatalf("double booking: %v", berr)
	}
	t.Logf("while held: %d reservations granted, %d streams held, %d no_room refusals; %d in all; booking consistent at check %d", booked, heldAtCheck, refusedWhileHeld, noRoom(), checks)
	if refusedWhileHeld == 0 {
		t.Fatalf("no reservation was refused for lack of room: the two routers' %d requests did not contend for the decode pools", len(rs))
	}
	for i := range rs {
		if got[i].err != nil || !same(got[i].toks, want[i].toks) || got[i].usage != want[i].usage {
			t.Fatalf("request %d (%s): got %v %+v %v, want %v %+v", i, rs[i].Tenant, got[i].toks, got[i].usage, got[i].err, want[i].toks, want[i].usage)
		}
	}
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
// close). Every request completes exactly: retried before its first token,
// or migrated to a surviving pair after it (the streams held on the victim
// past their first token are surely mid-decode when it dies) and continued
// bit for bit, usage included. The routers mark the worker down and send
// it nothing more; the surviving pools are whole after the drain.
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
	t.Logf("%d exact, %d failed after their first token, %d retried before it, %d held on the victim at its death", exact, failedAfterFirst, retries, atKill)
	if failedAfterFirst != 0 {
		t.Fatalf("%d requests failed after their first token; the %d held on the victim should have migrated", failedAfterFirst, atKill)
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

// A decode worker that joins after start is vetted before its first
// request as `sluice router` vets its workers at start: one whose context
// is smaller than the router's is refused, and one whose pool is another
// model's is refused as another model (I13) (never picked, logged, and
// /ready counts each kind of refusal, naming no address, once no other
// decode worker is left); one like the others is used.
func TestJoiningDecodeWorkerIsVetted(t *testing.T) {
	m := loadStories(t)
	rs := clusterJobs(m, 12)
	want := clusterReferences(t, m, rs)
	cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 1024}},
		PrefillWorkers: 1, DecodeWorkers: 1, Routers: 1, Probe: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	small, err := cs.StartDecode(func(c *engine.Config) { c.Context = 128 })
	if err != nil {
		t.Fatal(err)
	}
	cs.JoinDecode(small)
	like, err := cs.StartDecode()
	if err != nil {
		t.Fatal(err)
	}
	cs.JoinDecode(like)
	stat := func(addr string) WorkerStats {
		ws, _, _ := cs.Clusters[0].Stats()
		for _, w := range ws {
			if w.Name == addr {
				return w
			}
		}
		t.Fatalf("no worker %s in %+v", addr, ws)
		return WorkerStats{}
	}
	if w := stat(small); w.Refused == nil || w.Vetted {
		t.Fatalf("the worker of a smaller context was not refused: %+v", w)
	}
	if w := stat(like); w.Refused != nil || !w.Vetted {
		t.Fatalf("a worker like the others was not vetted: %+v", w)
	}
	got := runAll(cs, rs, 4, nil)
	for i, g := range got {
		if g.err != nil || !same(g.toks, want[i].toks) {
			t.Fatalf("request %d: %v %v", i, g.toks, g.err)
		}
	}
	if n := stat(small).Picks; n != 0 {
		t.Fatalf("the refused worker was picked %d times", n)
	}
	if stat(like).Picks == 0 {
		t.Fatal("the vetted worker that joined took no request")
	}
	// A decode worker whose pool holds another model's KV (I13): the
	// Reserve of the vetting carries the router's fingerprint, which that
	// worker refuses.
	other, err := LoadModel(testenv.Shared(t, "models/tiny-qwen2-random-gpt2vocab.gguf"), gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	foreign, err := cs.StartDecode(func(c *engine.Config) { c.Model = other.Runtime })
	if err != nil {
		t.Fatal(err)
	}
	cs.JoinDecode(foreign)
	if w := stat(foreign); w.ModelOK || w.Refused == nil || stat(foreign).Picks != 0 {
		t.Fatalf("the worker of another model was not refused as such: %+v", w)
	}
	cs.LeaveDecode(cs.DecodeAddrs[0])
	cs.LeaveDecode(like)
	err = cs.Clusters[0].Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "1 refused by the router's checks") || !strings.Contains(err.Error(), "1 run another model, model_mismatch") ||
		strings.Contains(err.Error(), small) || strings.Contains(err.Error(), foreign) {
		t.Fatalf("/ready with only the refused workers left: %v", err)
	}
	waitFree(t, cs.Pools(), "")
}

type stubPrefill struct{ name string }

func (stubPrefill) Prefill(context.Context, *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	return nil, errors.New("stub")
}

type stubDecode struct{ handoff.Decode }

// A prefill worker's load report (its requests from every router) steers
// the prefill-queue scorer: with this router's own counts equal, the
// worker that reports other routers' requests gets none of the next
// ones until this router's own requests even the queues.
func TestPrefillLoadReportSteersPairing(t *testing.T) {
	report := func(n int) func(context.Context) (*handoff.Load, error) {
		return func(context.Context) (*handoff.Load, error) {
			return &handoff.Load{Running: n, TotalPages: 16, FreePages: 16}, nil
		}
	}
	c, err := NewCluster([]Worker{{Name: "busy", Prefill: stubPrefill{"busy"}, Load: report(3)}, {Name: "idle", Prefill: stubPrefill{"idle"}, Load: report(0)}},
		[]Worker{{Name: "d", Decode: stubDecode{}}}, Weights{PrefillQueue: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Probe(context.Background())
	var got []string
	for range 5 {
		p, err := c.Pair(&engine.Request{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.Prefill.(stubPrefill).name)
	}
	// idle takes 3 (queues 3:1, 3:2, 3:3), then they tie and share.
	if strings.Join(got[:3], ",") != "idle,idle,idle" || !slices.Contains(got[3:], "busy") {
		t.Fatalf("prefill picks %v, want idle x3 then shared", got)
	}
}

// The prefill worker answers the load frame over TCP with its pool and
// the prompts it is running.
func TestPrefillWorkerReportsLoad(t *testing.T) {
	m := loadStories(t)
	cs := buildTestCluster(t, m, 512, nil)
	var l *handoff.Load
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := cs.Clusters[0]
		c.mu.Lock()
		p := c.prefill[0]
		rep, total := p.reported, p.total
		c.mu.Unlock()
		if rep {
			l = &handoff.Load{TotalPages: total}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no load report from the prefill worker")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if want := cs.Prefills[0].Pool().Pages(); l.TotalPages != want {
		t.Fatalf("reported %d pages, the pool has %d", l.TotalPages, want)
	}
}

// A preempted request resumes through the pairer (a new pair, chosen by
// the scores, usually the decode worker with more free pages), not pinned
// to the worker that ran out. Preemption is made certain: 12 requests of
// 150 tokens each reserve 2 pages (prompt and headroom) of two 16-page
// decode pools, their streams held until all 12 are reserved, then all
// decode at once and must grow to 10 pages each. Every resume is one more
// pick, and every output, some resumed on the other decode worker, equals
// the request served alone on the colocated engine.
func TestPreemptedRequestIsPairedAgain(t *testing.T) {
	m := loadStories(t)
	var rs []*engine.Request
	for i := range 12 {
		r := &engine.Request{ID: fmt.Sprint(i), Tenant: []string{"alice", "bob"}[i%2], Prompt: m.Tok.Encode(fmt.Sprintf("Once upon a time, %d", i), true, false),
			MaxTokens: 150, IgnoreEOS: true}
		if i%3 == 1 {
			r.Sampling = sample.Params{Temperature: 0.8, Seed: uint64(7 + i)}
		}
		rs = append(rs, r)
	}
	want := clusterReferences(t, m, rs)
	open := make(chan struct{})
	var gs []*gateDecode
	cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 256}, MaxConcurrency: 64},
		PrefillWorkers: 1, DecodeWorkers: 2, Routers: 1, Probe: 100 * time.Millisecond,
		WrapDecode: func(_ int, d handoff.Decode) handoff.Decode {
			g := &gateDecode{Decode: d, open: open, headroom: 16, live: map[kv.ID]gated{}}
			gs = append(gs, g)
			return g
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close(context.Background())
	for _, r := range rs {
		if len(r.Prompt) > 16 {
			t.Fatalf("prompt of %d tokens: more than one page", len(r.Prompt))
		}
	}
	resc := make(chan []cres, 1)
	go func() { resc <- runAll(cs, rs, len(rs), nil) }()
	for {
		n := 0
		for _, g := range gs {
			g.mu.Lock()
			n += g.held
			g.mu.Unlock()
		}
		if n >= len(rs) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(open)
	got := <-resc
	for i := range rs {
		if got[i].err != nil || !same(got[i].toks, want[i].toks) || got[i].usage != want[i].usage {
			t.Fatalf("request %d: got %d tokens %+v %v, want %d %+v", i, len(got[i].toks), got[i].usage, got[i].err, len(want[i].toks), want[i].usage)
		}
	}
	var preempted, revoked int64
	for _, d := range cs.Decodes {
		preempted += d.SchedStats().Preemptions
		revoked += d.SchedStats().Revoked
	}
	ws, retries, _ := cs.Clusters[0].Stats()
	var picks uint64
	for _, w := range ws {
		if w.Role == "decode" {
			picks += w.Picks
		}
	}
	t.Logf("%d requests, %d preemptions, %d revocations, %d retries, %d decode picks", len(rs), preempted, revoked, retries, picks)
	if preempted == 0 {
		t.Fatal("no preemption: the load did not exceed the pools")
	}
	if want := uint64(len(rs)) + retries + uint64(preempted+revoked); picks != want {
		t.Fatalf("%d decode picks, want %d (one per request, retry, resume and revoked reservation)", picks, want)
	}
	waitFree(t, cs.Pools(), "")
}
