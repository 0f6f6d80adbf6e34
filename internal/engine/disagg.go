package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/request"
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
	// MaxConcurrency bounds requests in flight (default 64); more are
	// refused with "overloaded", never queued without bound.
	MaxConcurrency int
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
	gate  *gate

	// bg outlives client requests: a client disconnect must not cancel the
	// prefill's context and tear a transfer (I10). Close cancels it last.
	bg       context.Context
	bgCancel context.CancelFunc
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

// Pairer chooses the workers of each attempt of a request. avoid is the
// failed first attempt's pair when the engine retries (nil otherwise); an
// error means no pair can take the request (with avoid: no other pair, so
// the first failure stands). internal/cluster and router/node implement it
// over many workers; one fixed pair is NewDisaggregated's.
type Pairer interface {
	Pair(r *Request, avoid *Pair) (*Pair, error)
}

type fixedPair struct{ p Pair }

func (f fixedPair) Pair(_ *Request, avoid *Pair) (*Pair, error) {
	if avoid != nil {
		return nil, errors.New("one prefill and one decode worker: no other pair to retry on")
	}
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
// request runs on the pair it returns, and a request whose first attempt
// fails before any token reached the client is retried once on another
// pair (new handoff id, new reservation; the first is aborted, I6).
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
		gate: newGate(cfg.MaxConcurrency), bg: bg, bgCancel: cancel}, nil
}

// Info implements Engine.
func (d *Disaggregated) Info() Info {
	return Info{Model: d.cfg.Model, Context: d.cfg.Context, Vocab: d.cfg.Vocab}
}

// Close implements Engine.
func (d *Disaggregated) Close(ctx context.Context) error {
	err := d.gate.close(ctx)
	d.bgCancel()
	return err
}

// Submit implements Engine. The request's life-cycle machine decides every
// step: Reserve happens only on its reserve action, Prefill only on its
// prefill action, tokens reach the client only as its emit actions (I1).
func (d *Disaggregated) Submit(ctx context.Context, r *Request) (Stream, error) {
	st := newStream(min(max(r.MaxTokens, 0), d.cfg.Context))
	if err := checkRequest(r, d.cfg.Context, d.cfg.Vocab, d.cfg.Unsafe.NoAdmission); err != nil {
		e := err.(*Error)
		newAttempt(st).lc.reject(e)
		return nil, e
	}
	release, err := d.gate.admit()
	if err != nil {
		e := err.(*Error)
		newAttempt(st).lc.reject(e)
		return nil, e
	}
	pair, perr := d.pairs.Pair(r, nil)
	if perr != nil {
		e := errf(CodeOverloaded, http.StatusServiceUnavailable, perr, "no prefill/decode pair can take this request now (%v); retry later", perr)
		newAttempt(st).lc.reject(e)
		release()
		return nil, e
	}
	var cur atomic.Pointer[attempt]
	st.cancelFn = func() {
		if a := cur.Load(); a != nil {
			a.lc.step(request.Event{Kind: request.EvCancel}, nil)
		}
	}
	a, e, retry := d.start(ctx, r, st, pair, &cur)
	retried := false
	if e != nil && retry {
		if p2, err := d.pairs.Pair(r, pair); err == nil {
			a, e, _ = d.start(ctx, r, st, p2, &cur)
			retried = true
		}
	}
	if e != nil {
		release()
		return nil, e
	}
	stopWatch := context.AfterFunc(ctx, st.Cancel)
	st.onClose = func() { stopWatch() }
	go d.run(ctx, r, a, release, !retried, &cur)
	return st, nil
}

// attempt is one try of a request on one pair: its own handoff id,
// reservation and life-cycle machine. A superseded attempt (retried on
// another pair before any token reached the client) still carries out its
// machine's actions, the abort of its handoff among them, but its end
// never reaches the client's stream.
type attempt struct {
	id         kv.ID
	pair       *Pair
	lc         *lifecycle
	res        *handoff.Reservation
	ts         handoff.TokenStream
	reserveErr *Error
	st         *stream
	superseded atomic.Bool
}

// newAttempt is an attempt with no pair, for requests refused before one.
func newAttempt(st *stream) *attempt { return newAttemptOn(st, nil, nil, nil) }

func newAttemptOn(st *stream, d *Disaggregated, ctx context.Context, r *Request) *attempt {
	a := &attempt{id: newID(), st: st}
	a.lc = newLifecycle(request.Disaggregated, func(act request.Action, e *Error, prompt, completion int) {
		switch act.Kind {
		case request.ActReserve:
			a.res, a.reserveErr = d.reserve(ctx, r, a)
		case request.ActPrefill:
			// Started by run once the stream is open.
		case request.ActEmit:
			st.push(outcome{token: act.Token, logprobs: a.lc.lp})
		case request.ActAbortHandoff:
			d.abort(a.pair.Decode, a.id, string(act.Reason)+": "+act.Msg)
		case request.ActStopDecode:
			_ = a.pair.Decode.Cancel(d.bg, a.id)
		case request.ActEnd:
			if !a.superseded.Load() {
				st.push(terminal(act, e, prompt, completion))
			}
		}
	})
	return a
}

