package handoff

import (
	"errors"
	"testing"
	"time"
)

// An Abort that overtakes its own Reserve (the router gave up waiting and
// sent the Abort on another connection) must still end the handoff: the
// late Reserve is refused, so no pages are left reserved for a handoff
// nobody will release (I6; the router's TestDisconnectAtEveryPhase/tcp
// found the leak).
func TestAbortBeforeReserveRefusesTheReserve(t *testing.T) {
	for _, oneSided := range []bool{false, true} {
		p := newMemPool(8, tPS, tPS*tBPS)
		r := NewReceiver(ReceiverConfig{PageSize: tPS, OneSided: oneSided, Lease: time.Second, Tombstone: time.Minute}, p)
		if r.Abort(t0, hid(7), "client gone") {
			t.Fatalf("abort of a handoff never reserved reported it live")
		}
		res, err := r.Reserve(t0.Add(time.Millisecond), &Reserve{Handoff: hid(7), Tenant: "acme", PromptTokens: 5, MaxTokens: 3})
		if !errors.Is(err, ErrAborted) || res != nil {
			t.Fatalf("one-sided %v: reserve after its abort: %+v, %v; want ErrAborted", oneSided, res, err)
		}
		if err := p.CheckDrained(); err != nil {
			t.Fatalf("one-sided %v: %v", oneSided, err)
		}
		if s := r.Stats(); s.Live != 0 || s.Reserved != 0 {
			t.Fatalf("one-sided %v: stats %+v", oneSided, s)
		}
		// Other ids are unaffected.
		if _, err := r.Reserve(t0, &Reserve{Handoff: hid(8), Tenant: "acme", PromptTokens: 5, MaxTokens: 3}); err != nil {
			t.Fatalf("unrelated reserve: %v", err)
		}
	}
}

// The early-abort tombstone expires like every other one, and there are
// never more than maxEarlyAborts of them.
func TestEarlyAbortTombstonesExpireAndAreBounded(t *testing.T) {
	p := newMemPool(8, tPS, tPS*tBPS)
	r := NewReceiver(ReceiverConfig{PageSize: tPS, Lease: time.Second, Tombstone: time.Minute}, p)
	r.Abort(t0, hid(1), "gone")
	r.Tick(t0.Add(2 * time.Minute))
	if _, err := r.Reserve(t0.Add(2*time.Minute), &Reserve{Handoff: hid(1), Tenant: "acme", PromptTokens: 4, MaxTokens: 1}); err != nil {
		t.Fatalf("reserve after the tombstone expired: %v", err)
	}
	for i := range maxEarlyAborts + 100 {
		id := hid(9)
		id[4], id[5], id[6] = byte(i), byte(i>>8), byte(i>>16)
		r.Abort(t0, id, "gone")
	}
	if len(r.live) > maxEarlyAborts+1 || len(r.early) > maxEarlyAborts {
		t.Fatalf("%d handoffs remembered, %d early tombstones; bound %d", len(r.live), len(r.early), maxEarlyAborts)
	}
	r.Tick(t0.Add(2 * time.Minute))
	if len(r.early) != 0 || len(r.live) != 1 {
		t.Fatalf("after expiry: %d early tombstones, %d remembered", len(r.early), len(r.live))
	}
}
