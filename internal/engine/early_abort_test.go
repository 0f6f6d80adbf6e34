package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"sluice/internal/handoff"
)

// overtaking is a decode link whose Reserve is slow on the wire: when the
// caller's context ends first, the call returns ErrTransport at once (as
// the TCP client does), and the Reserve itself reaches the decode worker
// only after whatever the caller sent next (its Abort, on another
// connection).
type overtaking struct {
	handoff.Decode
	reserveErr chan error
	aborted    chan struct{}
	// entered runs when Reserve is called: the test's client leaves there,
	// so the departure surely lands while the Reserve is in flight (a
	// cancel racing Submit could also land before Reserve is ever called,
	// and then nothing would arrive on reserveErr).
	entered func()
}

func (o *overtaking) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	o.entered()
	<-ctx.Done()
	go func() {
		<-o.aborted
		_, err := o.Decode.Reserve(context.Background(), r)
		o.reserveErr <- err
	}()
	return nil, handoff.ErrTransport.With("no reply before the deadline: %v", ctx.Err())
}

func (o *overtaking) Abort(ctx context.Context, a *handoff.Abort) error {
	err := o.Decode.Abort(ctx, a)
	close(o.aborted)
	return err
}

// A client that goes away while its Reserve is in flight must not leave
// decode pages reserved until the decode worker's HandoffTimeout (two
// minutes by default): the engine's Abort overtakes the Reserve, and the
// decode side refuses the late Reserve (I6; found by the router's
// TestDisconnectAtEveryPhase/tcp).
func TestAbortOvertakingReserveLeavesNothingReserved(t *testing.T) {
	m := newToy()
	dw, pw := toyWorkers(t, m, 32)
	ctx, cancel := context.WithCancel(context.Background())
	link := &overtaking{Decode: dw, reserveErr: make(chan error, 1), aborted: make(chan struct{}), entered: cancel}
	eng, err := NewDisaggregated(DisaggConfig{Model: "toy", Vocab: m.vocab, Context: 128}, pw, link)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, eng)
	_, err = eng.Submit(ctx, &Request{Tenant: "acme", Prompt: prompt(3, 9), MaxTokens: 4})
	if err == nil {
		t.Fatal("submit with a context cancelled during Reserve succeeded")
	}
	// The client's own leaving, not a failed handoff (seen as an ERROR
	// "handoff_failed" for every flood request cut at the end of a
	// crowding benchmark run).
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeCancelled {
		t.Fatalf("submit whose client left during Reserve: %v, want %s", err, CodeCancelled)
	}
	select {
	case err := <-link.reserveErr:
		if !errors.Is(err, handoff.ErrAborted) {
			t.Fatalf("the Reserve that arrived after its Abort: %v, want ErrAborted", err)
		}
	case <-time.After(30 * time.Second):
		// The late Reserve is sent only after the engine's Abort.
		t.Fatal("the engine sent no Abort within 30s of its client leaving during Reserve")
	}
	// No timer has run: what is reserved now stays reserved for minutes.
	if err := dw.Pool().CheckDrained(); err != nil {
		t.Fatalf("decode pool after the client left during Reserve: %v", err)
	}
}
