package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
	"sluice/internal/sched"
)

// PrefillWorker implements handoff.Prefill: it runs prompts (batched with
// other prompts, chunked) over its own KV pool, samples the first token,
// pushes the pages into the decode reservation in bounded batches, commits
// last, and releases its own pages.
type PrefillWorker struct {
	cfg    Config
	pool   pagePool
	sched  *scheduler
	decode handoff.Decode
	ctx    int
	cache  *prefixCache // nil: no prefix cache

	// adm is the prompts' queue for prefill pages: the same pure core
	// (internal/sched) and discipline as the router's admission, FIFO per
	// tenant, DRR across tenants, head of line per tenant. A prompt that
	// does not fit now waits at its tenant's head and nothing of its
	// tenant overtakes it until pages come back, when it is tried first,
	// so a stream of small prompts cannot keep a large one out (every
	// prompt fits the empty pool, I2; the wait is bounded by
	// QueueTimeout); another tenant's prompt that fits still goes, so a
	// flood's prompt waiting for room never holds it.
	adm *admission

	stats struct {
		committed, failed, tokens, bytes, pushNanos atomic.Int64
		sent, skipped, streamed                     atomic.Int64
		asides, asideTimeouts                       atomic.Int64
	}
	// aside is the scheduler goroutine's state for stepping aside for a
	// finished prompt's handoff (aside.go).
	aside aside
	// running is the Prefill calls in progress (its load report).
	running atomic.Int64
	// phases are the prompts' first-token phases seen here (phases.go).
	phases phases
	quit   chan struct{} // ends the lease ticker (expireLeases)
	closed sync.Once
	// promptEnded, when set (tests), runs on the Prefill call's
	// goroutine as it learns that a streamed prompt ended.
	promptEnded func()
}

// PrefillStats are the worker's counters, for metrics.
type PrefillStats struct {
	// Committed and Failed count handoffs by outcome.
	Committed, Failed int64
	// Tokens is the prompt tokens prefilled and committed (I9).
	Tokens int64
	// Bytes is the page bytes pushed by committed handoffs.
	Bytes int64
	// Push is the time from the end of the prompt's prefill (its first
	// token sampled) to the accepted commit, over committed handoffs: the
	// part of the transfer the prefill did not hide (the streaming
	// handoff sends most pages while later chunks compute).
	Push time.Duration
	// PagesSent and PagesSkipped count the prompt pages of committed
	// handoffs that were transferred, and that were not because the
	// decode worker already held them (Reservation.PrefixTokens).
	PagesSent, PagesSkipped int64
	// PagesStreamed is the pages of committed handoffs sent while their
	// prompt was still being prefilled (the streaming handoff): of
	// PagesSent, the transfer hidden under the prefill's compute.
	PagesStreamed int64
	// Asides counts the times the scheduler waited for a finished
	// prompt's handoff before computing another tenant's prompts
	// (aside.go); AsideTimeouts those that ended at Config.CommitAside
	// rather than with the push.
	Asides, AsideTimeouts int64
}

// Stats returns the counters.
func (w *PrefillWorker) Stats() PrefillStats {
	// A wait is counted before its timeout: read in the other order, the
	// timeouts never exceed the waits.
	timeouts := w.stats.asideTimeouts.Load()
	return PrefillStats{
		Committed: w.stats.committed.Load(), Failed: w.stats.failed.Load(), Tokens: w.stats.tokens.Load(),
		Bytes: w.stats.bytes.Load(), Push: time.Duration(w.stats.pushNanos.Load()),
		PagesSent: w.stats.sent.Load(), PagesSkipped: w.stats.skipped.Load(),
		PagesStreamed: w.stats.streamed.Load(),
		Asides:        w.stats.asides.Load(), AsideTimeouts: timeouts,
	}
}

var _ handoff.Prefill = (*PrefillWorker)(nil)

