package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sched"
)

// The disaggregated decode pool's KV quota (issue 28): the router's
// requests waiting for decode pages are seen as refusals for room; while
// tenant b's waits within its share, tenant a, over its share, gets no
// page, even one that came back, and b's next try gets it. Alone, a may
// fill the pool (work-conserving), and its refusals then are plain "no
// room", which hold the router's whole queue as before.
func TestDecodeQuotaHoldsOverShareTenantWhileAnotherWaits(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	ctx := context.Background()
	// a's reservations may not be revoked (Reserve.NoRevoke): this test
	// is the quota without revocation (TestDecodeQuotaRevokes... has it).
	reserve := func(tenant string) (kv.ID, error) {
		id := newID()
		_, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: 12, MaxTokens: 2, Model: FingerprintOf(m), NoRevoke: tenant == "a"})
		return id, err
	}
	var as []kv.ID
	for {
		id, err := reserve("a")
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("a alone refused with %v, want no_room", err)
			}
			break
		}
		as = append(as, id)
	}
	share := 32 / 2
	if held := 4 * len(as); held <= share {
		t.Fatalf("a alone holds %d pages of 32: not work-conserving", held)
	}
	// b, within its share, skips the free-page watermark that stopped a,
	// then waits: refused for room, within its share.
	var bs []kv.ID
	for {
		id, err := reserve("b")
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("b refused with %v, want no_room", err)
			}
			break
		}
		bs = append(bs, id)
	}
	if len(bs) == 0 {
		t.Fatal("b within its share waits for the watermark a's sequences keep")
	}
	if 4*(len(bs)+1) > share {
		t.Fatalf("b holds %d pages and waits for more: not within its share of %d", 4*len(bs), share)
	}
	// Pages come back (two of a's handoffs and one of b's end: a still
	// holds its share, and the free pages are more than the watermark
	// keeps): a may not take them while b waits.
	for _, id := range append(as[:2:2], bs[0]) {
		if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	as, bs = as[2:], bs[1:]
	if _, err := reserve("a"); !errors.Is(err, handoff.ErrOverShare) {
		t.Fatalf("a over its share took pages while b waits: %v (a %d, b %d reservations)", err, len(as), len(bs))
	}
	// b, within its share, skips the watermark and gets them.
	bid, err := reserve("b")
	if err != nil {
		t.Fatalf("b within its share refused: %v", err)
	}
	// b holds pages: a, over its share, is still held back (only a: its
	// refusal says over_share, which the router's queue passes over).
	if _, err := reserve("a"); !errors.Is(err, handoff.ErrOverShare) {
		t.Fatalf("a over its share refused with %v, want over_share", err)
	}
	for _, id := range append(append(as, bs...), bid) {
		if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, dw.Pool())
	if st := dw.SchedStats(); st.Revoked != 0 || st.RefusedOverShare != 2 {
		t.Fatalf("%d revoked (NoRevoke reservations), %d refused over_share; want 0 and 2", st.Revoked, st.RefusedOverShare)
	}
}

// A decode pool full of a's reservations whose prefill has not committed
// (issue 28's p99: a flood's prompts still queued at prefill) is taken
// back for b, who waits within its share: b's refused Reserve revokes a's
// newest reservations, one at a time, until b's request fits, and gets its
// pages in the same call. a keeps its share; b stops at its own (then
// over_share). A revoked reservation's stream ends with ErrRevoked (the
// router's cue to requeue), its writes are refused (the abort path, I6),
// and its pages come back scrubbed.
func TestDecodeQuotaRevokesOverShareReservations(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	ctx := context.Background()
	reserve := func(tenant string) (kv.ID, error) {
		id := newID()
		_, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: 12, MaxTokens: 2, Model: FingerprintOf(m)})
		return id, err
	}
	var as []kv.ID
	for {
		id, err := reserve("a")
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("a alone refused with %v, want no_room", err)
			}
			break
		}
		as = append(as, id)
	}
	const per, share = 4, 32 / 2
	if per*len(as) <= share+per {
		t.Fatalf("a alone holds %d pages of 32: too few for the test", per*len(as))
	}
	newest, err := dw.Stream(ctx, as[len(as)-1], handoff.StreamParams{})
	if err != nil {
		t.Fatal(err)
	}
	var bs []kv.ID
	for {
		id, err := reserve("b")
		if err != nil {
			if !errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("b refused with %v after %d reservations, want over_share", err, len(bs))
			}
			break
		}
		bs = append(bs, id)
	}
	if per*len(bs) != share {
		t.Fatalf("b got %d pages, want its share of %d", per*len(bs), share)
	}
	revoked := int(dw.SchedStats().Revoked)
	if revoked == 0 || per*(len(as)-revoked) < share || per*(len(as)-revoked) > share+per {
		t.Fatalf("%d of a's %d reservations revoked: a holds %d pages, its share is %d", revoked, len(as), per*(len(as)-revoked), share)
	}
	tok, err := newest.Recv()
	if err != nil || !errors.Is(tok.Err, handoff.ErrRevoked) {
		t.Fatalf("the newest reservation's stream: %+v %v, want revoked", tok, err)
	}
	for i, id := range as {
		werr := dw.Write(ctx, []handoff.PageWrite{{Handoff: id}})
		if gone := i >= len(as)-revoked; gone != errors.Is(werr, handoff.ErrAborted) {
			t.Fatalf("a's reservation %d of %d (revoked: %v): write gave %v", i, len(as), gone, werr)
		}
		if i == len(as)-2 {
			// Revoked before its stream opened: the stream says so.
			ts, err := dw.Stream(ctx, id, handoff.StreamParams{})
			if err != nil {
				t.Fatal(err)
			}
			if tok, err := ts.Recv(); err != nil || !errors.Is(tok.Err, handoff.ErrRevoked) {
				t.Fatalf("a revoked reservation's late stream: %+v %v", tok, err)
			}
		}
	}
	for _, id := range append(as, bs...) {
		if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, dw.Pool())
}

