package engine

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Tests of the decode worker's prefix cache (Reservation.PrefixTokens,
// SGLang's decode_prefix_len) on the toy model, whose reference output
// (toyReference) is computed without any KV cache. Page size 4: a 9-token
// prompt has 3 pages, 2 of them full and cacheable (never the last
// token's page), so a decode hit leaves 1 page to transfer.

func cacheRig(t *testing.T, transport string, tweak func(pcfg, dcfg *Config)) *abortRig {
	return newAbortRigCfg(t, transport, nil, nil, func(p, d *Config) {
		p.PrefixCache, d.PrefixCache = true, true
		if tweak != nil {
			tweak(p, d)
		}
	})
}

// submit runs r to its end and returns what came out.
func (r *abortRig) submit(t *testing.T, tenant string, p []int32, maxTokens int) result {
	t.Helper()
	s, err := r.eng.Submit(context.Background(), &Request{Tenant: tenant, Prompt: p, MaxTokens: maxTokens, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, s)
}

// pagesSent is the page writes sent by prefill since the last call.
func (r *abortRig) pagesSent() int {
	r.tp.mu.Lock()
	defer r.tp.mu.Unlock()
	n := r.tp.pages
	r.tp.pages = 0
	return n
}

// settle waits until neither pool holds a page (idle cache entries apart)
// and returns the decode pool's report.
func (r *abortRig) settle(t *testing.T) kv.DrainReport {
	t.Helper()
	var rep kv.DrainReport
	for _, p := range []*kv.Pool{r.pw.Pool(), r.dw.Pool()} {
		deadline := time.Now().Add(5 * time.Second)
		var err error
		for rep, err = p.Drained(); err != nil && time.Now().Before(deadline); rep, err = p.Drained() {
			time.Sleep(time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return rep
}

func (r *abortRig) want(t *testing.T, label string, res result, p []int32, n int) {
	t.Helper()
	if want := toyReference(r.m, p, n, true); res.final.Err != nil || !slices.Equal(res.tokens, want) {
		t.Fatalf("%s: %v %v, want %v", label, res.tokens, res.final.Err, want)
	}
}

// A repeat by the same tenant transfers only the page after decode's
// cached prefix (pages counted on the link); another tenant's identical
// prompt misses on decode and transfers all three; outputs equal the
// cache-free reference; the decode pool's idle entries afterwards are the
// two tenants' two full pages each.
func TestDecodePrefixHitTransfersFewerPages(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := cacheRig(t, transport, nil)
		p := prompt(5, 9)
		for _, tc := range []struct {
			name, tenant string
			sent         int
		}{
			{"a, first", "a", 3},
			{"a, again: decode holds 2 pages", "a", 1},
			{"b, same prompt: miss", "b", 3},
			{"b, again", "b", 1},
			{"a, third", "a", 1},
		} {
			res := r.submit(t, tc.tenant, p, 6)
			r.want(t, tc.name, res, p, 6)
			if n := r.pagesSent(); n != tc.sent {
				t.Errorf("%s: %d pages sent, want %d", tc.name, n, tc.sent)
			}
		}
		if rs := r.dw.ReceiverStats(); rs.PagesSkipped != 6 || rs.PagesTransferred != 9 {
			t.Errorf("receiver counted %d transferred, %d skipped; want 9 and 6", rs.PagesTransferred, rs.PagesSkipped)
		}
		if st := r.pw.Stats(); st.PagesSkipped != 6 || st.PagesSent != 9 {
			t.Errorf("prefill counted %d sent, %d skipped; want 9 and 6", st.PagesSent, st.PagesSkipped)
		}
		if rep := r.settle(t); rep.CacheIdle != 4 || rep.Held != 0 {
			t.Errorf("decode pool after: %+v, want 4 idle cache pages", rep)
		}
		// Idle entries are evictable: the load report counts them free.
		if l, err := r.dw.Load(context.Background()); err != nil || l.FreePages != l.TotalPages || l.CachedPages != 4 {
			t.Errorf("load report with only idle cache pages: %+v %v", l, err)
		}
	})
}

// A wrong hit must fail the handoff (I5), never decode over wrong KV:
// (1) a forged commit digest on a handoff with a decode hit; (2) a
// Reserve whose ids name another prompt decode has cached (decode's
// prefix is then X's KV while prefill computed Y): decode's digest over
// its cached pages and the received ones differs from prefill's. Neither
// is retried (integrity), neither touches the good entries: a later
// honest request still hits and is exact, and the pools come back whole.
func TestDecodePrefixWrongHitFailsHandoff(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := cacheRig(t, transport, nil)
		x, y := prompt(7, 9), prompt(8, 9)
		r.want(t, "warm x", r.submit(t, "a", x, 4), x, 4)

		r.tp.mu.Lock()
		r.tp.beforeCommit = func(c *handoff.Commit) { c.Digest[0] ^= 1 }
		r.tp.mu.Unlock()
		res := r.submit(t, "a", x, 4)
		if errorCode(res.final.Err) != CodeIntegrity || len(res.tokens) != 0 {
			t.Fatalf("forged digest on a decode hit: %v %v", res.tokens, res.final.Err)
		}
		r.tp.mu.Lock()
		r.tp.beforeCommit = nil
		r.tp.onReserve = func(rs *handoff.Reserve, _ *handoff.Reservation) {
			if rs != nil {
				rs.Tokens = x // decode looks up x, prefill runs y
			}
		}
		r.tp.mu.Unlock()
		res = r.submit(t, "a", y, 4)
		if errorCode(res.final.Err) != CodeIntegrity || len(res.tokens) != 0 {
			t.Fatalf("decode holding another prompt's prefix: %v %v", res.tokens, res.final.Err)
		}
		r.tp.mu.Lock()
		r.tp.onReserve = nil
		r.tp.mu.Unlock()
		if f := r.dw.ReceiverStats().Failed[handoff.ErrDigestMismatch.Code]; f != 2 {
			t.Errorf("%d digest mismatches counted, want 2", f)
		}
		r.pagesSent()
		r.want(t, "x after", r.submit(t, "a", x, 4), x, 4)
		if n := r.pagesSent(); n != 1 {
			t.Errorf("x after the failures: %d pages sent, want 1 (the good entries still hit)", n)
		}
		r.want(t, "y after", r.submit(t, "a", y, 4), y, 4)
		r.settle(t)
	})
}