// NewPrefillWorker builds a prefill worker that pushes to decode. It
// refuses a configured context larger than its pool (I2).
func NewPrefillWorker(cfg Config, decode handoff.Decode) (*PrefillWorker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("prefill"); err != nil {
		return nil, err
	}
	if decode == nil {
		return nil, errf(CodeInvalid, 500, nil, "prefill: no decode client to push pages to")
	}
	pool, err := cfg.newPool()
	if err != nil {
		return nil, err
	}
	ctx := cfg.configuredContext()
	w := &PrefillWorker{cfg: cfg, pool: pool, sched: newScheduler(cfg, pool), decode: decode,
		ctx: ctx, cache: newPrefixCache(cfg, pool), quit: make(chan struct{}),
		// Pages bound the prompts in flight, not a count; Quantum is the
		// largest prompt's pages in tokens (its cost), so every DRR turn
		// admits at least one.
		adm: newAdmission(sched.Config{MaxQueue: cfg.MaxQueue, QueueTimeout: cfg.QueueTimeout, MaxRunning: math.MaxInt32, Quantum: kv.PagesFor(ctx, cfg.PageSize) * cfg.PageSize})}
	// A prompt waiting for room wakes when quarantined pages come back,
	// not only when another prompt releases its own.
	go expireLeases(pool, cfg.Lease, w.quit, w.signalFreed)
	return w, nil
}

// limits are what CheckPrefill checks a call against.
func (w *PrefillWorker) limits() PrefillLimits {
	return PrefillLimits{Model: FingerprintOf(w.cfg.Model), PageSize: w.cfg.PageSize, Context: w.ctx, Vocab: w.cfg.Model.Vocab()}
}

// SchedStats are the prefill scheduler's counters (nested steps, the
// forward pass's fixed cost the nested budget counts, preemptions).
func (w *PrefillWorker) SchedStats() SchedStats { return w.sched.stats() }

// signalFreed tells the queue pages came back outside a prompt's end.
func (w *PrefillWorker) signalFreed() { w.adm.step(sched.Event{Kind: sched.EvFreed}) }

// admit waits for the prompt's turn in the prefill queue, then for its
// pages: its pages live only from the prompt's first chunk to the commit,
// so room comes back quickly. The wait is bounded by QueueTimeout: a stuck
// pool refuses rather than hangs. With the prefix cache, the prompt's
// cached leading pages (hits, which o then reads) are looked up only once
// it is its turn, so no waiting prompt pins pages the head of the queue
// needs. The ticket must be ended (done) once the pages are released.
func (w *PrefillWorker) admit(ctx context.Context, o kv.Owner, tenant string, weight int, keys []kv.BlockKey, tokens int) (tk *ticket, hits, table []kv.PageRef, err error) {
	pages := kv.PagesFor(tokens, w.cfg.PageSize)
	tk, e := w.adm.arrive(tenant, weight, pages*w.cfg.PageSize)
	if e != nil {
		return nil, nil, nil, e
	}
	var hard error
	if e := tk.wait(ctx, func() (bool, *Error) {
		hits = nil
		if keys != nil {
			hits = w.cache.lookup(o, keys, tokens)
		}
		var err error
		if len(hits) == 0 {
			table, err = w.pool.Reserve(o, pages)
		} else {
			table, err = w.pool.Extend(o, hits, pages-len(hits))
		}
		if err == nil {
			return false, nil
		}
		if len(hits) > 0 {
			releasePages(w.pool, o, hits)
		}
		if errors.Is(err, kv.ErrNoCapacity) {
			return true, nil
		}
		hard = err
		return false, asEngineError(err, CodeInternal, http.StatusInternalServerError, "reserving prefill pages")
	}); e != nil {
		if hard != nil {
			return nil, nil, nil, hard
		}
		return nil, nil, nil, e
	}
	return tk, hits, table, nil
}

// Idle reports that the worker has no prompt to compute (a neighbour
// role in the same process may borrow its threads, Config.BurstThreads).
func (w *PrefillWorker) Idle() bool { return w.sched.running.Load() == 0 && w.sched.pending() == 0 }

// Pool is the worker's KV pool (metrics, drain checks).
func (w *PrefillWorker) Pool() *kv.Pool { return rawPool(w.pool) }

// Context is the worker's effective context (I2).
func (w *PrefillWorker) Context() int { return w.ctx }

// Close stops the scheduler; prompts in flight fail.
func (w *PrefillWorker) Close() {
	w.closed.Do(func() { close(w.quit) })
	w.adm.shutdown() // prompts still waiting for pages are refused
	w.sched.stop()
	if p := rawPool(w.pool); p != nil {
		_ = p.Close()
	}
}

