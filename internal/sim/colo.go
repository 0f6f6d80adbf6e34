package sim

import (
	"fmt"
	"slices"

	"sluice/internal/engine"
	"sluice/internal/kv"
	"sluice/internal/request"
	admission "sluice/internal/sched"
)

// colo is a colocated engine in the run, beside the disaggregated pair:
// engine.DrivenBatch, the continuous-batching core engine.Colocated serves
// with (chunked prefill within a step budget, growth page by page,
// preemption of the latest arrival while it computes its prompt, decodes,
// or rebuilds its KV after an earlier preemption, resume oldest first),
// over its own pool, behind its own admission core. The glue follows
// engine.Colocated: reserve the prompt plus at most a page of generated
// tokens, and nothing while preempted sequences wait for room; the
// sequence's items drive the request's machine as the engine's lifecycle
// does.
type colo struct {
	w    *world
	pool *kv.Pool
	b    *engine.DrivenBatch
	core *admission.Core
	busy bool
	reqs map[admission.ID]*rreq
	next admission.ID
}

func (w *world) newColo(qc admission.Config) (*colo, error) {
	ps := w.geo.PageSize
	pages := kv.PagesFor(w.ctx, ps) * (1 + w.pick(2))
	p, err := kv.New(kv.Config{Geometry: w.geo, Pages: pages, Order: kv.LIFO, Scrub: w.scrub, Lease: lease, Unsafe: w.cfg.Bugs.KV})
	if err != nil {
		return nil, err
	}
	c := &colo{w: w, pool: p, core: admission.New(qc), reqs: map[admission.ID]*rreq{}}
	chunk := 1 + w.pick(8)
	b, err := engine.NewDrivenBatch(engine.Config{Model: w.env.rt, Context: w.ctx, PoolPages: pages, PageSize: ps,
		ChunkTokens: chunk, StepTokens: chunk * (1 + w.pick(3))}, engine.KVPool(p), c.kick)
	if err != nil {
		p.Close()
		return nil, err
	}
	c.b = b
	w.res.Setup += fmt.Sprintf(", colocated %d pages, chunk %d", pages, chunk)
	return c, nil
}

func (c *colo) close() {
	c.b.Close()
	c.pool.Close()
}

func (c *colo) coreStep(ev admission.Event) {
	w := c.w
	ev.Now = w.clock()
	for _, a := range c.core.Step(ev) {
		q := c.reqs[a.ID]
		switch a.Kind {
		case admission.ActAdmit:
			c.admitted(q)
		case admission.ActReject:
			q.queue = qOut
			w.res.QueueRejects[string(a.Reason)]++
			w.logf("%v refused by the colocated queue: %s", q, a.Reason)
			w.router.step(q, request.Event{Kind: request.EvFail, Code: string(a.Reason), Msg: "refused by the queue: " + string(a.Reason)})
		}
	}
}

func (c *colo) enqueue(q *rreq) {
	c.next++
	q.sid = c.next
	c.reqs[q.sid] = q
	q.queue = qWaiting
	q.queuedAt = c.w.now
	q.owner = kv.Owner{Tenant: q.tenant}
	for k := range q.owner.ID {
		q.owner.ID[k] = byte(c.w.rng.Uint32())
	}
	q.hid = q.owner.ID
	c.coreStep(admission.Event{Kind: admission.EvArrive, ID: q.sid, Tenant: q.tenant, Cost: len(q.toks) + q.max})
}

// admitted reserves as engine.Colocated.reserve does.
func (c *colo) admitted(q *rreq) {
	w := c.w
	q.queue = qAdmitting
	if !q.m.Live() {
		q.queue = qOut
		c.coreStep(admission.Event{Kind: admission.EvDropped, ID: q.sid})
		return
	}
	var err error
	if c.b.Stats().Preempted > 0 {
		err = kv.ErrNoCapacity // preempted sequences get the room first
	} else {
		q.table, err = c.pool.Reserve(q.owner, kv.PagesFor(len(q.toks)+min(q.max, w.geo.PageSize), w.geo.PageSize))
	}
	if err != nil {
		w.res.NoRoom++
		q.queue = qWaiting
		c.coreStep(admission.Event{Kind: admission.EvNoRoom, ID: q.sid})
		return
	}
	w.res.QueueWaits = append(w.res.QueueWaits, w.now-q.queuedAt)
	w.logf("%v admitted to the colocated batch after %v (pages %s)", q, w.now-q.queuedAt, pagesText(q.table))
	q.queue = qRunning
	c.coreStep(admission.Event{Kind: admission.EvReserved, ID: q.sid})
	w.router.step(q, request.Event{Kind: request.EvReserved})
}

