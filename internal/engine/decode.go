package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
	"sluice/internal/sched"
)

// DecodeWorker implements handoff.Decode over its own KV pool: it reserves
// pages, applies verified writes, verifies the commit (I5), then decodes
// every committed sequence with continuous batching.
type DecodeWorker struct {
	cfg   Config
	pool  pagePool
	sched *scheduler
	ctx   int
	// cache is the decode pool's prefix cache (nil: off): a Reserve
	// carrying the prompt's ids starts its table with this tenant's cached
	// prefix, and a verified commit inserts the prompt's full pages.
	cache *prefixCache

	// rmu serialises the protocol core, which is a pure state machine and
	// not safe for concurrent use.
	rmu  sync.Mutex
	recv *handoff.Receiver
	quit chan struct{}

	mu       sync.Mutex
	handoffs map[kv.ID]*dhandoff
	closed   bool
	// wanting is the tenants whose last Reserve was refused for room, and
	// until when that counts (the KV quota, decodeQuota): the router's
	// waiting requests, which this worker learns of only by refusing
	// them. Under mu.
	wanting map[string]dwant
	waitBuf []string // publishWantingLocked's scratch, under mu
	// reserving is the quota snapshot of the Reserve in progress and its
	// tenant, for admit (called from it, under mu).
	reserving       *sched.Pages
	reservingTenant string

	// sharedPreempted counts sequences preempted while reading pages
	// their reservation found in the prefix cache (tests: preemption of
	// sharers is exercised, not assumed).
	sharedPreempted atomic.Int64
	// revoked counts reservations taken back before their commit for a
	// tenant waiting within its share (revokeLocked); overShare counts
	// Reserves refused with ErrOverShare. Metrics.
	revoked, overShare atomic.Int64
	// nres orders the reservations (dhandoff.order): the newest is
	// revoked first. Under mu.
	nres uint64

	// now is the clock of every protocol call: time.Now, or a driver's.
	now func() time.Time

	// hooks: TEST HOOK ONLY, nil in production. Called where another
	// call may interleave, so a test can force that interleaving.
	hooks *decodeHooks
}

// decodeHooks are the points of a decode worker where a test may stop
// one call and run another (abort_race_test.go).
type decodeHooks struct {
	// abortChecked: in Abort, after the worker's own look at the handoff
	// and before the receiver's abort.
	abortChecked func(kv.ID)
	// commitAccepted: in Commit, after the receiver accepted the commit
	// and before the worker takes its pages.
	commitAccepted func(kv.ID)
}

var _ handoff.Decode = (*DecodeWorker)(nil)

// dhandoff is the worker's view of one handoff beside the protocol core:
// where its tokens go and whether the client left.
type dhandoff struct {
	tenant    string
	prompt    int
	maxTokens int
	keys      []kv.BlockKey // the prompt's full pages' cache keys (nil: no cache)
	hitBlocks int           // leading prompt blocks found in the cache at Reserve

	// pages is what the reservation took: the tenant's hold on the pool
	// until the sequence joins the batch (the batch counts it then).
	pages int
	// weight is the tenant's weight in the KV quota (Reserve.Weight);
	// order is when it was reserved among this worker's reservations
	// (revokeLocked takes the newest first); noRevoke: the router asked
	// that it never be revoked (Reserve.NoRevoke).
	weight   int
	order    uint64
	noRevoke bool

	committed bool
	owner     kv.Owner
	table     []kv.PageRef
	first     int32
	firstLP   *sample.Logprobs
	// timing is the commit's Timing (the prefill worker's part of the
	// first token's time, nil if it sent none) and commitAt when the
	// commit arrived: the first token carries both on (DecodeWait).
	timing   *handoff.Timing
	commitAt time.Time

	stream    *tokenStream
	params    handoff.StreamParams
	cancelled bool
	// aborted: an Abort came while the started handoff's sampler was
	// being made (startLocked), before its sequence existed.
	aborted bool
	started bool
	q       *seq
	failed  error
	// since is when the handoff last made progress: its reservation, or
	// its last page write applied (a long prompt streams its pages while
	// it prefills, so a slow prefill that keeps writing is not stale).
	since time.Time
}

// NewDecodeWorker builds a decode worker with its own pool. It refuses a
// configured context larger than its pool (I2).
func NewDecodeWorker(cfg Config) (*DecodeWorker, error) { return NewWatchedDecodeWorker(cfg, nil) }

// NewWatchedDecodeWorker is NewDecodeWorker with wrap put around the pool
// the worker reads and writes: the incident replay (internal/incident)
// watches what attention actually reads through it. A wrapper that has a
// Raw() *kv.Pool method keeps the pool's metrics and drain checks.
func NewWatchedDecodeWorker(cfg Config, wrap func(PagePool) PagePool) (*DecodeWorker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("decode"); err != nil {
		return nil, err
	}
	pool, err := cfg.newPool()
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		pool = wrap(pool)
	}
	w := buildDecodeWorker(cfg, pool, nil)
	go w.ticker()
	return w, nil
}

