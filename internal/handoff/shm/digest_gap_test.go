package shm

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// I5 over one-sided pages: bytes that change in shared memory after their
// notice was checked and before the commit must fail the commit's digest.
// The digest is taken over what decode holds at the commit, not combined
// from hashes taken when each notice arrived (the simulator's finding).
func TestOneSidedBytesChangedAfterNoticeFailTheDigest(t *testing.T) {
	geo := kv.Geometry{Layers: 2, KVDim: 8, PageSize: 4}
	const tokens = 10 // pages of 4, 4 and 2 slots: full and short pages
	for _, victim := range []int{0, 2} {
		path := filepath.Join(t.TempDir(), "kv.shm")
		dec, err := kv.New(kv.Config{Geometry: geo, Pages: 8, SharedFile: path})
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		w, err := Open(path, geo, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		// The digest the honest sender computes, from a pool of its own.
		src, err := kv.New(kv.Config{Geometry: geo, Pages: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Close()
		so := kv.Owner{Tenant: "acme", ID: kv.ID{1}}
		stable, err := src.Reserve(so, 3)
		if err != nil {
			t.Fatal(err)
		}
		images := make([][]byte, 3)
		for b := range images {
			img := make([]byte, geo.PageBytes())
			for i := range img {
				img[i] = byte(b*31 + i*7 + 1)
			}
			images[b] = img
			if err := src.WritePage(so, stable[b], min(4, tokens-4*b), img); err != nil {
				t.Fatal(err)
			}
		}
		want, err := src.Digest(so, stable, tokens)
		if err != nil {
			t.Fatal(err)
		}

		t0 := time.Unix(1000, 0)
		r := handoff.NewReceiver(handoff.ReceiverConfig{PageSize: geo.PageSize, OneSided: true, Lease: time.Second}, dec)
		id := kv.ID{7}
		res, err := r.Reserve(t0, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens, MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		for b, ref := range res.Pages {
			w.PlaceRaw(ref.Page, images[b])
			// The checksum covers the whole page image as placed.
			n := handoff.PageWrite{Handoff: id, Block: b, Page: ref, Slots: min(4, tokens-4*b),
				Checksum: handoff.Checksum(images[b]), Placed: true}
			if err := r.Write(t0, []handoff.PageWrite{n}); err != nil {
				t.Fatalf("notice of block %d: %v", b, err)
			}
		}
		// After its notice was checked, a one-sided write overwrites a
		// page (a stray or stale writer): decode no longer holds the
		// sequence the sender digested.
		w.PlaceRaw(res.Pages[victim].Page, make([]byte, geo.PageBytes()))
		_, err = r.Commit(t0, &handoff.Commit{Handoff: id, Tokens: tokens, Digest: want[:], FirstToken: 1})
		if !errors.Is(err, handoff.ErrDigestMismatch) {
			t.Fatalf("block %d overwritten after its notice: commit %v, want ErrDigestMismatch (I5)", victim, err)
		}
	}
}
