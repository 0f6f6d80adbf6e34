package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/kv"
	"sluice/internal/request"
	"sluice/internal/sample"
	"sluice/internal/sched"
)

// Colocated runs prefill and decode in one scheduler with no transfer:
// prompt chunks and decode tokens share forward steps. It is the reference
// path of the determinism oracle: for greedy decoding the disaggregated
// engine must produce exactly its tokens.
type Colocated struct {
	cfg   Config
	pool  pagePool
	sched *scheduler
	ctx   int
	adm   *admission
	cache *prefixCache  // nil: no prefix cache
	quit  chan struct{} // ends the lease ticker (expireLeases)
	// phases are the requests' first-token phases (phases.go).
	phases phases
}

var _ Engine = (*Colocated)(nil)

// NewColocated builds a colocated engine with its own KV pool. It refuses a
// configured context larger than the pool (I2).
func NewColocated(cfg Config) (*Colocated, error) {
	shared := cfg.SharedStepTokens
	cfg = cfg.withDefaults()
	if shared == 0 {
		cfg.SharedStepTokens = colocatedSharedStep(cfg)
	}
	if err := cfg.validate("colocated"); err != nil {
		return nil, err
	}
	pool, err := cfg.newPool()
	if err != nil {
		return nil, err
	}
	cfg.nestOnce = true
	c := &Colocated{
		cfg:   cfg,
		pool:  pool,
		sched: newScheduler(cfg, pool),
		ctx:   cfg.configuredContext(),
		adm:   newAdmission(cfg.queueConfig()),
		cache: newPrefixCache(cfg, pool),
		quit:  make(chan struct{}),
	}
	// A request paused for room retries on the queue's own pause, so an
	// expired lease needs no wake-up here; pages a KV-quota preemption
	// gave back wake it at once (they were taken for a waiting tenant).
	c.sched.freed = func() { c.adm.step(sched.Event{Kind: sched.EvFreed}) }
	go expireLeases(pool, cfg.Lease, c.quit, nil)
	return c, nil
}

// colocatedSharedStep is the colocated engine's default SharedStepTokens:
// half a chunk (the prefill worker's is one chunk). A paused step runs
// one nested step here (nestOnce), so a co-tenant's prompt that arrives
// after it waits for the rest of the paused step, a chunk of the flood
// through every layer: in the crowding bench ~1.5% of b's prompts waited
// ~11 ms for it (quiet), b's TTFT p99. More nested steps cost b's p50
// (colo99's 6947ced, reverted); half as many prompt tokens a step halve
// that wait and shorten the steps b's decode tokens ride in, for the
// flood's overhead of twice as many steps while another tenant is around
// (docs/benchmarks.md, short steps while shared).
func colocatedSharedStep(cfg Config) int {
	return max(min(cfg.ChunkTokens, cfg.StepTokens)/2, 1)
}

func (c *Colocated) stopLeases() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
}

// Pool is the engine's KV pool, for metrics and for tests that check it is
// drained.
func (c *Colocated) Pool() *kv.Pool { return rawPool(c.pool) }

// Info implements Engine.
func (c *Colocated) Info() Info {
	return Info{Model: c.cfg.Model.Name(), Context: c.ctx, Vocab: c.cfg.Model.Vocab()}
}