// start is the machine's prefill action: the sequence joins the batch.
func (c *colo) start(q *rreq) {
	w := c.w
	w.router.step(q, request.Event{Kind: request.EvPrefillStarted})
	table := q.table
	q.table = nil
	q.started = true
	q.stopColo = c.b.Add(q.owner, table, slices.Clone(q.toks), 0, q.max, true, samplings[q.si],
		func(it engine.DrivenItem) { c.item(q, it) },
		func(phase string) {
			q.preempts++
			w.res.Preemptions++
			w.res.ColoPreempted[phase]++
			w.logf("%v PREEMPTED in the colocated batch (%s) after %d tokens", q, phase, len(q.out))
			if w.chance(w.pl.p[FaultAfterPreempt]) {
				// Strike while it waits to resume or rebuilds its KV.
				w.count(FaultAfterPreempt)
				at := w.between(0, 2*decodeStep)
				if w.chance(0.5) {
					w.after(at, "disconnect after preemption", func() { w.router.disconnect(q, "disconnect-resumed") })
				} else {
					w.after(at, "abort after preemption", func() { w.router.routerAbort(q, "abort-resumed") })
				}
			}
		})
}

// item is lifecycle.scheduled: a sequence's item as the machine's event.
func (c *colo) item(q *rreq, it engine.DrivenItem) {
	r := c.w.router
	if (it.Done || it.Err != nil) && q.queue == qRunning {
		// Its pages are back (the batch releases before the end item).
		q.queue = qOut
		c.coreStep(admission.Event{Kind: admission.EvDone, ID: q.sid})
	}
	if !q.m.Live() {
		return // ended already (a cancel or a failure stopped it)
	}
	switch {
	case it.Err != nil:
		r.step(q, request.Event{Kind: request.EvFail, Code: codeOf(it.Err), Msg: it.Err.Error()})
	case it.Done && it.Finish == "cancelled":
		r.step(q, request.Event{Kind: request.EvCancel})
	case it.Done:
		if it.Prompt != len(q.toks) || it.Completion != len(q.out) {
			r.step(q, request.Event{Kind: request.EvFail, Code: "accounting", Msg: fmt.Sprintf("the batch reports %d+%d tokens, the request saw %d+%d", it.Prompt, it.Completion, len(q.toks), len(q.out))})
			return
		}
		r.step(q, request.Event{Kind: request.EvFinish, Reason: request.FinishedLength})
	case q.m.State() == request.Prefilling:
		r.step(q, request.Event{Kind: request.EvCommitted, Token: it.Token, Tokens: len(q.toks)})
	default:
		r.step(q, request.Event{Kind: request.EvToken, Token: it.Token})
	}
}

// leave is the request's end, for the colocated admission core.
func (c *colo) leave(q *rreq) {
	switch q.queue {
	case qWaiting:
		q.endedQueued = true
		c.w.res.EndedQueued++
		q.queue = qOut
		c.coreStep(admission.Event{Kind: admission.EvCancel, ID: q.sid})
	case qRunning:
		if q.started {
			return // the batch's end item gives the slot back
		}
		// Reserved, never started (ended between the two).
		q.queue = qOut
		_ = c.pool.Release(q.owner, q.table)
		q.table = nil
		c.coreStep(admission.Event{Kind: admission.EvDone, ID: q.sid})
	}
}

func (c *colo) kick() {
	if c.busy {
		return
	}
	c.busy = true
	c.w.after(decodeStep, "colocated step", func() {
		c.busy = false
		if c.b.Step() {
			c.kick()
		}
	})
}
