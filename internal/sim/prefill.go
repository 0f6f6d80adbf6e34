package sim

import (
	"errors"
	"fmt"
	"math"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	admission "sluice/internal/sched"
)

// prefill is one incarnation of the prefill worker: the real model forward
// pass into a real kv.Pool, and the real handoff.Sender driving the
// transfer. The driver (message sending, one-sided page landings, the drain
// acknowledgement) is this simulator's own wrapper, written to
// handoff.Push's contract: Drained only once none of our writes is in flight.
type prefill struct {
	w    *world
	gen  int
	up   bool
	pool *kv.Pool
	// b is the engine's prefill batch (the scheduler PrefillWorker
	// computes prompts with): the prompts' chunks, the tenants' step
	// shares, the steps' pause points and their nested steps. A step
	// runs stepDur after it was asked for (kick) and is one call at its
	// end: the prompts that arrived meanwhile (pending, by arrival) join
	// at the pause point that falls after their arrival, the pause
	// points spread evenly over the step's time (two a layer).
	b         *engine.DrivenPrefill
	busy      bool
	stepAt    time.Duration
	stepDur   time.Duration
	pauses    int
	pending   []*pjob
	computing int // prompt tokens of the jobs in the batch (the step's time)
	// items are the batch's outputs of the step under way, handled
	// once it returned (the simulator's world is not re-entered from
	// inside a step).
	items []func()
	jobs  []*pjob
	// queue is the prompts' queue for prefill pages, as the engine's
	// prefill worker's (PrefillWorker.adm): the pure admission core with
	// its config (FIFO per tenant, DRR across tenants, head of line per
	// tenant, a prompt's cost its pages, the queue timeout), the wrapper
	// carrying out its actions (acts, drained by coreStep) as the
	// engine's admission edge does; calls are the calls in it by ticket.
	queue    *admission.Core
	calls    map[admission.ID]*pwait
	nextCall admission.ID
	acts     []admission.Action
	stepping bool
	// stoppedUntil: the worker is stopped (SIGSTOP) until then; a
	// one-sided copy it had under way completes only then (hangPrefill).
	stoppedUntil time.Duration
	// cachedBy is, for each page this simulator saw handed to the prefix
	// cache, the tenant whose request computed it: the oracle of I11 (a
	// hit must be the reader's own tenant's KV), kept outside the system.
	cachedBy map[uint32]string
}

// misbehaviour of a prefill peer for one handoff (the incident's cases).
type misbehaviour int

const (
	honest misbehaviour = iota
	mShort
	mWrongDigest
	mNoDigest
	mStaleData
	mStaleWriter
	mForeign
)

func (m misbehaviour) String() string {
	return [...]string{"honest", "short transfer", "wrong digest", "no digest", "stale data", "stale writer", "foreign pages"}[m]
}

type pjob struct {
	p       *prefill
	id      kv.ID
	req     *handoff.PrefillRequest
	owner   kv.Owner
	table   []kv.PageRef
	fed     int
	first   int32
	snd     *handoff.Sender
	reply   func(*handoff.PrefillResult, error)
	bad     misbehaviour
	slow    bool
	late    bool
	posted  int  // one-sided page writes posted and not yet landed
	drain   bool // waiting for posted writes to land before Drained
	over    bool
	lastB   []handoff.PageWrite
	stopped error // Fail requested from outside before the sender existed
	// The prefix cache: the chain keys of the prompt's full pages, and how
	// many leading pages came from the cache (not computed here).
	keys []kv.BlockKey
	hits int
	// sharesAs is the owner the hits' shares were taken as: the job's own,
	// or another tenant's under wrong_tenant_lookup (which then crossed,
	// the tenant whose pages it was handed). read: the hits were read.
	sharesAs kv.Owner
	crossed  string
	// The batch (engine.DrivenPrefill): arrived is when the prompt
	// reached the worker (it joins at the first pause point after that,
	// or the step boundary); cancel stops it there.
	arrived time.Duration
	cancel  func()
	// ticket is the job's place in the queue's core, running from its
	// reservation to its end (0: none).
	ticket admission.ID
	// computing: the batch holds the prompt (added, its end not seen):
	// its pages are the batch's until then, so an end of the push waits
	// for it (ending, with the outcome in endRes and endErr), as the
	// engine's pushStreaming waits for the prompt's end before it
	// releases the pages and answers.
	computing bool
	ending    bool
	endRes    *handoff.PrefillResult
	endErr    error
	// streaming: the Sender was made before the prompt computed
	// (handoff.NewStreamingSender) and sends each chunk's full pages.
	streaming bool
}

