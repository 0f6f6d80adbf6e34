package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/request"
	admission "sluice/internal/sched"
)

// router owns every request's life cycle: the real request.Machine (I1,
// I10) and the real admission core (admission.Core: bounded queue, per-tenant
// DRR, queue timeout, per-tenant head-of-line pause on no room, resume of preempted
// requests first), driven by this simulator's single-threaded
// orchestration of the handoffs, following engine.Disaggregated's rules:
// the core's admit action sends the Reserve; no room puts the request back
// at the head; a stream that ends "preempted" re-queues the request, which
// resumes with a new handoff (new id) whose prompt is the prompt plus every
// token generated so far.
type router struct {
	w         *world
	reqs      []*rreq
	byHandoff map[kv.ID]*rreq // every handoff id a request ever had
	bySID     map[admission.ID]*rreq
	core      *admission.Core
	nextSID   admission.ID
	retries   int
	// dead are the decode incarnations declared dead (by generation);
	// migrated the handoffs a stream moved away from.
	dead     map[int]bool
	migrated map[kv.ID]bool
}

const maxRetries = 8

// qstate is where a request is in the admission core.
type qstate int

const (
	qNone      qstate = iota
	qWaiting          // in the queue (new, refused for room, or preempted)
	qAdmitting        // the core admitted it; its Reserve is in flight
	qRunning          // holds decode pages
	qOut              // left the core
)

// newReq registers a request.
func (r *router) newReq(prompt, max int, tenant string, si int) *rreq {
	q := &rreq{i: len(r.reqs), prompt: prompt, max: max, tenant: tenant, si: si, pending: map[int]handoff.Token{}}
	q.toks = r.w.env.prompts[prompt]
	q.m = newMachine()
	r.reqs = append(r.reqs, q)
	return q
}

// rreq is one client request.
type rreq struct {
	i      int
	prompt int // index into env prompts
	toks   []int32
	max    int
	tenant string
	si     int // index into samplings
	m      *request.Machine
	sid    admission.ID
	queue  qstate

	// The current handoff: a preempted request resumes with a new one.
	hid     kv.ID
	hprompt int // its prompt: toks and the tokens generated before it
	res     *handoff.Reservation

	committed bool
	first     int32
	pending   map[int]handoff.Token // decode stream items not yet consumed, by index
	nextIdx   int

	out      []int32 // what the client received
	end      request.Reason
	endMsg   string
	usage    [2]int
	kvBad    string // the oracle saw wrong KV behind this request's decode
	finished bool

	queuedAt time.Duration
	preempts int
	// revoked counts the reservations decode took back before their
	// commit (handoff.ErrRevoked); from handoff.MaxRevocations on, its
	// Reserves say NoRevoke, as engine.Disaggregated's do.
	revoked  int
	handoffs int
	// dec is the decode incarnation of the current handoff; avoid the
	// incarnations a migration moved the stream away from (the pairer's
	// avoid argument); migrations how many times it moved.
	dec        *decode
	avoid      []int
	migrations int
	// pre and pclaim are the prefill worker of the current handoff's
	// Prefill call and the call's claim (prefillDead answers it).
	pre         *prefill
	pclaim      func() bool
	endedQueued bool     // ended while waiting in the queue: may never reserve
	strike      strikeAt // an after-preemption fault waits for this phase
	// colo: served by the colocated engine (owner, its reserved table
	// before the batch takes it, the batch's cancel).
	colo     bool
	owner    kv.Owner
	table    []kv.PageRef
	started  bool
	stopColo func()
}

func (r *router) alive() bool { return true }

func (q *rreq) String() string { return fmt.Sprintf("req%d(%s)", q.i, short(q.hid)) }

