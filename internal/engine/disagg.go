package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/request"
	"sluice/internal/sched"
)

// DisaggConfig configures the orchestration half of a disaggregated engine.
type DisaggConfig struct {
	// Model and Vocab are reported by Info.
	Model string
	Vocab int
	// Fingerprint is the model the router tokenizes for (I13): every
	// Reserve and Prefill carries it, workers of another model refuse
	// them, and a reservation naming another model is not used.
	Fingerprint model.Fingerprint
	// Context is the effective context: the minimum of the configured
	// context and every role's pool capacity (I2). EffectiveContext
	// computes it from the roles' numbers.
	Context int
	// MaxConcurrency bounds requests holding decode pages at once
	// (default 64); more wait in the queue.
	MaxConcurrency int
	// MaxQueue bounds waiting requests (default 256; beyond: 429) and
	// QueueTimeout how long one may wait (default 30s; then 503).
	MaxQueue     int
	QueueTimeout time.Duration
	// MaxMigrations bounds how many times one request's stream may move
	// to another pair after its first token because its decode worker or
	// the link to it failed (run; default 3; negative: never, the stream
	// ends with the error as before).
	MaxMigrations int
	// MaxRetries bounds how many times one request moves to another pair
	// after an attempt failed before any token reached the client (a
	// decode worker that refused, left or died between the pick and the
	// reserve, a prefill worker that could not push): each retry avoids
	// every pair that already failed the request. Default
	// DefaultMaxRetries; negative: never (the first failure stands).
	MaxRetries int
	// Unsafe: TEST AND DEMO HOOK ONLY (see Unsafe).
	Unsafe Unsafe
}

// EffectiveContext is the smallest of the given contexts and capacities,
// ignoring non-positive entries (I2).
func EffectiveContext(limits ...int) int {
	best := 0
	for _, l := range limits {
		if l > 0 && (best == 0 || l < best) {
			best = l
		}
	}
	return best
}

// Disaggregated implements Engine over any handoff.Prefill and
// handoff.Decode (in-process, TCP, shm): admission, Reserve on decode,
// Prefill on prefill, tokens streamed from decode. A request succeeds only
// when both roles succeeded.
type Disaggregated struct {
	cfg   DisaggConfig
	pairs Pairer
	adm   *admission

	// bg outlives client requests: a client disconnect must not cancel the
	// prefill's context and tear a transfer (I10). Close cancels it last.
	bg       context.Context
	bgCancel context.CancelFunc
	migrated atomic.Int64
	revoked  atomic.Int64
	// sameRetried counts retries on the pair that just failed (SamePairer).
	sameRetried atomic.Int64
	// phases are the requests' first-token phases seen here (phases.go).
	phases phases
}

var _ Engine = (*Disaggregated)(nil)

// Pair is the two workers one attempt of a request runs on.
type Pair struct {
	Prefill handoff.Prefill
	Decode  handoff.Decode
	// DecodeName names the decode worker to the prefill worker
	// (PrefillRequest.Decode) when prefill pushes to several; "" with one.
	DecodeName string
	// Done, when set, is called once when the attempt ends: both errors
	// nil on success, else the failing role's error (a transport error
	// tells the pairer that worker stopped answering).
	Done func(prefillErr, decodeErr error)
}

func (p *Pair) done(prefillErr, decodeErr error) {
	if p.Done != nil {
		p.Done(prefillErr, decodeErr)
	}
}

// Pairer chooses the workers of each attempt of a request. avoid is, when
// the engine retries or migrates, every pair that failed this request so
// far (the latest maxFailedPairs), the latest last (nil otherwise); an
// error means no pair can take the request (with avoid: no other pair, so
// the last failure stands; a migration then asks once more avoiding only
// the pair it leaves, moveAvoids).
// router/node implements it over many workers (internal/cluster
// decides); one fixed pair is NewDisaggregated's.
type Pairer interface {
	Pair(r *Request, avoid []*Pair) (*Pair, error)
}

// DefaultMaxRetries is DisaggConfig.MaxRetries's default: enough for a
// request to get past two decode workers leaving at once (a scale-down
// by two, which the Kubernetes check does) and one more failure.
const DefaultMaxRetries = 3

// SamePairer is a Pairer that can give a request one more attempt on the
// workers of the pair that just failed it (Again): the engine asks when a
// failure before the first token was the link's (connFailure) and no
// other pair is left, so that a lone pair (one prefill and one decode
// worker) survives a connection lost under load as a pool of pairs does.
// The attempt is a new one (a new handoff id and reservation; the failed
// handoff was aborted, I6), on a fresh connection when the old one died
// (tcp.Redialer dials again). Again may refuse (the worker left).
type SamePairer interface {
	Again(r *Request, failed *Pair) (*Pair, error)
}

type fixedPair struct{ p Pair }

func (f fixedPair) Pair(_ *Request, avoid []*Pair) (*Pair, error) {
	if len(avoid) > 0 {
		return nil, errors.New("one prefill and one decode worker: no other pair to retry on")
	}
	p := f.p
	return &p, nil
}

// Again gives the one pair again (SamePairer).
func (f fixedPair) Again(*Request, *Pair) (*Pair, error) {
	p := f.p
	return &p, nil
}

