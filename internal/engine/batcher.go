package engine

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/handoff"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
	"sluice/internal/sched"
)

// outcome is one item a sequence emits: a token, or the terminal item.
type outcome struct {
	token      int32
	logprobs   *sample.Logprobs // token's, when asked
	done       bool
	finish     string // "stop", "length", "cancelled"
	err        *Error
	prompt     int
	cached     int
	completion int
	recomputed int
}

// seq is one sequence inside the continuous-batching scheduler. Only the
// scheduler goroutine touches its fields after join, except cancel.
type seq struct {
	owner kv.Owner
	table []kv.PageRef
	view  model.KV

	prompt  []int32 // prompt tokens still to be run here (colocated prefill)
	fed     int     // positions whose K/V is written: the next position
	next    int32   // last emitted token, fed at the next step
	decoded bool    // next is valid: the sequence is in its decode phase

	promptTokens int // for usage (I9)
	cachedTokens int // of those, read from the prefix cache
	// relookup, when set (a colocated sequence with the prefix cache),
	// takes the cached leading pages of its prompt (shares held) for its
	// rebuild after a preemption; it also sets public for them.
	relookup func() []kv.PageRef
	// public is the leading pages of table read from the public prefix
	// scope (--shared-prefix-file): held under the public scope's own
	// budget, counted in no tenant's KV share (quota.go).
	public int
	// prefilled, when set, runs once when the prompt's last token has been
	// computed (the prefix cache inserts the new full pages).
	prefilled func(q *seq)
	// started, when set, runs once when a step first carries a chunk of
	// the prompt, with how it started (a StartHow: the first-token
	// phases, phases.go). It must not block.
	started func(how string)
	// waited is why the prompt's first chunk did not run at the last
	// pause point that saw it (a StartHow; "": none saw it).
	waited string
	// joinedStep is the batch's step count when q joined: a prompt that
	// joined before a step that did not carry it waited for the plan.
	joinedStep int64
	generated  int
	maxTokens  int
	ignoreEOS  bool
	samp       *sample.Sampler

	// emit must not block: the scheduler serves every sequence from one
	// goroutine, and a slow client must not stall the others.
	emit func(outcome)
	// ended runs once, after the page release and before the terminal item.
	ended func()
	// handover, when set, takes the pages of a sequence that ended well
	// instead of releasing them: the prefill worker transfers them next.
	handover func(table []kv.PageRef)
	// holdPages makes handover take the pages however the sequence ends:
	// a streaming handoff may still be reading them (its writes in flight
	// alias the pool), so its owner releases them once the push returned.
	holdPages bool
	// chunked, when set, runs after each prompt chunk but the last, with
	// the positions computed so far: they are never written again (a
	// streaming handoff sends the pages they fill). It must not block.
	chunked func(fed int)
	// first is a token generated elsewhere (the prefill worker's first
	// token, carried by the commit); it is emitted when the sequence joins,
	// unless firstSent: its owner sent it already (the decode worker, as
	// the commit is accepted), and joining only counts it.
	first     int32
	firstLP   *sample.Logprobs
	hasFirst  bool
	firstSent bool
	// startErr fails the sequence when it joins, before its first token
	// is emitted: the decode worker could not build its sampler (the
	// output format is refused, or its grammar refuses the tokens it was
	// told were generated, I14).
	startErr error

	// all is every token of the sequence so far (prompt, then each
	// generated token), kept by sequences that may be preempted: their KV
	// is rebuilt from it. nil: not preemptible (the decode worker's
	// sequences, whose prompt lives on the prefill worker, and prompts
	// the prefill worker hands over).
	all []int32
	// arrival orders sequences for the victim policy (set by add).
	arrival uint64
	// weight is the tenant's weight (the key file's weight=) for the KV
	// quota (quota.go); 0 means 1.
	weight int
	// recompute: the prompt being run rebuilds the KV of a preempted
	// sequence; when it is done the sequence continues with next, which
	// was already emitted, instead of sampling again.
	recompute bool
	// recomputed counts positions whose KV was thrown away by preemption
	// and computed again (reported apart from usage, I9).
	recomputed int
	// parked: preempted, waiting in the scheduler's preempted list.
	parked bool
	// evict: preemptible, but its KV is rebuilt elsewhere: a preemption
	// ends it with finish "preempted" (the decode worker's sequences).
	evict bool
	// onPreempt, when set (a driven batch's driver), learns the phase a
	// preemption struck: "prompt", "decode" or "rebuild".
	onPreempt func(phase string)

	// held is the logits of a constrained sequence whose token is not
	// drawn yet: its grammar's mask did not fit in a step's grammar
	// budget (stepBudget). It sits out the forward steps until the
	// token is drawn from held, with the mask work done in later steps'
	// budgets (batch.grammarWork).
	held []float32
	// heldBuf is held's memory, kept from one deferred token of q to
	// the next: a request deferred at many tokens copies its logits (a
	// float per vocabulary id, ~600 KB at 151k) into one buffer instead
	// of a new one each time. It is q's alone (a seq serves one request
	// and is never reused), so no request reads another's logits.
	heldBuf []float32
	// queued: q is in batch.deferred.
	queued bool

	cancel atomic.Bool
	// stop, when set, ends like cancel once closed: a prefill worker's
	// prompt the router gave up (its call's ctx.Done). Read at the step
	// boundary itself, so the prompt runs no step after the boundary
	// that follows the router's word reaching the worker.
	stop <-chan struct{}
	// aborted turns a cancel into a failure: the handoff was aborted by a
	// peer after decoding started.
	aborted atomic.Bool
}

