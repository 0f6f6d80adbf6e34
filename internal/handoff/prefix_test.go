package handoff_test

import (
	"errors"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// drive runs a Sender against the Receiver synchronously and returns the
// accepted handoff, or why it failed; it also returns the pages written.
func drive(r *handoff.Receiver, now time.Time, res *handoff.Reservation, src handoff.Source, tokens int) (*handoff.Accepted, int, error) {
	snd, err := handoff.NewSender(handoff.SenderConfig{}, res, tokens, 1, src)
	if err != nil {
		return nil, 0, err
	}
	var acc *handoff.Accepted
	written := 0
	for {
		a := snd.Next()
		switch a.Kind {
		case handoff.ActWrite:
			written += len(a.Batch)
			snd.Ack(a.Seq, r.Write(now, a.Batch))
		case handoff.ActCommit:
			var cerr error
			acc, cerr = r.Commit(now, a.Commit)
			snd.Committed(cerr)
		case handoff.ActAbort:
			r.Abort(now, a.Abort.Handoff, a.Abort.Reason)
		case handoff.ActDone:
			return acc, written, nil
		case handoff.ActFailed:
			return nil, written, a.Err
		default:
			return nil, written, errors.New("sender waits with nothing in flight")
		}
	}
}

// The Receiver's decode prefix (Reservation.PrefixTokens) over a real kv
// pool: after a verified handoff's full pages are cached, the same
// tenant's Reserve starts its table with them (shares) and says 8 of 9
// tokens; the Sender then writes only block 2 and the commit verifies over
// the whole prompt. Another tenant with the same keys finds nothing. A
// prefix whose bytes differ from what prefill computed fails the commit
// (digest over cached + received). A write into a cached block is refused
// (sealed_write) before the pool sees it. Prompt ids that do not match
// the prompt are refused. Every pool is whole after, with the entries
// reported idle.
func TestReceiverDecodePrefix(t *testing.T) {
	rig := handofftest.New(t, handofftest.Options{})
	now := rig.Clock.Now()
	ps := rig.Geo.PageSize
	toks := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	keysOf := func(tenant string) []kv.BlockKey {
		var salt kv.Salt
		copy(salt[:], tenant)
		return kv.PrefixKeys([]byte("fp"), salt, ps, toks)
	}
	reserve := func(n int, tenant string, keys []kv.BlockKey) *handoff.Reservation {
		t.Helper()
		res, err := rig.Recv.ReservePrefix(now, &handoff.Reserve{Handoff: handofftest.ID(n), Tenant: tenant, PromptTokens: 9, MaxTokens: 1, Tokens: toks}, keys)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	release := func(acc *handoff.Accepted) {
		t.Helper()
		if err := rig.Decode.Release(acc.Owner, acc.Pages); err != nil {
			t.Fatal(err)
		}
	}

	// 1: nothing cached; every block is sent; the full pages are cached.
	res := reserve(1, "a", keysOf("a"))
	if res.PrefixTokens != 0 {
		t.Fatalf("empty cache, prefix %d", res.PrefixTokens)
	}
	src := rig.Sequence(t, handofftest.ID(1), "a", 9, 5)
	acc, n, err := drive(rig.Recv, now, res, src, 9)
	if err != nil || n != 3 {
		t.Fatalf("first handoff: %v, %d pages", err, n)
	}
	rig.ReleaseSource(t, src)
	if err := rig.Decode.Seal(acc.Owner, acc.Pages[:2]); err != nil {
		t.Fatal(err)
	}
	for i, k := range keysOf("a")[:2] {
		if ok, err := rig.Decode.Insert(acc.Owner, acc.Pages[i], k); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	cached := acc.Pages[:2]
	release(acc)

	// 2: same tenant, same prompt: decode holds 8 tokens; one page is sent.
	res = reserve(2, "a", keysOf("a"))
	if res.PrefixTokens != 8 || res.Pages[0] != cached[0] || res.Pages[1] != cached[1] {
		t.Fatalf("hit: prefix %d, pages %v, cached %v", res.PrefixTokens, res.Pages, cached)
	}
	src = rig.Sequence(t, handofftest.ID(2), "a", 9, 5)
	acc, n, err = drive(rig.Recv, now, res, src, 9)
	if err != nil || n != 1 || acc.CachedBlocks != 2 {
		t.Fatalf("hit handoff: %v, %d pages sent, %+v", err, n, acc)
	}
	if err := rig.SameKV(acc, src); err != nil {
		t.Fatal(err)
	}
	rig.ReleaseSource(t, src)
	release(acc)

	// 3: another tenant with the very same keys: the index is per tenant.
	res = reserve(3, "b", keysOf("a"))
	if res.PrefixTokens != 0 {
		t.Fatalf("tenant b found tenant a's prefix: %d", res.PrefixTokens)
	}
	rig.Recv.Abort(now, handofftest.ID(3), "test")

	// 4: prefill computed other KV than decode holds: the commit fails.
	res = reserve(4, "a", keysOf("a"))
	src = rig.Sequence(t, handofftest.ID(4), "a", 9, 6)
	if _, _, err = drive(rig.Recv, now, res, src, 9); !errors.Is(err, handoff.ErrDigestMismatch) {
		t.Fatalf("wrong prefix: %v", err)
	}
	rig.ReleaseSource(t, src)

	// 5: a write into a cached block is refused before the pool sees it.
	res = reserve(5, "a", keysOf("a"))
	src = rig.Sequence(t, handofftest.ID(5), "a", 9, 5)
	data, slots, _ := src.Page(0)
	err = rig.Recv.Write(now, []handoff.PageWrite{{Handoff: res.Handoff, Block: 0, Page: res.Pages[0], Slots: slots, Data: data, Checksum: handoff.Checksum(data)}})
	if !errors.Is(err, handoff.ErrSealedWrite) {
		t.Fatalf("write into a cached block: %v", err)
	}
	rig.ReleaseSource(t, src)
	if v := rig.Decode.Stats().Violations[kv.KindSealedWrite]; v != 0 {
		t.Fatalf("the pool saw %d sealed writes", v)
	}

	// 6: prompt ids that are not the prompt's.
	if _, err := rig.Recv.ReservePrefix(now, &handoff.Reserve{Handoff: handofftest.ID(6), Tenant: "a", PromptTokens: 10, MaxTokens: 1, Tokens: toks}, keysOf("a")); !errors.Is(err, handoff.ErrRefused) {
		t.Fatalf("9 ids for 10 tokens: %v", err)
	}

	st := rig.Recv.Stats()
	if st.PagesSkipped != 2 || st.PagesTransferred != 4 {
		t.Errorf("pages transferred %d, skipped %d; want 4 and 2", st.PagesTransferred, st.PagesSkipped)
	}
	rep, err := rig.Decode.Drained()
	if err != nil || rep.CacheIdle != 2 || rep.Held != 0 {
		t.Fatalf("decode pool: %+v %v", rep, err)
	}
	rig.CheckDrained(t)
}