// revokeOnStream revokes each reservation as its stream opens (before its
// prefill runs), through the worker's own revocation, unless its Reserve
// said NoRevoke; it records each Reserve's NoRevoke.
type revokeOnStream struct {
	*DecodeWorker
	mu       sync.Mutex
	noRevoke []bool
	weights  []int
}

func (d *revokeOnStream) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	d.mu.Lock()
	d.noRevoke = append(d.noRevoke, r.NoRevoke)
	d.weights = append(d.weights, r.Weight)
	d.mu.Unlock()
	return d.DecodeWorker.Reserve(ctx, r)
}

func (d *revokeOnStream) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	ts, err := d.DecodeWorker.Stream(ctx, id, p)
	w := d.DecodeWorker
	w.mu.Lock()
	if h := w.handoffs[id]; h != nil && !h.noRevoke && !h.committed && w.revoked.Load() < 5 {
		w.revokeOneLocked(w.now(), id, h)
	}
	w.mu.Unlock()
	return ts, err
}

// A revoked reservation is a preemption before the first token, not a
// failure: the router requeues the request, which completes with the
// reference output although retries are off (--max-retries spends nothing
// on it); after handoff.MaxRevocations its Reserve asks for a reservation
// decode keeps (NoRevoke), which bounds how often one request is sent
// back. The prefill of each revoked handoff is refused and its pages come
// back.
func TestRevokedReservationRequeues(t *testing.T) {
	m := newToy()
	l := toyLocal(t, m)
	dec := &revokeOnStream{DecodeWorker: l.Decode}
	d, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160, MaxRetries: -1}, l.Prefill, dec)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, d)
	r := &Request{Tenant: "t", Weight: 5, Prompt: prompt(3, 9), MaxTokens: 12}
	st, err := d.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, st)
	if got.final.Err != nil || !slices.Equal(got.tokens, toyReference(m, r.Prompt, r.MaxTokens, false)) {
		t.Fatalf("got %v (%v), want the reference", got.tokens, got.final.Err)
	}
	dec.mu.Lock()
	seen := slices.Clone(dec.noRevoke)
	weights := slices.Clone(dec.weights)
	dec.mu.Unlock()
	for _, w := range weights {
		if w != 5 {
			t.Fatalf("Reserves carried weights %v, want the tenant's 5", weights)
		}
	}
	want := make([]bool, handoff.MaxRevocations+1)
	want[handoff.MaxRevocations] = true
	if !slices.Equal(seen, want) {
		t.Fatalf("Reserves' NoRevoke %v, want %v", seen, want)
	}
	if d.Revoked() != handoff.MaxRevocations || l.Decode.SchedStats().Revoked != handoff.MaxRevocations {
		t.Fatalf("router counted %d revocations, decode %d; want %d", d.Revoked(), l.Decode.SchedStats().Revoked, handoff.MaxRevocations)
	}
	waitDrained(t, l.Decode.Pool(), l.Prefill.Pool())
}