// promptSeq is a sequence for a prompt of tokens, the first cached of
// them read from the prefix cache into table: the batch runs the rest.
// The colocated and the prefill worker's sequences (colocatedSeq,
// prefillSeq) add what differs between them.
func promptSeq(owner kv.Owner, table []kv.PageRef, tokens []int32, cached int, samp *sample.Sampler) *seq {
	return &seq{
		owner:        owner,
		table:        table,
		prompt:       tokens[cached:],
		fed:          cached,
		promptTokens: len(tokens),
		cachedTokens: cached,
		samp:         samp,
	}
}

// cancelled reports a cancel recorded for q (cancel, or stop closed).
func (q *seq) cancelled() bool {
	if q.cancel.Load() {
		return true
	}
	select {
	case <-q.stop:
		return true
	default:
		return false
	}
}

// batch is the continuous-batching core shared by the decode worker, the
// prefill worker and the colocated engine: every decision (cancels between
// steps, growth page by page, the preemption victim, resume order) and
// every step, each of which runs ONE Forward over all active sequences
// (prefill chunks and single decode tokens mixed). It is synchronous: no
// goroutine, no lock, no clock; sequences join and leave between calls to
// cycle. The scheduler below runs it on a goroutine for the servers; a
// deterministic driver (internal/sim, through a driven DecodeWorker and
// DrivenBatch) calls it directly, so both run this same code.
type batch struct {
	cfg  Config
	pool pagePool
	fwd  Forwarder
	// burst runs the steps taken while cfg.Idle reports the neighbour
	// role idle (cfg.BurstThreads); nil without.
	burst Forwarder

	active []*seq
	// advanceOrder is run's scratch: the order a step's members advance.
	advanceOrder []int
	// preempted sequences hold no pages; they resume, oldest arrival
	// first, when the pool has room for their KV again.
	preempted  []*seq
	nPreempted atomic.Int64 // len(preempted), read by admission

	steps atomic.Int64 // forward steps run (tests check batching happened)
	// clock is the server's clock, for the --kv-verify sweep's time budget
	// (verify); nil in driven mode, where there is no clock: no budget, a
	// sweep every step, deterministic.
	clock func() time.Time
	// fwdTime and verifyTime are the nanoseconds spent in Forward and in
	// the sweep, measured with clock; written by the stepping goroutine
	// only, atomic for benchmarks that read them.
	fwdTime, verifyTime atomic.Int64
	maxSeqs             atomic.Int64 // most sequences seen in one step
	preemptions         atomic.Int64 // sequences preempted
	recomputed          atomic.Int64 // positions computed again after a preemption
	generated           atomic.Int64 // tokens emitted
	running             atomic.Int64 // sequences in the batch (not preempted)

	// The KV quota (quota.go): requests waiting outside the batch for
	// pages (the colocated admission's, by owner), set from other
	// goroutines; nResumable is how many preempted sequences may take
	// pages now (admission lets them go first).
	wantMu  sync.Mutex
	wanting map[kv.ID]want
	// idleBuf, waitBuf, holdersBuf and sharedBuf are the quota's
	// scratch (addIdle, publishWaiting, pages), used by the batch
	// goroutine only.
	idleBuf    []kv.TenantPages
	waitBuf    []string
	holdersBuf []sched.Holder
	sharedBuf  []uint64
	nResumable atomic.Int64
	// held is the quota's snapshot after the last cycle, for admission.
	held atomic.Pointer[sched.Pages]
	// freed, when set, learns that a quota preemption gave pages back
	// (the colocated admission tries its waiting request again).
	freed func()

	// deferred are the sequences holding logits (seq.held), in the order
	// their mask work is served (round robin by slices); deferrals counts
	// the draws that did not fit in their step's budget.
	deferred  []*seq
	deferrals atomic.Int64
	// gb is the grammar budget of the step under way.
	gb stepBudget
	// shares is the tenants' service in this batch, which decides the
	// prompt chunks of each step (prefillPlan).
	shares sched.Shares

	// arrivals, when set, takes the sequences that arrived during a
	// step (the scheduler's joiners) so the step can yield to them at a
	// layer boundary (yield.go); nil in driven mode, where nothing
	// arrives during a step. during is the step's arrivals whose first
	// chunk has not run; paused the time the step spent in nested steps;
	// nestedSteps counts those.
	arrivals    func() []*seq
	during      []*seq
	paused      time.Duration
	nestedSteps atomic.Int64
	// nest is the nested work the step under way may still take.
	nest sched.Nest
	// arrivalMark is the arrival number of the latest sequence handed
	// to the scheduler (nil in driven mode); yielded is whether the last
	// step could yield (it carried prompt chunks), and endMark the
	// arrival number when its forward pass returned: a joiner the step
	// saw at no pause point and that arrived by then came after the
	// step's last pause point (StartAfterLastPause).
	arrivalMark func() uint64
	yielded     bool
	endMark     uint64
}

