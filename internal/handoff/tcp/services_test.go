package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

type fakePrefill struct{ got chan *handoff.PrefillRequest }

func (p fakePrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	p.got <- r
	if r.Tenant == "refuse" {
		return nil, handoff.ErrDigestMismatch.With("decode refused the commit")
	}
	return &handoff.PrefillResult{FirstToken: 42, Tokens: len(r.Tokens)}, nil
}

// The Prefill service crosses the wire intact, and its typed errors keep
// their code.
func TestPrefillOverTCP(t *testing.T) {
	fp := fakePrefill{got: make(chan *handoff.PrefillRequest, 2)}
	addr, _ := serve(t, Config{Secret: secret}, nil, fp)
	c := dial(t, addr, Config{Secret: secret})
	req := &handoff.PrefillRequest{Handoff: handofftest.ID(3), Tenant: "acme", Tokens: []int32{1, -2, 300000},
		Reservation: &handoff.Reservation{Handoff: handofftest.ID(3), Pages: []kv.PageRef{{Page: 7, Gen: 1 << 40}}, PageSize: 16, ExpectTokens: 3, Incarnation: 0xfeedface_cafe0001},
		Sampling:    sample.Params{Temperature: 0.7, TopK: 40, TopP: 0.9, Seed: 1<<63 + 5}}
	res, err := c.Prefill(context.Background(), req)
	if err != nil || res.FirstToken != 42 || res.Tokens != 3 {
		t.Fatalf("prefill: %+v %v", res, err)
	}
	if got := <-fp.got; !reflect.DeepEqual(got, req) {
		t.Fatalf("server got %+v\nwant %+v", got, req)
	}
	req.Tenant = "refuse"
	if _, err := c.Prefill(context.Background(), req); !errors.Is(err, handoff.ErrDigestMismatch) {
		t.Fatalf("typed error across the wire: %v", err)
	}
	// A worker that serves no decode side says so.
	if _, err := c.Reserve(context.Background(), &handoff.Reserve{}); !errors.Is(err, handoff.ErrState) {
		t.Fatalf("decode call to a prefill-only worker: %v", err)
	}
}

// Token streams: several at once on one connection, in order, terminal
// item last; a stream for an unknown handoff fails at open.
func TestStreamsOverTCP(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	r.Dec.Extra = 50
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	c := dial(t, addr, Config{Secret: secret})
	ctx := context.Background()
	var streams []handoff.TokenStream
	for i := 0; i < 3; i++ {
		id := handofftest.ID(i)
		src := r.Sequence(t, id, "acme", 5, byte(i))
		res, err := c.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 5, MaxTokens: 60})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := handoff.NewSender(handoff.SenderConfig{}, res, 5, int32(100*i), src)
		if err := handoff.Push(ctx, s, c); err != nil {
			t.Fatal(err)
		}
		r.ReleaseSource(t, src)
		ts, err := c.Stream(ctx, id, handoff.StreamParams{IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, ts)
	}
	// Read them interleaved.
	next := make([]int32, 3)
	done := 0
	for done < 3 {
		for i, ts := range streams {
			if next[i] < 0 {
				continue
			}
			tok, err := ts.Recv()
			if err != nil || tok.Err != nil {
				t.Fatalf("stream %d: %v %v", i, err, tok.Err)
			}
			if tok.Done {
				if next[i] != 51 || tok.PromptTokens != 5 {
					t.Fatalf("stream %d ended after %d tokens: %+v", i, next[i], tok)
				}
				if _, err := ts.Recv(); err != io.EOF {
					t.Fatalf("after the terminal item: %v, want io.EOF", err)
				}
				next[i] = -1
				done++
				continue
			}
			if tok.ID != int32(100*i)+next[i] {
				t.Fatalf("stream %d item %d is token %d", i, next[i], tok.ID)
			}
			next[i]++
		}
	}
	for i := range streams {
		r.Dec.Release(handofftest.ID(i))
	}
	if _, err := c.Stream(ctx, handofftest.ID(99), handoff.StreamParams{}); !errors.Is(err, handoff.ErrUnknownHandoff) {
		t.Fatalf("stream of an unknown handoff: %v", err)
	}
	r.CheckDrained(t)
}

// A server that breaks the protocol after the handshake fails the client's
// pending calls with an error instead of hanging them.
func TestClientRejectsBadServerFrames(t *testing.T) {
	addr := fakeServer(t, func(nc net.Conn) {
		c := fakeServerConn(nc)
		if c == nil {
			return
		}
		c.fr.readFrame(nc, nil)                                                             // the call
		nc.Write(rawFrame(maxVersion, tOK, 1, nil, func(c uint32) uint32 { return c + 1 })) // bad checksum
		time.Sleep(time.Second)
	})
	c := dial(t, addr, Config{Secret: secret})
	err := c.Drained(context.Background(), kv.ID{})
	if !errors.Is(err, handoff.ErrProtocol) && !errors.Is(err, handoff.ErrTransport) {
		t.Fatalf("call answered by a corrupt frame: %v", err)
	}
	if c.Err() == nil {
		t.Fatal("the client kept a connection that sent a corrupt frame")
	}
}

