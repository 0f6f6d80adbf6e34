package handoff_test

import (
	"context"
	"errors"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// With the Receiver's own checks off, the pool's tags stand alone (I3): a
// violation the pool detects (and quarantines a page for) still fails the
// handoff closed, and the page comes back after its lease: nothing leaks.
func TestPoolViolationAlone(t *testing.T) {
	for _, oneSided := range []bool{false, true} {
		opts := handofftest.Options{Safeguards: handoff.Safeguards{NoCoverage: true, NoReservationMatch: true}}
		if oneSided {
			opts.SharedFile = t.TempDir() + "/kv"
		}
		r := handofftest.New(t, opts)
		ctx := context.Background()
		id := handofftest.ID(1)
		src := r.Sequence(t, id, "acme", 8, 1)
		res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 8})
		if err != nil {
			t.Fatal(err)
		}
		d, n, _ := src.Page(0)
		w := handoff.PageWrite{Handoff: id, Block: 0, Page: res.Pages[0], Slots: n, Data: d, Checksum: handoff.Checksum(d)}
		if err := r.Server.Write(ctx, []handoff.PageWrite{w}); err != nil {
			t.Fatal(err)
		}
		// The same page again: only the pool notices (one transfer write per page).
		if err := r.Server.Write(ctx, []handoff.PageWrite{w}); !errors.Is(err, handoff.ErrBadWrite) {
			t.Fatalf("duplicate write with the Receiver's checks off: %v", err)
		}
		r.Server.Drained(ctx, id)
		r.ReleaseSource(t, src)
		r.CheckDrained(t)
	}
}