// Submit implements Engine. As in the disaggregated engine, the request's
// life-cycle machine decides every step (I1).
func (c *Colocated) Submit(ctx context.Context, r *Request) (Stream, error) {
	st := newStream(min(max(r.MaxTokens, 0), c.ctx))
	owner := kv.Owner{Tenant: r.Tenant, ID: newID()}
	arrived := time.Now()
	var admitted, started time.Time
	var startedHow string
	firstSeen := false
	var (
		lc      *lifecycle
		table   []kv.PageRef
		reserve bool
		q       *seq
		tk      *ticket
		keys    []kv.BlockKey // full prompt pages' cache keys (nil: no cache)
		cached  int           // leading prompt tokens read from the cache
		samp    *sample.Sampler
	)
	lc = newLifecycle(request.Colocated, func(a request.Action, e *Error, prompt, completion int) {
		switch a.Kind {
		case request.ActReserve:
			// Carried out below, outside the machine's lock: the request
			// waits in the queue for its turn and for room in the pool.
			reserve = true
		case request.ActPrefill:
			q = colocatedSeq(owner, table, r.Prompt, cached, r.MaxTokens, r.IgnoreEOS, samp)
			q.weight = r.Weight
			q.ended = tk.done
			q.started = func(how string) {
				started, startedHow = time.Now(), how
				c.phases.observe(r.Tenant, PhasePrefillWait, started.Sub(admitted))
				c.phases.observe(r.Tenant, PhasePrefillWait+"/"+how, started.Sub(admitted))
			}
			q.emit = func(o outcome) {
				if !firstSeen && !o.done && o.err == nil && !started.IsZero() {
					// The scheduler goroutine: started was set on it.
					firstSeen = true
					d := time.Since(started)
					c.phases.observe(r.Tenant, PhasePrefillCompute, d)
					c.phases.observe(r.Tenant, PhasePrefillCompute+"/"+startedHow, d)
					st.firstPhases([]PhaseTime{{PhaseQueue, admitted.Sub(arrived)}, {PhasePrefillWait, started.Sub(admitted)}, {PhasePrefillCompute, d}})
				}
				lc.scheduled(o, len(r.Prompt))
			}
			if keys != nil {
				// The public prefix's pages read from the cache count in
				// no tenant's share (quota.go).
				q.public = min(c.cache.publicCount(keys), cached/c.cfg.PageSize)
				// Runs when the prompt is computed, also after a preemption
				// rebuilt it (from the pages the cache then held).
				from := cached / c.cfg.PageSize
				q.prefilled = func(q *seq) { c.cache.insert(owner, q.table, keys, from) }
				// A rebuild after a preemption starts from the cached
				// prefix too (the same KV, batch invariance).
				q.relookup = func() []kv.PageRef {
					hits := c.cache.lookup(owner, keys, len(r.Prompt))
					from = max(from, len(hits))
					q.public = min(c.cache.publicCount(keys), len(hits))
					return hits
				}
			}
		case request.ActEmit:
			st.push(outcome{token: a.Token, logprobs: lc.lp})
		case request.ActStopDecode:
			q.cancel.Store(true)
			c.sched.poke()
		case request.ActEnd:
			o := terminal(a, e, prompt, completion)
			o.cached = cached
			st.push(o)
		}
	})
	if err := checkRequest(r, c.ctx, c.cfg.Model.Vocab(), c.cfg.Unsafe.NoAdmission); err != nil {
		e := err.(*Error)
		lc.reject(e)
		return nil, e
	}
	samp, err := c.cfg.formats.sampler(ctx, r.Tenant, r.Sampling, r.Prompt)
	if err != nil {
		e := err.(*Error)
		lc.queueEnd(e) // cancelled: the client left while its grammar compiled
		return nil, e
	}
	tk, e := c.adm.arrive(r.Tenant, r.Weight, requestCost(r))
	if e != nil {
		lc.reject(e)
		return nil, e
	}
	lc.step(request.Event{Kind: request.EvAdmit}, nil)
	if !reserve {
		tk.leave()
		return nil, errf(CodeInternal, http.StatusInternalServerError, nil, "admission did not ask for a reservation")
	}
	if e := tk.wait(ctx, func() (bool, *Error) {
		var e *Error
		table, cached, keys, e = c.reserve(owner, r)
		if e != nil && e.Code == CodeKVCapacity {
			n := kv.PagesFor(len(r.Prompt)+min(r.MaxTokens, c.cfg.PageSize), c.cfg.PageSize)
			if c.sched.overShare(owner.Tenant, n, c.adm.waitingTenants()) {
				// Over its KV share while others hold pages: only this
				// tenant waits; it does not contend (quota.go).
				tk.overShare = true
				return true, nil
			}
			// Waiting for pages: the tenant contends for the pool, which
			// caps the others at their KV shares (quota.go).
			c.sched.setWant(owner, r.Weight, n)
			c.sched.poke()
			return true, nil
		}
		return false, e
	}); e != nil {
		c.sched.dropWant(owner)
		lc.queueEnd(e)
		return nil, e
	}
	c.sched.dropWant(owner)
	admitted = time.Now()
	c.phases.observe(r.Tenant, PhaseQueue, admitted.Sub(arrived))
	st.cancelFn = func() { lc.step(request.Event{Kind: request.EvCancel}, nil) }
	lc.step(request.Event{Kind: request.EvReserved}, nil)
	lc.step(request.Event{Kind: request.EvPrefillStarted}, nil)
	c.sched.add(q)
	// Watched only now: a client already gone cancels at once (AfterFunc),
	// and that cancel must find the sequence (it stops it at its next
	// step), not end the request before its pages had an owner.
	st.watch(ctx, nil)
	return st, nil
}