func (w *world) newPrefill(gen int) (*prefill, error) {
	p, err := kv.New(kv.Config{Geometry: w.geo, Pages: w.prePages, Order: kv.LIFO, Scrub: w.scrub, Lease: lease, Unsafe: w.cfg.Bugs.KV})
	if err != nil {
		return nil, err
	}
	pr := &prefill{w: w, gen: gen, up: true, pool: p, cachedBy: map[uint32]string{}, calls: map[admission.ID]*pwait{}}
	chunk := 1 + w.prng.IntN(chunkMax)
	// The pass's fixed cost is a quarter chunk (engine.Config.nestForward).
	rt := &nestRuntime{ModelRuntime: w.env.rt, p: pr, forward: max(chunk/4, 1)}
	pr.b, err = engine.NewDrivenPrefill(engine.Config{Model: rt, Context: w.ctx, PoolPages: w.prePages, PageSize: w.geo.PageSize,
		ChunkTokens: chunk, StepTokens: chunk * (1 + w.prng.IntN(3))}, engine.KVPool(p), pr.kick, pr.pause)
	if err != nil {
		p.Close()
		return nil, err
	}
	return pr, nil
}

// compute hands a job's prompt to the batch: now, or, while a step is
// under way, at that step's first pause point after now.
func (p *prefill) compute(j *pjob) {
	j.arrived = p.w.now
	if p.busy {
		p.pending = append(p.pending, j)
		return
	}
	p.add(j)
	p.flush()
}

// add joins j to the batch (from a pause point inside a step, or
// between steps).
func (p *prefill) add(j *pjob) {
	w := p.w
	if j.over || !p.up {
		return
	}
	if j.stopped != nil {
		j.fail(j.stopped)
		return
	}
	if p.busy && w.now != j.arrived {
		w.logf("prefill#%d %s joins at a pause point (%v into the step)", p.gen, short(j.id), p.pauseAt()-p.stepAt)
	}
	n := len(j.req.Tokens) - j.fed
	p.computing += n
	j.computing = true
	var chunked func(int)
	if j.streaming {
		chunked = func(fed int) { p.items = append(p.items, func() { j.chunked(fed) }) }
	}
	j.cancel = p.b.Add(j.owner, j.table, j.req.Tokens, j.fed, j.req.Sampling, j.req.SampleOffset,
		func(it engine.DrivenItem) {
			p.items = append(p.items, func() {
				if it.Done || it.Err != nil {
					p.computing -= n
				}
				j.item(it)
			})
		},
		func(how string) { j.started(how) }, chunked)
}

// flush handles the batch's items, in order.
func (p *prefill) flush() {
	for len(p.items) > 0 {
		f := p.items[0]
		p.items = p.items[1:]
		f()
	}
}

// kick is the batch's wake: a step runs stepDur later, its time the
// prompt tokens it may carry.
func (p *prefill) kick() {
	if p.busy || !p.up {
		return
	}
	w := p.w
	p.busy = true
	p.stepAt = w.now
	p.stepDur = tokenCost * timeDur(min(max(p.computing, 1), chunkMax*3)+w.prng.IntN(4))
	w.after(p.stepDur, "prefill step", p.step)
}

// step runs the batch's step (it ends now); the prompts that arrived
// after its last pause point join for the next one.
func (p *prefill) step() {
	if !p.up {
		return // crashed or stopped: its batch is gone with it
	}
	p.pauses = 0
	before := p.b.Stats().NestedSteps
	more := p.b.Step()
	if n := p.b.Stats().NestedSteps - before; n > 0 {
		p.w.res.NestedSteps += int(n)
		p.w.logf("prefill#%d step paused for %d nested steps", p.gen, n)
	}
	p.busy = false
	for len(p.pending) > 0 {
		j := p.pending[0]
		p.pending = p.pending[1:]
		p.add(j)
	}
	p.flush()
	if more {
		p.kick()
	}
}

// pauseAt is the virtual time of the step's current pause point.
func (p *prefill) pauseAt() time.Duration {
	return p.stepAt + p.stepDur*timeDur(p.pauses)/timeDur(2*p.w.env.model.Config().Layers)
}

// pause is a pause point of the step under way: the prompts that
// arrived by its time join now.
func (p *prefill) pause() {
	p.pauses++
	at := p.pauseAt()
	for len(p.pending) > 0 && p.pending[0].arrived <= at {
		j := p.pending[0]
		p.pending = p.pending[1:]
		p.add(j)
	}
}