// submit starts request q: admission (I2) through the machine (I1).
func (r *router) submit(q *rreq) {
	w := r.w
	w.logf("%v arrives (%s): prompt %d tokens, max %d", q, q.tenant, len(q.toks), q.max)
	if len(q.toks)+q.max > w.ctx {
		r.step(q, request.Event{Kind: request.EvReject, Reason: request.RejectedContextLength,
			Msg: fmt.Sprintf("%d prompt + %d max tokens exceed the context of %d", len(q.toks), q.max, w.ctx)})
		return
	}
	r.step(q, request.Event{Kind: request.EvAdmit})
	// Faults that hit this request at a random later moment: any phase.
	if w.chance(w.pl.p[FaultDisconnect]) {
		w.after(w.faultTime(), "disconnect", func() { r.disconnect(q, "disconnect") })
	}
	if w.chance(w.pl.p[FaultAbortRouter]) {
		w.after(w.faultTime(), "router abort", func() { r.routerAbort(q, "abort") })
	}
	if w.chance(w.pl.p[FaultAbortPrefill]) {
		w.after(w.faultTime(), "prefill abort", func() {
			if j := w.pre.job(q.hid); j != nil && w.pre.up && !j.over {
				w.count(FaultAbortPrefill)
				w.logf("%v prefill gives the handoff up", q)
				j.stop(handoff.ErrAborted.With("prefill shutting down (injected)"))
			}
		})
	}
	w.after(requestDeadline, "deadline", func() {
		if q.m.Live() {
			w.logf("%v deadline in %v", q, r.phase(q))
			r.step(q, request.Event{Kind: request.EvFail, Code: "timeout", Msg: "the request did not finish in time"})
		}
	})
}

func (r *router) disconnect(q *rreq, tag string) {
	w := r.w
	if q.m.Live() {
		w.count(FaultDisconnect)
		w.res.Phases[tag+"/"+r.phase(q)]++
		w.logf("%v client disconnects in %v", q, r.phase(q))
	}
	r.step(q, request.Event{Kind: request.EvCancel})
}

func (r *router) routerAbort(q *rreq, tag string) {
	w := r.w
	if q.m.Live() {
		w.count(FaultAbortRouter)
		w.res.Phases[tag+"/"+r.phase(q)]++
		w.logf("%v router aborts in %v", q, r.phase(q))
		r.step(q, request.Event{Kind: request.EvFail, Code: "aborted", Msg: "aborted by the router (injected)"})
	}
}

// step applies an event and carries out the machine's actions. An illegal
// event is a bug in this orchestration or the machine: it is a violation.
func (r *router) step(q *rreq, ev request.Event) {
	if !q.m.Live() && ev.Kind == request.EvCancel {
		return
	}
	acts, err := q.m.Step(ev)
	if err != nil {
		r.w.violate("%v: %v", q, err)
		return
	}
	for _, a := range acts {
		r.act(q, a)
	}
}

func (r *router) act(q *rreq, a request.Action) {
	w := r.w
	if q.colo {
		switch a.Kind {
		case request.ActReserve:
			w.colo.enqueue(q)
			return
		case request.ActPrefill:
			w.colo.start(q)
			return
		case request.ActStopDecode:
			if q.stopColo != nil {
				q.stopColo()
			}
			return
		}
	}
	switch a.Kind {
	case request.ActReserve:
		r.enqueue(q)
	case request.ActPrefill:
		r.prefill(q)
	case request.ActEmit:
		q.out = append(q.out, a.Token)
	case request.ActAbortHandoff:
		if q.hid == (kv.ID{}) {
			return // a migration closed the handoff and aborted it already
		}
		r.abort(q, "request failed: "+string(q.m.Reason()))
	case request.ActStopDecode:
		// The machine has already set the reason: a cancel stops decoding
		// the normal way; a failure aborts; a normal finish needs nothing.
		switch reason := q.m.Reason(); {
		case reason == request.Cancelled:
			d := w.dec
			id := q.hid
			w.send(fmt.Sprintf("router->decode#%d cancel %v", d.gen, q), d.alive, func() { d.cancel(id) })
		case reason != request.FinishedLength && reason != request.FinishedStop:
			r.abortDecode(q, "request failed while decoding")
		}
	case request.ActEnd:
		q.finished = true
		q.end, q.endMsg = a.Reason, a.Msg
		q.usage[0], q.usage[1] = q.m.Usage()
		w.logf("%v END %s %s (out %v)", q, a.Reason, a.Msg, q.out)
		if q.colo {
			w.colo.leave(q)
		} else {
			r.leaveCore(q)
		}
		if strings.HasPrefix(string(a.Reason), "failed_") && a.Reason != "failed_refused" && a.Reason != "failed_no_room" && r.retries < maxRetries && w.chance(w.pl.retry) {
			// Clients retry failures at once: the retry's reservation takes
			// the pages the failure just freed (LIFO), the reuse I6 is about.
			r.retries++
			n := r.newReq(q.prompt, q.max, q.tenant, q.si)
			n.colo = q.colo
			if n.colo {
				n.m = request.New(request.Colocated)
			}
			w.after(w.between(0, msec), "retry", func() { r.submit(n) })
		}
	}
}