// A prefill that ignores decode_prefix_len and writes the cached blocks
// is refused (sealed_write), before any byte reaches a shared page: the
// pool records no violation on them and they still serve the next hit.
// Over shm the writer refuses the conflicting reservation first.
func TestDecodePrefixIgnoredByPrefillIsRefused(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := cacheRig(t, transport, nil)
		p := prompt(9, 9)
		r.want(t, "warm", r.submit(t, "a", p, 4), p, 4)
		r.tp.mu.Lock()
		r.tp.onReserve = func(_ *handoff.Reserve, res *handoff.Reservation) {
			if res != nil {
				res.PrefixTokens = 0 // the prefill is told nothing is cached
			}
		}
		r.tp.mu.Unlock()
		res := r.submit(t, "a", p, 4)
		if res.final.Err == nil || len(res.tokens) != 0 {
			t.Fatalf("prefill ignoring the decode prefix: %v %v", res.tokens, res.final.Err)
		}
		rs := r.dw.ReceiverStats()
		if transport != "shm" && rs.Failed[handoff.ErrSealedWrite.Code] != 1 {
			t.Errorf("%s: failures %v, want one sealed_write", transport, rs.Failed)
		}
		r.tp.mu.Lock()
		r.tp.onReserve = nil
		r.tp.mu.Unlock()
		if v := r.dw.Pool().Stats().Violations; v[kv.KindSealedWrite] != 0 {
			t.Errorf("the pool saw %d sealed writes: the refusal came too late", v[kv.KindSealedWrite])
		}
		r.pagesSent()
		r.want(t, "after", r.submit(t, "a", p, 4), p, 4)
		if n := r.pagesSent(); n != 1 {
			t.Errorf("after: %d pages sent, want 1", n)
		}
		r.settle(t)
	})
}