// started: a step (or a nested step at a pause point) carries the
// prompt's first chunk, which reads its cached pages.
func (j *pjob) started(how string) {
	p, w := j.p, j.p.w
	if how == engine.StartNested || how == engine.StartAfterNested {
		w.logf("prefill#%d %s: its first chunk runs nested, at a pause point of another tenant's step", p.gen, short(j.id))
	}
	// Every cached page this job reads was computed for its own tenant
	// (I11), whatever handed it the page.
	for _, h := range j.table[:j.hits] {
		if by := p.cachedBy[h.Page]; by != j.req.Tenant {
			w.violate("%s of %s read cached page %d computed for %s (I11: the prefix cache crossed tenants on a shared read)", short(j.id), j.req.Tenant, h.Page, by)
		}
	}
}

// item is the batch's output for j: its first token, then the end.
func (j *pjob) item(it engine.DrivenItem) {
	if j.over || !j.p.up {
		return
	}
	end := it.Done || it.Err != nil
	if end {
		j.computing = false
	}
	if j.ending {
		if end {
			j.ending = false
			j.finish(j.endRes, j.endErr)
		}
		return
	}
	var err error
	switch {
	case it.Err != nil:
		err = it.Err
	case it.Done && it.Finish != "length":
		err = j.stopped
		if err == nil {
			err = handoff.ErrAborted.With("prefill ended %s", it.Finish)
		}
	case !it.Done:
		j.computed(it.Token)
		return
	default:
		return
	}
	if j.streaming {
		// The push aborts the handoff (its writes in flight first).
		j.snd.Fail(err)
		j.drive()
		return
	}
	j.fail(err)
}

func (p *prefill) alive() bool { return p.up }

func (p *prefill) crash() {
	p.up = false
	p.w.logf("prefill#%d CRASH (%d jobs)", p.gen, len(p.jobs))
}

// start handles a Prefill call; reply is called once with the outcome.
// A call that fits the reservation waits its turn in the queue, then for
// its pages (PrefillWorker.admit).
func (p *prefill) start(r *handoff.PrefillRequest, reply func(*handoff.PrefillResult, error)) {
	w := p.w
	for _, x := range p.calls {
		if x.r.Handoff == r.Handoff {
			reply(nil, handoff.ErrDuplicate)
			return
		}
	}
	if p.job(r.Handoff) != nil {
		reply(nil, handoff.ErrDuplicate)
		return
	}
	// The prefill worker's own checks before a call queues (I13, the
	// reservation, the prefix claim, context, sampler offset and settings).
	if abort, err := engine.CheckPrefill(p.limits(), r); err != nil {
		// The simulated router is honest: its calls carry the models'
		// fingerprints, a reservation of their handoff that fits the
		// prompt, a prompt within the context (I2) and an offset within
		// it. A refusal here is a check that refuses honest work.
		w.violate("prefill#%d refused an honest call for %s: %v", p.gen, short(r.Handoff), err)
		if !abort {
			reply(nil, err)
			return
		}
		j := &pjob{p: p, id: r.Handoff, req: r, reply: reply}
		j.fail(err)
		return
	}
	p.nextCall++
	x := &pwait{r: r, reply: reply, id: p.nextCall}
	p.calls[x.id] = x
	p.coreStep(admission.Event{Kind: admission.EvArrive, ID: x.id, Tenant: r.Tenant, Weight: 1,
		Cost: kv.PagesFor(len(r.Tokens), w.geo.PageSize) * w.geo.PageSize})
}

// limits are what the prefill worker checks a call against
// (engine.CheckPrefill): the worker's model, page size, context, vocabulary.
func (p *prefill) limits() engine.PrefillLimits {
	return engine.PrefillLimits{Model: engine.FingerprintOf(p.w.env.rt), PageSize: p.w.geo.PageSize, Context: p.w.ctx, Vocab: p.w.env.rt.Vocab()}
}

// withdraw is the router giving handoff id up (its call's context ends):
// a job stops, a call still queued leaves the queue at once and its
// handoff is aborted, as PrefillWorker.admit's wait does.
func (p *prefill) withdraw(id kv.ID, err error) {
	if j := p.job(id); j != nil {
		j.stop(err)
		return
	}
	for cid, x := range p.calls {
		if x.r.Handoff != id {
			continue
		}
		delete(p.calls, cid)
		p.coreStep(admission.Event{Kind: admission.EvCancel, ID: cid})
		p.w.logf("prefill#%d %s leaves the queue (the router gave it up)", p.gen, short(id))
		j := &pjob{p: p, id: id, req: x.r, reply: x.reply}
		j.fail(handoff.ErrAborted.With("the router gave the prompt up while it waited for prefill pages: %v", err))
		return
	}
}

// pwait is a Prefill call in the queue.
type pwait struct {
	r      *handoff.PrefillRequest
	reply  func(*handoff.PrefillResult, error)
	id     admission.ID
	waited bool // the pool had no room for it once
}

