package node

import (
	"context"
	"errors"
	"testing"

	"sluice/internal/engine"
)

// Issue 30 item 8: a retry must move to another decode worker. With the
// only other decode worker refused (its vetting failed), the retry of a
// request whose handoff failed on d1 gets no pair, so the first failure
// stands; it is never paired with d1 again. With d2 usable it goes there.
func TestRetryNeverPairsTheFailedDecodeWorker(t *testing.T) {
	for _, d2ok := range []bool{false, true} {
		vet := func(context.Context) error { return errors.New("refused by the test") }
		if d2ok {
			vet = nil
		}
		c, err := NewCluster([]Worker{{Name: "p", Prefill: stubPrefill{"p"}}},
			[]Worker{{Name: "d1", Decode: stubDecode{}}, {Name: "d2", Decode: stubDecode{}, Vet: vet}}, DefaultWeights, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.Probe(context.Background())
		first := &engine.Pair{Prefill: stubPrefill{"p"}, Decode: stubDecode{}, DecodeName: "d1"}
		p, err := c.Pair(&engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 1}, first)
		switch {
		case !d2ok && err == nil:
			t.Fatalf("the retry was paired with %s although d1 failed and d2 is refused", p.DecodeName)
		case d2ok && (err != nil || p.DecodeName != "d2"):
			t.Fatalf("the retry with d2 usable: %v %v, want d2", p, err)
		}
	}
}