// start admits, reserves and opens the decode stream of one attempt. On
// failure the attempt's machine has ended (handoff aborted) without
// touching the client's stream, and start returns the error and whether
// another pair may be tried: the request has produced nothing yet.
func (d *Disaggregated) start(ctx context.Context, r *Request, st *stream, p *Pair, cur *atomic.Pointer[attempt]) (*attempt, *Error, bool) {
	a := newAttemptOn(st, d, ctx, r)
	a.pair = p
	cur.Store(a)
	a.lc.step(request.Event{Kind: request.EvAdmit}, nil)
	if a.reserveErr != nil {
		p.done(nil, a.reserveErr.Err)
		a.superseded.Store(true) // the caller reports the error or retries
		a.lc.reject(a.reserveErr)
		return a, a.reserveErr, ctx.Err() == nil && a.reserveErr.Code != CodeInvalid
	}
	a.lc.step(request.Event{Kind: request.EvReserved}, nil)
	sp := handoff.StreamParams{Sampling: r.Sampling, IgnoreEOS: r.IgnoreEOS}
	if r.Sampling.UsesPrompt() {
		sp.Prompt = r.Prompt
	}
	ts, err := p.Decode.Stream(d.bg, a.id, sp)
	if err != nil {
		e := asEngineError(err, CodeHandoff, http.StatusBadGateway, "opening the decode stream")
		p.done(nil, err)
		a.superseded.Store(true) // the caller reports the error or retries
		a.lc.fail(e)             // aborts the handoff: its pages are released
		return a, e, ctx.Err() == nil
	}
	a.ts = ts
	return a, nil, false
}

// reserve asks decode for pages. No free pages is kv_capacity_exhausted
// (503), any other refusal overloaded (429); both are retryable
// back-pressure, never integrity failures. A transport failure leaves the
// outcome unknown, so the handoff is aborted.
func (d *Disaggregated) reserve(ctx context.Context, r *Request, a *attempt) (*handoff.Reservation, *Error) {
	dec, id := a.pair.Decode, a.id
	res, err := dec.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: r.Tenant, PromptTokens: len(r.Prompt), MaxTokens: r.MaxTokens, Model: d.cfg.Fingerprint})
	if err == nil {
		if err = handoff.CheckModel(d.cfg.Fingerprint, res.Model, "the decode worker"); err == nil {
			return res, nil
		}
		// Defence in depth: decode checked the Reserve's fingerprint; one
		// that did not is not used either.
		d.abort(dec, id, err.Error())
	}
	if errors.Is(err, handoff.ErrTransport) || ctx.Err() != nil {
		d.abort(dec, id, "reserve outcome unknown")
	}
	if errors.Is(err, handoff.ErrNoRoom) {
		return nil, errf(CodeKVCapacity, http.StatusServiceUnavailable, err, "the decode worker has no free KV pages for this request now; retry later or lower max_tokens")
	}
	if errors.Is(err, handoff.ErrRefused) {
		return nil, errf(CodeOverloaded, http.StatusTooManyRequests, err, "the decode worker refused this request now (%v); retry later", err)
	}
	return nil, asEngineError(err, CodeHandoff, http.StatusBadGateway, "reserving decode pages")
}

func (d *Disaggregated) abort(dec handoff.Decode, id kv.ID, reason string) {
	_ = dec.Abort(d.bg, &handoff.Abort{Handoff: id, Reason: reason})
}

// handoffFailure classifies a failed handoff: verification failures are
// integrity errors (I8), the rest a failed handoff.
func handoffFailure(cause error) *Error {
	if errors.Is(cause, handoff.ErrCountMismatch) || errors.Is(cause, handoff.ErrCoverage) ||
		errors.Is(cause, handoff.ErrDigestMismatch) || errors.Is(cause, handoff.ErrDigestMissing) ||
		errors.Is(cause, handoff.ErrBadWrite) || errors.Is(cause, handoff.ErrChecksum) {
		return errf(CodeIntegrity, http.StatusInternalServerError, cause,
			"the KV handoff failed verification; the request was stopped and its pages quarantined")
	}
	return asEngineError(cause, CodeHandoff, http.StatusBadGateway, "the disaggregated request")
}

