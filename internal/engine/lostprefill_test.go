package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// lostPrefill is a prefill call that died with its connection before the
// worker did anything (or gave up without telling decode): decode holds a
// reservation for a commit that will never come.
type lostPrefill struct{}

func (lostPrefill) Prefill(context.Context, *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	return nil, handoff.ErrTransport.With("connection closed")
}

// A request whose prefill call fails ends at once, with the error, and
// its decode reservation is released: the router aborts the handoff at
// decode instead of waiting in the decode stream for a commit that never
// comes (before, it hung until decode's handoff timeout, two minutes by
// default; here an hour, so only the abort can end it before collect's
// hang guard).
func TestLostPrefillCallEndsTheRequest(t *testing.T) {
	m := newToy()
	cfg := toyConfig(m, 32)
	cfg.HandoffTimeout = time.Hour
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: 128}, lostPrefill{}, dw)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Bounded: with the bug, the request never ends by itself.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		eng.Close(ctx)
	}()
	s, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 9), MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	if r.final.Done || !errors.Is(r.final.Err, handoff.ErrTransport) || len(r.tokens) != 0 {
		t.Fatalf("a lost prefill call must end the request in its error, got %+v after %v", r.final, r.tokens)
	}
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatalf("the decode reservation outlived the request: %v", err)
	}
}