// Driven makes a decode worker a deterministic driver's (internal/sim):
// no goroutine at all (no batching loop, no ticker), the driver's clock,
// and a pool the driver made. The worker's code is otherwise the one that
// serves: the same Receiver calls, the same batch core (growth, preemption
// and its "preempted" stream end), the same streams.
type Driven struct {
	// Pool is the worker's KV pool: KVPool(p), or the driver's wrapper.
	Pool PagePool
	// Now is the clock every protocol call and Tick reads.
	Now func() time.Time
	// Wake is called, synchronously, when the batch has work (a sequence
	// joined, a cancel or an abort was recorded): the driver then calls
	// Step, after whatever a step costs on its clock.
	Wake func()
	// Raw is the kv pool behind Pool, for the prefix cache (Config.
	// PrefixCache); nil: no cache.
	Raw *kv.Pool
	// OneSided: a peer writes the pool's memory one-sidedly (the driver
	// made the pool on a shared file).
	OneSided bool
	// Safeguards are OR'ed into the Receiver's. TEST HOOK: the
	// simulator's injected bugs.
	Safeguards handoff.Safeguards
}

// NewDrivenDecodeWorker builds a decode worker stepped by its driver: it
// calls Step to run the batch and Tick to advance the protocol clock.
func NewDrivenDecodeWorker(cfg Config, d Driven) (*DecodeWorker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("decode"); err != nil {
		return nil, err
	}
	if d.Pool == nil || d.Now == nil || d.Wake == nil {
		return nil, fmt.Errorf("engine: a driven decode worker needs a pool, a clock and a wake function")
	}
	return buildDecodeWorker(cfg, d.Pool, &d), nil
}

func buildDecodeWorker(cfg Config, pool pagePool, d *Driven) *DecodeWorker {
	w := &DecodeWorker{
		cfg:      cfg,
		pool:     pool,
		ctx:      cfg.configuredContext(),
		handoffs: map[kv.ID]*dhandoff{},
		cache:    newPrefixCache(cfg, pool),
		now:      time.Now,
	}
	sg := receiverSafeguards(cfg.Unsafe)
	if d != nil {
		w.now = d.Now
		w.sched = newDrivenScheduler(cfg, pool, d.Wake)
		w.cache = newPrefixCacheOn(cfg, d.Raw)
		x := d.Safeguards
		sg = handoff.Safeguards{NoCount: sg.NoCount || x.NoCount, NoCoverage: sg.NoCoverage || x.NoCoverage,
			NoDigest: sg.NoDigest || x.NoDigest, NoReservationMatch: sg.NoReservationMatch || x.NoReservationMatch,
			NoChecksum: sg.NoChecksum || x.NoChecksum}
	} else {
		w.sched = newScheduler(cfg, pool)
	}
	w.recv = handoff.NewReceiver(handoff.ReceiverConfig{
		PageSize: cfg.PageSize,
		// Pages on demand: a page of room beyond the prompt; the batch
		// grows the table as tokens come and preempts when it cannot.
		Headroom:   cfg.PageSize,
		Admit:      w.admit,
		OneSided:   cfg.SharedFile != "" || (d != nil && d.OneSided),
		Lease:      cfg.Lease,
		Model:      FingerprintOf(cfg.Model), // I13: Reserves of another model are refused
		Safeguards: sg,
	}, pool)
	w.quit = make(chan struct{})
	return w
}

// Step runs one turn of a driven worker's batch (joiners in, cancels, one
// forward step). It reports whether sequences remain: the driver steps
// again after a step's time; false: idle until the next Wake.
func (w *DecodeWorker) Step() bool {
	if w.sched.driven == nil {
		panic("engine: Step on a decode worker that is not driven")
	}
	return w.sched.turn()
}

// Idle reports that the worker has no sequence to compute (a neighbour
// role in the same process may borrow its threads, Config.BurstThreads).
func (w *DecodeWorker) Idle() bool { return w.sched.running.Load() == 0 && w.sched.pending() == 0 }

// Pool is the worker's KV pool (metrics, drain checks).
func (w *DecodeWorker) Pool() *kv.Pool { return rawPool(w.pool) }

// Context is the worker's effective context (I2).
func (w *DecodeWorker) Context() int { return w.ctx }

// Close stops decoding; sequences in flight fail.
func (w *DecodeWorker) Close() {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.quit)
	}
	w.mu.Unlock()
	w.sched.stop()
	if p := rawPool(w.pool); p != nil {
		_ = p.Close()
	}
}

// ticker is the clock at the edge of the protocol core: quarantine leases
// expire (I6) and tombstones of ended handoffs are forgotten.
func (w *DecodeWorker) ticker() {
	t := time.NewTicker(max(w.cfg.Lease/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-w.quit:
			return
		case now := <-t.C:
			w.Tick(now)
		}
	}
}

// Tick advances the protocol clock; tests call it to expire leases now.
func (w *DecodeWorker) Tick(now time.Time) {
	w.rmu.Lock()
	w.recv.Tick(now)
	w.rmu.Unlock()
	// A handoff that made no progress (reservation, page write) for
	// HandoffTimeout and never started decoding lost its router or its
	// prefill worker: abort it so its pages come back
	// (through quarantine when a one-sided writer may still write, I6).
	var stale []kv.ID
	w.mu.Lock()
	for _, x := range w.wanting {
		if now.After(x.until) {
			// A refusal for room no longer counts: the pool hears it now,
			// not at the next Reserve.
			w.publishWantingLocked(now)
			break
		}
	}
	for id, h := range w.handoffs {
		if h.started || now.Sub(h.since) <= w.cfg.HandoffTimeout {
			continue
		}
		if h.failed != nil {
			// Already over (pages gone); only its stream never came.
			delete(w.handoffs, id)
			continue
		}
		stale = append(stale, id)
	}
	w.mu.Unlock()
	for _, id := range stale {
		_ = w.Abort(context.Background(), &handoff.Abort{Handoff: id, Reason: "the handoff did not start decoding within its timeout"})
	}
}

