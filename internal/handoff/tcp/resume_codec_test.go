package tcp

import (
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

// A resumed request's sampler offset crosses the wire in both messages
// that carry it (prefill request, stream open); a negative one is refused.
func TestSampleOffsetRoundTrips(t *testing.T) {
	id := handofftest.ID(7)
	sp := handoff.StreamParams{Sampling: sample.Params{Temperature: 0.5, Seed: 9}, IgnoreEOS: true, SampleOffset: 37}
	gotID, got, err := decStreamOpen(encStreamOpen(id, sp))
	if err != nil || gotID != id || got != sp {
		t.Fatalf("stream open: %v %+v, want %+v", err, got, sp)
	}
	pr := &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1, 2, 3}, SampleOffset: 41,
		Reservation: &handoff.Reservation{Handoff: id, Pages: []kv.PageRef{{Page: 1, Gen: 2}}, PageSize: 16, ExpectTokens: 3}}
	back, err := decPrefill(encPrefill(pr))
	if err != nil || back.SampleOffset != 41 || len(back.Tokens) != 3 {
		t.Fatalf("prefill: %v %+v", err, back)
	}
	sp.SampleOffset = -1
	if _, _, err := decStreamOpen(encStreamOpen(id, sp)); err == nil {
		t.Fatal("a negative sampler offset was accepted")
	}
}