// run drives one attempt after its reservation: prefill (which pushes and
// commits), decode's tokens through the life-cycle machine, and the final
// verdict, which is success only when both roles succeeded. A failure
// before the first token, when canRetry, supersedes this attempt (its
// machine still aborts its handoff) and starts one more on another pair;
// after the first token a failure ends the stream with its error, never a
// silent switch.
func (d *Disaggregated) run(ctx context.Context, r *Request, a *attempt, release func(), canRetry bool, cur *atomic.Pointer[attempt]) {
	lc, ts, res, id := a.lc, a.ts, a.res, a.id
	owned := true // release is ours until a retry takes it
	defer func() {
		if owned {
			release()
		}
	}()
	defer ts.Close()
	var perr, derr error
	defer func() { a.pair.done(perr, derr) }()
	// retry is tried on a failure before the first token: it reports
	// whether a new attempt took the request over.
	retry := func(cause *Error) bool {
		if !canRetry || ctx.Err() != nil || cause.Code == CodeIntegrity {
			return false
		}
		p2, err := d.pairs.Pair(r, a.pair)
		if err != nil {
			return false
		}
		a.superseded.Store(true)
		lc.fail(cause) // aborts this attempt's handoff (I6); its end is not the client's
		b, e, _ := d.start(ctx, r, a.st, p2, cur)
		if e != nil {
			// The retry could not start: the request ends with the
			// retry's error (the end its machine reached).
			a.st.push(outcome{err: e})
			return true
		}
		owned = false
		go d.run(ctx, r, b, release, false, cur)
		return true
	}
	lc.step(request.Event{Kind: request.EvPrefillStarted}, nil)
	type pres struct {
		r   *handoff.PrefillResult
		err error
	}
	pch := make(chan pres, 1)
	go func() {
		// d.bg, not the client's context: a disconnect never tears the
		// transfer (I10).
		pr, err := a.pair.Prefill.Prefill(d.bg, &handoff.PrefillRequest{Handoff: id, Tenant: r.Tenant, Tokens: r.Prompt, Reservation: res, Sampling: r.Sampling, Model: d.cfg.Fingerprint, Decode: a.pair.DecodeName})
		if err != nil {
			// The handoff did not commit. Abort it on decode now (the
			// Prefill contract asks the router to): an unreachable prefill
			// worker aborted nothing, and decode's stream, which the loop
			// below waits on, ends only with the abort.
			d.abort(a.pair.Decode, id, "prefill failed: "+err.Error())
		}
		pch <- pres{pr, err}
	}()
	var got *pres
	waitPrefill := func() *pres {
		if got == nil {
			p := <-pch
			got = &p
			perr = p.err
		}
		return got
	}
	first := true
	for {
		tok, err := ts.Recv()
		if err == io.EOF {
			err = errors.New("the decode stream ended without a terminal item")
		}
		if err == nil && tok.Err != nil {
			err = tok.Err
		}
		if got == nil {
			select {
			case p := <-pch:
				got = &p
				perr = p.err
			default:
			}
		}
		if got != nil && got.err != nil && lc.live() {
			// Prefill failed after decode started: the request fails now
			// (decode is told to stop); the loop still reads decode's
			// stream to its end so nothing of it outlives the request.
			e := asEngineError(got.err, CodeHandoff, http.StatusBadGateway, "prefill")
			if !(first && retry(e)) {
				lc.fail(e)
			}
		}
		if err != nil {
			// A prefill error, if any, says more precisely what failed.
			cause := err
			if p := waitPrefill(); p.err != nil {
				cause = p.err
			} else {
				derr = err
			}
			e := handoffFailure(cause)
			if lc.live() && first && retry(e) {
				return
			}
			lc.fail(e)
			return
		}
		switch {
		case tok.Done && tok.Finish == "cancelled":
			lc.step(request.Event{Kind: request.EvCancel}, nil)
			waitPrefill()
			return
		case tok.Done:
			// Success needs both roles: a late prefill failure still fails
			// the request.
			p := waitPrefill()
			if p.err != nil {
				lc.fail(asEngineError(p.err, CodeHandoff, http.StatusBadGateway, "prefill"))
				return
			}
			// I9: prompt_tokens is what prefill ran and transferred and
			// decode verified; all three must be the prompt.
			if p.r.Tokens != len(r.Prompt) || tok.PromptTokens != len(r.Prompt) {
				lc.fail(errf(CodeIntegrity, http.StatusInternalServerError, nil,
					"accounting mismatch: the prompt has %d tokens, prefill reports %d, decode verified %d",
					len(r.Prompt), p.r.Tokens, tok.PromptTokens))
				return
			}
			reason := request.FinishedLength
			if tok.Finish == "stop" {
				reason = request.FinishedStop
			}
			lc.step(request.Event{Kind: request.EvFinish, Reason: reason}, nil)
			return
		case first:
			first = false
			// Decode's first token is the commit's: the handoff was verified
			// (I5) and its prompt tokens are the reserved count (I9).
			lc.stepToken(request.Event{Kind: request.EvCommitted, Token: tok.ID, Tokens: res.ExpectTokens}, tok.Logprobs)
		default:
			// Illegal after the end (a cancel took effect): dropped.
			lc.stepToken(request.Event{Kind: request.EvToken, Token: tok.ID}, tok.Logprobs)
		}
	}
}

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
