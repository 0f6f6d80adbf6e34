package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// noRoomFor is a decode worker that has no room for one tenant's
// requests (as when that tenant's own reservations fill its pool and
// nobody else waits yet, so nothing is over any share).
type noRoomFor struct {
	*DecodeWorker
	tenant string
}

func (d *noRoomFor) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	if r.Tenant == d.tenant {
		return nil, handoff.ErrNoRoom.With("full of the tenant's own reservations")
	}
	return d.DecodeWorker.Reserve(ctx, r)
}

// Issue 28: tenant a's request refused for room by the decode pool waits
// in the router's queue; tenant b's request must still reach the decode
// worker (it may fit, or make decode take a's over-share reservations
// back) and finish, while a's waits. The queue's head of line holds only
// a's own later requests (sched.Core's per-tenant head of line): before,
// b waited behind a's refused request until pages came back (here: until
// a's queue timeout), and decode never learnt b wanted pages.
func TestNoRoomForOneTenantDoesNotHoldAnother(t *testing.T) {
	m := newToy()
	l := toyLocal(t, m)
	dec := &noRoomFor{DecodeWorker: l.Decode, tenant: "a"}
	d, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.Vocab(), Fingerprint: FingerprintOf(m), Context: 160,
		QueueTimeout: time.Minute}, l.Prefill, dec)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, d)
	actx, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	aErr := make(chan error, 1)
	go func() {
		_, err := d.Submit(actx, &Request{Tenant: "a", Prompt: prompt(1, 40), MaxTokens: 8})
		aErr <- err
	}()
	// a's request is in the queue, refused for room.
	deadline := time.Now().Add(10 * time.Second)
	for !d.adm.stats().Paused {
		if time.Now().After(deadline) {
			t.Fatal("a's request never waited in the queue")
		}
		time.Sleep(time.Millisecond)
	}
	r := &Request{Tenant: "b", Prompt: prompt(2, 9), MaxTokens: 6}
	bDone := make(chan result, 1)
	go func() {
		st, err := d.Submit(context.Background(), r)
		if err != nil {
			bDone <- result{final: Event{Err: err}}
			return
		}
		bDone <- collect(t, st)
	}()
	select {
	case got := <-bDone:
		if got.final.Err != nil || !slices.Equal(got.tokens, toyReference(m, r.Prompt, r.MaxTokens, false)) {
			t.Fatalf("b got %v (%v), want the reference", got.tokens, got.final.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("b's request waited behind a's request refused for room")
	}
	select {
	case err := <-aErr:
		t.Fatalf("a's request ended (%v) while its decode worker had no room", err)
	default:
	}
	cancelA()
	if err := <-aErr; err == nil {
		t.Fatal("a's request succeeded with no room for it")
	}
	waitDrained(t, l.Decode.Pool(), l.Prefill.Pool())
}