// coreStep feeds the admission core and carries out its actions.
func (r *router) coreStep(ev admission.Event) {
	ev.Now = r.w.clock()
	for _, a := range r.core.Step(ev) {
		q := r.bySID[a.ID]
		switch a.Kind {
		case admission.ActAdmit:
			r.admitted(q)
		case admission.ActReject:
			q.queue = qOut
			r.w.res.QueueRejects[string(a.Reason)]++
			r.w.logf("%v refused by the queue: %s", q, a.Reason)
			r.step(q, request.Event{Kind: request.EvFail, Code: string(a.Reason), Msg: "refused by the queue: " + string(a.Reason)})
		}
	}
}

// enqueue puts q in the core's queue: a new request arrives; a preempted
// one goes to the resume list, ahead of everything.
func (r *router) enqueue(q *rreq) {
	w := r.w
	q.queuedAt = w.now
	if q.sid == 0 {
		r.nextSID++
		q.sid = r.nextSID
		r.bySID[q.sid] = q
		q.queue = qWaiting
		r.coreStep(admission.Event{Kind: admission.EvArrive, ID: q.sid, Tenant: q.tenant, Cost: len(q.toks) + q.max})
		return
	}
	q.queue = qWaiting
	r.coreStep(admission.Event{Kind: admission.EvPreempted, ID: q.sid, Tenant: q.tenant})
}

// leaveCore tells the core that q ended: a waiting request leaves the
// queue at once (it never reserves), a running one gives its slot back.
func (r *router) leaveCore(q *rreq) {
	switch q.queue {
	case qWaiting:
		q.endedQueued = true
		r.w.res.EndedQueued++
		if r.w.cfg.Bugs.CancelQueuedReserves {
			return // the bug: the core is not told, and admits it later
		}
		q.queue = qOut
		r.coreStep(admission.Event{Kind: admission.EvCancel, ID: q.sid})
	case qRunning:
		q.queue = qOut
		r.coreStep(admission.Event{Kind: admission.EvDone, ID: q.sid})
	}
	// qAdmitting: the Reserve's reply drops it.
}

// admitted is the core's admit action: a new handoff id, the Reserve.
func (r *router) admitted(q *rreq) {
	w := r.w
	q.queue = qAdmitting
	if !q.m.Live() && !w.cfg.Bugs.CancelQueuedReserves {
		q.queue = qOut
		r.coreStep(admission.Event{Kind: admission.EvDropped, ID: q.sid})
		return
	}
	d := w.dec
	if slices.Contains(q.avoid, d.gen) {
		if !w.cfg.Bugs.MigrateNoExclude {
			// The pairer avoids the worker the stream moved away from: no
			// pair yet (the only decode slot is still that worker); the
			// request waits at the head of the queue for its replacement.
			q.queue = qWaiting
			r.coreStep(admission.Event{Kind: admission.EvNoRoom, ID: q.sid})
			return
		}
		w.violate("%v migrated away from decode#%d (declared dead) and was paired with it again (the migration did not exclude the failed worker)", q, d.gen)
	}
	wait := w.now - q.queuedAt
	w.res.QueueWaits = append(w.res.QueueWaits, wait)
	for k := range q.hid {
		q.hid[k] = byte(w.rng.Uint32())
	}
	r.byHandoff[q.hid] = q
	q.handoffs++
	q.hprompt = len(q.toks) + len(q.out)
	q.res, q.committed, q.nextIdx = nil, false, 0
	clear(q.pending)
	q.dec = d
	hid := q.hid
	// The tokens let decode look its own prefix cache up.
	m := &handoff.Reserve{Handoff: hid, Tenant: q.tenant, PromptTokens: q.hprompt, MaxTokens: q.max - len(q.out),
		Tokens: append(slices.Clone(q.toks), q.out...), NoRevoke: q.revoked >= handoff.MaxRevocations}
	// The stream continues the request's sampler after the tokens it
	// already has (a resumed request's offset).
	sp := handoff.StreamParams{Sampling: samplings[q.si], IgnoreEOS: true, Generated: slices.Clone(q.out)}
	if sp.Sampling.UsesPrompt() {
		sp.Prompt = q.toks
	}
	if w.cfg.Bugs.ResumeNoOffset {
		sp.Generated = nil
	}
	w.logf("%v admitted after %v in the queue (handoff %d, prompt %d)", q, wait, q.handoffs, q.hprompt)
	r.maybeStrike(q, strikeAdmitted)
	w.rpc(fmt.Sprintf("router->decode#%d reserve %v", d.gen, q), r.alive, d.alive, rpcTimeout,
		func() func() {
			res, err := d.reserve(m, sp)
			return func() { r.reserved(q, hid, res, err) }
		},
		func() { r.reserved(q, hid, nil, handoff.ErrTransport.With("reserve timed out")) })
}

