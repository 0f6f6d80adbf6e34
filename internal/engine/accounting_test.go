package engine

import (
	"context"
	"testing"

	"sluice/internal/handoff"
)

// liarPrefill is a prefill peer that does its work but reports one prompt
// token more than it prefilled.
type liarPrefill struct{ inner handoff.Prefill }

func (l liarPrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	res, err := l.inner.Prefill(ctx, r)
	if res != nil {
		c := *res
		c.Tokens++
		res = &c
	}
	return res, err
}

// Issue 30 item 5: I9 in drive. A prefill peer whose result claims one
// prompt token more than the prompt has fails the request with an
// integrity error; it never becomes a 200 with the peer's prompt_tokens.
func TestPrefillOverReportingFailsClosed(t *testing.T) {
	m := newToy()
	dw, pw := toyWorkers(t, m, 32)
	d, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Context: 128}, liarPrefill{pw}, dw)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, d)
	s, err := d.Submit(context.Background(), &Request{Tenant: "a", Prompt: prompt(1, 9), MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	r := collect(t, s)
	var e *Error
	if r.final.Err == nil {
		t.Fatalf("a prefill peer reporting 10 prompt tokens for a 9-token prompt: success with usage %+v", r.final.Usage)
	}
	if e = asEngineError(r.final.Err, "", 0, ""); e.Code != CodeIntegrity {
		t.Fatalf("got %v, want %s", r.final.Err, CodeIntegrity)
	}
	waitDrained(t, pw.Pool(), dw.Pool())
}
