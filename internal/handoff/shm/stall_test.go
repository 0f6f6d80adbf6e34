package shm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// commitPage commits a one-page handoff whose only page was just written,
// with the source's digest (what an honest prefill sends).
func commitPage(ctx context.Context, d handoff.Decode, id kv.ID, src *handoff.PoolSource) error {
	dg, err := src.Digest()
	if err != nil {
		return err
	}
	return d.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: src.Tokens, Digest: dg})
}

// I6 beyond the lease: a prefill writer whose page copy was posted for
// tenant A, then stalled (CPU throttling, SIGSTOP; here: a posted copy not
// yet run) past the lease, while the router aborted A on the decode side
// WITHOUT telling the writer, and A's page was freed and handed to tenant
// B. When the stalled copy finally runs, the shared file's generation word
// stops it: not one of A's bytes lands in B's page, B's own write and
// commit go through, and the writer places nothing more for A. With the
// word check off (NoGenFence) the same run puts A's KV in B's page.
func TestStalledWriterPastLease(t *testing.T) {
	for _, ctl := range []string{"inproc", "tcp"} {
		for _, fenced := range []bool{true, false} {
			name := ctl
			if !fenced {
				name += "/without the generation word"
			}
			t.Run(name, func(t *testing.T) {
				r, path := rig(t)
				w := writer(t, r, path, control(t, r, ctl))
				w.NoGenFence = !fenced
				ctx := context.Background()
				a, b := handofftest.ID(1), handofftest.ID(2)
				srcA := r.Sequence(t, a, "acme", 4, 1)
				resA, err := w.Reserve(ctx, &handoff.Reserve{Handoff: a, Tenant: "acme", PromptTokens: 4})
				if err != nil {
					t.Fatal(err)
				}
				dataA, slots, _ := srcA.Page(0)
				lands, err := w.Post([]handoff.PageWrite{{Handoff: a, Block: 0, Page: resA.Pages[0], Slots: slots, Data: dataA, Checksum: handoff.Checksum(dataA)}})
				if err != nil || lands[0] == nil {
					t.Fatalf("post: %v", err)
				}
				// The writer stalls. The router gives A up on the decode
				// side only; the lease runs out on the fake clock.
				if err := r.Server.Abort(ctx, &handoff.Abort{Handoff: a, Reason: "router timeout"}); err != nil {
					t.Fatal(err)
				}
				r.Clock.Advance(6 * time.Second) // the rig's lease is 5 s
				r.Server.Tick()
				srcB := r.Sequence(t, b, "globex", 4, 2)
				resB, err := w.Reserve(ctx, &handoff.Reserve{Handoff: b, Tenant: "globex", PromptTokens: 4})
				if err != nil {
					t.Fatal(err)
				}
				if resB.Pages[0].Page != resA.Pages[0].Page {
					t.Fatalf("B got page %d, not A's page %d: the test needs the re-use (LIFO)", resB.Pages[0].Page, resA.Pages[0].Page)
				}
				ob := kv.Owner{Tenant: "globex", ID: b}
				before, _, err := r.Decode.PageData(ob, resB.Pages[0])
				if err != nil {
					t.Fatal(err)
				}
				before = append([]byte(nil), before...)

				lands[0]() // the stalled copy resumes, long after the lease
				after, _, _ := r.Decode.PageData(ob, resB.Pages[0])
				if !fenced {
					if bytes.Equal(after, before) {
						t.Fatal("without the generation word the late copy did not land: the test shows nothing")
					}
					return
				}
				if !bytes.Equal(after, before) {
					t.Fatal("tenant A's late bytes landed in the page now reserved for tenant B")
				}
				if w.GenFenced() != 1 {
					t.Fatalf("%d copies fenced by the generation word, want 1", w.GenFenced())
				}
				// The writer learnt of the abort from the memory: nothing
				// more for A, even a write naming A's old page.
				if l, err := w.Post([]handoff.PageWrite{{Handoff: a, Block: 0, Page: resA.Pages[0], Slots: slots, Data: dataA}}); err != nil || l[0] != nil {
					t.Fatalf("the writer would place more bytes for the aborted handoff: %v", err)
				}
				// B is whole: its write and commit pass.
				dataB, slotsB, _ := srcB.Page(0)
				if err := w.Write(ctx, []handoff.PageWrite{{Handoff: b, Block: 0, Page: resB.Pages[0], Slots: slotsB, Data: dataB, Checksum: handoff.Checksum(dataB)}}); err != nil {
					t.Fatal(err)
				}
				if err := commitPage(ctx, w, b, srcB); err != nil {
					t.Fatalf("B's commit: %v", err)
				}
				if acc := r.Dec.Accepted(b); acc == nil {
					t.Fatal("B was not accepted")
				} else if err := r.SameKV(acc, srcB); err != nil {
					t.Fatalf("B's pages: %v", err)
				}
				if err := r.Dec.Release(b); err != nil {
					t.Fatal(err)
				}
				_ = w.Drained(ctx, a)
				r.ReleaseSource(t, srcA)
				r.ReleaseSource(t, srcB)
				r.CheckDrained(t)
			})
		}
	}
}