// decode_prefix_len is a peer's claim: one that is negative, not whole
// pages, the whole prompt or beyond it, or longer than the page list is
// refused by the prefill worker before it sends a page; a well-formed one
// larger than what decode holds fails the commit.
func TestDecodePrefixOutOfBoundsRefused(t *testing.T) {
	r := cacheRig(t, "inproc", nil)
	p := prompt(11, 9)
	for _, bad := range []struct {
		name  string
		set   func(*handoff.Reservation)
		notOK bool
	}{
		{"negative", func(res *handoff.Reservation) { res.PrefixTokens = -4 }, true},
		{"not page aligned", func(res *handoff.Reservation) { res.PrefixTokens = 3 }, true},
		{"the whole prompt", func(res *handoff.Reservation) { res.PrefixTokens = 9 }, true},
		{"past the prompt", func(res *handoff.Reservation) { res.PrefixTokens = 12 }, true},
		{"more pages than listed", func(res *handoff.Reservation) { res.PrefixTokens = 8; res.Pages = res.Pages[:1] }, true},
	} {
		r.tp.mu.Lock()
		r.tp.onReserve = func(_ *handoff.Reserve, res *handoff.Reservation) {
			if res != nil {
				bad.set(res)
			}
		}
		r.tp.mu.Unlock()
		r.pagesSent()
		res := r.submit(t, "a", p, 4)
		if res.final.Err == nil || len(res.tokens) != 0 {
			t.Errorf("%s: %v %v", bad.name, res.tokens, res.final.Err)
		}
		if n := r.pagesSent(); n != 0 {
			t.Errorf("%s: %d pages sent before the refusal", bad.name, n)
		}
	}
	// The whole prompt, page aligned (8 tokens, 2 pages of 4, both listed):
	// only the whole-prompt check refuses it, before any work; it must be
	// that refusal (bad_message), not a later count mismatch.
	p8 := prompt(12, 8)
	r.tp.mu.Lock()
	r.tp.onReserve = func(_ *handoff.Reserve, res *handoff.Reservation) {
		if res != nil {
			res.PrefixTokens = 8
		}
	}
	r.tp.mu.Unlock()
	r.pagesSent()
	before := r.dw.ReceiverStats().Failed[handoff.ErrCountMismatch.Code]
	if res := r.submit(t, "a", p8, 4); !errors.Is(res.final.Err, handoff.ErrBadMessage) || len(res.tokens) != 0 {
		t.Errorf("a page-aligned decode prefix covering the whole prompt: %v %v, want bad_message", res.tokens, res.final.Err)
	}
	if n := r.pagesSent(); n != 0 {
		t.Errorf("the whole prompt as prefix: %d pages sent before the refusal", n)
	}
	if f := r.dw.ReceiverStats().Failed[handoff.ErrCountMismatch.Code]; f != before {
		t.Errorf("the whole prompt as prefix reached the commit (count mismatches %d -> %d)", before, f)
	}
	// Well formed but more than decode holds (nothing, here): prefill
	// skips blocks decode waits for, and the commit fails closed (count).
	r.tp.mu.Lock()
	r.tp.onReserve = func(_ *handoff.Reserve, res *handoff.Reservation) {
		if res != nil {
			res.PrefixTokens = 8
		}
	}
	r.tp.mu.Unlock()
	if res := r.submit(t, "a", p, 4); res.final.Err == nil || len(res.tokens) != 0 {
		t.Errorf("a prefix decode does not hold: %v %v", res.tokens, res.final.Err)
	}
	if f := r.dw.ReceiverStats().Failed[handoff.ErrCountMismatch.Code]; f != 1 {
		t.Errorf("count mismatches %d, want 1", f)
	}
	r.tp.mu.Lock()
	r.tp.onReserve = nil
	r.tp.mu.Unlock()
	r.want(t, "after", r.submit(t, "a", p, 4), p, 4)
	r.settle(t)
}