func (r *router) reserved(q *rreq, hid kv.ID, res *handoff.Reservation, err error) {
	w := r.w
	if hid != q.hid || q.queue != qAdmitting {
		return
	}
	if err != nil {
		if errors.Is(err, handoff.ErrTransport) {
			// Unknown outcome: the pages may be reserved. Abort (harmless if not).
			r.abortDecode(q, "reserve outcome unknown")
		}
		if isNoRoom(err) && q.m.Live() {
			// Not now: back to the head of the queue; admission pauses
			// until pages come back.
			w.res.NoRoom++
			q.queue = qWaiting
			r.coreStep(admission.Event{Kind: admission.EvNoRoom, ID: q.sid})
			return
		}
		q.queue = qOut
		r.coreStep(admission.Event{Kind: admission.EvDropped, ID: q.sid})
		if q.m.Live() {
			r.step(q, request.Event{Kind: request.EvFail, Code: codeOf(err), Msg: err.Error()})
		}
		return
	}
	if !q.m.Live() || q.m.State() != request.Admitted {
		// Cancelled or failed while the reservation was on its way.
		q.queue = qOut
		r.coreStep(admission.Event{Kind: admission.EvDropped, ID: q.sid})
		r.abortDecode(q, "request ended before its reservation arrived")
		return
	}
	q.res = res
	q.queue = qRunning
	r.coreStep(admission.Event{Kind: admission.EvReserved, ID: q.sid})
	r.step(q, request.Event{Kind: request.EvReserved})
	if w.decHangArmed && len(q.out) > 0 && q.dec == w.dec {
		w.after(w.mbetween(0, 2*msec), "hang decode (a resumed handoff rebuilds)", w.stopDecode)
	}
}

func (r *router) prefill(q *rreq) {
	w := r.w
	p := w.pre
	r.step(q, request.Event{Kind: request.EvPrefillStarted})
	r.maybeStrike(q, strikeRebuilding)
	hid := q.hid
	toks := append(slices.Clone(q.toks), q.out...)
	pr := &handoff.PrefillRequest{Handoff: hid, Tenant: q.tenant, Tokens: toks, Reservation: q.res,
		Sampling: samplings[q.si], SampleOffset: len(q.out), Model: engine.FingerprintOf(w.env.rt)}
	if w.cfg.Bugs.ResumeNoOffset {
		pr.SampleOffset = 0
	}
	if w.cfg.Bugs.MigrateWrongOffset && q.migrations > 0 && len(q.out) > 0 {
		pr.SampleOffset = len(q.out) - 1
	}
	var claim func() bool
	defer func() { q.pre, q.pclaim = p, claim }()
	claim = w.rpc(fmt.Sprintf("router->prefill#%d prefill %v", p.gen, q), r.alive, p.alive, w.prefillTimeout,
		func() func() {
			// The answer comes when the transfer is over, as its own message.
			p.start(pr, func(x *handoff.PrefillResult, e error) { r.prefillReply(q, hid, p, claim, x, e) })
			return nil
		},
		func() { r.prefilled(q, hid, nil, handoff.ErrTransport.With("prefill timed out")) })
}

// prefillReply sends the prefill worker's answer back over the network.
func (r *router) prefillReply(q *rreq, hid kv.ID, p *prefill, claim func() bool, res *handoff.PrefillResult, err error) {
	w := r.w
	if !p.up {
		return
	}
	w.send(fmt.Sprintf("prefill#%d->router result %v", p.gen, q), r.alive, func() {
		if claim() {
			r.prefilled(q, hid, res, err)
		}
	})
}

