package engine

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"

	"sluice/internal/handoff"
)

// wrappingMaxTokens are max_tokens values at which prompt+max_tokens wraps
// (or nearly wraps) an int, for a prompt of n tokens.
func wrappingMaxTokens(n int) []int {
	return []int{math.MaxInt64, math.MaxInt64 - n, math.MaxInt64 - n + 1, math.MaxInt32 + 1}
}

// Every engine's admission compares without forming prompt+max_tokens:
// near MaxInt64 the sum wrapped negative and the request was admitted
// with no pages reserved, free to grow into the whole pool.
func TestAdmissionDoesNotWrap(t *testing.T) {
	m := newToy()
	col, err := NewColocated(toyConfig(m, 16))
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, col)
	dw := toyDecodeWorker(t, m, 16)
	cd := &countingDecode{Decode: dw}
	pw, err := NewPrefillWorker(toyConfig(m, 16), cd)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	cp := &countingPrefill{p: pw}
	dis, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: EffectiveContext(pw.Context(), dw.Context())}, cp, cd)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, dis)
	p := prompt(1, 5)
	for name, eng := range map[string]Engine{"colocated": col, "disaggregated": dis} {
		for _, mt := range wrappingMaxTokens(len(p)) {
			_, err := eng.Submit(context.Background(), &Request{Tenant: "a", Prompt: p, MaxTokens: mt})
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeContextLength || e.Status != http.StatusBadRequest {
				t.Fatalf("%s, max_tokens %d: %v, want context_length_exceeded", name, mt, err)
			}
		}
	}
	if cd.reserves.Load() != 0 || cp.n.Load() != 0 {
		t.Fatalf("a refused request reached the workers: %d reserves, %d prefills", cd.reserves.Load(), cp.n.Load())
	}
	for name, pool := range map[string]interface{ CheckDrained() error }{"colocated": col.Pool(), "decode": dw.Pool(), "prefill": pw.Pool()} {
		if err := pool.CheckDrained(); err != nil {
			t.Fatalf("%s pool: %v", name, err)
		}
	}
}

// The decode worker repeats admission (it never trusts its caller) with
// the same non-wrapping comparison: the Reserve is refused by the
// worker's own context check, before its Receiver or pool is asked. Its
// pool is four times its context, so a capacity refusal cannot mask a
// missing context check.
func TestDecodeAdmissionDoesNotWrap(t *testing.T) {
	cfg := toyConfig(newToy(), 64)
	cfg.Context = 64
	dw, err := NewDecodeWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	const n = 5
	for _, mt := range append(wrappingMaxTokens(n), 64) {
		_, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: newID(), Tenant: "a", PromptTokens: n, MaxTokens: mt})
		if !errors.Is(err, handoff.ErrRefused) {
			t.Fatalf("max_tokens %d: %v, want refused", mt, err)
		}
	}
	if rs := dw.ReceiverStats(); rs.Reserved != 0 || len(rs.Failed) != 0 {
		t.Fatalf("the Receiver saw refused reservations (the worker's own check let them through): %+v", rs)
	}
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatal(err)
	}
	// The boundary: prompt + max_tokens == context is admitted.
	id := newID()
	if _, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: n, MaxTokens: 64 - n}); err != nil {
		t.Fatalf("a reservation of exactly the context: %v", err)
	}
	if err := dw.Abort(context.Background(), &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
}