// coreStep feeds the queue's core and carries out its actions, in order
// (an action's outcome, fed back, queues the core's next ones).
func (p *prefill) coreStep(ev admission.Event) {
	w := p.w
	if !p.up {
		return // crashed or stopped: its queue is gone with it
	}
	if p.queue == nil {
		// As NewPrefillWorker configures it: pages bound the prompts in
		// flight, not a count; Quantum is the largest prompt's pages;
		// the run's queue timeout (set after the first incarnation).
		p.queue = admission.New(admission.Config{QueueTimeout: w.queueTimeout, MaxRunning: math.MaxInt32, Quantum: kv.PagesFor(w.ctx, w.geo.PageSize) * w.geo.PageSize})
	}
	ev.Now = w.clock()
	p.acts = append(p.acts, p.queue.Step(ev)...)
	if p.stepping {
		return
	}
	p.stepping = true
	defer func() { p.stepping = false }()
	for len(p.acts) > 0 && p.up {
		a := p.acts[0]
		p.acts = p.acts[1:]
		x := p.calls[a.ID]
		switch a.Kind {
		case admission.ActAdmit:
			switch p.startAt(x) {
			case noRoom:
				p.acts = append(p.acts, p.queue.Step(admission.Event{Kind: admission.EvNoRoom, ID: x.id, Now: w.clock()})...)
			case started: // reported EvReserved itself, before the job could end
				delete(p.calls, x.id)
			case failed:
				delete(p.calls, x.id)
				p.acts = append(p.acts, p.queue.Step(admission.Event{Kind: admission.EvDropped, ID: x.id, Now: w.clock()})...)
			}
		case admission.ActReject:
			delete(p.calls, x.id)
			j := &pjob{p: p, id: x.r.Handoff, req: x.r, reply: x.reply}
			if a.Reason == admission.ReasonTimeout {
				w.count(FaultBurst)
				j.fail(handoff.ErrRefused.With("prefill pool: no room for %d tokens within the queue timeout", len(x.r.Tokens)))
			} else {
				j.fail(handoff.ErrRefused.With("prefill queue: %s", a.Reason))
			}
		}
	}
}

// An admission's outcome.
const (
	started = iota
	noRoom
	failed
)

// startAt is the admitted call's try for pages: the prefix cache's hits
// and a reservation for the rest, then the job.
func (p *prefill) startAt(x *pwait) int {
	w := p.w
	r := x.r
	j := &pjob{p: p, id: r.Handoff, req: r, owner: kv.Owner{Tenant: r.Tenant, ID: r.Handoff}, reply: x.reply, ticket: x.id}
	// The prefix cache, as the engine's prefill worker uses it: the salt
	// is the authenticated tenant's; the cached leading full pages are not
	// computed again (the last prompt token always is); the pool evicts
	// idle entries when a reservation needs their pages.
	var hits []kv.PageRef
	j.sharesAs = j.owner
	if w.cacheOn {
		ps := w.geo.PageSize
		j.keys = w.prefillKeys(r.Tenant, r.Tokens)
		w.checkKeys(fmt.Sprintf("prefill#%d %s", p.gen, short(r.Handoff)), r.Tenant, j.keys)
		if n := min(len(j.keys), (len(r.Tokens)-1)/ps); n > 0 {
			if w.cchance(w.pl.p[FaultWrongTenant]) {
				hits = p.wrongTenantLookup(j, n)
			}
			if j.crossed == "" {
				hits, _ = p.pool.Lookup(j.owner, j.keys[:n])
			}
		}
		for _, h := range hits {
			if by := p.cachedBy[h.Page]; by != r.Tenant && j.crossed == "" {
				w.violate("%s of %s read cached page %d computed for %s (I11: the prefix cache crossed tenants)", short(r.Handoff), r.Tenant, h.Page, by)
			}
		}
		if len(hits) > 0 {
			w.res.CacheHits += len(hits)
			w.logf("prefill#%d %s: %d prompt pages from the prefix cache", p.gen, short(j.id), len(hits))
		}
	}
	need := kv.PagesFor(len(r.Tokens), w.geo.PageSize)
	var table []kv.PageRef
	var err error
	if len(hits) == 0 {
		table, err = p.pool.Reserve(j.owner, need)
	} else {
		table, err = p.pool.Extend(j.owner, hits, need-len(hits))
	}
	if err != nil {
		if len(hits) > 0 {
			_ = p.pool.Release(j.sharesAs, hits)
		}
		var v *kv.Violation
		if j.crossed != "" && errors.As(err, &v) {
			// The pool refused another tenant's cached page (I11's
			// read-time check): the request fails, the page is
			// quarantined, nothing was read.
			w.logf("prefill#%d %s: the pool refused %s's cached pages: %v", p.gen, short(j.id), j.crossed, err)
			j.ticket = 0
			j.fail(err)
			return failed
		}
		if errors.Is(err, kv.ErrNoCapacity) {
			if !x.waited {
				x.waited = true
				w.res.PrefillWaits++
				w.logf("prefill#%d %s waits for %d pages", p.gen, short(j.id), need)
			}
			return noRoom
		}
		w.count(FaultBurst)
		j.ticket = 0
		j.fail(handoff.ErrRefused.With("prefill pool: %v", err))
		return failed
	}
	// Reserved: the core counts it running until the job ends (finish).
	p.acts = append(p.acts, p.queue.Step(admission.Event{Kind: admission.EvReserved, ID: x.id, Now: w.clock()})...)
	j.table = table
	j.hits = len(hits)
	j.fed = len(hits) * w.geo.PageSize
	for f := mShort; f <= mForeign; f++ {
		if w.chance(w.pl.p[FaultShort+Fault(f-mShort)]) {
			j.bad = f
			w.count(FaultShort + Fault(f-mShort))
			break
		}
	}
	// Late one-sided writes are a property of a transfer (a congested
	// path), so fast victims can commit before a slow writer's stale
	// bytes land.
	j.late = w.pl.oneSided && w.chance(w.pl.p[FaultLateWrite])
	j.slow = w.chance(w.pl.p[FaultSlowTransfer])
	if j.slow {
		w.count(FaultSlowTransfer)
	}
	p.jobs = append(p.jobs, j)
	w.logf("prefill#%d %s: %d tokens into %d pages (%v, slow %v, late %v)", p.gen, short(j.id), len(r.Tokens), len(table), j.bad, j.slow, j.late)
	if !w.streaming || j.bad == mShort || j.stream() {
		p.compute(j)
	}
	return started
}