// Eviction and invalidation while a transfer into a reservation that
// shares cached pages is in flight: the shared pages have a reader, so
// neither takes them; the transfer commits (the digest covers them) and
// the output is exact; the invalidated entries leave with their last
// reader, so the pool ends with no idle entry of the tenant, and the next
// request misses and transfers every page.
func TestDecodePrefixEvictionDuringTransfer(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		r := cacheRig(t, transport, nil)
		p := prompt(13, 9)
		r.want(t, "warm", r.submit(t, "a", p, 4), p, 4)
		if st := r.dw.Pool().Stats(); st.CacheIdle != 2 {
			t.Fatalf("decode cache after the warm-up: %+v", st)
		}
		var evicted, invalidated int
		var during kv.Stats
		r.tp.mu.Lock()
		r.tp.beforeWrite = func(tp *tap, n int) {
			if during.Pages == 0 { // the first write of the handoff
				evicted = r.dw.Pool().EvictIdle(-1)
				invalidated = r.dw.Pool().InvalidateTenant("a")
				during = r.dw.Pool().Stats()
			}
		}
		r.tp.mu.Unlock()
		r.pagesSent()
		r.want(t, "during", r.submit(t, "a", p, 4), p, 4)
		r.tp.mu.Lock()
		r.tp.beforeWrite = nil
		r.tp.mu.Unlock()
		if evicted != 0 || invalidated != 2 || during.Cached != 2 || during.CacheReaders != 2 {
			t.Errorf("during the transfer: evicted %d, invalidated %d, %+v", evicted, invalidated, during)
		}
		if n := r.pagesSent(); n != 1 {
			t.Errorf("during: %d pages sent, want 1", n)
		}
		if rep := r.settle(t); rep.CacheIdle != 0 {
			t.Errorf("invalidated entries outlived their reader: %+v", rep)
		}
		r.want(t, "after", r.submit(t, "a", p, 4), p, 4)
		if n := r.pagesSent(); n != 3 {
			t.Errorf("after the invalidation: %d pages sent, want 3", n)
		}
		r.settle(t)
	})
}

// A decode sequence that reads cached pages is preempted: the decode pool
// (8 pages) holds the sharer (2 cached pages + 1 of its own) and another
// sequence (3 pages); both grow, and the sharer, the later arrival, is
// the victim (the oldest sequence is never preempted while another can
// go). It gives its shares back, the router resumes it with a new
// handoff (whose Reserve may hit the same pages again), and both outputs
// equal the un-preempted reference.
//
// Both sequences must be in the batch when the gate opens: the sharer's
// commit being accepted (Accepted) comes before its sequence is handed
// to the scheduler (making its sampler, then add), and on a loaded
// machine the other sequence, decoding alone, once ran dry first and was
// preempted itself before the sharer joined. In process, a hook holds
// the sharer's commit 50 ms after its acceptance, as such a machine did,
// so the test waits for the join, not the acceptance (over TCP the
// worker's connection goroutine predates the hook, which would race).
func TestDecodePrefixPreemptedSharer(t *testing.T) {
	forTransports(t, func(t *testing.T, transport string) {
		g := &stepGated{Runtime: newToy()}
		r := cacheRig(t, transport, func(_, d *Config) {
			d.Model, d.PoolPages, d.Context = g, 8, 32
			// Both sequences must hold pages at once for one to be
			// preempted: without the free-page watermark decode admits
			// the sharer into its pool's last pages.
			d.NoWatermark = true
		})
		var lateJoin atomic.Bool
		if transport == "inproc" {
			r.dw.hooks = &decodeHooks{commitAccepted: func(kv.ID) {
				if lateJoin.Load() {
					time.Sleep(50 * time.Millisecond)
				}
			}}
		}
		p, q := prompt(15, 9), prompt(16, 9)
		r.want(t, "warm", r.submit(t, "a", p, 2), p, 2)
		gate := make(chan struct{})
		g.gate.Store(&gate)
		other, err := r.eng.Submit(context.Background(), &Request{Tenant: "b", Prompt: q, MaxTokens: 16, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		// The other sequence is in the batch (its first decode step waits
		// at the gate): it arrived first, so it is the oldest.
		waitFor(t, "the other sequence's first step", func() bool { return g.gated.Load() == 1 })
		lateJoin.Store(true)
		sharer, err := r.eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: 16, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the sharer's commit", func() bool { return r.dw.ReceiverStats().Accepted == 3 })
		if rs := r.dw.ReceiverStats(); rs.PagesSkipped != 2 {
			t.Fatalf("the sharer's reservation did not hit: %+v", rs)
		}
		// Handed to the scheduler, it joins the batch at the next step.
		waitFor(t, "the sharer's sequence handed to the batch", func() bool { return r.dw.sched.pending() == 1 })
		close(gate)
		r.want(t, "other", collect(t, other), q, 16)
		r.want(t, "sharer", collect(t, sharer), p, 16)
		if n := r.dw.sharedPreempted.Load(); n < 1 {
			t.Fatalf("no sharer was preempted (%d preemptions)", r.dw.SchedStats().Preemptions)
		}
		r.settle(t)
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func errorCode(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
