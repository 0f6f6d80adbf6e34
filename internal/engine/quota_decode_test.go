package engine

import (
	"context"
	"errors"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// The disaggregated decode pool's KV quota (issue 28): the router's
// requests waiting for decode pages are seen as refusals for room; while
// tenant b's waits within its share, tenant a, over its share, gets no
// page, even one that came back, and b's next try gets it. Alone, a may
// fill the pool (work-conserving), and its refusals then are plain "no
// room", which hold the router's whole queue as before.
func TestDecodeQuotaHoldsOverShareTenantWhileAnotherWaits(t *testing.T) {
	m := newToy()
	dw, err := NewDecodeWorker(toyConfig(m, 32))
	if err != nil {
		t.Fatal(err)
	}
	defer dw.Close()
	ctx := context.Background()
	reserve := func(tenant string) (kv.ID, error) {
		id := newID()
		_, err := dw.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: tenant, PromptTokens: 12, MaxTokens: 2, Model: FingerprintOf(m)})
		return id, err
	}
	var as []kv.ID
	for {
		id, err := reserve("a")
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("a alone refused with %v, want no_room", err)
			}
			break
		}
		as = append(as, id)
	}
	share := 32 / 2
	if held := 4 * len(as); held <= share {
		t.Fatalf("a alone holds %d pages of 32: not work-conserving", held)
	}
	// b, within its share, skips the free-page watermark that stopped a,
	// then waits: refused for room, within its share.
	var bs []kv.ID
	for {
		id, err := reserve("b")
		if err != nil {
			if !errors.Is(err, handoff.ErrNoRoom) || errors.Is(err, handoff.ErrOverShare) {
				t.Fatalf("b refused with %v, want no_room", err)
			}
			break
		}
		bs = append(bs, id)
	}
	if len(bs) == 0 {
		t.Fatal("b within its share waits for the watermark a's sequences keep")
	}
	if 4*(len(bs)+1) > share {
		t.Fatalf("b holds %d pages and waits for more: not within its share of %d", 4*len(bs), share)
	}
	// Pages come back (three of a's handoffs end, more than the
	// watermark keeps): a may not take them while b waits.
	for _, id := range as[:3] {
		if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	as = as[3:]
	if _, err := reserve("a"); !errors.Is(err, handoff.ErrOverShare) {
		t.Fatalf("a over its share took pages while b waits: %v", err)
	}
	// b, within its share, skips the watermark and gets them.
	bid, err := reserve("b")
	if err != nil {
		t.Fatalf("b within its share refused: %v", err)
	}
	// b holds pages: a, over its share, is still held back (only a: its
	// refusal says over_share, which the router's queue passes over).
	if _, err := reserve("a"); !errors.Is(err, handoff.ErrOverShare) {
		t.Fatalf("a over its share refused with %v, want over_share", err)
	}
	for _, id := range append(append(as, bs...), bid) {
		if err := dw.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	waitDrained(t, dw.Pool())
}

// over_share crosses the wire as itself and still reads as "no room" (and
// a refusal) to a router that does not know it.
func TestOverShareIsNoRoomOnTheWire(t *testing.T) {
	code, msg := handoff.ToWire(handoff.ErrOverShare.With("x"))
	back := handoff.FromWire(code, msg)
	if !errors.Is(back, handoff.ErrOverShare) || !errors.Is(back, handoff.ErrNoRoom) || !errors.Is(back, handoff.ErrRefused) {
		t.Fatalf("%v does not read as over_share, no_room and refused", back)
	}
	if errors.Is(handoff.ErrNoRoom, handoff.ErrOverShare) {
		t.Fatal("no_room reads as over_share")
	}
}