// stream starts the streaming handoff, as the engine's pushStreaming
// does before the prompt's first chunk: the Sender sends each block once
// the chunks computed it (the prefix cache's blocks at once), the commit
// only after the last chunk and the first token. It reports whether the
// job goes on.
func (j *pjob) stream() bool {
	p, w := j.p, j.p.w
	src := &handoff.PoolSource{Pool: p.pool, Owner: j.owner, Pages: j.table, Tokens: len(j.req.Tokens)}
	snd, err := handoff.NewStreamingSender(handoff.SenderConfig{MaxBatchBytes: w.batchBytes, Window: w.window}, j.req.Reservation, len(j.req.Tokens), src)
	if err != nil {
		j.fail(err)
		return false
	}
	if w.pl.oneSided {
		if err := w.wr.Register(j.req.Reservation); err != nil {
			w.logf("prefill#%d %s: the one-sided writer refuses the reservation: %v", p.gen, short(j.id), err)
			j.fail(err)
			return false
		}
	}
	j.snd, j.streaming = snd, true
	snd.Prefilled(j.fed)
	j.drive()
	return !j.over && !j.ending
}

// chunked: the batch computed the prompt's first fed positions for good.
func (j *pjob) chunked(fed int) {
	if j.over || j.ending || !j.p.up {
		return
	}
	j.snd.Prefilled(fed)
	j.drive()
}

// computed continues a job whose prompt the batch computed: its first
// token was drawn; the prompt's new full pages go to the prefix cache,
// then the transfer starts.
func (j *pjob) computed(first int32) {
	p, w := j.p, j.p.w
	j.fed = len(j.req.Tokens)
	j.insert()
	j.first = first
	if j.streaming {
		j.snd.Finish(first, nil)
		j.drive()
		return
	}
	src := &handoff.PoolSource{Pool: p.pool, Owner: j.owner, Pages: j.table, Tokens: j.fed}
	snd, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: w.batchBytes, Window: w.window}, j.req.Reservation, j.fed, j.first, src)
	if err != nil {
		j.fail(err)
		return
	}
	j.snd = snd
	if w.pl.oneSided {
		// The writer places bytes only inside this reservation (I3),
		// in the pool incarnation that made it (I6).
		if err := w.wr.Register(j.req.Reservation); err != nil {
			w.logf("prefill#%d %s: the one-sided writer refuses the reservation: %v", p.gen, short(j.id), err)
			j.fail(err)
			return
		}
	}
	if j.bad == mShort {
		j.short()
		return
	}
	j.drive()
}

// prefillKeys are the chain keys of tokens' full pages for tenant, as the
// engine's prefill worker keys them (Bugs.CacheNoSalt: one salt for all).
func (w *world) prefillKeys(tenant string, tokens []int32) []kv.BlockKey {
	if w.cfg.Bugs.CacheNoSalt {
		tenant = "" // the bug: one salt for every tenant
	}
	return kv.PrefixKeys(w.cacheFP, kv.TenantSalt(w.cacheSecret, tenant), w.geo.PageSize, tokens)
}

