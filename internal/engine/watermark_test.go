package engine

import (
	"context"
	"errors"
	"testing"

	"sluice/internal/handoff"
)

// Expected values worked by hand from the documented rule: two free pages
// per holder after the reservation, at most a quarter of the pool; an
// unheld pool admits whatever it can hold.
func TestWatermark(t *testing.T) {
	for _, c := range []struct {
		avail, need, total, holders int
		ok                          bool
	}{
		{32, 16, 32, 0, true},  // empty pool: anything that fits
		{32, 32, 32, 0, true},  // the whole pool, nobody else holds pages
		{10, 11, 32, 0, false}, // does not fit now
		{20, 14, 32, 3, true},  // leaves 6 = 2 x 3
		{20, 15, 32, 3, false}, // leaves 5 < 6
		{20, 12, 32, 10, true}, // leaves 8: the cap (32/4), not 20
		{20, 13, 32, 10, false},
		{5, 5, 32, 1, false}, // the last free pages, with a holder
		{3, 1, 8, 1, true},   // leaves 2 = min(2, 8/4)
		{3, 2, 8, 1, false},  // leaves 1
		{30, 1, 31, 0, true}, // quarantined pages, nobody holds: admit
		{1, 1, 3, 1, true},   // a pool of 3: cap 0, the watermark is off
	} {
		if got := watermarkOK(c.avail, c.need, c.total, c.holders); got != c.ok {
			t.Errorf("watermarkOK(avail %d, need %d, total %d, holders %d) = %v, want %v", c.avail, c.need, c.total, c.holders, got, c.ok)
		}
	}
}

// The decode worker keeps the watermark: with one handoff holding pages, a
// reservation that would leave fewer than two pages free is "no room now"
// (the router's queue waits) though the pool could hold it; once the
// holder is gone the same reservation succeeds. (One tenant: another
// tenant within its KV share skips the watermark, quota_decode_test.go.)
func TestDecodeReserveKeepsWatermark(t *testing.T) {
	dw := toyDecodeWorker(t, newToy(), 16) // 16 pages of 4 tokens
	first := newID()
	// 40 prompt tokens + a page of headroom: 11 pages, 5 left.
	if _, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: first, Tenant: "a", PromptTokens: 40, MaxTokens: 8}); err != nil {
		t.Fatal(err)
	}
	// 12 + 4: 4 pages would leave 1 free, under the watermark of 2.
	r := &handoff.Reserve{Handoff: newID(), Tenant: "a", PromptTokens: 12, MaxTokens: 8}
	if _, err := dw.Reserve(context.Background(), r); !errors.Is(err, handoff.ErrNoRoom) {
		t.Fatalf("under the watermark: %v, want no room", err)
	}
	if free := dw.Pool().FreePages(); free != 5 {
		t.Fatalf("%d free pages: the refused reservation took some", free)
	}
	// 8 + 4: 3 pages leave 2, the watermark.
	if _, err := dw.Reserve(context.Background(), &handoff.Reserve{Handoff: newID(), Tenant: "a", PromptTokens: 8, MaxTokens: 8}); err != nil {
		t.Fatalf("at the watermark: %v", err)
	}
	if err := dw.Abort(context.Background(), &handoff.Abort{Handoff: first, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := dw.Reserve(context.Background(), r); err != nil {
		t.Fatalf("after the holder left: %v", err)
	}
}