// reserve takes the pages of the prompt plus a small headroom (at most a
// page of generated tokens): the rest grows page by page as tokens are
// produced, and a sequence that cannot grow preempts the latest arrival
// (see scheduler.growAll), so max_tokens is a bound, not a reservation.
// While preempted sequences wait for room, new requests wait too: room
// that comes back goes to them first (but not to those the KV quota holds
// back: their tenant is over its share while another waits). With the prefix cache, the table
// starts with the prompt's cached pages (cached tokens, read-only, shared)
// and the rest is reserved after them; keys are the prompt's full-page keys.
func (c *Colocated) reserve(owner kv.Owner, r *Request) (table []kv.PageRef, cached int, keys []kv.BlockKey, e *Error) {
	if c.sched.nResumable.Load() > 0 {
		return nil, 0, nil, errf(CodeKVCapacity, http.StatusServiceUnavailable, kv.ErrNoCapacity, "preempted requests wait for the KV cache first")
	}
	need := len(r.Prompt) + min(r.MaxTokens, c.cfg.PageSize)
	var hits []kv.PageRef
	if c.cache != nil {
		keys = c.cache.keys(r)
		hits = c.cache.lookup(owner, keys, len(r.Prompt))
	}
	if p := rawPool(c.pool); p != nil && !c.cfg.NoWatermark && !c.sched.withinShare(owner.Tenant, kv.PagesFor(need, c.cfg.PageSize)) {
		// The free-page watermark (see watermarkOK), over the new pages
		// only: the cached ones are shared, and now read (not available).
		// Available: what this tenant's reservation may use, not other
		// tenants' cached prefixes it may not evict (kv.Pool.AvailableFor).
		if n := kv.PagesFor(need, c.cfg.PageSize) - len(hits); !watermarkOK(p.AvailableFor(owner.Tenant, n), n, p.Pages(), int(c.sched.running.Load())) {
			if len(hits) > 0 {
				releasePages(c.pool, owner, hits)
			}
			return nil, 0, nil, errf(CodeKVCapacity, http.StatusServiceUnavailable, kv.ErrNoCapacity, "the KV cache is at its free-page watermark; the request waits")
		}
	}
	var err error
	if len(hits) == 0 {
		table, err = c.pool.Reserve(owner, kv.PagesFor(need, c.cfg.PageSize))
	} else {
		table, err = c.pool.Extend(owner, hits, kv.PagesFor(need, c.cfg.PageSize)-len(hits))
	}
	if err == nil {
		return table, len(hits) * c.cfg.PageSize, keys, nil
	}
	if len(hits) > 0 {
		releasePages(c.pool, owner, hits)
	}
	if errors.Is(err, kv.ErrNoCapacity) {
		return nil, 0, nil, errf(CodeKVCapacity, http.StatusServiceUnavailable, err, "the KV cache has no free pages for this request now; retry later or lower max_tokens")
	}
	return nil, 0, nil, asEngineError(err, CodeInternal, http.StatusInternalServerError, "reserving KV pages")
}

// SchedStats are the scheduler's counters (preemptions, recomputed tokens).
func (c *Colocated) SchedStats() SchedStats { return c.sched.stats() }

// Close implements Engine: refuses new requests, waits for in-flight ones
// until ctx ends, then stops the scheduler (failing what is left).
func (c *Colocated) Close(ctx context.Context) error {
	err := c.adm.close(ctx)
	c.sched.stop()
	c.stopLeases()
	if p := rawPool(c.pool); p != nil {
		_ = p.Close()
	}
	return err
}

// requestCost is what a request may hold in the pool, in tokens: the
// queue's fair share is counted in it.
func requestCost(r *Request) int { return len(r.Prompt) + r.MaxTokens }

