package router

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"sluice/internal/engine"
	"sluice/internal/sample"
)

// This file holds TEST DOUBLES ONLY: a byte-level tokenizer and an "echo"
// engine whose output is known from first principles, so the HTTP layer can
// be tested before (and apart from) the real engines.

const (
	fakeBOS   = 256
	fakeEOS   = 257
	fakeVocab = 258
)

// byteTok maps each byte to its own id; BOS 256, EOS 257.
type byteTok struct{}

func (byteTok) Encode(text string, addSpecial, _ bool) ([]int32, error) {
	var ids []int32
	if addSpecial {
		ids = append(ids, fakeBOS)
	}
	for _, b := range []byte(text) {
		ids = append(ids, int32(b))
	}
	return ids, nil
}

func (byteTok) NewDecoder() Decoder { return &byteDec{} }
func (byteTok) IsEOG(id int32) bool { return id == fakeEOS }

// TokenText is one token's bytes; BOS and EOS show as text.
func (byteTok) TokenText(id int32) string {
	switch {
	case id == fakeBOS:
		return "<s>"
	case id == fakeEOS:
		return "</s>"
	case id >= 0 && id < 256:
		return string([]byte{byte(id)})
	}
	return ""
}
func (d *byteDec) Push(id int32) string { return d.push(id) }
func (d *byteDec) Flush() string {
	out := strings.ToValidUTF8(string(d.pending), "\uFFFD")
	d.pending = nil
	return out
}

type byteDec struct{ pending []byte }

// push holds back an incomplete UTF-8 sequence, as a real detokenizer must.
func (d *byteDec) push(id int32) string {
	if id >= 256 {
		return ""
	}
	d.pending = append(d.pending, byte(id))
	n := len(d.pending)
	for i := max(0, n-3); i < n; i++ {
		if !utf8.RuneStart(d.pending[i]) {
			continue
		}
		if !utf8.FullRune(d.pending[i:]) {
			out := string(d.pending[:i])
			d.pending = append([]byte(nil), d.pending[i:]...)
			return out
		}
	}
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// echoEngine generates the prompt's bytes (BOS dropped) then EOS: the
// output of any prompt is known without running a model. Markers in the
// prompt script failures:
//
//	FAIL_EARLY  the stream fails before any token (handoff_failed, 502)
//	FAIL_LATE   two tokens, then kv_integrity_violation (500)
//	HOLD        tokens wait for the engine's gate (cancellation tests)
//
// lpFault breaks the logprobs of every request's second token: "missing"
// sends none though asked, "extra" one alternative more than asked.
type echoEngine struct {
	ctx       int
	gate      chan struct{}
	mu        sync.Mutex
	active    int
	cancels   atomic.Int64
	submitted atomic.Int64
	ignoreEOS atomic.Bool // the last request's IgnoreEOS
	tenants   []string
	weights   []int
	refuse    *engine.Error
	// refuseAfter > 0 refuses every Submit after that many (overloaded).
	refuseAfter int64
	// cancelDelay is how long a cancelled stream takes to end (a real
	// engine runs a handoff under way to its commit first, I10): a caller
	// that does not wait for the end sees the request still active.
	cancelDelay time.Duration
	reqs        []engine.Request // every request submitted
	lpFault     string
}

// Requests returns the requests submitted so far.
func (e *echoEngine) Requests() []engine.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]engine.Request(nil), e.reqs...)
}

// echoLogprobs are the test double's logprobs of token t, known from first
// principles: t scores -t/256, and its alternatives are t+1, t+2, ...
func echoLogprobs(t int32, top int) *sample.Logprobs {
	lp := &sample.Logprobs{Logprob: -float32(t) / 256}
	for k := range top {
		id := (t + int32(k) + 1) % 256
		lp.Top = append(lp.Top, sample.TokenLogprob{ID: id, Logprob: -float32(id) / 256})
	}
	return lp
}

func newEcho(ctx int) *echoEngine { return &echoEngine{ctx: ctx, gate: make(chan struct{})} }

func (e *echoEngine) Info() engine.Info {
	return engine.Info{Model: "echo-test-double", Context: e.ctx, Vocab: fakeVocab}
}

