package engine

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	"sluice/internal/handoff"
)

// DisaggConfig configures the orchestration half of a disaggregated engine.
type DisaggConfig struct {
	// Model and Vocab are reported by Info.
	Model string
	Vocab int
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
	cfg     DisaggConfig
	prefill handoff.Prefill
	decode  handoff.Decode
	slots   chan struct{}

	// bg outlives client requests: a client disconnect must not cancel the
	// prefill's context and tear a transfer (I10). Close cancels it last.
	bg       context.Context
	bgCancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	flight sync.WaitGroup
}

var _ Engine = (*Disaggregated)(nil)

// NewDisaggregated builds the orchestrator.
func NewDisaggregated(cfg DisaggConfig, prefill handoff.Prefill, decode handoff.Decode) (*Disaggregated, error) {
	if prefill == nil || decode == nil {
		return nil, errf(CodeInvalid, 500, nil, "a disaggregated engine needs both a prefill and a decode service")
	}
	if cfg.Context <= 0 {
		return nil, errf(CodeInvalid, 500, nil, "a disaggregated engine needs its effective context (got %d)", cfg.Context)
	}
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = 64
	}
	bg, cancel := context.WithCancel(context.Background())
	return &Disaggregated{cfg: cfg, prefill: prefill, decode: decode,
		slots: make(chan struct{}, cfg.MaxConcurrency), bg: bg, bgCancel: cancel}, nil
}

// Info implements Engine.
func (d *Disaggregated) Info() Info {
	return Info{Model: d.cfg.Model, Context: d.cfg.Context, Vocab: d.cfg.Vocab}
}

// Close implements Engine.
func (d *Disaggregated) Close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	err := waitGroup(ctx, &d.flight)
	d.bgCancel()
	return err
}

func (d *Disaggregated) admit() (func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errf(CodeShutdown, http.StatusServiceUnavailable, nil, "the engine is shutting down")
	}
	select {
	case d.slots <- struct{}{}:
	default:
		return nil, errf(CodeOverloaded, http.StatusTooManyRequests, nil,
			"the engine is at its concurrency limit (%d requests); retry later", cap(d.slots))
	}
	d.flight.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			<-d.slots
			d.flight.Done()
		})
	}, nil
}

// Submit implements Engine.
func (d *Disaggregated) Submit(ctx context.Context, r *Request) (Stream, error) {
	lc, err := admitLifecycle(r, d.cfg.Context, d.cfg.Vocab, d.cfg.Unsafe.NoAdmission)
	if err != nil {
		return nil, err
	}
	release, err := d.admit()
	if err != nil {
		lc.reject(err)
		return nil, err
	}
	id := newID()
	res, err := d.decode.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: r.Tenant, PromptTokens: len(r.Prompt), MaxTokens: r.MaxTokens})
	if err != nil {
		release()
		if errors.Is(err, handoff.ErrTransport) {
			d.abort(id, "reserve outcome unknown")
		}
		e := reserveError(err)
		lc.reject(e)
		return nil, e
	}
	lc.reserved()
	ts, err := d.decode.Stream(d.bg, id, handoff.StreamParams{Sampling: r.Sampling, IgnoreEOS: r.IgnoreEOS})
	if err != nil {
		d.abort(id, "stream could not be opened")
		release()
		e := asEngineError(err, CodeHandoff, http.StatusBadGateway, "opening the decode stream")
		lc.fail(e)
		return nil, e
	}
	st := newStream(r.MaxTokens)
	st.cancelFn = func() {
		// I10: recorded on decode; it takes effect after the commit and the
		// first token. The prefill context is d.bg, not the client's.
		lc.cancel()
		_ = d.decode.Cancel(d.bg, id)
	}
	stopWatch := context.AfterFunc(ctx, st.Cancel)
	st.onClose = func() { stopWatch() }
	go d.run(r, id, res, ts, st, lc, release)
	return st, nil
}

