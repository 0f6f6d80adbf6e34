package tcp

import (
	"slices"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

// A resumed request's earlier tokens cross the wire in both messages that
// carry them (prefill request: an offset into its prompt; stream open: the
// tokens); a negative offset is refused.
func TestSampleOffsetRoundTrips(t *testing.T) {
	id := handofftest.ID(7)
	sp := handoff.StreamParams{Sampling: sample.Params{Temperature: 0.5, Seed: 9}, IgnoreEOS: true, Generated: []int32{5, 6, 7}}
	gotID, got, err := decStreamOpen(mustEnc(encStreamOpen(id, sp)))
	if err != nil || gotID != id || !slices.Equal(got.Generated, sp.Generated) || got.Sampling.Seed != 9 || !got.IgnoreEOS {
		t.Fatalf("stream open: %v %+v, want %+v", err, got, sp)
	}
	pr := &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1, 2, 3}, SampleOffset: 41,
		Reservation: &handoff.Reservation{Handoff: id, Pages: []kv.PageRef{{Page: 1, Gen: 2}}, PageSize: 16, ExpectTokens: 3}}
	back, err := decPrefill(mustEnc(encPrefill(pr)))
	if err != nil || back.SampleOffset != 41 || len(back.Tokens) != 3 {
		t.Fatalf("prefill: %v %+v", err, back)
	}
	// A negative offset is refused by the encoder (on that call alone),
	// and its bytes by the decoder.
	pr.SampleOffset = -1
	if _, err := decPrefill(refused(t)(encPrefill(pr))); err == nil {
		t.Fatal("a negative sampler offset was accepted")
	}
}