// NewDisaggregated builds the orchestrator over one prefill and one decode
// worker.
func NewDisaggregated(cfg DisaggConfig, prefill handoff.Prefill, decode handoff.Decode) (*Disaggregated, error) {
	if prefill == nil || decode == nil {
		return nil, errf(CodeInvalid, 500, nil, "a disaggregated engine needs both a prefill and a decode service")
	}
	return NewDisaggregatedPairs(cfg, fixedPair{Pair{Prefill: prefill, Decode: decode}})
}

// NewDisaggregatedPairs builds the orchestrator over a Pairer: each
// request runs on the pair it returns, and a request whose handoff fails
// before any token reached the client is retried on another pair, at
// most MaxRetries times (new handoff id, new reservation; the failed one
// is aborted, I6).
func NewDisaggregatedPairs(cfg DisaggConfig, pairs Pairer) (*Disaggregated, error) {
	if pairs == nil {
		return nil, errf(CodeInvalid, 500, nil, "a disaggregated engine needs a pairer")
	}
	if cfg.Context <= 0 {
		return nil, errf(CodeInvalid, 500, nil, "a disaggregated engine needs its effective context (got %d)", cfg.Context)
	}
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = 64
	}
	bg, cancel := context.WithCancel(context.Background())
	return &Disaggregated{cfg: cfg, pairs: pairs,
		adm: newAdmission(sched.Config{MaxQueue: cfg.MaxQueue, QueueTimeout: cfg.QueueTimeout,
			MaxRunning: cfg.MaxConcurrency, Quantum: cfg.Context}),
		bg: bg, bgCancel: cancel}, nil
}

// Info implements Engine.
func (d *Disaggregated) Info() Info {
	return Info{Model: d.cfg.Model, Context: d.cfg.Context, Vocab: d.cfg.Vocab}
}

// Close implements Engine.
func (d *Disaggregated) Close(ctx context.Context) error {
	err := d.adm.close(ctx)
	d.bgCancel()
	return err
}

// Submit implements Engine. The request's life-cycle machine decides every
// step: Reserve happens only on its reserve action, Prefill only on its
// prefill action, tokens reach the client only as its emit actions (I1).
func (d *Disaggregated) Submit(ctx context.Context, r *Request) (Stream, error) {
	st := newStream(min(max(r.MaxTokens, 0), d.cfg.Context))
	cur := &currentHandoff{id: newID(), arrived: time.Now(), first: st.firstPhases}
	var (
		lc      *lifecycle
		res     *handoff.Reservation
		reserve bool
	)
	lc = newLifecycle(request.Disaggregated, func(a request.Action, e *Error, prompt, completion int) {
		switch a.Kind {
		case request.ActReserve:
			// Carried out below (or by run, after a preemption): the
			// request waits in the queue for its turn and for room in the
			// decode pool.
			reserve = true
		case request.ActPrefill:
			// Started by run once the stream is open.
		case request.ActEmit:
			st.push(outcome{token: a.Token, logprobs: lc.lp})
		case request.ActAbortHandoff:
			d.abort(cur.pair().Decode, cur.get(), string(a.Reason)+": "+a.Msg)
		case request.ActStopDecode:
			_ = cur.pair().Decode.Cancel(d.bg, cur.get())
		case request.ActEnd:
			o := terminal(a, e, prompt, completion)
			o.cached = int(cur.cached.Load())
			st.push(o)
		}
	})
	if err := checkRequest(r, d.cfg.Context, d.cfg.Vocab, d.cfg.Unsafe.NoAdmission); err != nil {
		e := err.(*Error)
		lc.reject(e)
		return nil, e
	}
	tk, e := d.adm.arrive(r.Tenant, r.Weight, requestCost(r))
	if e != nil {
		lc.reject(e)
		return nil, e
	}
	lc.step(request.Event{Kind: request.EvAdmit}, nil)
	if !reserve {
		tk.leave()
		return nil, errf(CodeInternal, http.StatusInternalServerError, nil, "admission did not ask for a reservation")
	}
	p, perr := d.pairs.Pair(r, nil)
	if perr != nil {
		tk.leave()
		// perr names workers by address and why each was dropped: the
		// router logs it (the cause); the tenant gets no internal address.
		e := errf(CodeOverloaded, http.StatusServiceUnavailable, perr, "no prefill and decode workers can take this request now (a worker is not answering or cannot serve this model); retry later")
		lc.queueEnd(e)
		return nil, e
	}
	cur.setPair(cur.get(), p)
	at := &attempts{max: d.maxRetries()}
	// full: the request already moved once off a decode worker with no
	// room; it then waits in the queue for pages (that move is not a
	// failure and spends nothing of the retry budget).
	full := false
	tryReserve := func() (bool, *Error) {
		for {
			var e *Error
			var noRoom bool
			res, noRoom, e = d.reserve(ctx, tk, at, r, cur.pair().Decode, cur.get())
			if (e == nil && !noRoom) || ctx.Err() != nil {
				return noRoom, e
			}
			var cause error = handoff.ErrNoRoom
			if e != nil {
				// Refused, unreachable or gone: another pair, with a new
				// handoff id (the failed reserve was aborted if its
				// outcome was unknown), while the budget lasts. A full one
				// kept nothing: once, another pair, then the queue.
				if !retryable(e) {
					return noRoom, e
				}
				cause = e.Err
			} else if full {
				return noRoom, e
			}
			var p2 *Pair
			if e == nil {
				p2 = d.nextPair(r, cur, at, true)
			} else {
				p2 = d.retryPair(r, cur, at, connFailure(e.Err))
			}
			if p2 == nil {
				return noRoom, e
			}
			if e == nil {
				full = true
			}
			cur.pair().done(nil, cause)
			cur.setPair(newID(), p2)
		}
	}
	if e := tk.wait(ctx, tryReserve); e != nil {
		cur.pair().done(nil, e.Err)
		lc.queueEnd(e)
		return nil, e
	}
	id := cur.get()
	cur.reserved()
	lc.step(request.Event{Kind: request.EvReserved}, nil)
	sp := handoff.StreamParams{Sampling: r.Sampling, IgnoreEOS: r.IgnoreEOS}
	if r.Sampling.UsesPrompt() {
		sp.Prompt = r.Prompt
	}
	ts, err := cur.pair().Decode.Stream(d.bg, id, sp)
	for err != nil && ctx.Err() == nil {
		if dr, _ := openFailed(false, err); dr.retry == nil {
			break // another pair would fail the same way, or I8
		}
		// Nothing reached the client: another pair while the budget
		// lasts (the machine's retry aborts this handoff, I6) and a new
		// reservation.
		p2 := d.retryPair(r, cur, at, connFailure(err))
		if p2 == nil {
			break
		}
		if _, ok := lc.step(request.Event{Kind: request.EvRetry, Code: CodeHandoff, Msg: err.Error()}, nil); !ok || !lc.live() {
			p2.done(nil, nil) // never used
			break
		}
		cur.pair().done(nil, err)
		tk.requeue(r.Tenant)
		cur.setPair(newID(), p2)
		if e := tk.wait(ctx, tryReserve); e != nil {
			cur.pair().done(nil, e.Err)
			lc.queueEnd(e)
			return nil, e
		}
		lc.step(request.Event{Kind: request.EvReserved}, nil)
		id = cur.get()
		ts, err = cur.pair().Decode.Stream(d.bg, id, sp)
	}
	if err != nil {
		dr, e := openFailed(false, err)
		if e == nil {
			e = dr.retry // the retry budget ran out, or no other pair
		}
		lc.fail(e) // aborts the handoff: its pages are released
		cur.pair().done(nil, err)
		tk.done()
		return nil, e
	}
	// gone ends a wait for a new reservation after a preemption when the
	// client leaves (or the router stops the request).
	gone, leave := context.WithCancel(d.bg)
	st.cancelFn = func() {
		leave()
		lc.step(request.Event{Kind: request.EvCancel}, nil)
	}
	st.watch(ctx, leave)
	go d.run(r, cur, res, ts, lc, tk, gone, at)
	return st, nil
}