// scheduler is the goroutine layer around a batch for the servers: it
// takes sequences from other goroutines (add, under a lock), wakes the
// loop when work arrives, and stops. That layer remains because the
// engines' callers (HTTP handlers, handoff RPCs) run on their own
// goroutines and a step must not run on theirs: one slow request would
// then stall every other one. In driven mode (newDrivenScheduler) there is
// no goroutine: the driver calls turn and is told through its wake
// function when work arrived.
type scheduler struct {
	*batch

	mu      sync.Mutex
	joining []*seq
	// arrived: joining is not empty; read without the lock at a step's
	// layer boundaries (arrived, yield.go).
	arrived     atomic.Bool
	closed      bool
	nextArrival uint64
	// lastArrival is nextArrival, for the step's pause-point accounting
	// (batch.arrivalMark) without the lock.
	lastArrival atomic.Uint64
	wake        chan struct{}
	quit        chan struct{}
	stopped     chan struct{}
	// driven, when set, replaces the goroutine: it is called (under no
	// lock of ours) whenever a sequence joins or a cancel is recorded.
	driven func()
}

// SchedStats are a scheduler's counters, for metrics and the load log.
type SchedStats struct {
	// Running is the sequences in the batch; Preempted those waiting to
	// resume.
	Running, Preempted int
	// Preemptions and RecomputedTokens count preemptions and the positions
	// whose KV they made computed again; Generated the tokens emitted.
	Preemptions, RecomputedTokens, Generated int64
	// GrammarDeferrals counts constrained draws that waited for their
	// mask beyond their step (GrammarShare); GrammarMaskBytes is what
	// the worker's compiled grammars' cached masks hold, and
	// GrammarMaskDrops the grammars whose masks were dropped to keep
	// within --grammar-mask-cache.
	GrammarDeferrals, GrammarMaskBytes, GrammarMaskDrops int64
	// GrammarCache counts the worker's grammar cache lookups (one per
	// constrained request's sampler) by how each was answered.
	GrammarCache grammar.Lookups
	// Revoked counts a decode worker's reservations taken back before
	// their commit for a tenant waiting within its KV share;
	// RefusedOverShare its Reserves refused with over_share (the tenant
	// would go over its share while another waits). Zero elsewhere.
	Revoked, RefusedOverShare int64
	// NestedSteps counts steps of newly arrived prompts run while a step
	// carrying another tenant's prompt chunks was paused at a layer
	// boundary (yield.go): how often a step yielded.
	NestedSteps int64
	// NestForward is the fixed cost of a forward pass, in prompt tokens,
	// that the nested budget counts (Config.NestForward, measured at
	// start; 0 for a decode worker, whose steps never pause).
	NestForward int
}

func (s *batch) stats() SchedStats {
	st := SchedStats{Running: int(s.running.Load()), Preempted: int(s.nPreempted.Load()),
		Preemptions: s.preemptions.Load(), RecomputedTokens: s.recomputed.Load(), Generated: s.generated.Load(),
		GrammarDeferrals: s.deferrals.Load(), NestedSteps: s.nestedSteps.Load()}
	st.GrammarMaskBytes, st.GrammarMaskDrops = s.cfg.formats.maskStats()
	st.GrammarCache = s.cfg.formats.lookups()
	st.NestForward = s.cfg.nestForward()
	return st
}

func newBatch(cfg Config, pool pagePool) *batch {
	b := &batch{cfg: cfg, pool: pool, fwd: cfg.Model.NewForwarder(cfg.Threads)}
	// Shared steps carry SharedStepTokens of prompt tokens (one chunk by
	// default), for sharedRecent steps after another tenant was last in
	// the batch.
	b.shares.Short, b.shares.Recent = cfg.SharedStepTokens, sharedRecent
	// Slack: a chunk's worth of service; Lag: a few shared steps' worth.
	// Lag is the priority a tenant new to the batch has over the others,
	// which then wait for it to run that much: counted in shared steps,
	// not whole budgets, or a co-tenant's prompt waits out 4x as many
	// short steps each time a flood starts (in whole budgets, b's prompts
	// in the crowding bench wait 16-64 of a's one-chunk steps, 0.5-1 s
	// under load, when a's flood begins right after b's own prompts).
	b.shares.Slack, b.shares.Lag = int64(max(cfg.ChunkTokens, 1)), int64(4*max(cfg.SharedStepTokens, 1))
	return b
}

// sharedRecent is how many steps a batch counts as shared after a
// second tenant was last in it (sched.Shares.Recent): a tenant that
// repeats requests is out of a prefill worker's batch between its
// prompts, ~150 ms in the crowding benchmark, where a flood's one-chunk
// steps take ~10-25 ms; 64 steps cover such gaps several times over, and
// bound what a tenant left alone pays (64 short steps) once the other
// stops.
const sharedRecent = 64