// ReceiverStats are the protocol counters: late writes dropped, handoffs
// failed by code (I8).
func (w *DecodeWorker) ReceiverStats() handoff.ReceiverStats {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return w.recv.Stats()
}

// Reserve implements handoff.Decode. Admission is repeated here: a decode
// worker never trusts the router to have checked the length (I1/I2 — the
// incident's decode reserved pages for a request already rejected).
func (w *DecodeWorker) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	if r.PromptTokens <= 0 || r.MaxTokens <= 0 {
		return nil, handoff.ErrRefused.With("prompt tokens %d and max tokens %d must both be positive", r.PromptTokens, r.MaxTokens)
	}
	if !w.cfg.Unsafe.NoAdmission && !kv.TokensFit(r.PromptTokens, r.MaxTokens, w.ctx) {
		return nil, handoff.ErrRefused.With("%d prompt + %d max tokens exceed the decode context of %d tokens", r.PromptTokens, r.MaxTokens, w.ctx)
	}
	var keys []kv.BlockKey
	if w.cache != nil && len(r.Tokens) > 0 {
		if len(r.Tokens) != r.PromptTokens || len(r.CacheScope) > handoff.MaxCacheScope {
			return nil, handoff.ErrRefused.With("%d prompt ids for %d prompt tokens, cache scope of %d bytes", len(r.Tokens), r.PromptTokens, len(r.CacheScope))
		}
		for i, t := range r.Tokens {
			if t < 0 || int(t) >= w.cfg.Model.Vocab() {
				return nil, handoff.ErrRefused.With("prompt id %d at index %d is outside the vocabulary of %d", t, i, w.cfg.Model.Vocab())
			}
		}
		// Salted with the authenticated tenant the router sent (I11, I12)
		// and this deployment's secret, as prefill's keys are.
		keys = w.cache.keys(&Request{Tenant: r.Tenant, Prompt: r.Tokens, CacheScope: r.CacheScope})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, handoff.ErrRefused.With("the decode worker is shutting down")
	}
	if _, dup := w.handoffs[r.Handoff]; dup {
		return nil, handoff.ErrDuplicate
	}
	// The KV quota (decodeQuota): a tenant that would go over its share
	// while another tenant's request waits for pages is held back before
	// anything is reserved; a tenant within its share skips the free-page
	// watermark (admit).
	now := w.now()
	n := kv.PagesFor(r.PromptTokens+min(r.MaxTokens, w.cfg.PageSize), w.cfg.PageSize)
	weight := min(max(r.Weight, 1), handoff.MaxWeight)
	quota := w.quotaLocked(now, r.Tenant, weight)
	if !quota.MayTake(r.Tenant, n) && quota.OverShare(r.Tenant, n) {
		w.overShare.Add(1)
		return nil, handoff.ErrOverShare.With("%d pages for %d+%d tokens: not now", n, r.PromptTokens, r.MaxTokens)
	}
	reserve := func() (*handoff.Reservation, error) {
		w.reserving, w.reservingTenant = &quota, r.Tenant
		w.rmu.Lock()
		defer w.rmu.Unlock()
		defer func() { w.reserving, w.reservingTenant = nil, "" }()
		return w.recv.ReservePrefix(now, r, keys)
	}
	res, err := reserve()
	if err != nil && errors.Is(err, handoff.ErrNoRoom) && !quota.OverShare(r.Tenant, n) {
		// Waiting within its share: it contends for the pool now, which
		// holds the others at their shares (decodeQuota), and takes back
		// what an over-share tenant holds in reservations whose prefill
		// is still running (revokeLocked). Then it tries once more: over
		// a two-sided transport the pages are free at once; a one-sided
		// writer's stay quarantined until its drain or lease (I6), and
		// the router tries again later.
		if w.wanting == nil {
			w.wanting = map[string]dwant{}
		}
		w.wanting[r.Tenant] = dwant{pages: n, weight: weight, until: now.Add(wantFor)}
		if w.revokeLocked(now, r.Tenant, weight) {
			quota = w.quotaLocked(now, r.Tenant, weight)
			res, err = reserve()
		}
	}
	if err != nil {
		if errors.Is(err, handoff.ErrNoRoom) && quota.OverShare(r.Tenant, n) {
			// Its own share is what it waits for: only it waits.
			w.overShare.Add(1)
			return nil, handoff.ErrOverShare.With("%d pages for %d+%d tokens: not now", n, r.PromptTokens, r.MaxTokens)
		}
		return nil, err
	}
	if _, waited := w.wanting[r.Tenant]; waited {
		delete(w.wanting, r.Tenant)
		w.publishWantingLocked(now)
	}
	w.nres++
	w.handoffs[r.Handoff] = &dhandoff{tenant: r.Tenant, prompt: r.PromptTokens, maxTokens: r.MaxTokens, since: now, keys: keys, pages: n,
		weight: weight, order: w.nres, noRevoke: r.NoRevoke}
	return res, nil
}