// currentHandoff is the id of a request's current handoff: a preempted
// request resumes with a new one, and the life-cycle actions (abort,
// stop) must name the live one.
type currentHandoff struct {
	mu sync.Mutex
	id kv.ID
	// cached is the prompt tokens the first handoff's prefill read from its
	// prefix cache (usage cached_tokens).
	cached atomic.Int64
	p      *Pair // the workers of the current handoff
	// arrived is the request's arrival and reservedAt its latest
	// reservation's time (the first-token phases, phases.go); first
	// sets the phases the first token's event carries (Event.Phases).
	arrived, reservedAt time.Time
	first               func([]PhaseTime)
}

// reserved notes the time of a new reservation.
func (c *currentHandoff) reserved() {
	c.mu.Lock()
	c.reservedAt = time.Now()
	c.mu.Unlock()
}

func (c *currentHandoff) pair() *Pair {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.p
}

func (c *currentHandoff) setPair(id kv.ID, p *Pair) {
	c.mu.Lock()
	c.id, c.p = id, p
	c.mu.Unlock()
}

func (c *currentHandoff) get() kv.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

func (c *currentHandoff) set(id kv.ID) {
	c.mu.Lock()
	c.id = id
	c.mu.Unlock()
}

// reserve asks decode for pages. No room now (noRoom) sends the request
// back to the queue; another refusal is "overloaded" (retryable); a
// transport failure leaves the outcome unknown, so the handoff is aborted.
// A client leaving during the call (ctx) makes its outcome unknown too:
// the Abort then overtakes the Reserve, which decode refuses (I6).
//
// The Reserve carries the tenant's weight for decode's KV quota, and asks
// for a reservation decode may not revoke once the request's were revoked
// handoff.MaxRevocations times (at.revoked).
func (d *Disaggregated) reserve(ctx context.Context, tk *ticket, at *attempts, r *Request, dec handoff.Decode, id kv.ID) (*handoff.Reservation, bool, *Error) {
	if tk != nil {
		tk.overShare = false // this attempt's answer only
	}
	// The prompt's ids let decode look up its own prefix cache (salted
	// there with the authenticated tenant, I11); a decode worker without
	// a cache ignores them.
	res, err := dec.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: r.Tenant, PromptTokens: len(r.Prompt), MaxTokens: r.MaxTokens, Model: d.cfg.Fingerprint,
		Tokens: r.Prompt, CacheScope: r.CacheScope, Weight: min(max(r.Weight, 1), handoff.MaxWeight), NoRevoke: at != nil && at.revoked >= handoff.MaxRevocations})
	if err == nil {
		if err = handoff.CheckModel(d.cfg.Fingerprint, res.Model, "the decode worker"); err == nil {
			return res, false, nil
		}
		// Defence in depth: decode checked the Reserve's fingerprint; one
		// that did not is not used either.
		d.abort(dec, id, err.Error())
	}
	if errors.Is(err, handoff.ErrNoRoom) && ctx.Err() == nil {
		// Nothing was kept on decode: wait in the queue, first in line;
		// or, refused for its tenant's KV share, behind the other
		// tenants (the queue passes over this tenant alone).
		if tk != nil && errors.Is(err, handoff.ErrOverShare) {
			tk.overShare = true
		}
		return nil, true, nil
	}
	if errors.Is(err, handoff.ErrTransport) || ctx.Err() != nil {
		d.abort(dec, id, "reserve outcome unknown")
	}
	if ctx.Err() != nil {
		// The client left during the call (the Abort above overtakes
		// the Reserve, I6): its own doing, not a failed handoff (which
		// the router logs as an error and counts as handoff_failed).
		return nil, false, errf(CodeCancelled, StatusClientClosed, nil, "the client disconnected while its decode pages were being reserved")
	}
	if errors.Is(err, handoff.ErrRefused) {
		return nil, false, errf(CodeOverloaded, http.StatusTooManyRequests, err, "the decode worker refused this request now (%v); retry later", err)
	}
	return nil, false, asEngineError(err, CodeHandoff, http.StatusBadGateway, "reserving decode pages")
}