func newScheduler(cfg Config, pool pagePool) *scheduler {
	b := newBatch(cfg, pool)
	b.clock = time.Now // the server's clock: the sweep's time budget (verify)
	s := &scheduler{
		batch:   b,
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	if cfg.BurstThreads > cfg.Threads && cfg.Idle != nil {
		s.burst = cfg.Model.NewForwarder(cfg.BurstThreads)
	}
	b.arrivals = s.takeJoining
	b.arrivalMark = s.lastArrival.Load
	go s.loop()
	return s
}

// newDrivenScheduler is a scheduler with no goroutine: the driver calls
// turn, and wake tells it (synchronously) that there is work.
func newDrivenScheduler(cfg Config, pool pagePool, wake func()) *scheduler {
	return &scheduler{batch: newBatch(cfg, pool), quit: make(chan struct{}), stopped: make(chan struct{}), driven: wake}
}

// add hands a sequence to the loop; it starts at the next step. It fails
// (and ends the sequence) when the scheduler is shutting down.
func (s *scheduler) add(q *seq) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.finish(q, outcome{err: errf(CodeShutdown, http.StatusServiceUnavailable, nil, "the engine is shutting down")})
		return
	}
	s.nextArrival++
	q.arrival = s.nextArrival
	s.lastArrival.Store(s.nextArrival)
	s.joining = append(s.joining, q)
	s.arrived.Store(true)
	s.mu.Unlock()
	s.poke()
}

// pending is the sequences handed to the loop and not yet in its batch.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.joining)
}

func (s *scheduler) poke() {
	if s.driven != nil {
		s.driven()
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stop ends every active sequence with a shutdown error, releases their
// pages and returns when the loop has exited.
func (s *scheduler) stop() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.quit)
		if s.driven != nil {
			close(s.stopped)
		}
	}
	s.mu.Unlock()
	if s.driven != nil {
		s.shutdown()
		if c, ok := s.fwd.(interface{ Close() }); ok {
			c.Close()
		}
		return
	}
	<-s.stopped
}

// take moves the sequences that joined since the last turn into the batch.
func (s *scheduler) take() {
	qs := s.takeJoining()
	for _, q := range qs {
		if q.waited == "" {
			// No pause point saw it: it came after the last step's last
			// pause point, or while no step that could yield ran.
			q.waited = StartNextStep
			if s.yielded && q.arrival <= s.endMark {
				q.waited = StartAfterLastPause
			}
		}
	}
	s.join(qs)
}

// takeJoining empties the joiners; cheap (one atomic load) when there
// are none, so a step can look at every layer boundary.
func (s *scheduler) takeJoining() []*seq {
	if !s.arrived.Load() {
		return nil
	}
	s.mu.Lock()
	j := s.joining
	s.joining = nil
	s.arrived.Store(false)
	s.mu.Unlock()
	return j
}

// turn is one driven iteration: joiners in, then one cycle. It reports
// whether sequences remain in the batch (the driver calls it again after
// a step's time); false when idle, until the next wake.
func (s *scheduler) turn() bool {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false
	}
	s.take()
	return s.cycle()
}

func (s *scheduler) loop() {
	defer close(s.stopped)
	// The loop drives the forward passes: its thread runs kernels beside
	// the pool's workers, in the process's compute class (normal unless
	// the binary lowered it, kernels.SetComputeClass). Everything that
	// waits on a step's result (pushes, streams) runs on other goroutines,
	// which then preempt compute when they wake.
	kernels.LockComputeThread()
	for _, f := range []Forwarder{s.fwd, s.burst} {
		if c, ok := f.(interface{ Close() }); ok {
			defer c.Close()
		}
	}
	for {
		s.take()
		select {
		case <-s.quit:
			s.shutdown()
			return
		default:
		}
		if !s.cycle() {
			select {
			case <-s.wake:
			case <-s.quit:
			}
		}
	}
}

// join adds sequences to the batch; a sequence carrying a first token
// generated elsewhere emits it now.
func (s *batch) join(qs []*seq) {
	joined := len(s.active)
	s.active = append(s.active, qs...)
	for _, q := range qs {
		q.joinedStep = s.steps.Load()
	}
	defer s.yieldJoined(s.active[joined:])
	for _, q := range s.active[joined:] {
		if q.startErr != nil {
			if rf := requestFault(q.startErr); rf != nil {
				s.fail(q, rf) // the schema's fault, found replaying its tokens
			} else {
				s.fail(q, handoff.ErrRefused.With("%v", q.startErr))
			}
			continue
		}
		if q.hasFirst {
			// Emitted before the cancel check in cycle: a cancel recorded
			// during the transfer still lets decode reach its first
			// token (I10).
			q.hasFirst = false
			s.emitToken(q, q.first, q.firstLP)
		}
	}
}

// shutdown ends every sequence, joining, active or preempted, with a
// shutdown error (a joiner's first token is not emitted).
func (s *scheduler) shutdown() {
	s.mu.Lock()
	s.active = append(s.active, s.joining...)
	s.joining = nil
	s.mu.Unlock()
	for _, q := range append(s.active, s.preempted...) {
		s.finish(q, outcome{err: errf(CodeShutdown, http.StatusServiceUnavailable, nil, "the engine shut down before the request finished")})
	}
	s.active, s.preempted = nil, nil
	s.nPreempted.Store(0)
}

// cycle applies cancels (between steps, never inside one), resumes what
// fits and runs one step. It reports whether it ran a step; false: no
// sequence is active.
func (s *batch) cycle() bool {
	live := s.active[:0]
	for _, q := range s.active {
		if q.emit == nil {
			continue
		}
		if q.cancelled() {
			if q.aborted.Load() {
				s.finish(q, outcome{err: errf(CodeHandoff, http.StatusBadGateway, nil, "the handoff was aborted while decoding")})
			} else {
				s.finish(q, outcome{done: true, finish: "cancelled"})
			}
			continue
		}
		live = append(live, q)
	}
	clear(s.active[len(live):])
	s.active = live
	s.endCancelledPreempted()
	s.reclaim()
	s.resume()
	s.running.Store(int64(len(s.active)))
	if len(s.active) == 0 {
		s.publishPages()
		return false
	}
	s.step()
	s.countResumable()
	s.publishPages()
	return true
}

