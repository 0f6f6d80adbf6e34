package sim

import (
	"errors"
	"fmt"
	"strings"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/request"
)

// router owns every request's life cycle: the real request.Machine (I1,
// I10), driven by this simulator's single-threaded orchestration of the
// handoff (reserve at decode, prefill with the reservation, the decode
// stream), following engine.Disaggregated's rules.
type router struct {
	w       *world
	reqs    []*rreq
	byID    map[kv.ID]*rreq
	retries int
}

const maxRetries = 8

// newReq registers a request with a fresh random handoff id.
func (r *router) newReq(prompt, max int, tenant string) *rreq {
	w := r.w
	q := &rreq{i: len(r.reqs), prompt: prompt, max: max, tenant: tenant, pending: map[int]item{}}
	q.toks = w.env.prompts[prompt]
	for k := range q.id {
		q.id[k] = byte(w.rng.Uint32())
	}
	q.m = newMachine()
	r.reqs = append(r.reqs, q)
	r.byID[q.id] = q
	return q
}

// rreq is one client request.
type rreq struct {
	i      int
	prompt int // index into env prompts
	toks   []int32
	max    int
	tenant string
	id     kv.ID
	m      *request.Machine
	res    *handoff.Reservation

	committed bool
	first     int32
	pending   map[int]item // decode stream items not yet consumed, by index
	nextIdx   int

	out      []int32 // what the client received
	end      request.Reason
	endMsg   string
	usage    [2]int
	kvBad    string // the oracle saw wrong KV behind this request's decode
	finished bool
}

func (r *router) alive() bool { return true }

func (q *rreq) String() string { return fmt.Sprintf("req%d(%s)", q.i, short(q.id)) }

// submit starts request q: admission (I2) through the machine (I1).
func (r *router) submit(q *rreq) {
	w := r.w
	w.logf("%v arrives: prompt %d tokens, max %d", q, len(q.toks), q.max)
	if len(q.toks)+q.max > w.ctx {
		r.step(q, request.Event{Kind: request.EvReject, Reason: request.RejectedContextLength,
			Msg: fmt.Sprintf("%d prompt + %d max tokens exceed the context of %d", len(q.toks), q.max, w.ctx)})
		return
	}
	r.step(q, request.Event{Kind: request.EvAdmit})
	// Faults that hit this request at a random later moment: any phase.
	if w.chance(w.pl.p[FaultDisconnect]) {
		w.after(w.faultTime(), "disconnect", func() {
			if q.m.Live() {
				w.count(FaultDisconnect)
				w.res.Phases["disconnect/"+r.phase(q)]++
				w.logf("%v client disconnects in %v", q, q.m.State())
			}
			r.step(q, request.Event{Kind: request.EvCancel})
		})
	}
	if w.chance(w.pl.p[FaultAbortRouter]) {
		w.after(w.faultTime(), "router abort", func() {
			if q.m.Live() {
				w.count(FaultAbortRouter)
				w.res.Phases["abort/"+r.phase(q)]++
				w.logf("%v router aborts in %v", q, q.m.State())
				r.step(q, request.Event{Kind: request.EvFail, Code: "aborted", Msg: "aborted by the router (injected)"})
			}
		})
	}
	if w.chance(w.pl.p[FaultAbortPrefill]) {
		w.after(w.faultTime(), "prefill abort", func() {
			if j := w.pre.job(q.id); j != nil && w.pre.up && !j.over {
				w.count(FaultAbortPrefill)
				w.logf("%v prefill gives the handoff up", q)
				j.stop(handoff.ErrAborted.With("prefill shutting down (injected)"))
			}
		})
	}
	w.after(requestDeadline, "deadline", func() {
		if q.m.Live() {
			w.logf("%v deadline in %v", q, q.m.State())
			r.step(q, request.Event{Kind: request.EvFail, Code: "timeout", Msg: "the request did not finish in time"})
		}
	})
}