// over_share crosses the wire as itself and still reads as "no room" (and
// a refusal) to a router that does not know it.
func TestOverShareIsNoRoomOnTheWire(t *testing.T) {
	code, msg := handoff.ToWire(handoff.ErrOverShare.With("x"))
	back := handoff.FromWire(code, msg)
	if !errors.Is(back, handoff.ErrOverShare) || !errors.Is(back, handoff.ErrNoRoom) || !errors.Is(back, handoff.ErrRefused) {
		t.Fatalf("%v does not read as over_share, no_room and refused", back)
	}
	if errors.Is(handoff.ErrNoRoom, handoff.ErrOverShare) {
		t.Fatal("no_room reads as over_share")
	}
}

// A reservation that ended before its stream opened (aborted, revoked)
// holds no pages: the quota does not count it for its tenant (counted,
// the tenant would look over its share and be refused or revoked for
// pages it no longer holds).
func TestDecodeQuotaForgetsEndedReservations(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	ctx := context.Background()
	var ids []kv.ID
	for range 2 {
		id := newID()
		if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 12, MaxTokens: 2, Model: FingerprintOf(m)}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := dw.Abort(ctx, &handoff.Abort{Handoff: ids[0], Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	dw.mu.Lock()
	q := dw.quotaLocked(dw.now(), "b", 1)
	dw.mu.Unlock()
	for _, h := range q.Holders {
		if h.Tenant == "a" && h.Held != 4 {
			t.Fatalf("a holds %d pages in the quota, want 4 (one live reservation)", h.Held)
		}
	}
	_ = dw.Abort(ctx, &handoff.Abort{Handoff: ids[1], Reason: "test"})
	waitDrained(t, dw.Pool())
}

// The decode worker's shares use the weight each Reserve carries (the
// router's --api-keys weight), not 1: a tenant of weight 3 beside one of
// weight 1 has three quarters of the pool.
func TestDecodeQuotaUsesReserveWeight(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	ctx := context.Background()
	var ids []kv.ID
	for _, x := range []struct {
		tenant string
		weight int
	}{{"a", 3}, {"b", 1}} {
		id := newID()
		if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: x.tenant, Weight: x.weight, PromptTokens: 12, MaxTokens: 2, Model: FingerprintOf(m)}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	dw.mu.Lock()
	q := dw.quotaLocked(dw.now(), "b", 1)
	dw.mu.Unlock()
	if a, b := q.Share("a"), q.Share("b"); a != 24 || b != 8 {
		t.Fatalf("shares a %d, b %d of 32 pages; want 24 and 8 (weights 3 and 1)", a, b)
	}
	for _, id := range ids {
		_ = dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"})
	}
	waitDrained(t, dw.Pool())
}

// A flood at the decode pool does not take the free pages a co-tenant's
// reservation needs and leave it its own cached prefixes to evict (the
// disaggregated shape of the hole ec9e97b closed colocated). b has two
// prompts cached on decode (4 idle pages); a reserves 4 pages at a time
// until refused. Counted against every idle page (AvailablePages), a's
// watermark saw b's 4 idle pages as room: a took 24 of the 28 free
// pages, and b's next reservation (6 pages, within its share) then had 4
// free pages and evicted 2 of its own cached pages. Counted against what
// a may evict (AvailableFor: over its pool share, not b's prefixes
// within b's cache share), a stops with 8 pages free, and b's
// reservation takes them and evicts nothing.
func TestDecodeFloodLeavesCoTenantPrefixCached(t *testing.T) {
	r := cacheRig(t, "inproc", nil)
	pb1, pb2 := prompt(60, 9), prompt(61, 9) // 2 full pages cached each
	for _, p := range [][]int32{pb1, pb2} {
		r.want(t, "b", r.submit(t, "b", p, 2), p, 2)
	}
	dp := r.dw.Pool()
	if rep := r.settle(t); rep.CacheIdle != 4 {
		t.Fatalf("decode pool before the flood: %+v, want b's 4 idle pages", rep)
	}
	ctx := context.Background()
	reserve := func(tenant string, prompt, maxTokens int) (kv.ID, error) {
		id := newID()
		_, err := r.dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: prompt, MaxTokens: maxTokens, Model: FingerprintOf(r.m), NoRevoke: true})
		return id, err
	}
	var ids []kv.ID
	for {
		id, err := reserve("a", 12, 2) // 4 pages
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) {
				t.Fatalf("a refused with %v, want no_room", err)
			}
			break
		}
		ids = append(ids, id)
	}
	before := dp.Stats()
	id, err := reserve("b", 20, 4) // 6 pages
	if err != nil {
		t.Fatalf("b within its share refused: %v (a holds %d reservations)", err, len(ids))
	}
	ids = append(ids, id)
	if st := dp.Stats(); st.CacheEvictions != before.CacheEvictions || st.CacheIdle != 4 {
		t.Errorf("a's flood (%d reservations of 4 pages) left %d pages free: b's reservation of 6 evicted %d of its own cached pages",
			len(ids)-1, before.Free, st.CacheEvictions-before.CacheEvictions)
	}
	for _, id := range ids {
		if err := r.dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, dp)
	r.pagesSent()
	for _, p := range [][]int32{pb1, pb2} {
		r.want(t, "b, again", r.submit(t, "b", p, 2), p, 2)
	}
	if n := r.pagesSent(); n != 2 {
		t.Errorf("b's two repeats sent %d pages, want 1 each (2 cached on decode)", n)
	}
}