func reserveError(err error) *Error {
	if errors.Is(err, handoff.ErrRefused) {
		return errf(CodeOverloaded, http.StatusServiceUnavailable, err, "the decode worker has no room for this request now; retry later")
	}
	return asEngineError(err, CodeHandoff, http.StatusBadGateway, "reserving decode pages")
}

func (d *Disaggregated) abort(id [16]byte, reason string) {
	_ = d.decode.Abort(d.bg, &handoff.Abort{Handoff: id, Reason: reason})
}

// run drives one request after its reservation: prefill (which pushes and
// commits), decode's tokens to the client, and the final verdict, which is
// success only when both roles succeeded.
func (d *Disaggregated) run(r *Request, id [16]byte, res *handoff.Reservation, ts handoff.TokenStream, st *stream, lc *lifecycle, release func()) {
	defer release()
	defer ts.Close()
	lc.prefilling()
	type pres struct {
		r   *handoff.PrefillResult
		err error
	}
	pch := make(chan pres, 1)
	go func() {
		pr, err := d.prefill.Prefill(d.bg, &handoff.PrefillRequest{Handoff: id, Tenant: r.Tenant, Tokens: r.Prompt, Reservation: res, Sampling: r.Sampling})
		if err != nil {
			// The prefill worker aborted on decode where it could; abort
			// again in case the failure was its link to decode.
			d.abort(id, "prefill failed")
		}
		pch <- pres{pr, err}
	}()

	var got *pres
	waitPrefill := func() *pres {
		if got == nil {
			p := <-pch
			got = &p
		}
		return got
	}
	completion := 0
	first := true
	for {
		tok, err := ts.Recv()
		if err == io.EOF {
			err = errors.New("the decode stream ended without a terminal item")
		}
		if err != nil {
			p := waitPrefill()
			cause := err
			if p.err != nil {
				cause = p.err
			}
			e := asEngineError(cause, CodeHandoff, http.StatusBadGateway, "the disaggregated request")
			lc.fail(e)
			st.push(outcome{err: e, completion: completion})
			return
		}
		switch {
		case tok.Err != nil:
			// Decode ended in failure. A prefill error, if any, says why
			// more precisely (e.g. it was prefill that aborted).
			p := waitPrefill()
			cause := tok.Err
			if p.err != nil {
				cause = p.err
			}
			e := asEngineError(cause, CodeHandoff, http.StatusBadGateway, "the disaggregated request")
			if errors.Is(cause, handoff.ErrCountMismatch) || errors.Is(cause, handoff.ErrCoverage) ||
				errors.Is(cause, handoff.ErrDigestMismatch) || errors.Is(cause, handoff.ErrDigestMissing) ||
				errors.Is(cause, handoff.ErrBadWrite) {
				e = errf(CodeIntegrity, http.StatusInternalServerError, cause,
					"the KV handoff failed verification; the request was stopped and its pages quarantined")
			}
			lc.fail(e)
			st.push(outcome{err: e, completion: completion})
			return
		case tok.Done:
			// Success needs both roles: wait for prefill's own verdict (a
			// late prefill failure still fails the request).
			p := waitPrefill()
			if p.err != nil {
				e := asEngineError(p.err, CodeHandoff, http.StatusBadGateway, "prefill")
				lc.fail(e)
				st.push(outcome{err: e, completion: completion})
				return
			}
			// I9: prompt_tokens is what prefill ran and transferred and
			// decode verified; both must be the prompt.
			if p.r.Tokens != len(r.Prompt) || tok.PromptTokens != len(r.Prompt) {
				e := errf(CodeIntegrity, http.StatusInternalServerError, nil,
					"accounting mismatch: prompt has %d tokens, prefill reports %d, decode verified %d",
					len(r.Prompt), p.r.Tokens, tok.PromptTokens)
				lc.fail(e)
				st.push(outcome{err: e, completion: completion})
				return
			}
			lc.finish(tok.Finish)
			st.push(outcome{done: true, finish: tok.Finish, prompt: p.r.Tokens, completion: completion})
			return
		default:
			if first {
				lc.decoding()
				first = false
			}
			completion++
			st.push(outcome{token: tok.ID})
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