// step runs one forward pass over the active sequences.
func (s *batch) step() {
	s.growAll()
	budget := s.cfg.StepTokens
	var steps []Step
	var members []*seq
	var sizes []int
	// Decode tokens first: they are one token each and keep latency flat;
	// prefill chunks take what is left of the step's token budget, as
	// the tenants' step shares say (prefillPlan).
	for pass := 0; pass < 2; pass++ {
		order := s.active
		var take map[*seq]int
		if pass == 1 {
			order, take = s.prefillPlan(budget)
		}
		for _, q := range order {
			if q.decoded != (pass == 0) || q.held != nil || q.emit == nil {
				continue
			}
			var toks []int32
			if q.decoded {
				toks = []int32{q.next}
			} else {
				n := min(take[q], budget)
				if n <= 0 {
					continue
				}
				toks = q.prompt[:n]
			}
			if err := s.grow(q, q.fed+len(toks)); err != nil {
				s.fail(q, err)
				continue
			}
			if !q.decoded && q.started != nil {
				q.started(q.startHow(s.steps.Load()))
				q.started = nil
			}
			budget -= len(toks)
			// advance reads a prompt chunk's logits only when it ends a
			// prompt that is not being recomputed.
			steps = append(steps, Step{Tokens: toks, Pos: q.fed, KV: q.view, NoLogits: !q.decoded && (len(toks) < len(q.prompt) || q.recompute)})
			members = append(members, q)
			sizes = append(sizes, len(toks))
		}
	}
	if len(steps) > 0 {
		s.steps.Add(1)
		if n := int64(len(steps)); n > s.maxSeqs.Load() {
			s.maxSeqs.Store(n)
		}
		fwd := s.fwd
		if s.burst != nil && s.cfg.Idle() {
			fwd = s.burst
		}
		s.run(fwd, steps, members, sizes, false)
		s.verify()
	} else if len(s.deferred) > 0 {
		// Only sequences waiting for their masks: no one else's step is
		// held up, but new arrivals join between cycles, so still in
		// bounded slices.
		s.gb.start(s.clock, 0, false, s.cfg.GrammarUnits)
	}
	s.grammarWork()
	live := s.active[:0]
	for _, q := range s.active {
		if q.emit != nil {
			live = append(live, q)
		}
	}
	clear(s.active[len(live):])
	s.active = live
}

// run runs one forward step (a step with prompt chunks may yield to
// prompts arriving meanwhile, yield.go) and applies its results: the
// tenants' shares charged, each sequence advanced, with the step's
// grammar budget.
// A nested step (nested) runs whole: it never yields.
func (s *batch) run(fwd Forwarder, steps []Step, members []*seq, sizes []int, nested bool) {
	var t0 time.Time
	if s.clock != nil {
		t0 = s.clock()
	}
	var res []StepResult
	if nested {
		res = fwd.Forward(steps)
	} else {
		s.paused = 0
		res = s.forward(fwd, steps, members)
	}
	var took time.Duration
	if s.clock != nil {
		// The paused step's own time: the nested steps' is theirs.
		took = s.clock().Sub(t0)
		if nested {
			s.paused += took
		} else {
			took -= s.paused
		}
		s.fwdTime.Add(int64(took))
	}
	s.gb.start(s.clock, took, true, s.cfg.GrammarUnits)
	// The sequences whose prompt this step ended are advanced first, so
	// their first tokens go on their streams before the step's other
	// tokens. Each token wakes its client's handler goroutine; the Go
	// scheduler queues them on this goroutine's P, which goes on
	// computing, and other Ps take them oldest first, except the last
	// woken (the P's runnext), taken last. In batch order a prompt that
	// ended in a step with 8 decoding sequences waited for their 8
	// handlers (each a JSON encode and a write) before its own first
	// token went out. Outputs do not depend on the order (each sequence
	// samples alone; a deferred draw has the same result).
	// The order is taken whole before any sequence advances (advancing
	// one ends its prompt).
	order := s.advanceOrder[:0]
	for pass := range 2 {
		for i, q := range members {
			if endsPrompt(q, sizes[i]) == (pass == 0) {
				order = append(order, i)
			}
		}
	}
	s.advanceOrder = order
	for _, i := range order {
		q := members[i]
		s.shares.Charge(q.owner.Tenant, q.weight, sizes[i])
		s.advance(q, sizes[i], res[i])
	}
}

// endsPrompt: a step that runs n of q's tokens ends q's prompt and draws
// its first token (not a recomputed prompt's, drawn before).
func endsPrompt(q *seq, n int) bool {
	return !q.decoded && !q.recompute && len(q.prompt) == n
}

