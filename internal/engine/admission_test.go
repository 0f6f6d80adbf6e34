package engine

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// countingPrefill counts prefill calls: a rejected request must never get one.
type countingPrefill struct {
	p handoff.Prefill
	n atomic.Int64
}

func (c *countingPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	c.n.Add(1)
	return c.p.Prefill(ctx, r)
}

// countingDecode counts reservations and page writes.
type countingDecode struct {
	handoff.Decode
	reserves, writes atomic.Int64
}

func (c *countingDecode) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	c.reserves.Add(1)
	return c.Decode.Reserve(ctx, r)
}

func (c *countingDecode) Write(ctx context.Context, ws []handoff.PageWrite) error {
	c.writes.Add(int64(len(ws)))
	return c.Decode.Write(ctx, ws)
}

// TestRejectedForLengthNeverReachesTheWorkers is the incident's first step
// broken on purpose (I1, I2): an over-long request is rejected with a 400
// that names both numbers, and produces no reservation, no prefill and no
// page write.
func TestRejectedForLengthNeverReachesTheWorkers(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	cd := &countingDecode{Decode: dw}
	pw, err := NewPrefillWorker(toyConfig(m, 32), cd)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cp := &countingPrefill{p: pw}
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, cp, cd)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	if got := eng.Info().Context; got != 128 {
		t.Fatalf("effective context %d, want 128 (32 pages of 4)", got)
	}
	_, err = eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 100), MaxTokens: 29})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeContextLength || e.Status != http.StatusBadRequest {
		t.Fatalf("want context_length_exceeded 400, got %v", err)
	}
	if !strings.Contains(e.Message, "128") || !strings.Contains(e.Message, "129") {
		t.Errorf("the message must name the limit and the request's need: %q", e.Message)
	}
	if cd.reserves.Load() != 0 || cd.writes.Load() != 0 || cp.n.Load() != 0 {
		t.Fatalf("a rejected request reached the workers: %d reserves, %d writes, %d prefills",
			cd.reserves.Load(), cd.writes.Load(), cp.n.Load())
	}
	// The boundary is inclusive: exactly the context fits.
	s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 100), MaxTokens: 28})
	if err != nil {
		t.Fatalf("a request of exactly the context was refused: %v", err)
	}
	if r := collect(t, s); r.final.Err != nil {
		t.Fatal(r.final.Err)
	}
}

// TestDecodeRepeatsAdmission: a decode worker does not trust its caller to
// have checked the length (the incident's decode reserved pages for a
// request the router had rejected). The pool holds twice the context, so
// only the context check itself can refuse this reservation: the pool has
// room for every page of it.
func TestDecodeRepeatsAdmission(t *testing.T) {
	m := newToy()
	cfg := toyConfig(m, 64)
	cfg.Context = 128 // the pool holds 256 tokens
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	_, err = dw.Reserve(context.Background(), &handoff.Reserve{Handoff: newID(), Tenant: "a", PromptTokens: 100, MaxTokens: 29})
	if !errors.Is(err, handoff.ErrRefused) {
		t.Fatalf("want a refusal, got %v", err)
	}
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// TestRoleRefusesContextLargerThanPool is I2 at start-up.
func TestRoleRefusesContextLargerThanPool(t *testing.T) {
	cfg := toyConfig(newToy(), 8)
	cfg.Context = 33 // the pool holds 32 tokens
	for name, mk := range map[string]func() error{
		"decode":    func() error { _, err := NewDecodeWorker(cfg); return err },
		"colocated": func() error { _, err := NewColocated(cfg); return err },
		"prefill":   func() error { _, err := NewPrefillWorker(cfg, &countingDecode{}); return err },
	} {
		err := mk()
		if err == nil || !strings.Contains(err.Error(), "33") || !strings.Contains(err.Error(), "32") {
			t.Errorf("%s started with a context larger than its pool: %v", name, err)
		}
	}
}

// TestAbandonedReservationIsReclaimed: a router that reserved and vanished
// does not hold decode pages forever.
func TestAbandonedReservationIsReclaimed(t *testing.T) {
	cfg := toyConfig(newToy(), 32)
	cfg.HandoffTimeout = time.Minute
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	if _, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: newID(), Tenant: "a", PromptTokens: 9, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	dw.Tick(time.Now())
	if dw.Pool().CheckDrained() == nil {
		t.Fatal("the reservation was reclaimed before its timeout")
	}
	dw.Tick(time.Now().Add(2 * time.Minute))
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatalf("an abandoned reservation still holds pages: %v", err)
	}
	if st := dw.ReceiverStats(); st.Aborted != 1 {
		t.Fatalf("stats %+v", st)
	}
	dw.Tick(time.Now().Add(4 * time.Minute))
	dw.mu.Lock()
	n := len(dw.handoffs)
	dw.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d ended handoffs are still remembered", n)
	}
}