// checkRequest validates a request and applies admission (I1/I2): what
// cannot fit the effective context is rejected before any page is reserved.
func checkRequest(r *Request, ctxLen, vocab int, noAdmission bool) error {
	if r == nil || len(r.Prompt) == 0 {
		return errf(CodeInvalid, http.StatusBadRequest, nil, "the prompt is empty")
	}
	if err := r.Sampling.Validate(vocab); err != nil {
		return errf(CodeInvalid, http.StatusBadRequest, err, "the sampling settings are invalid: %v", err)
	}
	if r.MaxTokens < 1 {
		return errf(CodeInvalid, http.StatusBadRequest, nil, "max_tokens must be at least 1 (got %d)", r.MaxTokens)
	}
	for i, t := range r.Prompt {
		if t < 0 || int(t) >= vocab {
			return errf(CodeInvalid, http.StatusBadRequest, nil, "prompt token %d at index %d is outside the vocabulary of %d", t, i, vocab)
		}
	}
	if noAdmission {
		return nil
	}
	// I2: prompt + max_tokens must fit the effective context, compared
	// without forming the sum (it wraps for a max_tokens near MaxInt).
	if !kv.TokensFit(len(r.Prompt), r.MaxTokens, ctxLen) {
		return errf(CodeContextLength, http.StatusBadRequest, nil,
			"this model's maximum context length is %d tokens, but the request needs %d (%d prompt + %d max_tokens); shorten the prompt or lower max_tokens",
			ctxLen, uint64(len(r.Prompt))+uint64(r.MaxTokens), len(r.Prompt), r.MaxTokens)
	}
	return nil
}

func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newID() kv.ID {
	var id kv.ID
	if _, err := rand.Read(id[:]); err != nil {
		panic("engine: crypto/rand failed: " + err.Error())
	}
	return id
}

// stream is an engine Stream fed by a scheduler sequence.
type stream struct {
	mu       sync.Mutex
	events   chan Event
	cancelFn func()
	onClose  func()
	once     sync.Once
	ended    atomic.Bool
	// sentFirst: the first token's event went out (Event.Sent); first
	// are the phases it carries (Event.Phases).
	sentFirst bool
	first     []PhaseTime
}

// firstPhases sets the engine's first-token phases of the request, for
// its first token's event (before that is pushed).
func (s *stream) firstPhases(ps []PhaseTime) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first = ps
}

func newStream(maxTokens int) *stream {
	// Room for every token plus the terminal event: push never blocks, so a
	// slow client never stalls the scheduler that serves everyone. Callers
	// cap maxTokens by the context before admission has looked at it, so
	// an absurd max_tokens cannot allocate an absurd buffer.
	return &stream{events: make(chan Event, maxTokens+2)}
}

func (s *stream) Events() <-chan Event { return s.events }

// watch cancels s when ctx ends (the client left) and stops watching once
// s has ended; onEnd, if set, runs when s ends. A ctx already done cancels
// at once, on another goroutine, which may end s before watch returns:
// onClose is only ever set under mu, which push holds when it runs it.
func (s *stream) watch(ctx context.Context, onEnd func()) {
	s.mu.Lock()
	s.onClose = onEnd
	s.mu.Unlock()
	stop := context.AfterFunc(ctx, s.Cancel)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		stop() // ended meanwhile: onEnd ran with it
		return
	}
	s.onClose = func() {
		stop()
		if onEnd != nil {
			onEnd()
		}
	}
}

func (s *stream) Cancel() {
	s.once.Do(func() {
		if s.cancelFn != nil {
			s.cancelFn()
		}
	})
}

// push converts a scheduler outcome into an event.
func (s *stream) push(o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended.Load() {
		return
	}
	if !o.done && o.err == nil {
		ev := Event{Token: o.token, Logprobs: o.logprobs}
		if !s.sentFirst {
			s.sentFirst, ev.Sent, ev.Phases = true, time.Now(), s.first
		}
		s.events <- ev
		return
	}
	ev := Event{Usage: Usage{PromptTokens: o.prompt, CompletionTokens: o.completion, CachedTokens: o.cached}}
	switch {
	case o.err != nil:
		ev.Err = o.err
	case o.finish == "cancelled":
		ev.Err = errf(CodeCancelled, StatusClientClosed, nil, "the request was cancelled")
	default:
		ev.Done, ev.Finish = true, o.finish
	}
	s.ended.Store(true)
	s.events <- ev
	close(s.events)
	if s.onClose != nil {
		s.onClose()
	}
}

// Pools lists the engine's KV pool by role name (see Local.Pools).
func (c *Colocated) Pools() map[string]*kv.Pool { return map[string]*kv.Pool{"colocated": c.Pool()} }

// PoolReporter is implemented by engines that hold KV pools in this
// process; the router's metrics read them through it.
type PoolReporter interface {
	Pools() map[string]*kv.Pool
}

var (
	_ PoolReporter = (*Colocated)(nil)
	_ PoolReporter = (*Local)(nil)
)