func (d *Disaggregated) abort(dec handoff.Decode, id kv.ID, reason string) {
	_ = dec.Abort(d.bg, &handoff.Abort{Handoff: id, Reason: reason})
}

// handoffFailure classifies a failed handoff: verification failures are
// integrity errors (I8), the rest a failed handoff.
func handoffFailure(cause error) *Error {
	if rf := requestFault(cause); rf != nil {
		return rf
	}
	if errors.Is(cause, handoff.ErrCountMismatch) || errors.Is(cause, handoff.ErrCoverage) ||
		errors.Is(cause, handoff.ErrDigestMismatch) || errors.Is(cause, handoff.ErrDigestMissing) ||
		errors.Is(cause, handoff.ErrBadWrite) || errors.Is(cause, handoff.ErrChecksum) {
		return errf(CodeIntegrity, http.StatusInternalServerError, cause,
			"the KV handoff failed verification; the request was stopped and its pages quarantined")
	}
	if errors.Is(cause, handoff.ErrPrefillRefused) {
		// Named as the prefill worker's: never blamed on decode.
		return errf(CodeHandoff, http.StatusBadGateway, cause, "the prefill worker refused the prompt (%v)", cause)
	}
	return asEngineError(cause, CodeHandoff, http.StatusBadGateway, "the disaggregated request")
}

