package handoff_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/handoff/inproc"
	"sluice/internal/handoff/shm"
)

// Over the real kv pool the Receiver takes each page's checksum from the
// pool's one hash of the bytes it applied (kv.WritePageSum/MarkWrittenSum)
// instead of a pass of its own. That must still catch a flipped byte in any
// block, full or short, two-sided or placed one-sidedly, and fail closed
// with nothing left behind (I5, I8).
func TestOnePassChecksumCatchesCorruption(t *testing.T) {
	for _, oneSided := range []bool{false, true} {
		for _, tokens := range []int{4, 6} { // one full page; a full page and a short one
			for bad := 0; bad < (tokens+3)/4; bad++ {
				t.Run(fmt.Sprintf("onesided=%v/tokens=%d/block=%d", oneSided, tokens, bad), func(t *testing.T) {
					o := handofftest.Options{}
					if oneSided {
						o.SharedFile = filepath.Join(t.TempDir(), "kv.shm")
					}
					r := handofftest.New(t, o)
					ctx := context.Background()
					id := handofftest.ID(1)
					src := r.Sequence(t, id, "acme", tokens, 5)
					res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens})
					if err != nil {
						t.Fatal(err)
					}
					var w *shm.Writer
					if oneSided {
						if w, err = shm.Open(o.SharedFile, r.Geo, inproc.Decode(r.Server)); err != nil {
							t.Fatal(err)
						}
						defer w.Close()
					}
					var werr error
					for b := range res.Pages {
						data, slots, _ := src.Page(b)
						pw := handoff.PageWrite{Handoff: id, Block: b, Page: res.Pages[b], Slots: slots,
							Data: append([]byte(nil), data...), Checksum: handoff.Checksum(data)}
						if b == bad {
							// Slot 0 of the last layer's V rows: valid in every block.
							pw.Data[(2*r.Geo.Layers-1)*r.Geo.PageSize*r.Geo.RowBytes()+1] ^= 0x40
						}
						if oneSided {
							w.PlaceRaw(pw.Page.Page, pw.Data)
							pw.Data, pw.Placed = nil, true
						}
						if werr = r.Server.Write(ctx, []handoff.PageWrite{pw}); werr != nil {
							break
						}
					}
					if !errors.Is(werr, handoff.ErrChecksum) {
						t.Fatalf("corrupted block %d: %v, want ErrChecksum", bad, werr)
					}
					if s := r.Server.Stats(); s.Failed[handoff.ErrChecksum.Code] != 1 {
						t.Fatalf("stats %+v", s)
					}
					if err := r.Server.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: tokens, Digest: mustDigest(t, src)}); err == nil {
						t.Fatal("a handoff that failed its checksum committed")
					}
					r.ReleaseSource(t, src)
					r.CheckDrained(t)
				})
			}
		}
	}
}

func mustDigest(t *testing.T, src handoff.Source) []byte {
	t.Helper()
	d, err := src.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The Sender's checksums come from the prefill pool's one hash per page
// (PoolSource.PageSum): each must be exactly handoff.Checksum of the bytes
// the write carries, for full pages and the short last one, and the
// digest combined from those hashes must be the one the decode side
// computes over what it received.
func TestSenderOnePassChecksums(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	ctx := context.Background()
	id := handofftest.ID(2)
	const tokens = 3*4 + 2
	src := r.Sequence(t, id, "acme", tokens, 9)
	res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	s, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: 1}, res, tokens, 3, handoff.PrefetchDigest(src))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for {
		a := s.Next()
		switch a.Kind {
		case handoff.ActWrite:
			for _, w := range a.Batch {
				if w.Checksum != handoff.Checksum(w.Data) {
					t.Fatalf("block %d (%d slots): checksum %08x, the bytes hash to %08x", w.Block, w.Slots, w.Checksum, handoff.Checksum(w.Data))
				}
				seen++
			}
			s.Ack(a.Seq, r.Server.Write(ctx, a.Batch))
		case handoff.ActCommit:
			s.Committed(r.Server.Commit(ctx, a.Commit))
		case handoff.ActDone:
			if seen != len(res.Pages) {
				t.Fatalf("%d writes for %d pages", seen, len(res.Pages))
			}
			if err := r.SameKV(r.Dec.Accepted(id), src); err != nil {
				t.Fatal(err)
			}
			if err := r.Dec.Release(id); err != nil {
				t.Fatal(err)
			}
			r.ReleaseSource(t, src)
			r.CheckDrained(t)
			return
		default:
			t.Fatalf("action %v: %v", a.Kind, a.Err)
		}
	}
}