// revokeLocked takes back, newest first, reservations whose prefill has
// not committed yet from the tenant furthest over its share of the pool,
// while a tenant waits for pages that fit within its own share but not in
// the free pages (sched.Pages.Reclaim decides; the reservations are
// counted in the holders' pages). A revoked reservation goes through the
// abort path (Receiver.Abort: fenced by generation, released and
// scrubbed, or quarantined while a one-sided writer may still write, I6)
// and its stream ends with ErrRevoked, which the router turns into a wait
// for another reservation, not a failure. A reservation whose Reserve
// said NoRevoke is never taken. It reports whether any was revoked. The
// waiting tenant is in w.wanting already. Under mu.
func (w *DecodeWorker) revokeLocked(now time.Time, tenant string, weight int) bool {
	raw := rawPool(w.pool)
	if raw == nil {
		return false
	}
	// pending: pages revoked in this call that are not free yet
	// (quarantined for a one-sided writer): counted as free, or every
	// reservation of the tenant over its share would be taken for them.
	pending := 0
	skip := map[kv.ID]bool{}
	newest := func(t string) (kv.ID, *dhandoff) {
		var id kv.ID
		var best *dhandoff
		for hid, h := range w.handoffs {
			if h.tenant != t || h.started || h.committed || h.failed != nil || h.noRevoke || skip[hid] {
				continue
			}
			if best == nil || h.order > best.order {
				id, best = hid, h
			}
		}
		return id, best
	}
	any := false
	for range len(w.handoffs) {
		q := w.quotaLocked(now, tenant, weight)
		// Owed what its reservation could not get: the idle entries it
		// may not evict are no room for it (TestDecodeReclaimCountsWhatTheWaiterMayEvict).
		avail := func(h sched.Holder) int { return raw.AvailableFor(h.Tenant, h.Wants) + pending }
		t := q.ReclaimBy(avail, func(t string) bool { _, h := newest(t); return h != nil })
		if t == "" {
			break
		}
		id, h := newest(t)
		before := raw.AvailablePages()
		if !w.revokeOneLocked(now, id, h) {
			skip[id] = true
			continue
		}
		pending += max(h.pages-(raw.AvailablePages()-before), 0)
		any = true
	}
	return any
}

// revokeOneLocked revokes the reservation h (id): the receiver's abort
// path, then its stream ends with ErrRevoked. False when its commit was
// accepted meanwhile (Commit takes mu after the receiver): the pages are
// the decoder's then, and nothing is revoked. Under mu.
func (w *DecodeWorker) revokeOneLocked(now time.Time, id kv.ID, h *dhandoff) bool {
	w.rmu.Lock()
	ok := w.recv.Abort(now, id, "revoked for a tenant waiting within its KV share")
	w.rmu.Unlock()
	if !ok {
		return false
	}
	w.revoked.Add(1)
	err := handoff.ErrRevoked.With("%d pages of tenant %q's newest reservation, for another tenant's request within its share", h.pages, h.tenant)
	if h.stream == nil {
		h.failed = err
		return true
	}
	delete(w.handoffs, id)
	h.fail(err)
	return true
}

// admit is the receiver's Admit: the free-page watermark (watermarkOK)
// for the sequences holding pages here. The receiver calls it from
// Reserve, under w.mu: every live handoff is in w.handoffs.
func (w *DecodeWorker) admit(pages int) bool {
	p := rawPool(w.pool)
	if p == nil || w.cfg.NoWatermark {
		return true
	}
	if w.reserving != nil && w.reserving.WithinShare(w.reservingTenant, pages) {
		// Within its share while others hold pages: the watermark is the
		// over-share tenants' to keep, not this one's to wait on.
		return true
	}
	// What this tenant may evict, not every idle page: counted against
	// another tenant's cached prefixes (which a tenant over its share
	// may not evict), a flood took the free pages down to the watermark
	// and a co-tenant's next reservation then had only its own prefixes
	// to evict (TestDecodeFloodLeavesCoTenantPrefixCached; colocated.go
	// does the same).
	return watermarkOK(p.AvailableFor(w.reservingTenant, pages), pages, p.Pages(), len(w.handoffs))
}

// Write implements handoff.Decode.
func (w *DecodeWorker) Write(ctx context.Context, ws []handoff.PageWrite) error {
	if len(ws) == 0 {
		return nil
	}
	for i := range ws {
		if ws[i].Handoff != ws[0].Handoff {
			// The failure could not be pinned on one handoff; refuse the
			// call whole, before any write is applied.
			return handoff.ErrProtocol.With("one Write call carries writes of two handoffs")
		}
	}
	now := w.now()
	w.rmu.Lock()
	cw, err := w.recv.BeginWrite(now, ws)
	if err == nil && cw.Pages() > 0 {
		// Sealed pages are opened into their claimed pages without the
		// receiver's lock, on the process's openers (every core but the
		// one the decode step keeps, handoff.OpenParallelism): other
		// handoffs' Reserve and Commit, and this one's next batch, go on
		// meanwhile.
		w.rmu.Unlock()
		cw.Open()
		w.rmu.Lock()
	}
	if err == nil {
		err = w.recv.EndWrite(w.now(), cw)
	}
	w.rmu.Unlock()
	if err != nil {
		w.end(ws[0].Handoff, err)
		return err
	}
	w.mu.Lock()
	if h := w.handoffs[ws[0].Handoff]; h != nil && now.After(h.since) {
		h.since = now
	}
	w.mu.Unlock()
	return nil
}