func (e *echoEngine) Close(context.Context) error { return nil }

func (e *echoEngine) Active() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active
}

func (e *echoEngine) Tenants() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.tenants...)
}

type echoStream struct {
	ch     chan engine.Event
	cancel chan struct{}
	once   sync.Once
	eng    *echoEngine
}

func (s *echoStream) Events() <-chan engine.Event { return s.ch }
func (s *echoStream) Cancel() {
	s.once.Do(func() { s.eng.cancels.Add(1); close(s.cancel) })
}

func (e *echoEngine) Submit(_ context.Context, r *engine.Request) (engine.Stream, error) {
	n := e.submitted.Add(1)
	e.ignoreEOS.Store(r.IgnoreEOS)
	if e.refuse != nil {
		return nil, e.refuse
	}
	if e.refuseAfter > 0 && n > e.refuseAfter {
		return nil, &engine.Error{Code: engine.CodeOverloaded, Status: http.StatusServiceUnavailable, Message: "no room"}
	}
	if r.MaxTokens > e.ctx-len(r.Prompt) { // never the wrapping sum
		return nil, &engine.Error{Code: engine.CodeContextLength, Status: 400, Message: "engine admission refused"}
	}
	e.mu.Lock()
	e.active++
	e.tenants = append(e.tenants, r.Tenant)
	e.weights = append(e.weights, r.Weight)
	e.reqs = append(e.reqs, *r)
	e.mu.Unlock()
	s := &echoStream{ch: make(chan engine.Event, r.MaxTokens+2), cancel: make(chan struct{}), eng: e}
	var body []int32
	for _, t := range r.Prompt {
		if t != fakeBOS {
			body = append(body, t)
		}
	}
	text := string(func() []byte {
		b := make([]byte, len(body))
		for i, t := range body {
			b[i] = byte(t)
		}
		return b
	}())
	go func() {
		defer close(s.ch)
		// end sends the terminal event. The request leaves the engine
		// (Active) before its terminal event goes out, so a caller that
		// read every stream to its end (the router's run and drain) sees
		// Active() == 0 at once; the other order made that a race
		// (TestOneChoiceFailsTheRequest failed 2 runs in 200).
		end := func(ev engine.Event) {
			e.mu.Lock()
			e.active--
			e.mu.Unlock()
			s.ch <- ev
		}
		usage := engine.Usage{PromptTokens: len(r.Prompt)}
		if strings.Contains(text, "FAIL_EARLY") {
			end(engine.Event{Err: &engine.Error{Code: engine.CodeHandoff, Status: http.StatusBadGateway, Message: "the KV handoff failed verification"}, Usage: usage})
			return
		}
		out := append(append([]int32(nil), body...), fakeEOS)
		for i, t := range out {
			if strings.Contains(text, "HOLD") {
				select {
				case <-e.gate:
				case <-s.cancel:
				}
			}
			select {
			case <-s.cancel:
				time.Sleep(e.cancelDelay)
				end(engine.Event{Err: &engine.Error{Code: engine.CodeCancelled, Status: engine.StatusClientClosed, Message: "cancelled"}, Usage: usage})
				return
			default:
			}
			if i == 2 && strings.Contains(text, "FAIL_LATE") {
				end(engine.Event{Err: &engine.Error{Code: engine.CodeIntegrity, Status: 500, Message: "a KV page failed its owner check"}, Usage: usage})
				return
			}
			ev := engine.Event{Token: t}
			if r.Sampling.Logprobs {
				top := r.Sampling.TopLogprobs
				if i == 1 && e.lpFault == "extra" {
					top++
				}
				ev.Logprobs = echoLogprobs(t, top)
				if i == 1 && e.lpFault == "missing" {
					ev.Logprobs = nil
				}
			}
			s.ch <- ev
			usage.CompletionTokens++
			if t == fakeEOS {
				end(engine.Event{Done: true, Finish: "stop", Usage: usage})
				return
			}
			if usage.CompletionTokens == r.MaxTokens {
				end(engine.Event{Done: true, Finish: "length", Usage: usage})
				return
			}
		}
	}()
	return s, nil
}