// prefillPlan is the order in which prompt chunks take the step's token
// budget and the tokens each may run, by the tenants' step shares
// (sched.Shares: the least served tenants' chunks first and alone, each
// tenant within its weighted part of the step while others are in the
// batch; with one tenant, every chunk oldest first, as much as fits).
// s.active is sorted by arrival (growAll). Outputs do not depend on it
// (batch invariance).
func (s *batch) prefillPlan(budget int) ([]*seq, map[*seq]int) {
	var ms []sched.Member
	var chunks []sched.Chunk
	var qs []*seq
	for _, q := range s.active {
		if q.emit == nil {
			continue
		}
		ms = append(ms, sched.Member{Tenant: q.owner.Tenant, Weight: q.weight})
		if q.decoded || q.held != nil || len(q.prompt) == 0 {
			continue
		}
		chunks = append(chunks, sched.Chunk{Tenant: q.owner.Tenant, Weight: q.weight, Tokens: min(len(q.prompt), s.cfg.ChunkTokens)})
		qs = append(qs, q)
	}
	s.shares.Sync(ms)
	order, take := s.shares.Plan(budget, s.cfg.ChunkTokens, ms, chunks)
	out := make([]*seq, len(order))
	n := make(map[*seq]int, len(order))
	for i, k := range order {
		out[i] = qs[k]
		n[qs[k]] = take[k]
	}
	return out, n
}

// verify is the step's share of --kv-verify sample (kv.Pool.VerifyStep):
// a bounded number of sealed pages re-hashed, run only while the time
// spent sweeping stays within Config.VerifyShare of the time spent in
// forward steps, so its cost is bounded whatever the batch (one page of
// bench-15M is ~50 us to hash, a single-sequence decode step ~2 ms). A
// page found changed is quarantined by the pool, so every sequence
// reading it fails at its next read (the next step) with an integrity
// error, never a finished answer.
func (s *batch) verify() {
	p := rawPool(s.pool)
	if p == nil || !p.Sweeps() {
		return
	}
	if s.clock == nil {
		_ = p.VerifyStep() // driven: every step, no clock
		return
	}
	share := s.cfg.VerifyShare
	if share <= 0 {
		share = DefaultVerifyShare
	}
	// all sweeps every step, unbounded (debugging).
	if share < 1 && p.VerifyMode() != kv.VerifyAll && float64(s.verifyTime.Load()) > share*float64(s.fwdTime.Load()) {
		return
	}
	t0 := s.clock()
	_ = p.VerifyStep() // counted and quarantined by the pool
	s.verifyTime.Add(int64(s.clock().Sub(t0)))
}

// DefaultVerifyShare is Config.VerifyShare when zero: the sweep may take
// 1/200 of the forward steps' time (0.5% of decode throughput at most).
const DefaultVerifyShare = 0.005

// need is the positions a sequence's next step may cover.
func (s *batch) need(q *seq) int {
	if q.decoded {
		return q.fed + 1
	}
	return q.fed + min(len(q.prompt), s.cfg.ChunkTokens)
}

// growAll gives every active sequence the pages of its next step, oldest
// arrival first. When the pool is dry it preempts by the victim policy:
// the preemptible sequence of LATEST arrival (it has the least work to
// redo, and the oldest sequence always makes progress, so nothing
// livelocks). Its pages go back through the normal release (scrubbed, I7)
// and it waits, holding nothing, to resume with its KV recomputed from
// its tokens. A sequence that cannot grow and cannot be helped this way
// (not preemptible, nothing to preempt) fails with kv_capacity_exhausted.
func (s *batch) growAll() {
	// Oldest first: resumed sequences rejoin at the end. The batch's order
	// does not change any output (batch-invariant kernels), so sort in
	// place, and only when needed (no allocation on the usual step).
	if !slices.IsSortedFunc(s.active, byArrival) {
		slices.SortFunc(s.active, byArrival)
	}
	oldest := s.oldest()
	for _, q := range s.active {
		for q.emit != nil && !s.isPreempted(q) {
			if more := kv.PagesFor(s.need(q), s.cfg.PageSize) - len(q.table); more > 0 && q != oldest &&
				!s.pages().MayTake(q.owner.Tenant, more) {
				// Over its share while another tenant waits: the tenant
				// yields its own latest sequence (maybe q) instead of
				// growing.
				if v := s.latestOf(q.owner.Tenant, oldest); v != nil {
					s.preempt(v)
					continue
				}
			}
			err := s.grow(q, s.need(q))
			if err == nil {
				break
			}
			v := s.victim(oldest)
			if !errors.Is(err, kv.ErrNoCapacity) || v == nil {
				s.fail(q, err)
				break
			}
			s.preempt(v)
		}
	}
	live := s.active[:0]
	for _, q := range s.active {
		if q.emit != nil && !s.isPreempted(q) {
			live = append(live, q)
		}
	}
	clear(s.active[len(live):])
	s.active = live
}

func (s *batch) isPreempted(q *seq) bool { return q.parked }

func byArrival(a, b *seq) int { return cmp.Compare(a.arrival, b.arrival) }

// victim is the sequence to preempt when the pool is dry: the latest
// arrival of the tenant furthest over its KV share (sched.Pages.Victim),
// never the oldest sequence while another one can go; with one tenant,
// the preemptible sequence of latest arrival. nil when nothing holding
// pages can be preempted.
func (s *batch) victim(oldest *seq) *seq {
	if t := s.pages().Victim(func(t string) bool { return s.latestOf(t, oldest) != nil }); t != "" {
		return s.latestOf(t, oldest)
	}
	return s.latestOf("", nil)
}