// run drives one request after its reservation: prefill (which pushes and
// commits), decode's tokens through the life-cycle machine, and the final
// verdict, which is success only when both roles succeeded.
//
// When decode preempts the sequence (it could not grow it and released its
// pages: the stream ends "preempted"), the request goes back to the head
// of the queue and resumes with a NEW handoff whose prompt is the prompt
// plus every token generated so far and whose sampler continues the same
// random stream; the client's stream just continues (batch-invariant
// kernels make the rebuilt KV, and so the output, exactly the
// un-preempted one). Usage still counts the prompt once (I9).
//
// A handoff that fails before its commit (no token reached the client) is
// retried on another pair the Pairer gives, avoiding every pair that
// failed the request, while the request's retry budget (MaxRetries) lasts:
// the failed handoff is aborted (I6) and the request reserves again with a
// new id.
//
// After the first token, a failure of the decode worker or of the link to
// it (a transport failure: the worker died, hung past the heartbeat or was
// cut off; never an integrity failure or a refusal), or a transport
// failure of a resumed handoff before its commit (the new decode worker
// died too, or the prefill worker did), or its stream failing to open
// right after the new reservation (openFailed), migrates the stream:
// exactly a preemption's resume, on a new pair that avoids the failed
// decode worker and every earlier one that failed the request while
// another is left (movePair). The new handoff carries the prompt plus
// every token already sent, the sampler continues at the same offset, and
// batch-invariant kernels rebuild the same KV, so the client's stream goes
// on bit for bit as if nothing had happened. At most MaxMigrations times
// per request; then, or with no other pair, the stream ends with the error.
func (d *Disaggregated) run(r *Request, cur *currentHandoff, res *handoff.Reservation, ts handoff.TokenStream, lc *lifecycle, tk *ticket, gone context.Context, at *attempts) {
	defer tk.done()
	var gen []int32 // tokens generated so far, over every handoff
	var dr driveResult
	migrations := 0
	defer func() { cur.pair().done(dr.perr, dr.derr) }()
	// repairAfresh: a preempted or revoked request's next handoff is an
	// ordinary new one, so it may go to any pair: paired afresh, it
	// leaves the decode worker that just ran out of pages for one with
	// more free (the pairer's scores); with no pair to be had it stays on
	// its own.
	repairAfresh := func() {
		if p2, err := d.pairs.Pair(r, nil); err == nil {
			cur.pair().done(dr.perr, dr.derr)
			dr = driveResult{}
			cur.setPair(newID(), p2)
		} else {
			cur.set(newID())
		}
	}
	for {
		if ts != nil {
			dr = d.drive(r, cur.get(), cur.pair(), res, ts, lc, &gen, cur)
			ts.Close()
		}
		// else the stream did not open after the latest reservation: dr
		// says what that leads to (openFailed), as for a handoff that
		// failed at once.
		// retrying: this attempt failed before any token reached the
		// client; its new reservation below spends the retry budget.
		// A revoked reservation of a request that sent nothing yet is
		// in the same place.
		retrying := dr.retry != nil || (dr.revoked && len(gen) == 0)
		if dr.revoked {
			// Decode took the reservation back before its commit for a
			// tenant waiting within its KV share: back to the queue, as a
			// preemption (no failure, nothing of --max-retries spent; at
			// most handoff.MaxRevocations times, then its Reserve asks for
			// a reservation decode keeps). Paired afresh like a
			// preemption's resume.
			if !lc.move(request.Event{Kind: request.EvRevoked}) {
				return // the request ended meanwhile (a cancel took effect)
			}
			at.revoked++
			d.revoked.Add(1)
			tk.requeue(r.Tenant)
			repairAfresh()
		} else if dr.retry != nil {
			var p2 *Pair
			if gone.Err() == nil {
				p2 = d.retryPair(r, cur, at, dr.conn)
			}
			if p2 == nil {
				lc.fail(dr.retry)
				return
			}
			if !lc.move(request.Event{Kind: request.EvRetry, Code: dr.retry.Code, Msg: dr.retry.Message}) {
				p2.done(nil, nil) // never used
				return            // the request ended meanwhile (a cancel took effect)
			}
			cur.pair().done(dr.perr, dr.derr)
			dr = driveResult{}
			tk.requeue(r.Tenant)
			cur.setPair(newID(), p2)
		} else if dr.migrate != nil {
			var p2 *Pair
			if migrations < d.maxMigrations() && gone.Err() == nil {
				p2 = d.movePair(r, cur, at)
			}
			if p2 == nil {
				lc.fail(dr.migrate)
				return
			}
			if !lc.move(request.Event{Kind: request.EvPreempted}) {
				p2.done(nil, nil) // never used
				return            // the request ended meanwhile (a cancel took effect)
			}
			migrations++
			d.migrated.Add(1)
			d.abort(cur.pair().Decode, cur.get(), "migrated after its decode stream failed: "+dr.migrate.Message)
			cur.pair().done(dr.perr, dr.derr)
			dr = driveResult{}
			tk.requeue(r.Tenant)
			cur.setPair(newID(), p2)
		} else if !dr.preempted {
			return
		} else {
			if !lc.move(request.Event{Kind: request.EvPreempted}) {
				return // the request ended meanwhile (a cancel took effect)
			}
			tk.requeue(r.Tenant)
			repairAfresh() // the resume is an ordinary new handoff
		}
		id := cur.get()
		again := *r
		again.Prompt = append(slices.Clone(r.Prompt), gen...)
		again.MaxTokens = r.MaxTokens - len(gen)
		if e := tk.wait(gone, func() (bool, *Error) {
			for {
				var e *Error
				var noRoom bool
				res, noRoom, e = d.reserve(gone, tk, at, &again, cur.pair().Decode, id)
				if e == nil || !retryable(e) || gone.Err() != nil {
					return noRoom, e
				}
				if retrying {
					// Still no token sent: a retry, as at the first
					// attempt's reserve (Submit), within --max-retries
					// and avoiding every pair that failed the request.
					p2 := d.retryPair(r, cur, at, connFailure(e.Err))
					if p2 == nil {
						return noRoom, e
					}
					cur.pair().done(nil, e.Err)
					id = newID()
					cur.setPair(id, p2)
					continue
				}
				if migrations >= d.maxMigrations() {
					return noRoom, e
				}
				// The new decode worker refused (it is draining) or is
				// gone: the stream moves on once more, avoiding it and
				// every worker that failed the request, as a migration
				// (nothing of this handoff exists anywhere).
				p2 := d.movePair(r, cur, at)
				if p2 == nil {
					return noRoom, e
				}
				migrations++
				d.migrated.Add(1)
				cur.pair().done(nil, e.Err)
				id = newID()
				cur.setPair(id, p2)
			}
		}); e != nil {
			lc.queueEnd(e)
			return
		}
		cur.reserved()
		lc.step(request.Event{Kind: request.EvReserved}, nil)
		var err error
		sp := handoff.StreamParams{Sampling: r.Sampling, IgnoreEOS: r.IgnoreEOS, Generated: slices.Clone(gen)}
		if r.Sampling.UsesPrompt() {
			sp.Prompt = r.Prompt
		}
		ts, err = cur.pair().Decode.Stream(d.bg, id, sp)
		if err != nil {
			// The link or the worker failed in the few milliseconds
			// since the reservation: a move like any other (the loop
			// above aborts the reservation, I6, and bounds the moves),
			// unless openFailed says the failure stands.
			ts = nil
			var fail *Error
			if dr, fail = openFailed(len(gen) > 0, err); fail != nil {
				lc.fail(fail)
				return
			}
		}
	}
}