// Prefill implements handoff.Prefill. It returns only after decode accepted
// the commit. On any failure it aborts the handoff on the decode side and
// releases its own pages.
func (w *PrefillWorker) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	// The calls to decode for this prompt (its page writes, its commit)
	// take their connection's call slots as its tenant's, by its weight.
	ctx = handoff.WithCaller(ctx, r.Tenant, r.Weight)
	arrived := time.Now()
	w.running.Add(1)
	defer w.running.Add(-1)
	if abort, err := CheckPrefill(w.limits(), r); err != nil {
		if abort {
			return nil, w.abort(r.Handoff, err)
		}
		return nil, err
	}
	samp, err := prefillSampler(ctx, w.cfg.formats, r.Tenant, r.Sampling, r.Tokens, r.SampleOffset)
	if err != nil {
		if ctx.Err() != nil {
			// Given up while it waited for the same tenant's compile of
			// the schema: a handoff that failed, as one given up while it
			// waited for prefill pages.
			w.stats.failed.Add(1)
			return nil, w.abort(r.Handoff, handoff.ErrAborted.With("the router gave the prompt up while its response format's grammar was being compiled"))
		}
		if rf := requestFault(err); rf != nil {
			return nil, w.abort(r.Handoff, wireError(rf))
		}
		return nil, w.abort(r.Handoff, handoff.ErrRefused.With("output format: %v", err))
	}
	owner := kv.Owner{Tenant: r.Tenant, ID: r.Handoff}
	// The prefix cache: the tenant is the router's (authenticated, I12),
	// the scope only narrows within it. Cached pages are sent like the
	// others and covered by the digest, so decode verifies them too (I5).
	var keys []kv.BlockKey
	if w.cache != nil {
		keys = w.cache.keys(&Request{Tenant: r.Tenant, Prompt: r.Tokens, CacheScope: r.CacheScope})
	}
	weight := prefillWeight(r.Weight)
	tk, hits, table, err := w.admit(ctx, owner, r.Tenant, weight, keys, len(r.Tokens))
	if err != nil {
		if ctx.Err() != nil {
			// Given up while it waited for prefill pages: a handoff that
			// failed, as one given up mid-prompt.
			w.stats.failed.Add(1)
			return nil, w.abort(r.Handoff, handoff.ErrAborted.With("the router gave the prompt up while it waited for prefill pages"))
		}
		return nil, w.abort(r.Handoff, handoff.ErrPrefillRefused.With("prefill pool: %v", err))
	}
	// The first-token phases (phases.go) of a request's first handoff
	// (a resumed one carries generated tokens: SampleOffset > 0),
	// recorded here and sent with the commit (times: handoff.Timing).
	observe := func(string, time.Duration) {}
	var times *prefillTimes
	var timing func() *handoff.Timing
	if r.SampleOffset == 0 {
		observe = func(phase string, d time.Duration) { w.phases.observe(r.Tenant, phase, d) }
		times = &prefillTimes{}
		timing = times.commit
	}
	admitted := time.Now()
	observe(PhasePrefillQueue, admitted.Sub(arrived))
	if times != nil {
		times.set(func(t *handoff.Timing) { t.PrefillQueue = admitted.Sub(arrived) })
	}
	// After the pages are released (deferred below, or by the scheduler
	// on a failure): the next prompt in the queue may take them.
	defer tk.done()
	cached := len(hits) * w.cfg.PageSize

	ch := make(chan done, 1)
	var first int32
	var firstLP *sample.Logprobs
	q := prefillSeq(owner, table, r.Tokens, cached, weight, samp)
	q.ended = w.signalFreed
	// Both run on the scheduler goroutine, in this order; computed is
	// read after the prompt's end is received from it (ch).
	var started, computed time.Time
	var startedHow string
	q.started = func(how string) {
		started, startedHow = time.Now(), how
		observe(PhasePrefillWait, started.Sub(admitted))
		observe(PhasePrefillWait+"/"+how, started.Sub(admitted))
		if times != nil {
			times.set(func(t *handoff.Timing) { t.PrefillWait = started.Sub(admitted) })
		}
	}
	from := len(hits)
	q.prefilled = func(q *seq) {
		computed = time.Now()
		if !started.IsZero() {
			observe(PhasePrefillCompute, computed.Sub(started))
			observe(PhasePrefillCompute+"/"+startedHow, computed.Sub(started))
			if times != nil {
				times.prompted(computed, computed.Sub(started))
			}
		}
		if keys != nil {
			w.cache.insert(owner, q.table, keys, from)
		}
	}
	pushed := func() {
		if !computed.IsZero() {
			observe(PhasePrefillPush, time.Since(computed))
		}
	}
	var kept []kv.PageRef
	q.handover = func(t []kv.PageRef) { kept = t }
	q.emit = func(o outcome) {
		switch {
		case !o.done && o.err == nil:
			first, firstLP = o.token, o.logprobs
		case o.err != nil:
			ch <- done{err: wireError(o.err), table: kept} // kept: with holdPages only
		case o.finish == "cancelled":
			ch <- done{err: errors.New("prefill cancelled"), table: kept}
		default:
			ch <- done{first: first, firstLP: firstLP, table: kept}
		}
	}
	// The router gave the prompt up (its request was cancelled or its
	// reservation revoked; over TCP, a close frame on the call ends ctx):
	// the prompt stops at its next step boundary (q.stop) and ends
	// "cancelled", which aborts the handoff (pushStreaming's push sees
	// ctx as well) and frees its pages, instead of computing what nobody
	// will read. The poke wakes a scheduler with nothing else to do.
	q.stop = ctx.Done()
	stopWatch := context.AfterFunc(ctx, w.sched.poke)
	defer stopWatch()
	var out *handoff.PrefillResult
	if w.cfg.HandoffAfterPrefill {
		out, err = w.pushAfter(ctx, r, q, ch, owner, cached, timing)
	} else {
		out, err = w.pushStreaming(ctx, r, q, ch, owner, table, cached, timing)
	}
	if err == nil {
		pushed()
	} else if ctx.Err() != nil {
		// However the prompt's end noticed it (its cancelled end, the
		// push's context), the cause is the router's giving it up.
		err = withdrawn(err)
	}
	return out, err
}