// Open streams never stall short calls: with every call slot taken by a
// stream, Cancel still gets through; one stream over the limit is refused.
func TestStreamsDoNotStallCalls(t *testing.T) {
	d := &blockingStreams{release: make(chan struct{})}
	addr, _ := serve(t, Config{Secret: secret, MaxInflight: 2, MaxStreams: 3}, d, nil)
	c := dial(t, addr, Config{Secret: secret})
	ctx := context.Background()
	var open []handoff.TokenStream
	for i := 0; i < 3; i++ {
		ts, err := c.Stream(ctx, handofftest.ID(i), handoff.StreamParams{})
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, ts)
	}
	if _, err := c.Stream(ctx, handofftest.ID(9), handoff.StreamParams{}); !errors.Is(err, handoff.ErrRefused) {
		t.Fatalf("stream over the limit: %v", err)
	}
	for i := 0; i < 5; i++ {
		if err := c.Cancel(ctx, handofftest.ID(i)); err != nil {
			t.Fatalf("cancel with streams open: %v", err)
		}
	}
	close(d.release)
	for _, ts := range open {
		if tok, err := ts.Recv(); err != nil || !tok.Done {
			t.Fatalf("stream end: %+v %v", tok, err)
		}
	}
}

type blockingStreams struct {
	slowDecode
	release chan struct{}
}

func (b *blockingStreams) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	return &waitStream{release: b.release}, nil
}

type waitStream struct {
	release chan struct{}
	done    bool
}

func (w *waitStream) Recv() (handoff.Token, error) {
	if w.done {
		return handoff.Token{}, io.EOF
	}
	<-w.release
	w.done = true
	return handoff.Token{Done: true, Finish: "stop"}, nil
}
func (w *waitStream) Close() error { return nil }

// A Redialer reaches a restarted server; the call that hit the dead
// connection reports ErrTransport (never a silent retry).
func TestRedialer(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, s1 := serve(t, Config{Secret: secret}, r.Server, nil)
	rd := NewRedialer(addr, Config{Secret: secret})
	defer rd.Close()
	ctx := context.Background()
	if err := rd.Drained(ctx, kv.ID{}); err != nil {
		t.Fatal(err)
	}
	s1.Close() // the decode worker restarts
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot rebind %s: %v", addr, err)
	}
	s2, _ := NewServer(Config{Secret: secret}, r.Server, nil)
	go s2.Serve(l2)
	defer s2.Close()
	err = rd.Drained(ctx, kv.ID{})
	if err != nil && !errors.Is(err, handoff.ErrTransport) {
		t.Fatalf("call on the dead connection: %v", err)
	}
	if err := rd.Drained(ctx, kv.ID{}); err != nil {
		t.Fatalf("after redial: %v", err)
	}
}

// stoppablePrefill runs until its call's context ends (the router gave the
// prompt up), then answers as a worker that dropped the prompt does.
type stoppablePrefill struct{ started, stopped chan struct{} }

func (p stoppablePrefill) Prefill(ctx context.Context, r *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	if r.Tenant == "quick" {
		return &handoff.PrefillResult{FirstToken: 1, Tokens: len(r.Tokens)}, nil
	}
	close(p.started)
	<-ctx.Done()
	close(p.stopped)
	return nil, handoff.ErrAborted.With("the router gave the prompt up")
}

// A Prefill call whose context ends reaches the worker (a close frame on
// the call's id ends the call's context there), and the call returns the
// worker's own answer, not a transport error: the router learns the
// prompt was dropped, and that the worker is done with it. The connection
// and its other calls carry on.
func TestPrefillCancelReachesWorker(t *testing.T) {
	sp := stoppablePrefill{started: make(chan struct{}), stopped: make(chan struct{})}
	addr, _ := serve(t, Config{Secret: secret}, nil, sp)
	c := dial(t, addr, Config{Secret: secret})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: handofftest.ID(4), Tenant: "long", Tokens: []int32{1, 2}})
		errc <- err
	}()
	<-sp.started
	cancel()
	select {
	case <-sp.stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled Prefill call never reached the worker")
	}
	select {
	case err := <-errc:
		if !errors.Is(err, handoff.ErrAborted) {
			t.Fatalf("a cancelled Prefill call returned %v, want the worker's aborted", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the cancelled Prefill call never returned")
	}
	if res, err := c.Prefill(context.Background(), &handoff.PrefillRequest{Handoff: handofftest.ID(5), Tenant: "quick", Tokens: []int32{1}}); err != nil || res.Tokens != 1 {
		t.Fatalf("the next call on the connection: %+v %v", res, err)
	}
}