// preemptible: q holds pages and its KV can be rebuilt (or evicted).
func (s *batch) preemptible(q *seq) bool {
	return q.emit != nil && (q.all != nil || q.evict) && len(q.table) > 0 && !s.isPreempted(q)
}

// latestOf is the preemptible active sequence of latest arrival of tenant
// ("" any tenant) other than except, or nil.
func (s *batch) latestOf(tenant string, except *seq) *seq {
	var v *seq
	for _, q := range s.active {
		if q == except || !s.preemptible(q) || (tenant != "" && q.owner.Tenant != tenant) {
			continue
		}
		if v == nil || q.arrival > v.arrival {
			v = q
		}
	}
	return v
}

// preempt releases q's pages and turns the tokens it has into the prompt
// that rebuilds its KV on resume. The token already emitted and not yet
// fed (next) is not run again: after the rebuild the sequence continues
// with it, so the output is exactly the un-preempted one (batch-invariant
// kernels make the rebuilt KV bitwise equal).
func (s *batch) preempt(q *seq) {
	if q.evict {
		q.recomputed += q.fed
		s.recomputed.Add(int64(q.fed))
		s.preemptions.Add(1)
		s.finish(q, outcome{done: true, finish: "preempted"}) // releases its pages the normal way
		return
	}
	if q.onPreempt != nil {
		switch {
		case q.recompute:
			q.onPreempt("rebuild")
		case q.decoded:
			q.onPreempt("decode")
		default:
			q.onPreempt("prompt")
		}
	}
	releasePages(s.pool, q.owner, q.table)
	q.table, q.view, q.public = nil, nil, 0
	// A deferred draw is dropped: the rebuild computes the same logits
	// again (batch invariance), and the mask work done so far is kept by
	// the sampler.
	q.held = nil
	q.recomputed += q.fed
	s.recomputed.Add(int64(q.fed))
	if q.decoded || q.recompute {
		// Decoding, or preempted again while rebuilding.
		q.prompt = q.all[:len(q.all)-1]
		q.recompute = true
	} else {
		q.prompt = q.all
	}
	q.fed, q.decoded, q.parked = 0, false, true
	s.preempted = append(s.preempted, q)
	slices.SortFunc(s.preempted, byArrival)
	s.nPreempted.Store(int64(len(s.preempted)))
	s.preemptions.Add(1)
}

// resume gives preempted sequences, oldest first, the pages to rebuild
// their KV, while the pool has room; the first that does not fit waits
// (head of line, so the oldest is never overtaken). A sequence whose
// tenant may not take the pages now (over its KV share while another
// tenant waits, sched.Pages.MayTake) is passed over: it waits for the
// others, not they for it.
func (s *batch) resume() {
	defer s.countResumable()
	oldest := s.oldest()
	for i := 0; i < len(s.preempted); {
		q := s.preempted[i]
		n := kv.PagesFor(len(q.prompt)+1, s.cfg.PageSize)
		if q != oldest && !s.pages().MayTake(q.owner.Tenant, n) {
			i++
			continue
		}
		var hits []kv.PageRef
		if q.relookup != nil {
			hits = q.relookup()
		}
		var table []kv.PageRef
		var err error
		if len(hits) == 0 {
			table, err = s.pool.Reserve(q.owner, n)
		} else {
			table, err = s.pool.Extend(q.owner, hits, n-len(hits))
		}
		if err != nil {
			if len(hits) > 0 {
				releasePages(s.pool, q.owner, hits)
			}
			return
		}
		if c := len(hits) * s.cfg.PageSize; c > 0 {
			// The rebuild starts after the prefix cache's pages: the same
			// KV (batch invariance), not computed again.
			q.fed, q.prompt = c, q.prompt[c:]
			q.recomputed -= c
			s.recomputed.Add(-int64(c))
		}
		q.table, q.parked = table, false
		q.view = s.pool.View(q.owner, q.table)
		s.preempted = slices.Delete(s.preempted, i, i+1)
		s.nPreempted.Store(int64(len(s.preempted)))
		s.active = append(s.active, q)
	}
}

// endCancelledPreempted ends preempted sequences whose client left; they
// hold no pages.
func (s *batch) endCancelledPreempted() {
	keep := s.preempted[:0]
	for _, q := range s.preempted {
		if q.cancelled() {
			s.finish(q, outcome{done: true, finish: "cancelled"})
			continue
		}
		keep = append(keep, q)
	}
	clear(s.preempted[len(keep):])
	s.preempted = keep
	s.nPreempted.Store(int64(len(s.preempted)))
}

// grow makes the page table cover positions [0, need). Pool exhaustion
// fails this sequence with a clear error: never a hang, never a wait for
// another request's pages.
func (s *batch) grow(q *seq, need int) error {
	pages := kv.PagesFor(need, s.cfg.PageSize)
	if pages <= len(q.table) && q.view != nil {
		return nil
	}
	if pages > len(q.table) {
		more, err := s.pool.Extend(q.owner, q.table, pages-len(q.table))
		if err != nil {
			if errors.Is(err, kv.ErrNoCapacity) {
				return errf(CodeKVCapacity, http.StatusServiceUnavailable, err,
					"the KV cache ran out of pages while generating (needed %d tokens); retry later or lower max_tokens", need)
			}
			return err
		}
		q.table = more
	}
	q.view = s.pool.View(q.owner, q.table)
	return nil
}

