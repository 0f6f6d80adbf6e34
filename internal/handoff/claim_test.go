package handoff_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// gatedOpen makes w's bytes arrive sealed, with an Open that writes the
// plaintext, then waits for gate (closed by the test) before it says
// whether the record verified: a record being opened, held mid-way.
func gatedOpen(w handoff.PageWrite, gate <-chan struct{}, started chan<- int, tamper bool) handoff.PageWrite {
	data := w.Data
	w.Data, w.Size = nil, len(data)
	b := w.Block
	w.Open = func(dst []byte) error {
		copy(dst, data)
		if started != nil {
			started <- b
		}
		<-gate
		if tamper {
			return handoff.ErrAuth.With("frame does not decrypt under the session key")
		}
		return nil
	}
	return w
}

// sealedBatch is one Write call's sealed pages of src for res.
func sealedBatch(t *testing.T, id kv.ID, res *handoff.Reservation, src *handoff.PoolSource, gate <-chan struct{}, started chan<- int, bad int) ([]handoff.PageWrite, [][]byte) {
	t.Helper()
	var ws []handoff.PageWrite
	var plain [][]byte
	for b := range res.Pages {
		data, slots, err := src.Page(b)
		if err != nil {
			t.Fatal(err)
		}
		plain = append(plain, bytes.Clone(data))
		ws = append(ws, gatedOpen(handoff.PageWrite{Handoff: id, Block: b, Page: res.Pages[b], Slots: slots,
			Data: bytes.Clone(data), Checksum: handoff.Checksum(data)}, gate, started, b == bad))
	}
	return ws, plain
}

// reserved is a handoff of tenant acme reserved on r for tokens, and the
// prefill's source of them.
func reserved(t *testing.T, r *handofftest.Rig, id kv.ID, tokens int) (*handoff.PoolSource, *handoff.Reservation) {
	t.Helper()
	src := r.Sequence(t, id, "acme", tokens, 5)
	res, err := r.Server.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	return src, res
}

// writeOpening starts one Write of src's sealed pages for res whose opens
// wait for gate: it returns their plaintexts, the channel each open sends
// its block on as it starts, and the Write's result.
func writeOpening(t *testing.T, r *handofftest.Rig, id kv.ID, res *handoff.Reservation, src *handoff.PoolSource, gate <-chan struct{}) (plain [][]byte, started chan int, done chan error) {
	t.Helper()
	started = make(chan int, len(res.Pages))
	ws, plain := sealedBatch(t, id, res, src, gate, started, -1)
	done = make(chan error, 1)
	go func() { done <- r.Server.Write(context.Background(), ws) }()
	return plain, started, done
}

func noPlaintext(t *testing.T, r *handofftest.Rig, plain [][]byte) {
	t.Helper()
	r.Decode.SetChecks(false)
	defer r.Decode.SetChecks(true)
	for pg := range r.Decode.Pages() {
		mem, _, _ := r.Decode.PageData(kv.Owner{}, kv.PageRef{Page: uint32(pg)})
		for b, p := range plain {
			if bytes.Contains(mem, p[:16]) {
				t.Fatalf("plaintext of block %d stays in pool page %d", b, pg)
			}
		}
	}
}

// One Write call's sealed pages are opened at once, on more than one
// goroutine, without the Server's lock: another handoff reserves
// meanwhile; the handoff then commits with what landed.
func TestSealedBatchOpensInParallel(t *testing.T) {
	// Three openers (one core kept for the decode step, openers.go).
	setProcs(t, 4)
	r := handofftest.New(t, handofftest.Options{})
	ctx := context.Background()
	id := handofftest.ID(1)
	const tokens = 16 // four full pages
	src, res := reserved(t, r, id, tokens)
	gate := make(chan struct{})
	_, started, done := writeOpening(t, r, id, res, src, gate)
	for range 2 { // two records in their opens at once
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("a batch's sealed pages are not opened in parallel")
		}
	}
	other := handofftest.ID(2)
	if _, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: other, Tenant: "beta", PromptTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if err := r.Server.Abort(ctx, &handoff.Abort{Handoff: other, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := r.Server.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: tokens, Digest: mustDigest(t, src), FirstToken: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.SameKV(r.Dec.Accepted(id), src); err != nil {
		t.Fatal(err)
	}
	r.Dec.Release(id)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}

// A batch opened in parallel with one record that does not verify fails
// the handoff closed (ErrAuth): no page of it is marked written, no
// plaintext of any record stays in the pool, everything is freed.
func TestSealedBatchBadRecordFailsClosed(t *testing.T) {
	for bad := range 4 {
		r := handofftest.New(t, handofftest.Options{})
		ctx := context.Background()
		id := handofftest.ID(1)
		src, res := reserved(t, r, id, 16)
		gate := make(chan struct{})
		close(gate)
		ws, plain := sealedBatch(t, id, res, src, gate, nil, bad)
		if err := r.Server.Write(ctx, ws); !errors.Is(err, handoff.ErrAuth) {
			t.Fatalf("bad record %d: %v, want ErrAuth", bad, err)
		}
		if s := r.Decode.Stats(); s.Filling != 0 || s.Reserved != 0 {
			t.Fatalf("bad record %d: pages left after the failed batch: %+v", bad, s)
		}
		noPlaintext(t, r, plain)
		if err := r.Server.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: 16, Digest: mustDigest(t, src)}); err == nil {
			t.Fatal("a handoff with a record that did not verify committed")
		}
		r.ReleaseSource(t, src)
		r.CheckDrained(t)
	}
}