// prefillWeight is a PrefillRequest's weight as this worker's queue and
// step shares count it: the router's --api-keys weight, within 1 to
// handoff.MaxWeight. The router is authenticated (I12) and sends its key
// file's weight, already within those bounds, and the TCP codec refuses
// one outside them; but an in-process caller passes the struct as it is,
// and the queue's DRR credit per turn is the weight times the largest
// prompt's tokens: a weight of 0 or less would give its tenant no credit
// (its prompts never admitted while another tenant's wait), and an
// unbounded one overflows the credit. At MaxWeight against 1 the light
// tenant still runs: its step shares' part is at least a chunk, and it is
// passed over only while the other runs MaxWeight times its lag bound.
func prefillWeight(w int) int { return min(max(w, 1), handoff.MaxWeight) }

// prefillSeq is the prefill worker's sequence for a prompt of tokens, the
// first cached of them read from the prefix cache into table: it runs the
// rest, samples the first token and ends (its pages handed to the push),
// weighing weight in the batch's step shares and KV quota.
func prefillSeq(owner kv.Owner, table []kv.PageRef, tokens []int32, cached, weight int, samp *sample.Sampler) *seq {
	q := promptSeq(owner, table, tokens, cached, samp)
	q.maxTokens, q.ignoreEOS, q.weight = 1, true, weight
	return q
}

// withdrawn is a prefill's outcome once the router gave its prompt up
// (the Prefill call's context ended): the handoff was aborted, by the
// router's word, not for a fault of either worker.
func withdrawn(err error) error {
	var he *handoff.Error
	if errors.As(err, &he) && he.Code == handoff.ErrAborted.Code {
		return err
	}
	return handoff.ErrAborted.With("the router gave the prompt up before its commit (its request ended or decode revoked its reservation): %v", err)
}

// pushAfter prefills the whole prompt, then pushes its pages
// (Config.HandoffAfterPrefill). timing, when set, stamps the commit
// (handoff.SenderConfig.Timing).
func (w *PrefillWorker) pushAfter(ctx context.Context, r *handoff.PrefillRequest, q *seq, ch chan done, owner kv.Owner, cached int, timing func() *handoff.Timing) (*handoff.PrefillResult, error) {
	res := r.Reservation
	w.sched.add(q)
	d := <-ch
	if d.err != nil {
		return nil, w.abort(r.Handoff, d.err)
	}
	defer w.signalFreed()
	defer releasePages(w.pool, owner, d.table)
	start := time.Now()
	if err := w.push(ctx, owner, d.table, res, len(r.Tokens), d.first, d.firstLP, timing); err != nil {
		w.stats.failed.Add(1)
		return nil, w.abort(r.Handoff, err)
	}
	return w.committed(r, len(d.table), cached, d.first, start), nil
}

