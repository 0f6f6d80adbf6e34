package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sluice/internal/handoff"
)

// Issue 30 item 3: a prefill worker's refusal names the prefill worker,
// never decode (handoff.ErrRefused is decode's reservation refusal), and
// the router's error says so; the prefill worker's load report carries
// its context so a router can vet it (I2).
func TestPrefillRefusalNamesPrefill(t *testing.T) {
	m := newToy()
	dw := toyDecodeWorker(t, m, 64)
	pw, err := NewPrefillWorker(toyConfig(m, 8), dw)
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	if l, err := pw.Load(context.Background()); err != nil || l.Context != 32 {
		t.Fatalf("prefill load report %+v %v, want context 32", l, err)
	}
	if l, err := dw.Load(context.Background()); err != nil || l.Context != 256 {
		t.Fatalf("decode load report %+v %v, want context 256", l, err)
	}
	id := newID()
	res, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 40, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, err = pw.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: prompt(1, 40), Reservation: res})
	if !errors.Is(err, handoff.ErrPrefillRefused) || errors.Is(err, handoff.ErrRefused) || strings.Contains(err.Error(), "decode") {
		t.Fatalf("prefill of a prompt beyond its context: %v, want a prefill refusal that does not name decode", err)
	}
	e := handoffFailure(err)
	if !strings.Contains(e.Message, "prefill worker refused") {
		t.Fatalf("the router's error %q does not name the prefill worker", e.Message)
	}
	waitDrained(t, pw.Pool(), dw.Pool())
}