// Commit implements handoff.Decode: verified, then the sequence joins the
// batch (once its stream is open).
func (w *DecodeWorker) Commit(ctx context.Context, c *handoff.Commit) error {
	arrived := time.Now()
	if bad := badFirst(c, w.cfg.Model.Vocab()); bad != "" {
		// The first token goes straight to the client: a peer must not be
		// able to hand it an id the tokenizer has never seen (I8).
		err := handoff.ErrProtocol.With("%s", bad)
		w.rmu.Lock()
		w.recv.Abort(w.now(), c.Handoff, err.Error())
		w.rmu.Unlock()
		w.end(c.Handoff, err)
		return err
	}
	w.rmu.Lock()
	acc, err := w.recv.Commit(w.now(), c)
	w.rmu.Unlock()
	if err != nil {
		w.end(c.Handoff, err)
		return err
	}
	if w.hooks != nil && w.hooks.commitAccepted != nil {
		w.hooks.commitAccepted(c.Handoff)
	}
	w.mu.Lock()
	h := w.handoffs[c.Handoff]
	if h == nil || h.failed != nil {
		// Ended meanwhile (an abort raced the commit: Abort ends the
		// worker's side before the receiver's, which then found the
		// commit accepted and did nothing): the pages are ours now and
		// nobody will read them. A handoff whose stream is not open yet
		// keeps its failure for that stream (and Tick forgets it); it
		// holds no pages.
		w.mu.Unlock()
		releasePages(w.pool, acc.Owner, acc.Pages)
		return handoff.ErrAborted.With("the handoff ended while it was committing")
	}
	h.committed, h.owner, h.table, h.first, h.firstLP = true, acc.Owner, acc.Pages, acc.FirstToken, c.FirstLogprobs
	h.prompt = acc.Tokens // I9: what was verified, not what was asked
	h.hitBlocks = acc.CachedBlocks
	if c.Timing != nil {
		t := c.Timing.Bounded()
		h.timing, h.commitAt = &t, arrived
	}
	if h.keys != nil {
		// The prompt's KV is final and verified (I5: the digest covered
		// it whole): its full pages become this tenant's cache entries
		// now rather than when the sequence ends, so requests already
		// queued behind it hit them. Decode only appends after the
		// prompt, never into a full prompt page.
		w.cache.insert(acc.Owner, acc.Pages, h.keys, acc.CachedBlocks)
	}
	start := w.startLocked(c.Handoff, h)
	w.mu.Unlock()
	if start != nil {
		start()
	}
	return nil
}

// Abort implements handoff.Decode.
//
// The worker's side ends first, then the receiver's, then the worker
// looks again. A commit the receiver accepts in between (Commit runs the
// receiver, then takes mu) either finds the handoff ended here and
// releases the pages it was handed, or took them before the second look,
// which stops or releases them. Either way no committed page outlives
// the abort: the receiver's abort does nothing to an accepted handoff, so
// its answer alone cannot be relied on for that.
func (w *DecodeWorker) Abort(ctx context.Context, a *handoff.Abort) error {
	err := handoff.ErrAborted.With("%s", a.Reason)
	if w.abortLocal(a.Handoff, err) {
		return nil // committed: the receiver holds nothing of it
	}
	if w.hooks != nil && w.hooks.abortChecked != nil {
		w.hooks.abortChecked(a.Handoff)
	}
	w.rmu.Lock()
	w.recv.Abort(w.now(), a.Handoff, a.Reason)
	w.rmu.Unlock()
	// The second look: a commit the worker took meanwhile, or a Reserve
	// of this id that landed meanwhile (an abort overtaking its Reserve,
	// which the receiver ended just now).
	w.abortLocal(a.Handoff, err)
	return nil
}

// abortLocal ends the worker's side of handoff id for an abort, under mu
// in one piece: a sequence already decoding is stopped and reported as
// failed; a committed one not decoding yet gives its pages back; one not
// committed is ended (its stream, or the one opened later, gets err),
// which a racing Commit then sees. It reports whether the handoff was
// committed.
func (w *DecodeWorker) abortLocal(id kv.ID, err error) bool {
	w.mu.Lock()
	h := w.handoffs[id]
	switch {
	case h == nil:
		w.mu.Unlock()
		return false
	case h.started:
		// Already decoding: the protocol is over, the sequence owns its
		// pages; stop it like a cancel but report the failure.
		if h.q == nil {
			// Its sampler is still being made: the sequence takes
			// these when it joins.
			h.cancelled, h.aborted = true, true
			w.mu.Unlock()
			return true
		}
		h.q.aborted.Store(true)
		h.q.cancel.Store(true)
		w.mu.Unlock()
		w.sched.poke()
		return true
	case h.committed:
		delete(w.handoffs, id)
		w.mu.Unlock()
		releasePages(w.pool, h.owner, h.table)
		h.fail(err)
		return true
	default:
		w.endLocked(id, h, err) // unlocks mu
		return false
	}
}

