package engine

import (
	"net/http"
	"sync"

	"sluice/internal/request"
	"sluice/internal/sample"
)

// lifecycle is the engine's handle on one request's life-cycle state
// machine (internal/request). Every phase change steps it, and only the
// actions it returns are carried out, so a rejected or finished request can
// never reach reservation, prefill, transfer or decode, and nothing is
// emitted after its terminal event (I1). The machine is pure; this wrapper
// serialises the goroutines that feed it (orchestrator, client cancel).
type lifecycle struct {
	mu  sync.Mutex
	m   *request.Machine
	run func(a request.Action, err *Error, prompt, completion int)
	// failure is the *Error of a failing event, handed to ActEnd.
	failure *Error
	// lp is the logprobs of the token being stepped (stepToken), for the
	// ActEmit action that sends it; nil otherwise.
	lp *sample.Logprobs
}

func newLifecycle(mode request.Mode, run func(a request.Action, err *Error, prompt, completion int)) *lifecycle {
	return &lifecycle{m: request.New(mode), run: run}
}

// step applies ev and carries out the actions, under the lock so that the
// actions of two events never interleave (no token after the end). It
// reports whether the event was legal; an illegal one (e.g. a token after
// a cancel took effect) changes nothing and does nothing.
func (l *lifecycle) step(ev request.Event, failure *Error) ([]request.Action, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stepLocked(ev, failure)
}

// stepToken steps a token event (EvCommitted, EvToken) whose emit action
// carries the token's logprobs. They are payload only: the machine alone
// decides whether the token is emitted.
func (l *lifecycle) stepToken(ev request.Event, lp *sample.Logprobs) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lp = lp
	l.stepLocked(ev, nil)
	l.lp = nil
}

func (l *lifecycle) stepLocked(ev request.Event, failure *Error) ([]request.Action, bool) {
	acts, err := l.m.Step(ev)
	if err != nil {
		return nil, false
	}
	if failure != nil {
		l.failure = failure
	}
	p, c := l.m.Usage()
	for _, a := range acts {
		l.run(a, l.failure, p, c)
	}
	return acts, true
}

// move steps a move's event (revoked, retry, preempted) and says whether
// the request goes on. A refused event after the request ended (a cancel
// took effect) is the normal race; refused while the request lives would
// be a bug in the move logic: the request then fails (500 internal_error)
// instead of leaving its client waiting for a stream that never ends.
func (l *lifecycle) move(ev request.Event) bool {
	if _, ok := l.step(ev, nil); ok {
		return l.live()
	}
	if l.live() {
		l.fail(errf(CodeInternal, http.StatusInternalServerError, nil,
			"the request could not be moved to another worker (%s refused); retry it", ev.Kind))
	}
	return false
}

func (l *lifecycle) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Live()
}

func (l *lifecycle) state() request.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.State()
}

// reject ends a request at admission (I1): terminal, nothing reserved.
func (l *lifecycle) reject(e *Error) {
	reason := request.RejectedOverloaded
	if e.Code == CodeContextLength {
		reason = request.RejectedContextLength
	}
	if e.Code != CodeContextLength && e.Code != CodeOverloaded && e.Code != CodeKVCapacity && e.Code != CodeQueueTimeout {
		l.fail(e)
		return
	}
	if _, ok := l.step(request.Event{Kind: request.EvReject, Reason: reason, Msg: e.Message}, e); !ok {
		// Not rejectable any more (a resumed request already sent tokens).
		l.fail(e)
	}
}

// queueEnd ends a request that left the queue (or never reached it)
// without pages: its client left, it timed out, or its reservation
// failed. Nothing is reserved.
func (l *lifecycle) queueEnd(e *Error) {
	if e.Code == CodeCancelled {
		l.step(request.Event{Kind: request.EvCancel}, nil)
		return
	}
	l.reject(e)
}

func (l *lifecycle) fail(e *Error) {
	l.step(request.Event{Kind: request.EvFail, Code: e.Code, Msg: e.Message}, e)
}

// terminal turns the machine's end action into the stream's last item.
func terminal(a request.Action, e *Error, prompt, completion int) outcome {
	o := outcome{prompt: prompt, completion: completion}
	switch a.Reason {
	case request.FinishedStop:
		o.done, o.finish = true, "stop"
	case request.FinishedLength:
		o.done, o.finish = true, "length"
	case request.Cancelled:
		o.done, o.finish = true, "cancelled"
	default:
		if e == nil {
			e = errf(CodeInternal, http.StatusInternalServerError, nil, "the request ended: %s", a.Reason)
		}
		o.err = e
	}
	return o
}

// scheduled feeds a colocated sequence's outcomes to the machine. It runs
// on the scheduler goroutine.
func (l *lifecycle) scheduled(o outcome, promptTokens int) {
	switch {
	case o.err != nil:
		l.fail(o.err)
	case o.done && o.finish == "cancelled":
		l.step(request.Event{Kind: request.EvCancel}, nil)
	case o.done:
		reason := request.FinishedLength
		if o.finish == "stop" {
			reason = request.FinishedStop
		}
		l.step(request.Event{Kind: request.EvFinish, Reason: reason}, nil)
	default:
		l.mu.Lock()
		st := l.m.State()
		l.mu.Unlock()
		if st == request.Prefilling {
			l.stepToken(request.Event{Kind: request.EvCommitted, Token: o.token, Tokens: promptTokens}, o.logprobs)
		} else {
			l.stepToken(request.Event{Kind: request.EvToken, Token: o.token}, o.logprobs)
		}
	}
}