// step applies an event and carries out the machine's actions. An illegal
// event is a bug in this orchestration or the machine: it is a violation.
func (r *router) step(q *rreq, ev request.Event) {
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
	switch a.Kind {
	case request.ActReserve:
		r.reserve(q)
	case request.ActPrefill:
		r.prefill(q)
	case request.ActEmit:
		q.out = append(q.out, a.Token)
	case request.ActAbortHandoff:
		r.abort(q, "request failed: "+string(q.m.Reason()))
	case request.ActStopDecode:
		// The machine has already set the reason: a cancel stops decoding
		// the normal way; a failure aborts; a normal finish needs nothing.
		switch reason := q.m.Reason(); {
		case reason == request.Cancelled:
			d := w.dec
			id := q.id
			w.send(fmt.Sprintf("router->decode#%d cancel %v", d.gen, q), d.alive, func() { d.cancel(id) })
		case reason != request.FinishedLength && reason != request.FinishedStop:
			r.abortDecode(q, "request failed while decoding")
		}
	case request.ActEnd:
		q.finished = true
		q.end, q.endMsg = a.Reason, a.Msg
		q.usage[0], q.usage[1] = q.m.Usage()
		w.logf("%v END %s %s (out %v)", q, a.Reason, a.Msg, q.out)
		if strings.HasPrefix(string(a.Reason), "failed_") && a.Reason != "failed_refused" && a.Reason != "failed_no_room" && r.retries < maxRetries && w.chance(w.pl.retry) {
			// Clients retry failures at once: the retry's reservation takes
			// the pages the failure just freed (LIFO), the reuse I6 is about.
			r.retries++
			n := r.newReq(q.prompt, q.max, q.tenant)
			w.after(w.between(0, msec), "retry", func() { r.submit(n) })
		}
	}
}

func (r *router) reserve(q *rreq) {
	w := r.w
	d := w.dec
	m := &handoff.Reserve{Handoff: q.id, Tenant: q.tenant, PromptTokens: len(q.toks), MaxTokens: q.max}
	w.rpc(fmt.Sprintf("router->decode#%d reserve %v", d.gen, q), r.alive, d.alive, rpcTimeout,
		func() func() {
			res, err := d.reserve(m)
			return func() { r.reserved(q, res, err) }
		},
		func() { r.reserved(q, nil, handoff.ErrTransport.With("reserve timed out")) })
}

func (r *router) reserved(q *rreq, res *handoff.Reservation, err error) {
	w := r.w
	if err != nil {
		if errors.Is(err, handoff.ErrTransport) {
			// Unknown outcome: the pages may be reserved. Abort (harmless if not).
			r.abortDecode(q, "reserve outcome unknown")
		}
		if errors.Is(err, handoff.ErrRefused) {
			w.count(FaultBurst)
		}
		if q.m.Live() {
			r.step(q, request.Event{Kind: request.EvFail, Code: codeOf(err), Msg: err.Error()})
		}
		return
	}
	if !q.m.Live() || q.m.State() != request.Admitted {
		// Cancelled or failed while the reservation was on its way.
		r.abortDecode(q, "request ended before its reservation arrived")
		return
	}
	q.res = res
	r.step(q, request.Event{Kind: request.EvReserved})
}

func (r *router) prefill(q *rreq) {
	w := r.w
	p := w.pre
	r.step(q, request.Event{Kind: request.EvPrefillStarted})
	pr := &handoff.PrefillRequest{Handoff: q.id, Tenant: q.tenant, Tokens: q.toks, Reservation: q.res}
	var claim func() bool
	claim = w.rpc(fmt.Sprintf("router->prefill#%d prefill %v", p.gen, q), r.alive, p.alive, w.prefillTimeout,
		func() func() {
			// The answer comes when the transfer is over, as its own message.
			p.start(pr, func(x *handoff.PrefillResult, e error) { r.prefillReply(q, p, claim, x, e) })
			return nil
		},
		func() { r.prefilled(q, nil, handoff.ErrTransport.With("prefill timed out")) })
}

// prefillReply sends the prefill worker's answer back over the network.
func (r *router) prefillReply(q *rreq, p *prefill, claim func() bool, res *handoff.PrefillResult, err error) {
	w := r.w
	if !p.up {
		return
	}
	w.send(fmt.Sprintf("prefill#%d->router result %v", p.gen, q), r.alive, func() {
		if claim() {
			r.prefilled(q, res, err)
		}
	})
}