// Drained implements handoff.Decode.
func (w *DecodeWorker) Drained(ctx context.Context, id kv.ID) error {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return w.recv.Drained(w.now(), id)
}

// Stream implements handoff.Decode.
func (w *DecodeWorker) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	var start func()
	defer func() {
		if start != nil {
			start() // once w.mu is released (the next defer)
		}
	}()
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.handoffs[id]
	if h == nil {
		return nil, handoff.ErrUnknownHandoff
	}
	if len(p.Generated) >= h.prompt {
		// A resumed request's earlier tokens are part of its prompt: more
		// is a confused peer (each is a draw of work).
		return nil, handoff.ErrRefused.With("%d tokens generated before with a prompt of %d tokens", len(p.Generated), h.prompt)
	}
	if h.stream != nil {
		return nil, handoff.ErrState.With("the handoff's stream is already open")
	}
	if err := checkStreamParams(p, w.cfg.Model.Vocab(), h.prompt); err != nil {
		return nil, err
	}
	h.stream = newTokenStream(ctx, h.maxTokens)
	h.params = p
	if h.failed != nil {
		h.stream.push(handoff.Token{Err: h.failed})
		delete(w.handoffs, id)
	} else {
		start = w.startLocked(id, h)
	}
	return h.stream, nil
}

// Cancel implements handoff.Decode. Before the commit it is only recorded
// (I10): the transfer runs to its commit and decode to its first token.
func (w *DecodeWorker) Cancel(ctx context.Context, id kv.ID) error {
	w.mu.Lock()
	h := w.handoffs[id]
	if h == nil {
		w.mu.Unlock()
		return nil
	}
	h.cancelled = true
	q := h.q
	w.mu.Unlock()
	if q != nil {
		q.cancel.Store(true)
		w.sched.poke()
	}
	return nil
}

// startLocked marks a committed handoff whose stream is open as started
// and returns what joins it to the batch (nil: not ready yet), to run
// once w.mu is released: making its sampler replays the tokens generated
// before through the request's grammar (I14), which for a wide schema and
// a long output is seconds of work, and w.mu is what every handoff and
// the scheduler (a sequence's end) take.
func (w *DecodeWorker) startLocked(id kv.ID, h *dhandoff) func() {
	if !h.committed || h.stream == nil || h.started {
		return nil
	}
	h.started = true
	// h's fields read below no longer change: a started handoff is only
	// cancelled or aborted (through h.q, or the flags read under w.mu).
	return func() { w.start(id, h) }
}

// start makes a started handoff's sampler and joins its sequence to the
// batch (startLocked), holding w.mu only to publish the sequence.
func (w *DecodeWorker) start(id kv.ID, h *dhandoff) {
	samp, serr := decodeSampler(w.cfg.formats, h.owner.Tenant, h.params, h.first)
	if serr == nil {
		serr = samp.Err()
	}
	q := &seq{
		owner:        h.owner,
		table:        h.table,
		fed:          h.prompt,
		promptTokens: h.prompt,
		maxTokens:    h.maxTokens,
		weight:       h.weight,
		ignoreEOS:    h.params.IgnoreEOS,
		samp:         samp,
		startErr:     serr,
		first:        h.first,
		firstLP:      h.firstLP,
		hasFirst:     true,
		decoded:      true,
		// Its prompt lives with the router: a preemption ends the stream
		// with "preempted" and the router resumes it with a new handoff.
		evict: true,
	}
	st := h.stream
	hits := h.hitBlocks
	q.emit = func(o outcome) {
		if hits > 0 && o.done && o.finish == "preempted" {
			w.sharedPreempted.Add(1)
		}
		st.push(o.token2())
	}
	q.ended = func() {
		w.mu.Lock()
		delete(w.handoffs, id)
		w.mu.Unlock()
	}
	if serr == nil {
		// The first token is the commit's, verified with it (I5): it goes
		// to the stream now, before the sequence joins the batch, rather
		// than when the batch next takes joiners, after the step in
		// progress (other tenants' decode tokens: a few ms under load).
		// Sent from this goroutine, which returns right after, the
		// stream's reader runs on this thread next instead of waiting for
		// the batch's goroutine to finish its next step. Joining counts
		// it (and ends the sequence there if it is the last); a cancel
		// or abort recorded meanwhile is applied after it, as before
		// (I10: decode reaches its first token). It carries the first
		// token's Timing on, with this worker's wait since the commit.
		tok := outcome{token: h.first, logprobs: h.firstLP}.token2()
		if h.timing != nil {
			t := *h.timing
			t.DecodeWait = time.Since(h.commitAt)
			tok.Timing = &t
		}
		st.push(tok)
		q.firstSent = true
	}
	w.mu.Lock()
	q.cancel.Store(h.cancelled)
	q.aborted.Store(h.aborted)
	h.q = q
	w.mu.Unlock()
	w.sched.add(q)
}