// lateFailPrefill runs the real prefill (the commit is accepted and decode
// starts) and then reports err, as a reply lost or garbled on the way
// back would.
type lateFailPrefill struct {
	p   handoff.Prefill
	err error
}

func (l lateFailPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	if _, err := l.p.Prefill(ctx, r); err != nil {
		return nil, err
	}
	return nil, l.err
}

// TestLatePrefillFailureEndsInError: success needs both roles; decode's
// output alone is not a 200. A prefill failure after the commit that is
// not the transport's fails the request. A transport one lost only
// prefill's answer (decode verified the commit, I5, I9): the request
// fails with it when the router learns it first, and completes whole when
// decode finished first (disagg.go, tok.Done); never anything in between.
func TestLatePrefillFailureEndsInError(t *testing.T) {
	for _, c := range []struct {
		name        string
		err         error
		mayComplete bool
	}{
		{"protocol", handoff.ErrProtocol.With("reply garbled"), false},
		{"transport", handoff.ErrTransport.With("reply lost"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newToy()
			dw, pw := toyWorkers(t, m, 32)
			eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: 128}, lateFailPrefill{pw, c.err}, dw)
			if err != nil {
				t.Fatal(err)
			}
			defer closeWithin(t, eng)
			s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 9), MaxTokens: 5})
			if err != nil {
				t.Fatal(err)
			}
			r := collect(t, s)
			var e *Error
			switch {
			case c.mayComplete && r.final.Done && r.final.Err == nil && len(r.tokens) == 5:
			case !r.final.Done && errors.As(r.final.Err, &e) && errors.Is(r.final.Err, c.err):
			default:
				t.Fatalf("a late prefill failure must end the stream in its error (or, for a lost reply, complete), got %+v after %v", r.final, r.tokens)
			}
			waitDrained(t, dw.Pool())
		})
	}
}

// TestCommitWithForeignFirstTokenFails: the commit's first token reaches
// the client unmodified, so an id outside the vocabulary fails the handoff.
func TestCommitWithForeignFirstTokenFails(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 32)
	id := newID()
	if _, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 4, MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	err := dw.Commit(context.Background(), &handoff.Commit{Handoff: id, Tokens: 4, Digest: []byte{1}, FirstToken: int32(m.vocab)})
	if !errors.Is(err, handoff.ErrProtocol) {
		t.Fatalf("want a protocol error, got %v", err)
	}
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// TestAbsurdMaxTokensIsRejectedCheaply: max_tokens is client input; it is
// rejected by admission, not turned into a giant buffer first.
func TestAbsurdMaxTokensIsRejectedCheaply(t *testing.T) {
	e, err := NewColocated(toyConfig(newToy(), 8))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e)
	_, err = e.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 3), MaxTokens: 1 << 40})
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != CodeContextLength {
		t.Fatalf("want context_length_exceeded, got %v", err)
	}
}

// noPair is a Pairer with no usable worker, refusing as router/node's
// cluster does: naming the worker's address and the filter that dropped it.
type noPair struct{}

func (noPair) Pair(*Request, []*Pair) (*Pair, error) {
	return nil, errors.New("decode: no usable worker: all 1 filtered out ([10.1.2.3:9002 not answering])")
}

// With no worker to take a request, the tenant gets 503 overloaded with a
// sentence it can act on and no internal address; the log (the error's
// cause) keeps the address.
func TestNoPairRefusalNamesNoWorker(t *testing.T) {
	eng, err := NewDisaggregatedPairs(DisaggConfig{Model: "toy", Vocab: 64, Context: 128}, noPair{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	_, err = eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 10), MaxTokens: 4})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeOverloaded || e.Status != http.StatusServiceUnavailable {
		t.Fatalf("want overloaded 503, got %v", err)
	}
	if strings.Contains(e.Message, "10.1.2.3") || strings.Contains(e.Message, "9002") || !strings.Contains(e.Message, "retry") {
		t.Errorf("the tenant's message names an internal worker or no action: %q", e.Message)
	}
	if !strings.Contains(e.Error(), "10.1.2.3:9002 not answering") {
		t.Errorf("the log line lost the worker: %q", e.Error())
	}
}
