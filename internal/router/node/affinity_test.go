package node

import (
	"context"
	"testing"
	"time"

	"sluice/internal/engine"
	"sluice/internal/kv"
)

// Prefix affinity through a real cluster (1 prefill, 3 decode workers over
// TCP, both caches on): tenant alice's six requests with one prompt all go
// to the decode worker the first went to, and each repeat finds the
// prompt's pages in that worker's cache (5 repeats x the full pages
// skipped, counted by the worker); bob's identical prompt is a miss on
// whichever worker he lands, and is not routed by any belief: the router's
// memory of alice's pages is alice's (his memory and the workers' caches
// are his own). Without affinity the same six requests are spread by load and
// only the ones that land on a holder hit. Outputs equal the colocated
// reference.
func TestPrefixAffinityThroughTheCluster(t *testing.T) {
	m := loadStories(t)
	p := m.Tok.Encode("Once upon a time there was a little robot who liked to count the pages of its big book.", true, false)
	ps := 16
	full := (len(p) - 1) / ps
	if full < 2 {
		t.Fatalf("prompt of %d tokens is too short", len(p))
	}
	req := func(tenant string) *engine.Request {
		return &engine.Request{Tenant: tenant, Prompt: p, MaxTokens: 6}
	}
	want := clusterReferences(t, m, []*engine.Request{req("alice")})[0]
	for _, aw := range []float64{DefaultWeights.PrefixAffinity, 0} {
		w := DefaultWeights
		w.PrefixAffinity = aw
		if aw == 0 {
			w.DecodeQueue = 0.001 // any positive weight set: not the defaults
		}
		cs, err := BuildCluster(m, ClusterConfig{LocalConfig: LocalConfig{Pools: Pools{Context: 256, PoolTokens: 1024}, PrefixCache: true,
			Engine: func(_ string, c *engine.Config) { c.Order = kv.LIFO }},
			PrefillWorkers: 1, DecodeWorkers: 3, Routers: 1, Probe: time.Hour, Weights: w})
		if err != nil {
			t.Fatal(err)
		}
		skipped := func() []uint64 {
			var out []uint64
			for _, d := range cs.Decodes {
				out = append(out, d.ReceiverStats().PagesSkipped)
			}
			return out
		}
		picks := func() map[string]uint64 {
			ws, _, _ := cs.Clusters[0].Stats()
			out := map[string]uint64{}
			for _, w := range ws {
				if w.Role == "decode" && w.Picks > 0 {
					out[w.Name] = w.Picks
				}
			}
			return out
		}
		// A request's stream ends before the router's Done for it runs
		// (its in-flight count, its pages back): each next request waits
		// for that, or the last worker can look busy and lose its turn,
		// which the scorer rightly weighs against the prefix it holds.
		settled := func() {
			t.Helper()
			deadline := time.Now().Add(20 * time.Second)
			for {
				ws, _, _ := cs.Clusters[0].Stats()
				busy := 0
				for _, w := range ws {
					busy += w.InFlight
				}
				if busy == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d attempts still in flight at the router", busy)
				}
				time.Sleep(time.Millisecond)
			}
			waitFree(t, cs.Pools(), "")
		}
		for range 6 {
			settled()
			if got := runReq(cs.Routers[0], req("alice")); got.err != nil || !same(got.toks, want.toks) {
				t.Fatalf("affinity %v: %v %v, want %v", aw, got.toks, got.err, want.toks)
			}
		}
		alice, sk := picks(), skipped()
		var total uint64
		for _, n := range sk {
			total += n
		}
		if aw > 0 && (len(alice) != 1 || total != uint64(5*full)) {
			t.Errorf("affinity on: alice's decode picks %v, pages skipped per worker %v; want one worker and %d skipped", alice, sk, 5*full)
		}
		if aw == 0 && (len(alice) < 2 || total >= uint64(5*full)) {
			t.Errorf("affinity off: alice's decode picks %v, pages skipped %v; want them spread", alice, sk)
		}
		affHits := func() uint64 {
			c := cs.Clusters[0]
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.affHits["decode"]
		}
		if aw > 0 && affHits() != 5 {
			t.Errorf("affinity hits after alice's six: %d, want 5", affHits())
		}
		for i := range 2 {
			settled()
			before, hits := skipped(), affHits()
			if got := runReq(cs.Routers[0], req("bob")); got.err != nil || !same(got.toks, want.toks) {
				t.Fatalf("bob: %v %v", got.toks, got.err)
			}
			var delta uint64
			for j, n := range skipped() {
				delta += n - before[j]
			}
			// Bob's first is a miss wherever he lands; with affinity his
			// second follows his own first and hits there.
			if wantDelta := uint64(0); i == 0 && delta != wantDelta || i == 1 && aw > 0 && delta != uint64(full) {
				t.Errorf("affinity %v: bob's request %d skipped %d pages (%v -> %v)", aw, i, delta, before, skipped())
			}
			if aw > 0 && i == 0 && affHits() != hits {
				t.Errorf("bob's first request was routed by a belief (alice's prompt pages)")
			}
		}
		t.Logf("affinity %v: alice's picks %v, skipped %v", aw, alice, sk)
		waitFree(t, cs.Pools(), "")
		// The load reports carry each decode worker's cached pages.
		cs.Clusters[0].Probe(context.Background())
		ws, _, _ := cs.Clusters[0].Stats()
		for i, d := range cs.Decodes {
			for _, w := range ws {
				if w.Role == "decode" && w.Name == cs.DecodeAddrs[i] && w.Cached != d.Pool().Stats().Cached {
					t.Errorf("decode %s reports %d cached pages, its pool holds %d", w.Name, w.Cached, d.Pool().Stats().Cached)
				}
			}
		}
		cs.Close(context.Background())
	}
}