func (r *router) prefilled(q *rreq, res *handoff.PrefillResult, err error) {
	if q.committed || !q.m.Live() {
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
	if res.Tokens != len(q.toks) {
		r.step(q, request.Event{Kind: request.EvFail, Code: "count_mismatch", Msg: "prefill reports a different prompt length"})
		return
	}
	q.committed = true
	q.first = res.FirstToken
	r.step(q, request.Event{Kind: request.EvCommitted, Token: res.FirstToken, Tokens: res.Tokens})
	r.drainStream(q)
}

// onStream takes a decode stream item; items are consumed in index order
// and only after the prefill's success (the router reports success only
// when both sides succeeded).
func (r *router) onStream(id kv.ID, it item) {
	q := r.byID[id]
	if q == nil || !q.m.Live() {
		return
	}
	if _, dup := q.pending[it.idx]; dup || it.idx < q.nextIdx {
		return
	}
	q.pending[it.idx] = it
	// A failure ends the request at once, committed or not.
	if it.err != nil && it.err != errCancelled {
		r.step(q, request.Event{Kind: request.EvFail, Code: codeOf(it.err), Msg: it.err.Error()})
		return
	}
	r.drainStream(q)
}

func (r *router) drainStream(q *rreq) {
	for q.committed && q.m.Live() {
		it, ok := q.pending[q.nextIdx]
		if !ok {
			return
		}
		delete(q.pending, q.nextIdx)
		q.nextIdx++
		switch {
		case it.done && it.err == errCancelled:
			if q.m.Live() {
				r.step(q, request.Event{Kind: request.EvFail, Code: "cancelled_by_decode", Msg: "decode stopped the request"})
			}
		case it.done:
			if it.completion != len(q.out) || it.prompt != len(q.toks) {
				r.step(q, request.Event{Kind: request.EvFail, Code: "accounting", Msg: fmt.Sprintf("decode reports %d+%d tokens, router saw %d+%d", it.prompt, it.completion, len(q.toks), len(q.out))})
				return
			}
			r.step(q, request.Event{Kind: request.EvFinish, Reason: request.FinishedLength})
		case it.idx == 0:
			if it.tok != q.first {
				r.step(q, request.Event{Kind: request.EvFail, Code: "first_token_mismatch", Msg: "decode's first token differs from prefill's"})
			}
		default:
			r.step(q, request.Event{Kind: request.EvToken, Token: it.tok})
		}
	}
}

func (r *router) abort(q *rreq, reason string) {
	r.abortDecode(q, reason)
	w := r.w
	p := w.pre
	id := q.id
	w.send(fmt.Sprintf("router->prefill#%d abort %v", p.gen, q), p.alive, func() {
		if j := p.job(id); j != nil {
			j.stop(handoff.ErrAborted.With("%s", reason))
		}
	})
}

func (r *router) abortDecode(q *rreq, reason string) {
	w := r.w
	d := w.dec
	a := &handoff.Abort{Handoff: q.id, Reason: reason}
	w.send(fmt.Sprintf("router->decode#%d abort %v", d.gen, q), d.alive, func() { d.abort(a) })
}

// otherPages are pages reserved for live handoffs other than id: what a
// misbehaving prefill peer that confuses handoffs would write into.
func (r *router) otherPages(id kv.ID) []kv.PageRef {
	var out []kv.PageRef
	for _, q := range r.reqs {
		if q.id != id && q.res != nil && q.m.Live() {
			out = append(out, q.res.Pages...)
		}
	}
	return out
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
	return "internal"
}

func newMachine() *request.Machine { return request.New(request.Disaggregated) }

// holder names the live request (other than id) whose reservation holds a
// page, for the trace of a late write.
func (r *router) holder(id kv.ID, page uint32) string {
	for _, q := range r.reqs {
		if q.id == id || q.res == nil || !q.m.Live() {
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

// phase names where a request's handoff is, finer than the machine's
// state: the prefilling state spans compute, transfer and commit.
func (r *router) phase(q *rreq) string {
	st := q.m.State()
	if st != request.Prefilling {
		return st.String()
	}
	j := r.w.pre.job(q.id)
	switch {
	case j == nil:
		return "prefilling(queued or answering)"
	case j.snd == nil:
		return "prefilling(compute)"
	case j.fed == len(q.toks) && !j.over:
		return "prefilling(transfer or commit)"
	}
	return "prefilling"
}