// pushStreaming prefills the prompt while its pages travel: after each
// chunk the pages it completed are sent (bounded batches, each
// acknowledged as applied), and once the last chunk is computed and the
// first token sampled the remaining pages go, then the commit, last, over
// the whole prompt (I5 as with pushAfter: decode reads nothing before it
// verifies the commit). The prompt's pages stay this worker's until the
// push returned, however the prompt ends (seq.holdPages): a write in
// flight reads them. A prefill that fails mid-prompt aborts the handoff
// through the push, which waits for its writes in flight before the drain
// acknowledgement, exactly as a failed transfer does (I6); a push that
// fails mid-prompt (decode aborted, the link broke) cancels the prompt.
func (w *PrefillWorker) pushStreaming(ctx context.Context, r *handoff.PrefillRequest, q *seq, ch chan done, owner kv.Owner, table []kv.PageRef, cached int, timing func() *handoff.Timing) (*handoff.PrefillResult, error) {
	res := r.Reservation
	tokens := len(r.Tokens)
	src := &poolSource{pool: w.pool, owner: owner, table: table, tokens: tokens}
	snd, err := handoff.NewStreamingSender(handoff.SenderConfig{MaxBatchBytes: w.cfg.BatchBytes, Timing: timing}, res, tokens, src)
	if err != nil {
		releasePages(w.pool, owner, table)
		w.signalFreed()
		return nil, w.abort(r.Handoff, err)
	}
	prog := handoff.NewProgress()
	// Prefix-cache hits are computed pages already.
	prog.Prefilled(cached)
	q.chunked = prog.Prefilled
	q.holdPages = true
	pushed := make(chan error, 1)
	landed := make(chan struct{}) // closed as the push returns (stepAside)
	go func() {
		err := handoff.PushStreaming(ctx, snd, w.decode, prog)
		close(landed)
		pushed <- err
	}()
	// The prompt's end tells the push itself, from the scheduler's
	// goroutine (Finish does not block, like chunked), so the last pages
	// and the commit go without first waking this goroutine: one thread
	// crossing less between the last chunk and the first token, which on
	// cores the flood's steps keep busy is a wait for a core each. This
	// goroutine's Finish below is then a no-op (a Progress ends once).
	emit := q.emit
	var first int32
	var firstLP *sample.Logprobs
	q.emit = func(o outcome) {
		switch {
		case !o.done && o.err == nil:
			first, firstLP = o.token, o.logprobs
		case o.done && o.err == nil && o.finish != "cancelled":
			prog.Finish(first, firstLP) // the pages are handed over (holdPages): complete
			// Another tenant's prompts wait for this thread: they wait
			// for this handoff (bounded), which then runs on it.
			w.stepAside(r.Tenant, landed)
		}
		emit(o)
	}
	w.sched.add(q)
	var d done
	var perr error
	gotPush := false
	select {
	case d = <-ch:
	case perr = <-pushed:
		// The push ended before this goroutine saw the prompt's end: it
		// failed (stop computing what nobody will read), or the prompt
		// ended well, the scheduler's Finish came first and the commit
		// is accepted already (the prompt's end is on its way in ch).
		gotPush = true
		if perr != nil {
			q.cancel.Store(true)
			w.sched.poke()
		}
		d = <-ch
	}
	if w.promptEnded != nil {
		w.promptEnded()
	}
	start := time.Now() // the push time counted is what the prefill did not hide
	if d.err != nil {
		prog.Fail(d.err)
	} else {
		prog.Finish(d.first, d.firstLP)
	}
	if !gotPush {
		perr = <-pushed
	}
	// Every write of the push has returned: the pages are ours again.
	releasePages(w.pool, owner, d.table)
	w.signalFreed()
	if d.err != nil && perr == nil {
		perr = d.err
	}
	if perr != nil {
		w.stats.failed.Add(1)
		return nil, w.abort(r.Handoff, perr)
	}
	w.stats.streamed.Add(int64(snd.Streamed()))
	return w.committed(r, len(d.table), cached, d.first, start), nil
}