// A tenant waiting within its share is owed the pages its request could
// not get, counted as its reservation counts them: the free pages and
// the idle cache entries it may evict, not every idle entry. b caches 6
// pages on a 32-page decode pool and a 2; a's revocable reservations
// fill the rest (24 pages, 8 over its share: no watermark here, the way
// growth takes a tenant past its share). b asks for 12 pages, within its
// share of 16: with its 6 cached it would hold 18, over its pool share,
// so it may evict only its own idle entries, not a's 2 within a's cache
// share. Counted against every idle page, b was owed only until one
// revocation left 4 + 8 idle "available", and its retry, able to use
// 4 + 6, was refused while a still held 20 pages; now a's reservations
// are revoked until b's request fits (two), and b gets its pages.
func TestDecodeReclaimCountsWhatTheWaiterMayEvict(t *testing.T) {
	r := cacheRig(t, "inproc", func(_, d *Config) { d.NoWatermark = true })
	for i, tenant := range []string{"b", "b", "a"} {
		p := prompt(70+i, 13) // 3 full pages cached
		if tenant == "a" {
			p = prompt(70+i, 9) // 2
		}
		r.want(t, tenant, r.submit(t, tenant, p, 2), p, 2)
	}
	dp := r.dw.Pool()
	if rep := r.settle(t); rep.CacheIdle != 8 {
		t.Fatalf("decode pool before the flood: %+v, want 8 idle pages", rep)
	}
	ctx := context.Background()
	reserve := func(tenant string, prompt, maxTokens int) (kv.ID, error) {
		id := newID()
		_, err := r.dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: prompt, MaxTokens: maxTokens, Model: FingerprintOf(r.m)})
		return id, err
	}
	var ids []kv.ID
	for {
		id, err := reserve("a", 12, 2) // 4 pages
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) {
				t.Fatalf("a refused with %v, want no_room", err)
			}
			break
		}
		ids = append(ids, id)
	}
	if st := dp.Stats(); len(ids) != 6 || st.Free != 0 || st.CacheIdle != 8 {
		t.Fatalf("a holds %d reservations, %d pages free, %d idle; want 6, 0, 8", len(ids), st.Free, st.CacheIdle)
	}
	id, err := reserve("b", 44, 4) // 12 pages
	if err != nil {
		t.Fatalf("b, within its share while a is over its own, refused: %v (%d of a's reservations revoked)", err, r.dw.SchedStats().Revoked)
	}
	if n := r.dw.SchedStats().Revoked; n != 2 {
		t.Errorf("%d of a's reservations revoked for b, want 2", n)
	}
	for _, id := range append(ids, id) {
		if err := r.dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, dp)
}

// The decode worker's quota and its pool's share check count the same
// contenders (one idea of a share): b, refused for room within its share
// and holding nothing, is a contender for the pool too, so a's share
// there is 16 of 32, as in the quota, not the whole pool (the pool left
// waiting tenants out before; a third tenant's share is 32/3).
func TestDecodeWaitingTenantCountsInThePoolsShare(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	ctx := context.Background()
	var ids []kv.ID
	for {
		id := newID()
		if _, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 12, MaxTokens: 2, Model: FingerprintOf(m), NoRevoke: true}); err != nil {
			break
		}
		ids = append(ids, id)
	}
	_, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: newID(), Tenant: "b", PromptTokens: 40, MaxTokens: 2, Model: FingerprintOf(m)})
	if !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
		t.Fatalf("b's 11 pages beside a's %d: %v, want no_room", 4*len(ids), err)
	}
	if held, share := dw.Pool().ShareOf("a"); held != 4*len(ids) || share != 16 {
		t.Errorf("the pool counts a holding %d pages (want %d) with a share of %d, want 16 (b waits)", held, 4*len(ids), share)
	}
	if _, share := dw.Pool().ShareOf("c"); share != 10 {
		t.Errorf("a third tenant's share in the pool is %d, want 32/3 = 10", share)
	}
	for _, id := range ids {
		if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
}