// drive runs one handoff: prefill of prompt (the request's, or a resumed
// request's prompt + generated tokens), decode's tokens appended to gen.
// It reports whether decode preempted the sequence, or, for a failure
// before any token of the request reached the client (and not an
// integrity failure), the error to retry on (the request is still live).
func (d *Disaggregated) drive(r *Request, id kv.ID, p *Pair, res *handoff.Reservation, ts handoff.TokenStream, lc *lifecycle, gen *[]int32, cur *currentHandoff) (dr driveResult) {
	cached := &cur.cached
	prompt := append(slices.Clone(r.Prompt), (*gen)...)
	offset := len(*gen)
	lc.step(request.Event{Kind: request.EvPrefillStarted}, nil)
	type pres struct {
		r   *handoff.PrefillResult
		err error
	}
	pch := make(chan pres, 1)
	// pctx is this attempt's prefill, ended when the router gives the
	// prompt up before its commit (decode revoked the reservation): the
	// prefill worker, in process or remote, stops the prompt at its next
	// step boundary instead of computing it to the end. Derived from
	// d.bg, not the client's context: a disconnect never tears the
	// transfer (I10). drive returns only once the prefill has (every
	// return path waits for it), so stopPrefill then only releases pctx.
	// It names the tenant and its weight: a TCP client hands its call
	// slots out by them (handoff.WithCaller).
	pctx, stopPrefill := context.WithCancel(handoff.WithCaller(d.bg, r.Tenant, r.Weight))
	defer stopPrefill()
	// committed: decode's first token of this handoff reached the loop
	// below; it is the commit's, so decode verified the handoff (I5).
	var committed atomic.Bool
	go func() {
		pr, err := p.Prefill.Prefill(pctx, &handoff.PrefillRequest{Handoff: id, Tenant: r.Tenant, Tokens: prompt, Reservation: res,
			Sampling: r.Sampling, SampleOffset: offset, Model: d.cfg.Fingerprint, Decode: p.DecodeName, CacheScope: r.CacheScope,
			Weight: min(max(r.Weight, 1), handoff.MaxWeight)})
		// The handoff did not commit, or its outcome is unknown: abort
		// it on decode now (the Prefill contract asks the router to): an
		// unreachable prefill worker aborted nothing, and decode's
		// stream, which the loop below waits on, ends only with the
		// abort. Not when the link lost the answer after decode's first
		// token arrived: the commit was verified, and an abort would
		// stop a sequence that decodes as it should (decode refuses any
		// late write of a committed handoff).
		if err != nil && !(committed.Load() && errors.Is(err, handoff.ErrTransport)) {
			d.abort(p.Decode, id, "prefill failed: "+err.Error())
		}
		pch <- pres{pr, err}
	}()
	var got *pres
	waitPrefill := func() *pres {
		if got == nil {
			p := <-pch
			got = &p
			dr.perr = p.err
		}
		return got
	}
	first := true
	// canRetry: nothing of this request reached the client yet.
	canRetry := func() bool { return first && offset == 0 && lc.live() }
	for {
		tok, err := ts.Recv()
		if err == io.EOF {
			err = errStreamEnded
		}
		if err == nil && tok.Err != nil {
			err = tok.Err
		}
		if err != nil && first && lc.live() && errors.Is(err, handoff.ErrRevoked) {
			// Decode revoked the reservation before the commit (its
			// tenant held more than its KV share while another waited):
			// the prefill, whose next write decode refuses, ends with an
			// abort (waited for, so the pair's accounting stays right);
			// the request goes back to the queue (run). The prefill
			// worker is told at once (stopPrefill): a remote one would
			// otherwise compute on until its next write is refused, or to
			// the end of a prompt that writes nothing before (a prompt
			// still in its queue, HandoffAfterPrefill).
			stopPrefill()
			waitPrefill()
			dr.revoked = true
			return dr
		}
		if got == nil {
			select {
			case p := <-pch:
				got = &p
				dr.perr = p.err
			default:
			}
		}
		if got != nil && got.err != nil && lc.live() && !canRetry() && !migratable(got.err) {
			// Prefill failed after decode started: the request fails now
			// (decode is told to stop); the loop still reads decode's
			// stream to its end so nothing of it outlives the request.
			// (Before any token, the abort above ends decode's stream and
			// the failure below may be retried.) A transport failure of
			// the prefill worker or its link is not the request's: the
			// abort sent above ends decode's stream, and the stream
			// migrates below (or decode finished first, see tok.Done).
			lc.fail(asEngineError(got.err, CodeHandoff, http.StatusBadGateway, "prefill"))
		}
		if err != nil {
			// A prefill error, if any, says more precisely what failed.
			cause := err
			if p := waitPrefill(); p.err != nil {
				cause = p.err
			} else {
				dr.derr = err
			}
			e := handoffFailure(cause)
			if de := handoffFailure(err); de.Code == CodeIntegrity {
				// Decode refused the handoff's verification (I5): that
				// is the failure, whatever the prefill side says (its
				// answer lost to the link is no link failure to retry):
				// it fails closed (I8), never retried.
				e = de
			}
			// A failure the request caused (4xx) would fail the same way
			// on any pair: never retried (retryable).
			if canRetry() && retryable(e) {
				dr.retry = e
				// The link's failure on either side: a prefill error
				// may be the consequence (decode aborted the handoff
				// when the router's connection to it ended).
				dr.conn = connFailure(err) || connFailure(cause)
				return dr
			}
			// After tokens reached the client, a transport failure of
			// either worker or its link migrates the stream: decode's
			// (it died, hung, was cut off), or, in a resumed handoff not
			// yet committed, prefill's (its push to the new decode worker
			// failed because that one died too, or prefill itself did).
			// Never when either side reported an integrity failure.
			if (!first || offset > 0) && lc.live() && (migratable(err) || migratable(cause)) &&
				e.Code != CodeIntegrity && handoffFailure(err).Code != CodeIntegrity {
				dr.migrate = e
				return dr
			}
			lc.fail(e)
			return dr
		}
		switch {
		case tok.Done && tok.Finish == "cancelled":
			lc.step(request.Event{Kind: request.EvCancel}, nil)
			waitPrefill()
			return dr
		case tok.Done:
			// Success needs both roles: a late prefill failure still fails
			// the request.
			p := waitPrefill()
			if p.err != nil && !(migratable(p.err) && !first) {
				lc.fail(asEngineError(p.err, CodeHandoff, http.StatusBadGateway, "prefill"))
				return dr
			}
			// A transport failure of prefill after the commit (decode's
			// first token) lost only prefill's answer: decode verified the
			// commit's digest and token count (I5, I9) and finished.
			prefilled := len(prompt)
			if p.err == nil {
				prefilled = p.r.Tokens
			}
			// I9: prompt_tokens is what prefill ran and transferred and
			// decode verified; all three must be the prompt.
			if prefilled != len(prompt) || tok.PromptTokens != len(prompt) {
				lc.fail(errf(CodeIntegrity, http.StatusInternalServerError, nil,
					"accounting mismatch: the prompt has %d tokens, prefill reports %d, decode verified %d",
					len(prompt), prefilled, tok.PromptTokens))
				return dr
			}
			if c := cachedTokens(p.r); p.err == nil && offset == 0 && c >= 0 && c < len(prompt) {
				// A peer's figure, taken only if it is possible (the last
				// prompt token is always computed); a resumed handoff's
				// prompt holds generated tokens, so only the first counts.
				cached.Store(int64(c))
			}
			if tok.Finish == "preempted" {
				dr.preempted = true
				return dr
			}
			reason := request.FinishedLength
			if tok.Finish == "stop" {
				reason = request.FinishedStop
			}
			lc.step(request.Event{Kind: request.EvFinish, Reason: reason}, nil)
			return dr
		case first:
			first = false
			committed.Store(true)
			if offset == 0 {
				// The request's first token: where its wait went. The
				// workers' parts (handoff.Timing, decode's with the
				// token) split the handoff for the request's log line;
				// the prefill worker records its own, the router the two
				// it alone learns of (push, decode_wait).
				cur.mu.Lock()
				arrived, reservedAt := cur.arrived, cur.reservedAt
				cur.mu.Unlock()
				queue, hd := reservedAt.Sub(arrived), time.Since(reservedAt)
				d.phases.observe(r.Tenant, PhaseQueue, queue)
				d.phases.observe(r.Tenant, PhaseHandoff, hd)
				ps := []PhaseTime{{PhaseQueue, queue}}
				if parts := handoffParts(tok.Timing, hd); parts != nil {
					for _, p := range parts {
						if p.Phase == PhasePush || p.Phase == PhaseDecodeWait {
							d.phases.observe(r.Tenant, p.Phase, p.D)
						}
					}
					ps = append(ps, parts...)
				} else {
					ps = append(ps, PhaseTime{PhaseHandoff, hd})
				}
				if cur.first != nil {
					cur.first(ps)
				}
			}
			*gen = append(*gen, tok.ID)
			// Decode's first token is the commit's: the handoff was verified
			// (I5) and its prompt tokens are the reserved count (I9).
			lc.stepToken(request.Event{Kind: request.EvCommitted, Token: tok.ID, Tokens: res.ExpectTokens}, tok.Logprobs)
		default:
			*gen = append(*gen, tok.ID)
			// Illegal after the end (a cancel took effect): dropped.
			lc.stepToken(request.Event{Kind: request.EvToken, Token: tok.ID}, tok.Logprobs)
		}
	}
}