// end forgets a handoff that failed or was aborted before its commit and
// ends its stream with the error (or keeps it for a stream opened later).
// A committed handoff is not ended here (a late write or a repeated commit
// after it changes nothing the commit verified): only an abort or a cancel
// ends it, and gives its pages back.
func (w *DecodeWorker) end(id kv.ID, err error) {
	w.mu.Lock()
	h := w.handoffs[id]
	if h == nil || h.started || h.committed {
		w.mu.Unlock()
		return
	}
	w.endLocked(id, h, err)
}

// endLocked is end's work on h, not committed, under mu, which it
// unlocks. A handoff with its failure recorded holds no pages: Commit
// and Tick rely on it.
func (w *DecodeWorker) endLocked(id kv.ID, h *dhandoff, err error) {
	if h.stream == nil {
		if h.failed == nil {
			// The first failure says why (a revocation stays one when
			// the prefill's refused write ends the handoff again).
			h.failed = err
		}
		w.mu.Unlock()
		return
	}
	delete(w.handoffs, id)
	w.mu.Unlock()
	h.fail(err)
}

func (h *dhandoff) fail(err error) {
	if h.stream != nil {
		h.stream.push(handoff.Token{Err: err})
	}
}

func (o outcome) token2() handoff.Token {
	switch {
	case o.err != nil:
		return handoff.Token{Err: wireError(o.err), PromptTokens: o.prompt, CompletionTokens: o.completion}
	case o.done:
		return handoff.Token{Done: true, Finish: o.finish, PromptTokens: o.prompt, CompletionTokens: o.completion}
	default:
		return handoff.Token{ID: o.token, Logprobs: o.logprobs}
	}
}

// tokenStream is the in-process TokenStream of a decode worker. Pushes never
// block (room for every token and the terminal item).
type tokenStream struct {
	ctx   context.Context
	ch    chan handoff.Token
	mu    sync.Mutex
	ended bool
}

func newTokenStream(ctx context.Context, maxTokens int) *tokenStream {
	return &tokenStream{ctx: ctx, ch: make(chan handoff.Token, maxTokens+2)}
}

func (t *tokenStream) push(tok handoff.Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return
	}
	t.ch <- tok
	if tok.Done || tok.Err != nil {
		t.ended = true
		close(t.ch)
	}
}

// Recv implements handoff.TokenStream.
func (t *tokenStream) Recv() (handoff.Token, error) {
	select {
	case tok, ok := <-t.ch:
		if !ok {
			return handoff.Token{}, io.EOF
		}
		return tok, nil
	case <-t.ctx.Done():
		return handoff.Token{}, t.ctx.Err()
	}
}

// TryRecv is Recv that does not wait, for a driven worker's driver (which
// must not block its single thread): ok is false when no item is there
// yet; err is io.EOF after the terminal item.
func (t *tokenStream) TryRecv() (tok handoff.Token, ok bool, err error) {
	select {
	case tok, open := <-t.ch:
		if !open {
			return handoff.Token{}, false, io.EOF
		}
		return tok, true, nil
	default:
		return handoff.Token{}, false, nil
	}
}

// Close implements handoff.TokenStream; decoding goes on (use Cancel).
func (t *tokenStream) Close() error { return nil }

// decodeSampler continues the request's random stream after the first
// token, which the prefill worker drew with a sampler of the same seed, and
// counts that token for the penalties as that sampler did. A resumed
// request's earlier tokens (p.Generated) were drawn and counted before.
//
// A constrained request's grammar is compiled here from the request's
// schema and replays the generated tokens and the first token (I14): the
// prefill worker's word for the state is never taken. A token the grammar
// refuses shows in the sampler's Err, and the sequence fails before the
// first token is emitted (batch.join). The handoff is verified by then and
// the sequence ends by its own path after its first token (I10), so a
// compile of the same tenant's schema another sequence runs is waited for
// whole (context.Background).
func decodeSampler(f *formats, tenant string, p handoff.StreamParams, first int32) (*sample.Sampler, error) {
	s, err := f.sampler(context.Background(), tenant, p.Sampling, p.Prompt)
	if err != nil {
		return nil, err
	}
	for _, t := range p.Generated {
		s.Observe(t)
	}
	s.Advance(len(p.Generated) + 1)
	s.Observe(first)
	return s, nil
}

// checkStreamParams refuses settings a peer sent outside their domain:
// the router checks them, but a worker trusts no peer with its sampler.
func checkStreamParams(p handoff.StreamParams, vocab, prompt int) error {
	if err := p.Sampling.Validate(vocab); err != nil {
		return handoff.ErrRefused.With("sampling settings: %v", err)
	}
	if len(p.Prompt) > prompt {
		return handoff.ErrRefused.With("%d prompt ids for a prompt of %d tokens", len(p.Prompt), prompt)
	}
	for i, t := range p.Prompt {
		if t < 0 || int(t) >= vocab {
			return handoff.ErrRefused.With("prompt id %d at index %d is outside the vocabulary of %d", t, i, vocab)
		}
	}
	return nil
}