// An Abort while a batch's pages are being opened (no lock held) ends the
// handoff at once; the pages being written are fenced, then scrubbed and
// freed when their opens end, and the Write reports the abort. Nothing of
// the records stays in the pool.
func TestAbortWhileSealedPagesOpen(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	ctx := context.Background()
	id := handofftest.ID(1)
	src, res := reserved(t, r, id, 16)
	gate := make(chan struct{})
	plain, started, done := writeOpening(t, r, id, res, src, gate)
	<-started
	aborted := make(chan error, 1)
	go func() { aborted <- r.Server.Abort(ctx, &handoff.Abort{Handoff: id, Reason: "router gave up"}) }()
	select {
	case err := <-aborted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Abort waited for the pages being opened")
	}
	// Every page of the batch is claimed: none is free before its open
	// ends (I6), all are out of service.
	if s := r.Decode.Stats(); s.Free != s.Pages-len(res.Pages) || s.Quarantined != len(res.Pages) {
		t.Fatalf("after the abort, during the opens: %+v", s)
	}
	close(gate)
	if err := <-done; !errors.Is(err, handoff.ErrAborted) {
		t.Fatalf("Write of an aborted handoff: %v, want ErrAborted", err)
	}
	noPlaintext(t, r, plain)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}

// While a batch's pages are being opened, the handoff cannot commit, and
// its blocks cannot be written again: with the count and digest layers
// off, the in-flight check alone refuses the commit (I5).
func TestCommitWhileSealedPagesOpen(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Safeguards: handoff.Safeguards{NoCount: true, NoDigest: true}})
	ctx := context.Background()
	id := handofftest.ID(1)
	src, res := reserved(t, r, id, 16)
	gate := make(chan struct{})
	plain, started, done := writeOpening(t, r, id, res, src, gate)
	<-started
	var calls atomic.Int32
	again := gatedOpen(handoff.PageWrite{Handoff: id, Block: 0, Page: res.Pages[0], Slots: 4,
		Data: bytes.Clone(plain[0]), Checksum: handoff.Checksum(plain[0])}, gate, nil, false)
	open := again.Open
	again.Open = func(dst []byte) error { calls.Add(1); return open(dst) }
	var once sync.Once
	unblock := func() { once.Do(func() { close(gate) }) }
	defer unblock()
	if err := r.Server.Write(ctx, []handoff.PageWrite{again}); !errors.Is(err, handoff.ErrCoverage) {
		t.Fatalf("second write of a block being opened: %v, want ErrCoverage", err)
	}
	if calls.Load() != 0 {
		t.Fatal("the second write's record was opened")
	}
	// The handoff failed with that: a new one for the commit check.
	unblock()
	<-done
	r.ReleaseSource(t, src)

	id = handofftest.ID(3)
	src, res = reserved(t, r, id, 16)
	gate2 := make(chan struct{})
	var once2 sync.Once
	unblock2 := func() { once2.Do(func() { close(gate2) }) }
	defer unblock2() // before the pools close: Close waits for the fills
	plain, started, done = writeOpening(t, r, id, res, src, gate2)
	<-started
	if err := r.Server.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: 16, Digest: mustDigest(t, src), FirstToken: 1}); !errors.Is(err, handoff.ErrState) {
		t.Fatalf("commit while pages are being opened: %v, want ErrState", err)
	}
	unblock2()
	if err := <-done; err == nil {
		t.Fatal("a batch of a handoff that failed meanwhile succeeded")
	}
	noPlaintext(t, r, plain)
	r.ReleaseSource(t, src)
	r.CheckDrained(t)
}
