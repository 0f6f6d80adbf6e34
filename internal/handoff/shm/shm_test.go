package shm

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/handoff/inproc"
	"sluice/internal/handoff/tcp"
	"sluice/internal/kv"
)

var secret = []byte("0123456789abcdef-shm-secret")

func rig(t *testing.T) (*handofftest.Rig, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kv.shm")
	return handofftest.New(t, handofftest.Options{SharedFile: path, Lease: 5 * time.Second}), path
}

// control returns the control channel to r's decode service: in-process or TCP.
func control(t *testing.T, r *handofftest.Rig, kind string) handoff.Decode {
	t.Helper()
	if kind == "inproc" {
		return inproc.Decode(r.Server)
	}
	s, err := tcp.NewServer(tcp.Config{Secret: secret}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	c, err := tcp.Dial(context.Background(), l.Addr().String(), tcp.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writer(t *testing.T, r *handofftest.Rig, path string, next handoff.Decode) *Writer {
	t.Helper()
	w, err := Open(path, r.Geo, next)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func TestHonest(t *testing.T) {
	for _, ctl := range []string{"inproc", "tcp"} {
		t.Run(ctl, func(t *testing.T) {
			r, path := rig(t)
			w := writer(t, r, path, control(t, r, ctl))
			for i, n := range []int{1, 4, 5, 37} {
				handofftest.Honest(t, r, w, i, n, handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes()})
			}
			r.CheckDrained(t)
		})
	}
}

func TestAbortEveryPhase(t *testing.T) {
	for _, ctl := range []string{"inproc", "tcp"} {
		t.Run(ctl, func(t *testing.T) {
			r, path := rig(t)
			handofftest.AbortEveryPhase(t, r, writer(t, r, path, control(t, r, ctl)))
		})
	}
}

func TestForeignWrite(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	handofftest.ForeignWrite(t, r, w)
}

// I6 for real: a write posted before the abort lands in the decode pool's
// memory after it. The pages stay quarantined until the writer's drain
// acknowledgement (or the lease), and the next owner of those pages reads
// scrubbed memory, never the stale bytes.
func TestStaleOneSidedWriteAfterAbort(t *testing.T) {
	for _, end := range []string{"drain", "lease"} {
		t.Run(end, func(t *testing.T) {
			r, path := rig(t)
			w := writer(t, r, path, control(t, r, "tcp"))
			ctx := context.Background()
			id := handofftest.ID(1)
			src := r.Sequence(t, id, "acme", 16, 3)
			res, err := w.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 16})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: r.Geo.PageBytes(), Window: 1}, res, 16, 1, src)
			a := s.Next()
			err = w.Write(ctx, a.Batch)
			if err != nil {
				t.Fatal(err)
			}
			s.Ack(a.Seq, err)
			inflight := s.Next() // posted, not yet landed
			free0 := r.Decode.FreePages()
			if err := w.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "prefill worker lost"}); err != nil {
				t.Fatal(err)
			}
			// The in-flight write lands now, one-sidedly, after the abort.
			data, _, _ := src.Page(inflight.Batch[0].Block)
			w.PlaceRaw(inflight.Batch[0].Page.Page, data)
			if got := r.Decode.FreePages(); got != free0 {
				t.Fatalf("%d pages freed at the abort while a one-sided write could still land (I6)", got-free0)
			}
			r.Clock.Advance(4 * time.Second)
			r.Server.Tick()
			if got := r.Decode.FreePages(); got != free0 {
				t.Fatal("pages freed before the lease ran out and without a drain acknowledgement (I6)")
			}
			if end == "drain" {
				if err := w.Drained(ctx, id); err != nil {
					t.Fatal(err)
				}
			} else {
				r.Clock.Advance(time.Second)
				r.Server.Tick()
			}
			if got := r.Decode.FreePages(); got != free0+len(res.Pages) {
				t.Fatalf("after %s: %d pages came back, want %d", end, got-free0, len(res.Pages))
			}
			// LIFO: the next owner gets the same pages and must read scrubbed memory (I7).
			o := kv.Owner{Tenant: "globex", ID: handofftest.ID(2)}
			refs, err := r.Decode.Reserve(o, len(res.Pages))
			if err != nil {
				t.Fatal(err)
			}
			for _, ref := range refs {
				img, _, err := r.Decode.PageData(o, ref)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range img {
					if b != 0 {
						t.Fatalf("page %d holds stale bytes of the aborted handoff", ref.Page)
					}
				}
			}
			r.Decode.Release(o, refs)
			r.ReleaseSource(t, src)
			r.CheckDrained(t)
		})
	}
}

// A torn or foreign one-sided write fails the notice's checksum.
func TestPlacedChecksum(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	ctx := context.Background()
	id := handofftest.ID(1)
	src := r.Sequence(t, id, "acme", 4, 3)
	res, _ := w.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 4})
	data, slots, _ := src.Page(0)
	bad := append([]byte(nil), data...)
	bad[1] ^= 0xFF
	w.PlaceRaw(res.Pages[0].Page, bad)
	err := w.next.Write(ctx, []handoff.PageWrite{{Handoff: id, Page: res.Pages[0], Slots: slots, Checksum: handoff.Checksum(data), Placed: true}})
	if !errors.Is(err, handoff.ErrChecksum) {
		t.Fatalf("torn placed page: %v, want ErrChecksum", err)
	}
	w.Drained(ctx, id)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}

func TestOutOfRangePageRefused(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	err := w.Write(context.Background(), []handoff.PageWrite{{Page: kv.PageRef{Page: 1 << 30}, Data: make([]byte, r.Geo.PageBytes())}})
	if !errors.Is(err, handoff.ErrBadWrite) {
		t.Fatalf("page outside the mapping: %v", err)
	}
}