func (r *router) prefilled(q *rreq, hid kv.ID, res *handoff.PrefillResult, err error) {
	if hid != q.hid || q.committed || !q.m.Live() {
		return
	}
	st := q.m.State()
	if st != request.Prefilling && st != request.Transferring {
		return
	}
	if err != nil {
		r.step(q, request.Event{Kind: request.EvFail, Code: codeOf(err), Msg: err.Error()})
		return
	}
	if res.Tokens != q.hprompt {
		r.step(q, request.Event{Kind: request.EvFail, Code: "count_mismatch", Msg: "prefill reports a different prompt length"})
		return
	}
	q.committed = true
	q.first = res.FirstToken
	r.step(q, request.Event{Kind: request.EvCommitted, Token: res.FirstToken, Tokens: res.Tokens})
	r.maybeStrike(q, strikeCommitted)
	r.drainStream(q)
}

// onStream takes a decode stream item; items are consumed in index order
// and only after the prefill's success (the router reports success only
// when both sides succeeded). Items of a handoff the request no longer
// runs on (before a resume) are stale.
func (r *router) onStream(it item) {
	q := r.byHandoff[it.hid]
	if r.migrated[it.hid] {
		// A continued worker's item for a handoff its stream moved away
		// from: that stream is closed (engine.Disaggregated closes it
		// before the migration's new handoff).
		r.w.res.StaleItems++
	}
	if q == nil || !q.m.Live() || it.hid != q.hid {
		return
	}
	if _, dup := q.pending[it.idx]; dup || it.idx < q.nextIdx {
		return
	}
	q.pending[it.idx] = it.tok
	if it.tok.Err != nil && errors.Is(it.tok.Err, handoff.ErrRevoked) && !q.committed {
		// Decode took the reservation back before the commit (the KV
		// quota): as engine.Disaggregated, the request goes back to the
		// queue (its handoff aborted on both sides), not a failure.
		q.revoked++
		r.w.logf("%v REVOKED by decode before its commit (%d)", q, q.revoked)
		r.step(q, request.Event{Kind: request.EvRevoked})
		return
	}
	// A failure ends the request at once, committed or not.
	if it.tok.Err != nil {
		r.step(q, request.Event{Kind: request.EvFail, Code: codeOf(it.tok.Err), Msg: it.tok.Err.Error()})
		return
	}
	r.drainStream(q)
}

func (r *router) drainStream(q *rreq) {
	w := r.w
	for q.committed && q.m.Live() {
		tok, ok := q.pending[q.nextIdx]
		if !ok {
			return
		}
		delete(q.pending, q.nextIdx)
		q.nextIdx++
		offset := q.hprompt - len(q.toks)
		switch {
		case tok.Done && tok.Finish == "cancelled":
			r.step(q, request.Event{Kind: request.EvFail, Code: "cancelled_by_decode", Msg: "decode stopped the request"})
		case tok.Done:
			if tok.CompletionTokens != len(q.out)-offset || tok.PromptTokens != q.hprompt {
				r.step(q, request.Event{Kind: request.EvFail, Code: "accounting", Msg: fmt.Sprintf("decode reports %d+%d tokens, router saw %d+%d",
					tok.PromptTokens, tok.CompletionTokens, q.hprompt, len(q.out)-offset)})
				return
			}
			if tok.Finish == "preempted" {
				// Decode could not grow the sequence and released its pages:
				// back to the head of the queue, then a new handoff.
				q.preempts++
				w.res.Preemptions++
				w.logf("%v PREEMPTED by decode after %d tokens", q, len(q.out))
				r.step(q, request.Event{Kind: request.EvPreempted})
				if q.m.Live() && w.chance(w.pl.p[FaultAfterPreempt]) {
					// Strike the resume in one of its phases: queued to
					// resume, admitted (its new Reserve in flight),
					// rebuilding (prefill of prompt + generated), or right
					// after its new commit.
					w.count(FaultAfterPreempt)
					q.strike = 1 + strikeAt(w.pick(4))
					if q.strike == strikeQueued {
						r.strikeNow(q)
					}
				}
				return
			}
			r.step(q, request.Event{Kind: request.EvFinish, Reason: request.FinishedLength})
		case q.nextIdx == 1:
			if tok.ID != q.first {
				r.step(q, request.Event{Kind: request.EvFail, Code: "first_token_mismatch", Msg: "decode's first token differs from prefill's"})
			}
		default:
			r.step(q, request.Event{Kind: request.EvToken, Token: tok.ID})
		}
	}
}