// driveResult is how one handoff ended (see drive).
type driveResult struct {
	preempted bool
	// revoked: decode took the reservation back before the commit
	// (handoff.ErrRevoked); the request waits for another (run).
	revoked bool
	retry   *Error
	// conn: retry's failure was the link's (connFailure), not a worker's
	// answer.
	conn bool
	// migrate: decode's stream broke after tokens reached the client, by
	// a transport failure: the request may move to another pair (run).
	migrate    *Error
	perr, derr error
}

// migratable says whether a decode stream's failure is the worker's or
// the link's (it died, hung past the heartbeat, was cut off), or a
// worker's refusal because it is shutting down (handoff.ErrDraining: it
// did nothing), after which the stream may continue elsewhere; anything
// else a live peer answered (refusals, integrity failures) is not.
func migratable(err error) bool {
	return errors.Is(err, handoff.ErrTransport) || errors.Is(err, errStreamEnded) || errors.Is(err, handoff.ErrDraining)
}

// cachedTokens is prefill's figure of prompt tokens it found cached, -1
// without an answer from prefill.
func cachedTokens(r *handoff.PrefillResult) int {
	if r == nil {
		return -1
	}
	return r.CachedTokens
}

// errStreamEnded: decode's stream ended without its terminal item.
var errStreamEnded = errors.New("the decode stream ended without a terminal item")

// attempts is a request's retry budget before its first token: how many
// retries it may still make and the pairs that already failed it, which
// the pairer is asked to avoid.
type attempts struct {
	n, max int
	failed []*Pair
	// revoked counts the request's reservations decode revoked (not
	// retries: they spend nothing of n).
	revoked int
	// same: the request was retried once on the pair that failed it
	// (retryPair).
	same bool
}

// nextPair pairs r again after its current attempt (cur) failed before
// any token reached the client: nil when the budget is spent or no other
// pair exists (the failure then stands). A move off a full decode worker
// (full) is not a failure: it spends nothing and is not remembered.
func (d *Disaggregated) nextPair(r *Request, cur *currentHandoff, at *attempts, full bool) *Pair {
	if !full && at.n >= at.max {
		return nil
	}
	avoid := rememberFailed(at.failed, cur.pair(), maxFailedPairs)
	p2, err := d.pairs.Pair(r, avoid)
	if err != nil || p2 == nil {
		return nil
	}
	if !full {
		at.n++
		at.failed = avoid
	}
	return p2
}