// wrongTenantLookup is the wrong_tenant_lookup fault: a lookup/index bug
// that looks the prompt up under another tenant (as if the tenant came
// from the wrong request) and hands the shares to j, so the pool's check of
// the page's tenant against the reader's, when j holds and reads them, is
// the only layer left. It returns the first other tenant's hits (none: no
// other tenant caches this prefix, the fault did not fire).
func (p *prefill) wrongTenantLookup(j *pjob, n int) []kv.PageRef {
	w := p.w
	for i := range numTenants {
		t := tenantName(i)
		if t == j.req.Tenant {
			continue
		}
		as := kv.Owner{Tenant: t, ID: j.owner.ID}
		hits, err := p.pool.Lookup(as, w.prefillKeys(t, j.req.Tokens)[:n])
		if err != nil || len(hits) == 0 {
			continue
		}
		w.count(FaultWrongTenant)
		w.logf("prefill#%d %s of %s: cache lookup made as %s (wrong_tenant_lookup): %s", p.gen, short(j.id), j.req.Tenant, t, pagesText(hits))
		j.sharesAs, j.crossed = as, t
		return hits
	}
	return nil
}

// insert seals the prompt's full pages computed here and hands them to
// the prefix cache (failures leave them private).
func (j *pjob) insert() {
	p := j.p
	to := min(len(j.keys), len(j.table))
	if to <= j.hits {
		return
	}
	if err := p.pool.Seal(j.owner, j.table[j.hits:to]); err != nil {
		return
	}
	for i := j.hits; i < to; i++ {
		if ok, err := p.pool.Insert(j.owner, j.table[i], j.keys[i]); err == nil && ok {
			p.cachedBy[j.table[i].Page] = j.req.Tenant
		}
	}
}

// Fail gives the handoff up from the prefill side (shutdown, abort).
func (j *pjob) stop(err error) {
	if j.over {
		return
	}
	if j.snd == nil {
		// Computing (or waiting to join the batch): the prompt stops at
		// the batch's next step boundary, as the engine's prefill worker
		// stops one the router gave up.
		j.stopped = err
		if j.cancel != nil {
			j.cancel()
		}
		return
	}
	j.snd.Fail(err)
	j.drive()
}

// drive runs the Sender until it waits.
func (j *pjob) drive() {
	p := j.p
	for !j.over && p.up {
		a := j.snd.Next()
		switch a.Kind {
		case handoff.ActWrite:
			j.sendBatch(a.Seq, a.Batch)
		case handoff.ActWait:
			return
		case handoff.ActCommit:
			c := a.Commit
			switch j.bad {
			case mWrongDigest:
				c.Digest[0] ^= 0x5a
			case mNoDigest:
				c.Digest = nil
			}
			j.commit(c)
		case handoff.ActAbort:
			j.abortDecode(a.Abort)
		case handoff.ActDone:
			j.finish(&handoff.PrefillResult{FirstToken: j.first, Tokens: j.fed}, nil)
			return
		case handoff.ActFailed:
			err := a.Err
			if err == nil {
				err = errors.New("handoff failed")
			}
			j.finish(nil, err)
			return
		}
	}
}

func (j *pjob) sendBatch(seq int, ws []handoff.PageWrite) {
	w := j.p.w
	// A transport copies at send time: the Sender's page images alias the
	// prefill pool, whose pages may be reused before delivery.
	for i := range ws {
		ws[i].Data = append([]byte(nil), ws[i].Data...)
	}
	switch j.bad {
	case mStaleData:
		// A page carries bytes that are not this sequence's (a stale image),
		// with a checksum that matches them: only the digest can tell.
		pw := &ws[w.pick(len(ws))]
		for k := range pw.Data {
			pw.Data[k] ^= 0x11
		}
		pw.Checksum = handoff.Checksum(pw.Data)
	case mForeign:
		// Names a page reserved for another handoff (with its generation).
		if other := w.router.otherPages(j.id); len(other) > 0 {
			pw := &ws[w.pick(len(ws))]
			pw.Page = other[w.pick(len(other))]
		}
	}
	j.lastB = ws
	if w.pl.oneSided {
		j.postOneSided(seq, ws)
		return
	}
	j.call(seq, ws)
}

// call sends a Write and reports its acknowledgement to the Sender.
func (j *pjob) call(seq int, ws []handoff.PageWrite) {
	p, w := j.p, j.p.w
	d := w.dec
	extra := timeDur(0)
	if j.slow {
		extra = w.between(lease/4, lease)
	}
	w.rpcAfter(extra, fmt.Sprintf("prefill#%d->decode#%d write %s seq %d (%d pages)", p.gen, d.gen, short(j.id), seq, len(ws)),
		p.alive, d.alive, rpcTimeout+extra,
		func() func() {
			err := d.write(ws)
			return func() { j.acked(seq, err) }
		},
		func() { j.acked(seq, handoff.ErrTransport.With("write timed out")) })
}