// A copy the writer wrote while the handoff was still live but that the
// decode side ended meanwhile: Write refuses it with ErrAborted and places
// no byte (the writer learns of an abort it was not told of).
func TestWriteAfterUntoldAbort(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	ctx := context.Background()
	a := handofftest.ID(1)
	src := r.Sequence(t, a, "acme", 4, 1)
	res, err := w.Reserve(ctx, &handoff.Reserve{Handoff: a, Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Server.Abort(ctx, &handoff.Abort{Handoff: a, Reason: "decode gave up"}); err != nil {
		t.Fatal(err)
	}
	data, slots, _ := src.Page(0)
	before := mustPage(t, r, path, res.Pages[0])
	err = w.Write(ctx, []handoff.PageWrite{{Handoff: a, Block: 0, Page: res.Pages[0], Slots: slots, Data: data, Checksum: handoff.Checksum(data)}})
	if !errors.Is(err, handoff.ErrAborted) {
		t.Fatalf("write after an untold abort: %v, want ErrAborted", err)
	}
	if !bytes.Equal(mustPage(t, r, path, res.Pages[0]), before) {
		t.Fatal("bytes landed in a page whose handoff the decode side had ended")
	}
	_ = w.Drained(ctx, a)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}

// mustPage reads a page's raw bytes through a peer mapping of the file,
// whoever holds it now.
func mustPage(t *testing.T, r *handofftest.Rig, path string, ref kv.PageRef) []byte {
	t.Helper()
	w, err := Open(path, r.Geo, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	off := kv.SharedHeaderBytes + int(ref.Page)*r.Geo.PageBytes()
	return append([]byte(nil), w.cur.mem[off:off+r.Geo.PageBytes()]...)
}

// The window the generation word leaves: a writer that passed the check
// and stalls before its copy (beforeCopy) while A is aborted, the lease
// runs out and B is given the page and writes it inline (as over TCP to
// a shared pool). A's late copy then lands over B's bytes; B's commit
// digest, hashed from the memory at the commit (a shared pool trusts no
// recorded hash, kv sum.go), refuses it: B fails closed with
// digest_mismatch, never decodes over A's KV.
func TestStalledWriterAfterCheck(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	ctx := context.Background()
	a, b := handofftest.ID(1), handofftest.ID(2)
	srcA := r.Sequence(t, a, "acme", 4, 1)
	srcB := r.Sequence(t, b, "globex", 4, 2)
	resA, err := w.Reserve(ctx, &handoff.Reserve{Handoff: a, Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	var resB *handoff.Reservation
	w.beforeCopy = func(uint32) {
		w.beforeCopy = nil
		if err := r.Server.Abort(ctx, &handoff.Abort{Handoff: a, Reason: "router timeout"}); err != nil {
			t.Error(err)
		}
		r.Clock.Advance(6 * time.Second)
		r.Server.Tick()
		resB, err = r.Server.Reserve(ctx, &handoff.Reserve{Handoff: b, Tenant: "globex", PromptTokens: 4})
		if err != nil {
			t.Error(err)
			return
		}
		d, n, _ := srcB.Page(0)
		if err := r.Server.Write(ctx, []handoff.PageWrite{{Handoff: b, Block: 0, Page: resB.Pages[0], Slots: n, Data: d, Checksum: handoff.Checksum(d)}}); err != nil {
			t.Error(err)
		}
	}
	dataA, slots, _ := srcA.Page(0)
	// A's write passes the check, stalls in beforeCopy, then lands; its
	// notice is refused (A was aborted).
	_ = w.Write(ctx, []handoff.PageWrite{{Handoff: a, Block: 0, Page: resA.Pages[0], Slots: slots, Data: dataA, Checksum: handoff.Checksum(dataA)}})
	if resB == nil || resB.Pages[0].Page != resA.Pages[0].Page {
		t.Fatal("B did not get A's page: the test needs the re-use (LIFO)")
	}
	err = commitPage(ctx, r.Server, b, srcB)
	if !errors.Is(err, handoff.ErrDigestMismatch) {
		t.Fatalf("B's commit over A's late bytes: %v, want %s", err, handoff.ErrDigestMismatch.Code)
	}
	r.ReleaseSource(t, srcA)
	r.ReleaseSource(t, srcB)
	r.CheckDrained(t)
}