// advance applies one forward result to its sequence.
func (s *batch) advance(q *seq, n int, r StepResult) {
	if r.Err != nil {
		s.fail(q, r.Err)
		return
	}
	q.fed += n
	if !q.decoded {
		q.prompt = q.prompt[n:]
		if len(q.prompt) > 0 {
			if q.chunked != nil {
				q.chunked(q.fed)
			}
			return
		}
		if q.prefilled != nil {
			q.prefilled(q)
			q.prefilled = nil
		}
		if q.recompute {
			// The KV is rebuilt; next was emitted before the preemption.
			q.recompute, q.decoded = false, true
			return
		}
	}
	s.draw(q, r.Logits)
}

// draw samples q's next token from logits and emits it. A constrained
// sequence's draw may need its grammar's mask over the whole vocabulary,
// which on a cold position of a large vocabulary is a long trie walk:
// that work is bounded by the step's grammar budget (I: no tenant's
// request may stall another's), and a draw that does not fit is
// deferred: q keeps a copy of its logits, sits out the forward steps,
// and is drawn in a later step (grammarWork) with the same result.
func (s *batch) draw(q *seq, logits []float32) {
	var tok int32
	var err error
	if q.samp.Constrained() {
		var pending bool
		tok, pending, err = q.samp.SampleWithin(logits, &s.gb)
		if pending {
			if q.held == nil {
				q.held = append(q.heldBuf[:0], logits...)
				q.heldBuf = q.held
				s.deferrals.Add(1)
			}
			if !q.queued {
				q.queued = true
				s.deferred = append(s.deferred, q)
			}
			return
		}
	} else {
		tok, err = q.samp.Sample(logits)
	}
	q.held = nil
	if err != nil {
		s.fail(q, samplingFailure(err))
		return
	}
	// Logprobs are computed here, where the token is sampled, from the
	// same logits, and travel with it.
	s.emitToken(q, tok, q.samp.Logprobs(logits, tok))
}

// grammarWork spends what is left of the step's grammar budget on the
// deferred sequences' masks, round robin, and draws those whose mask is
// done. The first of them always gets a slice, so each makes progress
// even when the step's sampling used the budget up.
func (s *batch) grammarWork() {
	live := s.deferred[:0]
	for _, q := range s.deferred {
		if q.emit != nil && q.held != nil {
			live = append(live, q)
		} else {
			q.queued = false
		}
	}
	clear(s.deferred[len(live):])
	s.deferred = live
	if len(live) == 0 {
		return
	}
	s.gb.least()
	served := 0
	for served < len(s.deferred) && (served == 0 || s.gb.open()) {
		q := s.deferred[0]
		s.deferred = append(s.deferred[1:], q)
		served++
		if q.emit != nil && q.held != nil && q.samp.Work(&s.gb) {
			s.draw(q, q.held)
		}
	}
}

// emitToken sends a generated token and ends the sequence when it is the
// last one (end of generation or max tokens).
func (s *batch) emitToken(q *seq, tok int32, lp *sample.Logprobs) {
	q.generated++
	s.generated.Add(1)
	if q.all != nil {
		q.all = append(q.all, tok)
	}
	if q.firstSent {
		q.firstSent = false // on its stream already: counted, not sent twice
	} else {
		q.emit(outcome{token: tok, logprobs: lp})
	}
	switch {
	case !q.ignoreEOS && s.cfg.Model.EOG(tok):
		s.finish(q, outcome{done: true, finish: "stop"})
	case q.generated >= q.maxTokens:
		s.finish(q, outcome{done: true, finish: "length"})
	default:
		q.next = tok
		q.decoded = true
	}
}

func (s *batch) fail(q *seq, err error) {
	s.finish(q, outcome{err: asEngineError(err, CodeInternal, http.StatusInternalServerError, "decoding")})
}

// finish releases the sequence's pages by the normal path (scrub, I7) and
// emits its terminal item. Pages that failed a check were already
// quarantined by the pool (I8); releasing the rest must not hide that.
func (s *batch) finish(q *seq, o outcome) {
	if q.emit == nil {
		return
	}
	if q.handover != nil && (q.holdPages || o.done && o.finish != "cancelled") {
		q.handover(q.table)
	} else if len(q.table) > 0 {
		releasePages(s.pool, q.owner, q.table)
	}
	q.table = nil
	q.view = nil
	if q.hasFirst && q.firstSent {
		// Its first token went to the stream at the commit (DecodeWorker.
		// start) and it ends before joining, where that token is counted
		// (a shutdown): counted here, so usage says what the stream
		// carried.
		q.hasFirst, q.firstSent = false, false
		q.generated++
		s.generated.Add(1)
	}
	o.prompt = q.promptTokens
	o.cached = q.cachedTokens
	o.completion = q.generated
	o.recomputed = q.recomputed
	emit := q.emit
	q.emit = nil
	// ended before the terminal item: whoever sees the request complete
	// (its client) must also see it counted done (the queue's running
	// gauge, the next admission), not a moment later.
	if q.ended != nil {
		q.ended()
	}
	emit(o)
}

// releasePages gives a sequence's pages back. A page the pool already
// quarantined after a violation refuses the release; that is expected and
// the pool has counted it, so the error is not the request's outcome.
func releasePages(p pagePool, o kv.Owner, refs []kv.PageRef) {
	_ = p.Release(o, refs)
}