func (j *pjob) acked(seq int, err error) {
	if j.over {
		j.maybeDrained()
		return
	}
	j.snd.Ack(seq, err)
	j.drive()
	j.maybeDrained()
}

// postOneSided places the page bytes into the decode pool's shared memory
// as posted one-sided writes (RDMA-like): each lands after an in-flight
// time, and the notice goes once all of the batch has landed. A posted
// write cannot be recalled: it lands even if the handoff is aborted
// meanwhile or this worker crashes (the case I6 exists for).
func (j *pjob) postOneSided(seq int, ws []handoff.PageWrite) {
	p, w := j.p, j.p.w
	d := w.dec
	lands, err := w.wr.Post(ws)
	if err != nil {
		// Refused before any byte was placed (a write outside the
		// reservation, I3): the batch fails and the Sender aborts.
		w.res.Fenced++
		w.logf("prefill#%d %s seq %d: the one-sided writer refuses: %v", p.gen, short(j.id), seq, err)
		w.after(0, "write refused", func() { j.acked(seq, err) })
		return
	}
	notices := make([]handoff.PageWrite, len(ws))
	left := len(ws)
	for i := range ws {
		n := ws[i]
		n.Data, n.Placed = nil, true
		notices[i] = n
		fly := w.between(10*timeDur(1000), maxInFlight/10)
		if j.late {
			w.count(FaultLateWrite)
			fly = w.between(4*msec, maxInFlight)
		}
		land, page := lands[i], ws[i].Page.Page
		j.posted++
		var landing func()
		landing = func() {
			if p.stoppedUntil > w.now {
				// The writer is stopped (SIGSTOP) in the middle of its
				// copy: the copy completes when it is continued.
				w.after(p.stoppedUntil-w.now, "one-sided land (the stopped writer continued)", landing)
				return
			}
			if j.over || j.drain {
				w.res.LateLandings++
				w.logf("one-sided write %s page %d lands in decode#%d memory AFTER its handoff ended%s", short(j.id), page, d.gen, w.router.holder(j.id, page))
			} else {
				w.logf("one-sided write %s page %d lands in decode#%d memory", short(j.id), page, d.gen)
			}
			if d != w.dec || !d.up {
				w.res.OldIncarnationLandings++
				w.logf("one-sided write %s page %d lands in crashed decode#%d's file (its successor's pool is a new file)", short(j.id), page, d.gen)
			}
			if land != nil {
				land()
			}
			j.posted--
			left--
			if left == 0 && p.up && !j.over {
				j.call(seq, notices)
			}
			j.maybeDrained()
		}
		w.after(fly, "one-sided land", landing)
	}
	if w.hangArmed && p == w.pre {
		w.stopPrefill() // stopped with this batch's copies under way
	}
}

// short is the incident's misbehaving peer: one page, then a commit that
// claims the whole prompt with the correct digest of it.
func (j *pjob) short() {
	w := j.p.w
	data, slots, err := j.p.pool.PageData(j.owner, j.table[0])
	if err != nil {
		j.finish(nil, err)
		return
	}
	pw := handoff.PageWrite{Handoff: j.id, Block: 0, Page: j.req.Reservation.Pages[0], Slots: slots,
		Data: append([]byte(nil), data...), Checksum: handoff.Checksum(data)}
	d := w.dec
	w.rpc(fmt.Sprintf("prefill#%d->decode#%d short write %s", j.p.gen, d.gen, short(j.id)), j.p.alive, d.alive, rpcTimeout,
		func() func() {
			err := d.write([]handoff.PageWrite{pw})
			return func() {
				if j.over {
					return
				}
				dg, derr := j.p.pool.Digest(j.owner, j.table, j.fed)
				if err != nil || derr != nil {
					j.finish(nil, errors.Join(err, derr))
					return
				}
				j.commit(&handoff.Commit{Handoff: j.id, Tokens: j.fed, Digest: dg[:], FirstToken: j.first})
			}
		},
		func() { j.finish(nil, handoff.ErrTransport.With("short write timed out")) })
}

func (j *pjob) commit(c *handoff.Commit) {
	p, w := j.p, j.p.w
	d := w.dec
	j.endWriter()
	w.rpc(fmt.Sprintf("prefill#%d->decode#%d commit %s", p.gen, d.gen, short(j.id)), p.alive, d.alive, rpcTimeout,
		func() func() {
			err := d.commit(c)
			return func() { j.committed(err) }
		},
		func() { j.committed(handoff.ErrTransport.With("commit timed out")) })
}