// retryPair is nextPair for a failure before the first token, and, when
// no other pair is left and the failure was the link's (conn:
// connFailure), once per request the failed pair again (SamePairer),
// within the same retry budget: with one pair, a connection lost under
// load would otherwise fail the request (502 handoff_failed) although
// both workers are fine. Never after a worker's own answer (a refusal, a
// verification failure): that one would only come again.
func (d *Disaggregated) retryPair(r *Request, cur *currentHandoff, at *attempts, conn bool) *Pair {
	if p2 := d.nextPair(r, cur, at, false); p2 != nil {
		return p2
	}
	sp, ok := d.pairs.(SamePairer)
	if !ok || at.same || at.n >= at.max || !conn {
		return nil
	}
	p2, err := sp.Again(r, cur.pair())
	if err != nil || p2 == nil {
		return nil
	}
	at.n++
	at.same = true
	d.sameRetried.Add(1)
	return p2
}

// movePair pairs r again for a migration off its current pair (cur),
// avoiding every pair that failed the request so far (moveAvoids), and
// remembers cur's as failed: nil when no pair is left.
func (d *Disaggregated) movePair(r *Request, cur *currentHandoff, at *attempts) *Pair {
	leaving := cur.pair()
	for _, avoid := range moveAvoids(at.failed, leaving) {
		if p2, err := d.pairs.Pair(r, avoid); err == nil && p2 != nil {
			at.failed = rememberFailed(at.failed, leaving, maxFailedPairs)
			return p2
		}
	}
	return nil
}

// connFailure: the failure was the link's (the connection died or was
// declared dead, a call got no answer: ErrTransport, or decode's stream
// ended without its terminal item), not an answer of a live worker.
func connFailure(err error) bool {
	return errors.Is(err, handoff.ErrTransport) || errors.Is(err, errStreamEnded)
}

// SameRetried is how many requests were retried on the pair that had just
// failed them (no other pair left, a connection-level failure).
func (d *Disaggregated) SameRetried() int64 { return d.sameRetried.Load() }

// retryable: a failure another pair may not repeat. A failure the request
// caused (4xx: a grammar, a parameter) would fail the same way anywhere,
// an integrity failure is never hidden; a refusal (429: the worker's
// limits, or it is draining) and a failed worker or link (5xx) are retried.
func retryable(e *Error) bool {
	return e.Code != CodeIntegrity && (e.Status >= 500 || e.Status == http.StatusTooManyRequests)
}

func (d *Disaggregated) maxRetries() int {
	switch m := d.cfg.MaxRetries; {
	case m < 0:
		return 0
	case m == 0:
		return DefaultMaxRetries
	default:
		return m
	}
}

func (d *Disaggregated) maxMigrations() int {
	switch m := d.cfg.MaxMigrations; {
	case m < 0:
		return 0
	case m == 0:
		return 3
	default:
		return m
	}
}

// Migrated is how many streams moved to another pair after a failure.
func (d *Disaggregated) Migrated() int64 { return d.migrated.Load() }

// Revoked is how many times a request went back to the queue because
// decode revoked its reservation before the commit (handoff.ErrRevoked).
func (d *Disaggregated) Revoked() int64 { return d.revoked.Load() }

// Local is a disaggregated engine whose two workers live in this process,
// the prefill worker calling the decode worker directly (the decode side
// copies every page write into its own pool, so the pools share nothing).
type Local struct {
	*Disaggregated
	Prefill *PrefillWorker
	Decode  *DecodeWorker
}

// NewLocal builds a prefill worker, a decode worker and the orchestrator
// over them. Each role refuses a context larger than its pool (I2); the
// engine's context is the smallest of the roles'.
func NewLocal(prefill, decode Config) (*Local, error) {
	dw, err := NewDecodeWorker(decode)
	if err != nil {
		return nil, err
	}
	pw, err := NewPrefillWorker(prefill, dw)
	if err != nil {
		dw.Close()
		return nil, err
	}
	d, err := NewDisaggregated(DisaggConfig{
		Model:          decode.Model.Name(),
		Vocab:          decode.Model.Vocab(),
		Fingerprint:    FingerprintOf(decode.Model),
		Context:        EffectiveContext(pw.Context(), dw.Context()),
		MaxConcurrency: dw.cfg.MaxConcurrency,
		MaxQueue:       dw.cfg.MaxQueue,
		QueueTimeout:   dw.cfg.QueueTimeout,
		Unsafe:         decode.Unsafe,
	}, pw, dw)
	if err != nil {
		pw.Close()
		dw.Close()
		return nil, err
	}
	return &Local{Disaggregated: d, Prefill: pw, Decode: dw}, nil
}

// Close drains requests, then stops both workers.
func (l *Local) Close(ctx context.Context) error {
	err := l.Disaggregated.Close(ctx)
	l.Prefill.Close()
	l.Decode.Close()
	return err
}

// Pools lists the KV pools of this process's roles by role name, for
// metrics (pages by state, violations, late writes) and drain checks.
func (l *Local) Pools() map[string]*kv.Pool {
	return map[string]*kv.Pool{"prefill": l.Prefill.Pool(), "decode": l.Decode.Pool()}
}
