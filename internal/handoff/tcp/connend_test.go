package tcp

import (
	"context"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// abortLog is a decode service that records the aborts it is asked for
// and whose streams stay open (decoding goes on) until their call's
// context ends.
type abortLog struct {
	handoff.Decode
	mu      sync.Mutex
	aborted map[kv.ID]string
}

func (a *abortLog) Abort(ctx context.Context, m *handoff.Abort) error {
	a.mu.Lock()
	a.aborted[m.Handoff] = m.Reason
	a.mu.Unlock()
	return a.Decode.Abort(ctx, m)
}

func (a *abortLog) reason(id kv.ID) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.aborted[id]
	return r, ok
}

func (a *abortLog) Stream(ctx context.Context, id kv.ID, _ handoff.StreamParams) (handoff.TokenStream, error) {
	return &openStream{ctx: ctx}, nil
}

type openStream struct{ ctx context.Context }

func (s *openStream) Recv() (handoff.Token, error) {
	<-s.ctx.Done()
	return handoff.Token{}, s.ctx.Err()
}
func (s *openStream) Close() error { return nil }

// A handoff reserved on one connection and streamed on another (the
// router's Redialer dialled again between its Reserve and its Stream) is
// the streaming connection's: the end of the reserving connection, which
// the server may notice only after the heartbeat's dead-after, must not
// abort a handoff that is decoding for the router on the other one.
// The reserving connection's other reservation, never streamed, is still
// aborted when it ends (be8681c's rule); that abort also tells the test
// the connection's end has been handled.
func TestConnEndSparesHandoffStreamedElsewhere(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	svc := &abortLog{Decode: r.Server, aborted: map[kv.ID]string{}}
	addr, _ := serve(t, Config{Secret: secret}, svc, nil)
	ctx := context.Background()
	c1 := dial(t, addr, Config{Secret: secret})
	streamed, given := handofftest.ID(3000), handofftest.ID(3001)
	for _, id := range []kv.ID{streamed, given} {
		if _, err := c1.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 9, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	c2 := dial(t, addr, Config{Secret: secret})
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ts, err := c2.Stream(sctx, streamed, handoff.StreamParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	c1.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := svc.reason(given); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connection's unstreamed reservation was never aborted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if why, ok := svc.reason(streamed); ok {
		t.Fatalf("the handoff streaming on another connection was aborted when the reserving one ended: %q", why)
	}
	cancel()
	_ = c2.Abort(ctx, &handoff.Abort{Handoff: streamed, Reason: "test over"})
	r.CheckDrained(t)
}