// A tenant holding only cached pages on the decode pool (its prompts'
// prefixes, idle) contends for the pool: the decode worker's quota
// copies each tenant's idle cached pages from the batch's snapshot
// (quotaLocked), so another tenant's share shrinks as the pool's does (one
// idea of a share). c caches 8 of 32 pages and runs nothing: a's share is
// 16, not the whole pool; with weights a 3, c 1, 24.
func TestDecodeQuotaCountsCacheOnlyTenant(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	dw.mu.Lock()
	q := dw.quotaLocked(dw.now(), "a", 1)
	dw.mu.Unlock()
	if got := q.Share("a"); got != 32 {
		t.Fatalf("a alone has a share of %d of 32 pages, want 32", got)
	}
	cacheIdleIn(t, dw.Pool(), dw.cfg.PageSize, "c", 8)
	// The batch's next cycle publishes its snapshot, c's cached pages in it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		dw.sched.poke()
		if p := dw.sched.held.Load(); p != nil && slices.ContainsFunc(p.Holders, func(h sched.Holder) bool { return h.Tenant == "c" && h.Cached == 8 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the decode batch's snapshot never counted c's 8 cached pages")
		}
		time.Sleep(time.Millisecond)
	}
	for _, x := range []struct{ weight, share int }{{1, 16}, {3, 24}} {
		dw.mu.Lock()
		q := dw.quotaLocked(dw.now(), "a", x.weight)
		dw.mu.Unlock()
		if got := q.Share("a"); got != x.share {
			t.Errorf("a (weight %d) beside c holding only cached pages: share %d of 32 pages, want %d (c contends)", x.weight, got, x.share)
		}
	}
	if _, share := dw.Pool().ShareOf("a"); share != 16 {
		t.Errorf("the pool gives a a share of %d, want 16: engine and pool disagree", share)
	}
}

// The decode pool's list of waiting tenants (kv.Pool.SetWaiting) follows
// the decode worker's, not only its next reservation: b, refused for room
// within its share, waits (a's share of the pool 16 of 32); when b stops
// waiting the pool's share for a is 32 again with no Reserve in between:
// once b's refusal no longer counts (wantFor after it: the worker's Tick),
// or as soon as b's next Reserve got its pages (here then given up).
// Before, the pool kept b waiting until the next Reserve of anyone, and a
// decoding tenant's growth meanwhile evicted as if b still waited.
func TestDecodePoolForgetsTenantThatStoppedWaiting(t *testing.T) {
	for _, how := range []string{"expired", "reserved"} {
		t.Run(how, func(t *testing.T) {
			m := newToy()
			dw := toyDecodeWorker(t, m, 32)
			// The worker's protocol clock stands an hour ahead: its own
			// ticker's Ticks (real time) expire nothing, only the test's.
			t0 := time.Now().Add(time.Hour)
			dw.now = func() time.Time { return t0 }
			ctx := context.Background()
			reserve := func(tenant string, prompt int) (kv.ID, error) {
				id := newID()
				_, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: prompt, MaxTokens: 2, Model: FingerprintOf(m), NoRevoke: true})
				return id, err
			}
			var as []kv.ID
			for {
				id, err := reserve("a", 12)
				if err != nil {
					break
				}
				as = append(as, id)
			}
			defer func() {
				for _, id := range as {
					_ = dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"})
				}
			}()
			if _, err := reserve("b", 40); !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("b's 11 pages beside a's %d: %v, want no_room", 4*len(as), err)
			}
			if _, share := dw.Pool().ShareOf("a"); share != 16 {
				t.Fatalf("the pool gives a a share of %d while b waits, want 16", share)
			}
			switch how {
			case "expired":
				dw.Tick(t0.Add(wantFor + time.Millisecond))
			case "reserved":
				for _, id := range as[:2] {
					if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
						t.Fatal(err)
					}
				}
				as = as[2:]
				id, err := reserve("b", 4)
				if err != nil {
					t.Fatalf("b's reservation with pages back: %v", err)
				}
				if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "the client left"}); err != nil {
					t.Fatal(err)
				}
			}
			if held, share := dw.Pool().ShareOf("a"); share != 32 {
				t.Fatalf("b no longer waits (%s) and holds nothing, yet the pool gives a (holding %d) a share of %d, want 32", how, held, share)
			}
		})
	}
}