// committed counts a committed handoff of pages pages, the push having
// started at start, and returns its result.
func (w *PrefillWorker) committed(r *handoff.PrefillRequest, pages, cached int, first int32, start time.Time) *handoff.PrefillResult {
	res := r.Reservation
	w.stats.committed.Add(1)
	skipped := res.PrefixBlocks()
	w.stats.sent.Add(int64(pages - skipped))
	w.stats.skipped.Add(int64(skipped))
	w.stats.bytes.Add(int64(pages-skipped) * int64(w.cfg.geometry().PageBytes()))
	w.stats.pushNanos.Add(int64(time.Since(start)))
	w.stats.tokens.Add(int64(len(r.Tokens)))
	return &handoff.PrefillResult{FirstToken: first, Tokens: len(r.Tokens), CachedTokens: cached}
}

// done is how a prompt's prefill ended: its first token and pages, or why not.
type done struct {
	first   int32
	firstLP *sample.Logprobs
	table   []kv.PageRef
	err     error
}

// prefillSampler draws the first token as draw offset of the request's
// random stream: a resumed request's last offset tokens are ones it
// generated before (they used the earlier draws and count for the
// penalties as generated, not prompt, tokens).
//
// A constrained request's grammar replays those tokens too (I14: from the
// tokens, never from a peer's claim of the state); one it refuses fails
// the handoff. ctx ends a wait for the same tenant's concurrent compile of
// the schema (grammar.Cache).
func prefillSampler(ctx context.Context, f *formats, tenant string, p sample.Params, tokens []int32, offset int) (*sample.Sampler, error) {
	s, err := f.sampler(ctx, tenant, p, tokens[:len(tokens)-offset])
	if err != nil {
		return nil, err
	}
	for _, t := range tokens[len(tokens)-offset:] {
		s.Observe(t)
	}
	s.Advance(offset)
	return s, s.Err()
}

// push drives the protocol's Sender: page writes in bounded batches, each
// acknowledged as applied, then the commit LAST (the Sender emits it only
// after every write was acknowledged). On failure Push has already aborted
// the handoff and acknowledged its drain (I6). timing, when set, stamps
// the commit (handoff.SenderConfig.Timing).
func (w *PrefillWorker) push(ctx context.Context, owner kv.Owner, table []kv.PageRef, res *handoff.Reservation, tokens int, first int32, firstLP *sample.Logprobs, timing func() *handoff.Timing) error {
	src := &poolSource{pool: w.pool, owner: owner, table: table, tokens: tokens}
	snd, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: w.cfg.BatchBytes, Timing: timing}, res, tokens, first, src)
	if err != nil {
		return err
	}
	snd.SetFirstLogprobs(firstLP)
	return handoff.Push(ctx, snd, w.decode)
}

// poolSource reads a prefilled sequence out of the prefill pool for the Sender.
type poolSource struct {
	pool   pagePool
	owner  kv.Owner
	table  []kv.PageRef
	tokens int
}

func (s *poolSource) Page(b int) ([]byte, int, error) {
	if b < 0 || b >= len(s.table) {
		return nil, 0, handoff.ErrCoverage.With("block %d of %d", b, len(s.table))
	}
	return s.pool.PageData(s.owner, s.table[b])
}

func (s *poolSource) Digest() ([]byte, error) {
	d, err := s.pool.Digest(s.owner, s.table, s.tokens)
	if err != nil {
		return nil, err
	}
	return d[:], nil
}

// abort tells decode the handoff is over (fail closed on its side too) and
// returns err as the prefill's outcome.
func (w *PrefillWorker) abort(id kv.ID, err error) error {
	actx, cancel := context.WithTimeout(context.Background(), w.cfg.Lease)
	defer cancel()
	_ = w.decode.Abort(actx, &handoff.Abort{Handoff: id, Reason: fmt.Sprint(err)})
	// Nothing of ours is in flight any more: every Write call returned.
	_ = w.decode.Drained(actx, id)
	var he *handoff.Error
	if errors.As(err, &he) {
		return err
	}
	return asEngineError(err, CodeHandoff, http.StatusBadGateway, "prefill")
}