func (j *pjob) committed(err error) {
	if j.over {
		return
	}
	if j.bad == mShort {
		if err != nil {
			j.abortDecode(&handoff.Abort{Handoff: j.id, Reason: err.Error()})
			j.finish(nil, err)
		} else {
			j.finish(&handoff.PrefillResult{FirstToken: j.first, Tokens: j.fed}, nil)
		}
		return
	}
	j.snd.Committed(err)
	j.drive()
}

// abortDecode tells decode the handoff is over and, once none of our
// writes can still land, acknowledges the drain (I6).
func (j *pjob) abortDecode(a *handoff.Abort) {
	p, w := j.p, j.p.w
	d := w.dec
	j.endWriter()
	w.send(fmt.Sprintf("prefill#%d->decode#%d abort %s", p.gen, d.gen, short(j.id)), d.alive, func() { d.abort(a) })
	j.drain = true
	if j.bad == mStaleWriter && j.lastB != nil {
		// A stale writer: the last batch again, much later, after the pages
		// were surely released and reused.
		ws := j.lastB
		w.after(w.between(lease/2, 2*lease), "stale writer", func() {
			w.send(fmt.Sprintf("stale writer %s -> decode#%d", short(j.id), d.gen), d.alive, func() { _ = d.write(ws) })
		})
	}
	j.maybeDrained()
}

// endWriter fences the handoff on the one-sided writer, as shm.Writer's
// Commit and Abort do: it places no further byte for it.
func (j *pjob) endWriter() {
	if wr := j.p.w.wr; wr != nil {
		wr.End(j.id)
	}
}

func (j *pjob) maybeDrained() {
	p, w := j.p, j.p.w
	if !j.drain || (j.posted > 0 && !w.cfg.Bugs.EarlyDrain) || !p.up {
		return
	}
	j.drain = false
	d := w.dec
	id := j.id
	w.send(fmt.Sprintf("prefill#%d->decode#%d drained %s", p.gen, d.gen, short(id)), d.alive, func() { d.drained(id) })
}

func (j *pjob) fail(err error) {
	if j.table == nil {
		j.over = true
		j.reply(nil, err)
		j.abortDecode(&handoff.Abort{Handoff: j.id, Reason: err.Error()})
		return
	}
	j.abortDecode(&handoff.Abort{Handoff: j.id, Reason: err.Error()})
	j.finish(nil, err)
}

// finish answers the router and releases the prefill pages.
func (j *pjob) finish(res *handoff.PrefillResult, err error) {
	if j.over || j.ending {
		return
	}
	if j.computing {
		// The push ended before the prompt did (it failed: it commits
		// only after the last chunk): stop computing what nobody will
		// read; the pages go back and the router is answered once the
		// batch ended the prompt (item).
		j.ending, j.endRes, j.endErr = true, res, err
		j.p.w.logf("prefill#%d %s: the push ended before the prompt (%v): the prompt stops at the next step boundary", j.p.gen, short(j.id), err)
		if j.cancel != nil {
			j.cancel()
		}
		return
	}
	j.over = true
	if err != nil && j.bad == honest && j.table != nil {
		w := j.p.w
		code := codeOf(err)
		if w.res.HonestFails == nil {
			w.res.HonestFails = map[string]int{}
		}
		w.res.HonestFails[code]++
		// An honest push in a run with no misbehaving peer is refused
		// for its counts or coverage only if prefill or decode mis-steps
		// (a block sent before the chunks filled it, a miscounted
		// commit): a liveness bug, not a leak, but one no fault excuses.
		if (code == string(handoff.ErrCountMismatch.Code) || code == string(handoff.ErrCoverage.Code)) && !w.pl.misbehaving() {
			w.violate("%s: an honest prefill's handoff failed with %s in a run without misbehaving peers: %v", short(j.id), code, err)
		}
	}
	if res != nil && j.streaming {
		j.p.w.res.StreamedPages += j.snd.Streamed()
	}
	p := j.p
	j.endWriter()
	if j.table != nil {
		_ = p.pool.Release(j.owner, j.table)
		j.table = nil
	}
	for i, o := range p.jobs {
		if o == j {
			p.jobs = append(p.jobs[:i], p.jobs[i+1:]...)
			break
		}
	}
	j.reply(res, err)
	j.maybeDrained()
	if t := j.ticket; t != 0 {
		// Its pages are back: the queue's next prompt may take them.
		j.ticket = 0
		p.coreStep(admission.Event{Kind: admission.EvDone, ID: t})
	}
}

func (p *prefill) job(id kv.ID) *pjob {
	for _, j := range p.jobs {
		if j.id == id {
			return j
		}
	}
	return nil
}
