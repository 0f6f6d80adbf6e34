package handofftest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Honest runs one full handoff of tokens tokens through d and checks the
// decode side holds exactly the prefill KV, streams the first token, and
// that both pools drain afterwards.
func Honest(t *testing.T, r *Rig, d handoff.Decode, n int, tokens int, cfg handoff.SenderConfig) {
	t.Helper()
	if err := HonestErr(t, r, d, n, tokens, cfg); err != nil {
		t.Fatal(err)
	}
}

// HonestErr is Honest returning the error of a call through d (reserve,
// push, stream, a stream's end) instead of failing the test, for tests
// that judge a transport's failure themselves; every other check still
// fails the test. After an error the handoff is left as it was.
func HonestErr(t *testing.T, r *Rig, d handoff.Decode, n int, tokens int, cfg handoff.SenderConfig) error {
	t.Helper()
	ctx := context.Background()
	id := ID(n)
	src := r.Sequence(t, id, "acme", tokens, byte(n))
	res, err := d.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens, MaxTokens: 5})
	if err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	s, err := handoff.NewSender(cfg, res, tokens, 77, handoff.PrefetchDigest(src))
	if err != nil {
		t.Fatal(err)
	}
	if err := handoff.Push(ctx, s, d); err != nil {
		return fmt.Errorf("push: %w", err)
	}
	a := r.Dec.Accepted(id)
	if a == nil || a.Tokens != tokens || a.FirstToken != 77 {
		t.Fatalf("accepted %+v", a)
	}
	if err := r.SameKV(a, src); err != nil {
		t.Fatal(err)
	}
	r.ReleaseSource(t, src)
	ts, err := d.Stream(ctx, id, handoff.StreamParams{})
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	var got []int32
	for {
		tok, err := ts.Recv()
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		if tok.Err != nil {
			return fmt.Errorf("stream ended with %w", tok.Err)
		}
		if tok.Done {
			if tok.PromptTokens != tokens {
				t.Fatalf("prompt tokens %d, want %d", tok.PromptTokens, tokens)
			}
			break
		}
		got = append(got, tok.ID)
	}
	ts.Close()
	if err := r.Dec.Release(id); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0] != 77 {
		t.Fatalf("stream %v, want the first token 77 first", got)
	}
	return nil
}

// AbortEveryPhase aborts a handoff through d at each phase — reserved,
// mid-transfer, after a failed write, after the commit — and checks that a
// late write is refused and counted and that no page leaks (I6, I8).
func AbortEveryPhase(t *testing.T, r *Rig, d handoff.Decode) {
	ctx := context.Background()
	const tokens = 23 // 6 pages of 4: the last one partial
	for i, phase := range []string{"reserved", "transferring", "failed_write", "committed"} {
		t.Run(phase, func(t *testing.T) {
			id := ID(1000 + i)
			src := r.Sequence(t, id, "acme", tokens, byte(i))
			res, err := d.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens, MaxTokens: 4})
			if err != nil {
				t.Fatal(err)
			}
			s, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes(), Window: 1}, res, tokens, 5, src)
			if err != nil {
				t.Fatal(err)
			}
			var pendingLate []handoff.PageWrite
			late0 := r.Server.Stats().LateWrites
			step := func() handoff.SenderAction {
				a := s.Next()
				if a.Kind == handoff.ActWrite {
					s.Ack(a.Seq, d.Write(ctx, a.Batch))
				}
				return a
			}
			switch phase {
			case "reserved":
				a := s.Next() // built, never sent: it becomes the late write
				pendingLate = a.Batch
			case "transferring":
				step()
				a := s.Next()
				pendingLate = a.Batch // in flight when the abort lands
			case "failed_write":
				step()
				a := s.Next()
				bad := append([]handoff.PageWrite(nil), a.Batch...)
				bad[0].Checksum ^= 1
				if err := d.Write(ctx, bad); !errors.Is(err, handoff.ErrChecksum) {
					t.Fatalf("corrupted write: %v, want ErrChecksum", err)
				}
				pendingLate = a.Batch
			case "committed":
				for {
					a := step()
					if a.Kind == handoff.ActCommit {
						if err := d.Commit(ctx, a.Commit); err != nil {
							t.Fatal(err)
						}
						break
					}
				}
				pendingLate = []handoff.PageWrite{{Handoff: id, Block: 0, Page: res.Pages[0], Slots: r.Geo.PageSize,
					Data: make([]byte, r.Geo.PageBytes()), Checksum: handoff.Checksum(make([]byte, r.Geo.PageBytes()))}}
			}
			if err := d.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "test abort at " + phase}); err != nil {
				t.Fatal(err)
			}
			if err := d.Write(ctx, pendingLate); err == nil {
				t.Fatal("a write after the abort was applied")
			}
			if got := r.Server.Stats().LateWrites - late0; got != 1 {
				t.Fatalf("late writes counted %d, want 1", got)
			}
			if err := d.Drained(ctx, id); err != nil {
				t.Fatal(err)
			}
			r.ReleaseSource(t, src)
			r.CheckDrained(t)
		})
	}
}

// ForeignWrite: a peer writes into another tenant's reserved page; the
// write is refused and the victim's page stays unwritten.
func ForeignWrite(t *testing.T, r *Rig, d handoff.Decode) {
	ctx := context.Background()
	victim, thief := ID(2000), ID(2001)
	vres, err := d.Reserve(ctx, &handoff.Reserve{Handoff: victim, Tenant: "globex", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	tres, err := d.Reserve(ctx, &handoff.Reserve{Handoff: thief, Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, r.Geo.PageBytes())
	for i := range data {
		data[i] = 0x5A
	}
	w := handoff.PageWrite{Handoff: thief, Block: 0, Page: vres.Pages[0], Slots: 4, Data: data, Checksum: handoff.Checksum(data)}
	if err := d.Write(ctx, []handoff.PageWrite{w}); !errors.Is(err, handoff.ErrBadWrite) {
		t.Fatalf("write into another handoff's page: %v, want ErrBadWrite", err)
	}
	if _, n, err := r.Decode.PageData(kv.Owner{Tenant: "globex", ID: victim}, vres.Pages[0]); err != nil || n != 0 {
		t.Fatalf("victim page: %d slots written, %v", n, err)
	}
	_ = tres
	_ = d.Abort(ctx, &handoff.Abort{Handoff: victim, Reason: "done"})
	_ = d.Drained(ctx, victim)
	_ = d.Drained(ctx, thief)
	r.CheckDrained(t)
}