// badFirst says what is wrong with a commit's first token and its
// logprobs, or "" when nothing is.
func badFirst(c *handoff.Commit, vocab int) string {
	if c.FirstToken < 0 || int(c.FirstToken) >= vocab {
		return fmt.Sprintf("first token %d is outside the vocabulary of %d", c.FirstToken, vocab)
	}
	if lp := c.FirstLogprobs; lp != nil {
		if len(lp.Top) > sample.MaxTopLogprobs {
			return fmt.Sprintf("first token carries %d top logprobs; at most %d", len(lp.Top), sample.MaxTopLogprobs)
		}
		for _, t := range lp.Top {
			if t.ID < 0 || int(t.ID) >= vocab {
				return fmt.Sprintf("a top logprob names token %d, outside the vocabulary of %d", t.ID, vocab)
			}
		}
	}
	return ""
}

// DecodeStats are the worker's scheduler counters, for metrics.
type DecodeStats struct {
	// Steps is the number of forward steps run.
	Steps int64
	// MaxBatch is the most sequences one step has served.
	MaxBatch int64
}

// SchedStats are the decode scheduler's counters, with the worker's KV
// quota counters.
func (w *DecodeWorker) SchedStats() SchedStats {
	st := w.sched.stats()
	st.Revoked, st.RefusedOverShare = w.revoked.Load(), w.overShare.Load()
	st.NestForward = 0 // decode steps never pause
	return st
}

// Stats returns the counters.
func (w *DecodeWorker) Stats() DecodeStats {
	return DecodeStats{Steps: w.sched.steps.Load(), MaxBatch: w.sched.maxSeqs.Load()}
}

// The decode worker's KV quota (docs/isolation.md, "KV quotas"): the same
// pure rules as the colocated engine's (sched.Pages), over this pool. The
// requests waiting for its pages are the router's, which it learns of only
// by refusing them for room: a tenant refused within its share "wants"
// pages for wantFor (the router tries again well within that: at every
// request's end, at the latest after its retry interval), and while it
// does, a tenant over its share is refused with ErrOverShare, which the
// router's queue turns into a pass-over of that tenant alone. Pages held
// are the reservations of handoffs not yet decoding plus what the batch's
// sequences hold (its last cycle's snapshot). Tenants count with the
// weight their Reserve carried (the router's --api-keys weight).
//
// A tenant waiting within its share also takes back reservations still in
// prefill from the tenant furthest over its own (revokeLocked): without
// that, a pool full of a flooding tenant's reservations whose prompts
// still wait in the prefill queue holds everyone else off until those
// prompts have run.

// dwant is a tenant's request refused for room: the pages it needs, and
// until when it counts as waiting.
type dwant struct {
	pages, weight int
	until         time.Time
}

// wantFor is how long a refusal for room keeps its tenant contending.
const wantFor = time.Second

// quotaLocked is the quota's snapshot of the pool now, tenant (the
// Reserve in progress) among its holders with its weight. Under mu.
func (w *DecodeWorker) quotaLocked(now time.Time, tenant string, weight int) sched.Pages {
	p := sched.Pages{Pool: w.pool.CapacityTokens() / w.cfg.PageSize}
	at := func(tenant string, weight int) *sched.Holder {
		for i := range p.Holders {
			if p.Holders[i].Tenant == tenant {
				// The latest word on a tenant's weight is its Reserve's;
				// of those held, the largest (a reload may change it).
				p.Holders[i].Weight = max(p.Holders[i].Weight, weight)
				return &p.Holders[i]
			}
		}
		p.Holders = append(p.Holders, sched.Holder{Tenant: tenant, Weight: max(weight, 1)})
		return &p.Holders[len(p.Holders)-1]
	}
	at(tenant, weight)
	if b := w.sched.held.Load(); b != nil {
		for _, h := range b.Holders {
			x := at(h.Tenant, h.Weight)
			x.Held += h.Held
			// The pool's idle entries (addIdle), counted once: they
			// make a tenant holding only cached pages a contender.
			x.Cached = h.Cached
		}
	}
	for _, h := range w.handoffs {
		if (!h.started || h.q == nil) && h.failed == nil {
			// A handoff that failed (aborted, revoked) before its stream
			// opened holds no pages any more; one started but still
			// making its sampler (start) is not in the batch's count yet.
			at(h.tenant, h.weight).Held += h.pages
		}
	}
	w.publishWantingLocked(now)
	for t, x := range w.wanting {
		at(t, x.weight).Wants = x.pages
	}
	return p
}

// publishWantingLocked forgets the refusals for room that no longer
// count (wantFor passed) and names the tenants still waiting to the pool,
// which counts them in its share (one idea of a share: kv's
// holdShareLocked). Called at each Reserve's quota, when a waiting
// tenant's Reserve succeeds, and from Tick when a refusal expired:
// between reservations the pool's list must not keep a tenant that
// stopped waiting (its request cancelled, given up or served), which
// would keep shrinking the others' shares of the pool, e.g. what a
// decoding sequence's growth may evict. Under mu.
func (w *DecodeWorker) publishWantingLocked(now time.Time) {
	w.waitBuf = w.waitBuf[:0]
	for t, x := range w.wanting {
		if now.After(x.until) {
			delete(w.wanting, t)
			continue
		}
		w.waitBuf = append(w.waitBuf, t)
	}
	if raw := rawPool(w.pool); raw != nil {
		raw.SetWaiting(kv.WaitReserve, w.waitBuf)
	}
}
