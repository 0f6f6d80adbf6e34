package handoff_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// sealed makes w's bytes arrive sealed (PageWrite.Open), as an encrypted
// transport hands them on; tamper makes the record fail to verify after
// its plaintext was written, as AES-GCM would before clearing it.
func sealed(w handoff.PageWrite, tamper bool, calls *int) handoff.PageWrite {
	data := w.Data
	w.Data, w.Size = nil, len(data)
	w.Open = func(dst []byte) error {
		*calls++
		if len(dst) != len(data) {
			return fmt.Errorf("destination of %d bytes for %d", len(dst), len(data))
		}
		copy(dst, data)
		if tamper {
			return handoff.ErrAuth.With("frame does not decrypt under the session key")
		}
		return nil
	}
	return w
}

// Sealed writes over the real kv pool: full pages are opened straight into
// their reserved pages, the short last page through a buffer, and the
// handoff commits with the digest over what landed. A record that does not
// verify (in any block, full or short) fails the handoff closed with
// ErrAuth: nothing of it is marked written, no plaintext stays in the
// pool, and everything is released (I8, I15).
func TestSealedWritesOpenIntoThePool(t *testing.T) {
	for _, tokens := range []int{8, 6} { // two full pages; a full page and a short one
		for bad := -1; bad < (tokens+3)/4; bad++ {
			t.Run(fmt.Sprintf("tokens=%d/bad=%d", tokens, bad), func(t *testing.T) {
				r := handofftest.New(t, handofftest.Options{})
				ctx := context.Background()
				id := handofftest.ID(1)
				src := r.Sequence(t, id, "acme", tokens, 5)
				res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens})
				if err != nil {
					t.Fatal(err)
				}
				var werr error
				calls := 0
				var plain [][]byte
				for b := range res.Pages {
					data, slots, _ := src.Page(b)
					plain = append(plain, bytes.Clone(data))
					pw := sealed(handoff.PageWrite{Handoff: id, Block: b, Page: res.Pages[b], Slots: slots,
						Data: bytes.Clone(data), Checksum: handoff.Checksum(data)}, b == bad, &calls)
					if werr = r.Server.Write(ctx, []handoff.PageWrite{pw}); werr != nil {
						if s := r.Decode.Stats(); s.Filling != 0 || s.Reserved != 0 {
							t.Fatalf("pages left after a failed sealed write: %+v", s)
						}
						break
					}
				}
				if bad < 0 {
					if werr != nil {
						t.Fatal(werr)
					}
					if calls != len(res.Pages) {
						t.Fatalf("%d records opened for %d pages", calls, len(res.Pages))
					}
					if err := r.Server.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: tokens, Digest: mustDigest(t, src), FirstToken: 1}); err != nil {
						t.Fatalf("honest sealed handoff: %v", err)
					}
					if err := r.SameKV(r.Dec.Accepted(id), src); err != nil {
						t.Fatal(err)
					}
					r.Dec.Release(id)
				} else {
					if !errors.Is(werr, handoff.ErrAuth) {
						t.Fatalf("tampered block %d: %v, want ErrAuth", bad, werr)
					}
					r.Decode.SetChecks(false) // read pages whatever their state
					for b, ref := range res.Pages {
						mem, _, _ := r.Decode.PageData(kv.Owner{Tenant: "acme", ID: id}, ref)
						if bytes.Contains(mem, plain[min(b, len(plain)-1)][:16]) {
							t.Fatalf("plaintext of block %d stays in the pool", b)
						}
					}
					r.Decode.SetChecks(true)
					if err := r.Server.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: tokens, Digest: mustDigest(t, src)}); err == nil {
						t.Fatal("a handoff with a record that did not verify committed")
					}
				}
				r.ReleaseSource(t, src)
				r.CheckDrained(t)
			})
		}
	}
}