// decodeDead is the router's verdict that decode incarnation d is dead: its
// connection reset (a crash) or the heartbeat heard nothing from it for
// peerTimeout (a stopped worker; handoff/tcp heartbeat.go). Each request
// whose current handoff is on d fails by transport; one that already
// streamed tokens migrates instead, as engine.Disaggregated does: its
// handoff is aborted (the message is lost on a dead worker), its stream
// closed, and it resumes exactly as a preempted request does (a new
// handoff of the prompt plus the tokens sent, the sampler at the same
// offset), paired avoiding d, at most maxMigrations times.
func (r *router) decodeDead(d *decode, why string) {
	w := r.w
	if r.dead[d.gen] {
		return
	}
	r.dead[d.gen] = true
	w.res.DeclaredDead++
	w.logf("decode#%d declared dead: %s", d.gen, why)
	for _, q := range r.reqs {
		if q.colo || q.dec != d || !q.m.Live() || q.queue != qRunning {
			continue
		}
		st := q.m.State()
		// A resumed request (it already streamed tokens) whose new
		// handoff had not committed yet migrates too: the engine takes a
		// transport failure there as the new worker's death, not the
		// request's (request.Machine: a resumed request's preemption
		// before its commit aborts that handoff and reserves again).
		beforeCommit := st == request.Reserved || st == request.Prefilling || st == request.Transferring
		if (st == request.Committed || st == request.Decoding || beforeCommit) && len(q.out) > 0 && q.migrations < w.pl.maxMigrations {
			w.count(FaultMigrate)
			w.res.Migrations++
			if beforeCommit {
				w.res.MigratedBeforeCommit++
			}
			q.migrations++
			q.avoid = append(q.avoid, d.gen)
			old := q.hid
			r.migrated[old] = true
			w.send(fmt.Sprintf("router->decode#%d abort %v (migrated)", d.gen, q), d.alive, func() {
				d.abort(&handoff.Abort{Handoff: old, Reason: "migrated after its decode worker was declared dead"})
			})
			if p := q.pre; beforeCommit && p != nil {
				// Its prefill may still be pushing to the dead worker.
				w.send(fmt.Sprintf("router->prefill#%d abort %s (migrated)", p.gen, short(old)), p.alive, func() {
					p.withdraw(old, handoff.ErrAborted.With("migrated after its decode worker was declared dead"))
				})
			}
			q.hid = kv.ID{} // the old stream is closed: its items are dropped
			q.committed = false
			clear(q.pending)
			w.logf("%v MIGRATES after %d tokens (migration %d of at most %d), avoiding decode#%d", q, len(q.out), q.migrations, w.pl.maxMigrations, d.gen)
			r.step(q, request.Event{Kind: request.EvPreempted})
			continue
		}
		r.step(q, request.Event{Kind: request.EvFail, Code: string(handoff.ErrTransport.Code),
			Msg: fmt.Sprintf("the decode worker was declared dead (%s)", why)})
	}
}

// prefillDead is the router's verdict that prefill worker p is dead (its
// heartbeat stopped): every open Prefill call on it fails by transport,
// as engine.Disaggregated's drive sees it, and the request fails (it has
// sent nothing yet), aborting its handoff: decode then quarantines the
// pages until the lease (handoff.Receiver.end), since a stopped writer's
// posted writes may still land. Nothing is released because a heartbeat
// stopped (Bugs.HeartbeatRelease breaks exactly that).
func (r *router) prefillDead(p *prefill, why string) {
	w := r.w
	w.logf("prefill#%d declared dead: %s", p.gen, why)
	for _, q := range r.reqs {
		if q.colo || q.pre != p || q.pclaim == nil || !q.m.Live() {
			continue
		}
		hid := q.hid
		if !q.pclaim() {
			continue // answered already
		}
		r.prefilled(q, hid, nil, handoff.ErrTransport.With("the prefill worker was declared dead (%s)", why))
		if w.cfg.Bugs.HeartbeatRelease {
			d := w.dec
			w.send(fmt.Sprintf("router->decode#%d abort+drained %s (heartbeat lost)", d.gen, short(hid)), d.alive, func() {
				d.abort(&handoff.Abort{Handoff: hid, Reason: "prefill worker declared dead"})
				d.drained(hid)
			})
		}
	}
}

