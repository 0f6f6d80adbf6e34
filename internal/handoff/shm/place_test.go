package shm

import (
	"context"
	"errors"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// A Sender placing through the Writer (handoff.Placer, as Push sets up)
// copies every page into the decode pool's mapping while it hashes it: its
// batches are notices only, each checksum is handoff.Checksum of the page
// image (full pages and the short last one), and the decode side accepts
// exactly the prefill KV.
func TestSenderPlacesPages(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	ctx := context.Background()
	id := handofftest.ID(1)
	const tokens = 2*4 + 3
	src := r.Sequence(t, id, "acme", tokens, 7)
	res, err := w.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	s, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes()}, res, tokens, 4, handoff.PrefetchDigest(src))
	if err != nil {
		t.Fatal(err)
	}
	s.PlaceWith(w)
	notices := 0
	for done := false; !done; {
		a := s.Next()
		switch a.Kind {
		case handoff.ActWrite:
			if len(a.Batch) > 2 {
				t.Fatalf("batch of %d pages, bound is 2", len(a.Batch))
			}
			for _, pw := range a.Batch {
				img, _, _ := src.Page(pw.Block)
				if !pw.Placed || pw.Data != nil || pw.Checksum != handoff.Checksum(img) {
					t.Fatalf("block %d: placed=%v data=%d checksum %08x, image hashes to %08x",
						pw.Block, pw.Placed, len(pw.Data), pw.Checksum, handoff.Checksum(img))
				}
				notices++
			}
			s.Ack(a.Seq, w.Write(ctx, a.Batch))
		case handoff.ActCommit:
			s.Committed(w.Commit(ctx, a.Commit))
		case handoff.ActDone:
			done = true
		default:
			t.Fatalf("action %v: %v", a.Kind, a.Err)
		}
	}
	if notices != len(res.Pages) {
		t.Fatalf("%d notices for %d pages", notices, len(res.Pages))
	}
	if err := r.SameKV(r.Dec.Accepted(id), src); err != nil {
		t.Fatal(err)
	}
	r.Dec.Release(id)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}

// The writer-side fence holds for placement too: once this writer aborted
// a handoff, a Sender placing for it fails before a byte lands (I6).
func TestPlacementFenced(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	ctx := context.Background()
	id := handofftest.ID(2)
	src := r.Sequence(t, id, "acme", 4, 9)
	res, err := w.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	s, err := handoff.NewSender(handoff.SenderConfig{}, res, 4, 1, src)
	if err != nil {
		t.Fatal(err)
	}
	s.PlaceWith(w)
	if a := s.Next(); a.Kind != handoff.ActAbort || !errors.Is(a.Err, handoff.ErrAborted) {
		t.Fatalf("placing for a fenced handoff: %v %v", a.Kind, a.Err)
	}
	off := int(res.Pages[0].Page) * r.Geo.PageBytes()
	for i, b := range w.mem[off : off+r.Geo.PageBytes()] {
		if b != 0 {
			t.Fatalf("byte %d of the fenced page was placed", i)
		}
	}
	if _, err := w.PlaceDst(handofftest.ID(99), kv.PageRef{Page: 1 << 30}); err == nil {
		t.Fatal("a page outside the mapping was handed out")
	}
	w.Drained(ctx, id)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}