// strikeAt is the resume phase an after-preemption fault strikes in.
type strikeAt int

const (
	strikeQueued strikeAt = 1 + iota
	strikeAdmitted
	strikeRebuilding
	strikeCommitted
)

// strikeNow disconnects or aborts q shortly, when its resume reached the
// phase the fault picked.
func (r *router) strikeNow(q *rreq) {
	w := r.w
	q.strike = 0
	at := w.between(0, 300*time.Microsecond)
	if w.chance(0.5) {
		w.after(at, "disconnect after preemption", func() { r.disconnect(q, "disconnect-resumed") })
	} else {
		w.after(at, "abort after preemption", func() { r.routerAbort(q, "abort-resumed") })
	}
}

func (r *router) maybeStrike(q *rreq, at strikeAt) {
	if q.strike == at {
		r.strikeNow(q)
	}
}

func (r *router) abort(q *rreq, reason string) {
	r.abortDecode(q, reason)
	w := r.w
	p := w.pre
	id := q.hid
	w.send(fmt.Sprintf("router->prefill#%d abort %v", p.gen, q), p.alive, func() {
		p.withdraw(id, handoff.ErrAborted.With("%s", reason))
	})
}

func (r *router) abortDecode(q *rreq, reason string) {
	w := r.w
	d := w.dec
	a := &handoff.Abort{Handoff: q.hid, Reason: reason}
	w.send(fmt.Sprintf("router->decode#%d abort %v", d.gen, q), d.alive, func() { d.abort(a) })
}

// otherPages are pages reserved for live handoffs other than id: what a
// misbehaving prefill peer that confuses handoffs would write into.
func (r *router) otherPages(id kv.ID) []kv.PageRef {
	var out []kv.PageRef
	for _, q := range r.reqs {
		if q.hid != id && q.res != nil && q.m.Live() {
			out = append(out, q.res.Pages...)
		}
	}
	return out
}

// isNoRoom: decode's "not now" (its pool cannot hold the request yet),
// as opposed to a refusal.
func isNoRoom(err error) bool {
	var he *handoff.Error
	return errors.As(err, &he) && (he.Code == handoff.ErrNoRoom.Code || he.Code == handoff.ErrOverShare.Code)
}

// codeOf is an error's stable code for the request's terminal reason.
func codeOf(err error) string {
	var he *handoff.Error
	if errors.As(err, &he) {
		return string(he.Code)
	}
	var v *kv.Violation
	if errors.As(err, &v) {
		return v.Code()
	}
	type coder interface{ Code() string }
	var c coder
	if errors.As(err, &c) {
		return c.Code()
	}
	var ee *engine.Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	return "internal"
}

func newMachine() *request.Machine { return request.New(request.Disaggregated) }

// holder names the live request (other than id) whose reservation holds a
// page, for the trace of a late write.
func (r *router) holder(id kv.ID, page uint32) string {
	for _, q := range r.reqs {
		if q.hid == id || q.res == nil || !q.m.Live() {
			continue
		}
		for _, p := range q.res.Pages {
			if p.Page == page {
				return fmt.Sprintf(" (page now reserved for %v, %v)", q, q.m.State())
			}
		}
	}
	return ""
}

// phase names where a request is, finer than the machine's state: queued
// or reserving, the prefilling state split into compute, transfer and
// commit, and "resumed-" for a request that was preempted.
func (r *router) phase(q *rreq) string {
	p := r.basePhase(q)
	if q.preempts > 0 {
		return "resumed-" + p
	}
	return p
}

func (r *router) basePhase(q *rreq) string {
	st := q.m.State()
	if q.colo {
		if st == request.Admitted && q.queue == qWaiting {
			return "colo-queued"
		}
		return "colo-" + st.String()
	}
	switch {
	case st == request.Admitted && q.queue == qWaiting:
		return "queued"
	case st != request.Prefilling:
		return st.String()
	}
	j := r.w.pre.job(q.hid)
	switch {
	case j == nil:
		return "prefilling(queued or answering)"
	case j.snd == nil:
		return "prefilling(compute)"
	case j.fed == len(j.req.Tokens) && !j.over:
		return "prefilling(transfer or commit)"
	}
	return "prefilling"
}
