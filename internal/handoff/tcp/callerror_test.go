package tcp

import (
	"context"
	"errors"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

// One connection carries every tenant's calls, so a call whose message is
// bad (a field out of the wire's range, a body that does not decode) must
// fail alone: never the connection, never another call on it. These tests
// hold a second tenant's token stream open across the bad call and use the
// connection again afterwards.

// callSvc is a decode and prefill service that records what reached it.
type callSvc struct {
	mu       sync.Mutex
	calls    []string // every call that reached the service
	aborted  []kv.ID  // Abort calls
	release  chan struct{}
	badReply kv.ID // Reserve of this id answers a reservation the wire cannot carry
	badToken kv.ID // Stream of this id yields a token the wire cannot carry
}

func newCallSvc() *callSvc { return &callSvc{release: make(chan struct{})} }

func (s *callSvc) note(c string) {
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
}

func (s *callSvc) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *callSvc) Reserve(_ context.Context, m *handoff.Reserve) (*handoff.Reservation, error) {
	s.note("reserve")
	ps := 4
	if m.Handoff == s.badReply {
		ps = math.MaxInt32 + 1
	}
	return &handoff.Reservation{Handoff: m.Handoff, PageSize: ps, ExpectTokens: m.PromptTokens}, nil
}
func (s *callSvc) Write(context.Context, []handoff.PageWrite) error { s.note("write"); return nil }
func (s *callSvc) Commit(context.Context, *handoff.Commit) error    { s.note("commit"); return nil }
func (s *callSvc) Abort(_ context.Context, a *handoff.Abort) error {
	s.note("abort")
	s.mu.Lock()
	s.aborted = append(s.aborted, a.Handoff)
	s.mu.Unlock()
	return nil
}
func (s *callSvc) Drained(context.Context, kv.ID) error { s.note("drained"); return nil }
func (s *callSvc) Cancel(context.Context, kv.ID) error  { s.note("cancel"); return nil }
func (s *callSvc) Prefill(_ context.Context, m *handoff.PrefillRequest) (*handoff.PrefillResult, error) {
	s.note("prefill")
	return &handoff.PrefillResult{FirstToken: 7, Tokens: len(m.Tokens)}, nil
}

// Stream yields tokens 1, 2, 3 once release is closed, then the terminal
// item; badToken's stream yields a token with a negative count.
func (s *callSvc) Stream(ctx context.Context, id kv.ID, _ handoff.StreamParams) (handoff.TokenStream, error) {
	s.note("stream")
	toks := []handoff.Token{{ID: 1}, {ID: 2}, {ID: 3}, {Done: true, Finish: "length", PromptTokens: 5, CompletionTokens: 3}}
	if id == s.badToken {
		toks = []handoff.Token{{ID: 1, CompletionTokens: -1}}
	}
	return &gatedStream{ctx: ctx, release: s.release, toks: toks}, nil
}

type gatedStream struct {
	ctx     context.Context
	release chan struct{}
	toks    []handoff.Token
}

func (g *gatedStream) Recv() (handoff.Token, error) {
	select {
	case <-g.release:
	case <-g.ctx.Done():
		return handoff.Token{}, g.ctx.Err()
	}
	if len(g.toks) == 0 {
		return handoff.Token{}, errors.New("read past the end")
	}
	t := g.toks[0]
	g.toks = g.toks[1:]
	return t, nil
}
func (g *gatedStream) Close() error { return nil }

// readStream reads a stream to its end and checks it is the callSvc's
// tokens 1, 2, 3 with a clean end.
func readStream(t *testing.T, ts handoff.TokenStream) {
	t.Helper()
	for want := int32(1); ; want++ {
		tok, err := ts.Recv()
		if err != nil || tok.Err != nil {
			t.Fatalf("the other tenant's stream failed at token %d: %v %v", want, err, tok.Err)
		}
		if tok.Done {
			if want != 4 || tok.CompletionTokens != 3 {
				t.Fatalf("stream ended after %d tokens: %+v", want-1, tok)
			}
			return
		}
		if tok.ID != want {
			t.Fatalf("stream token %d is %d", want, tok.ID)
		}
	}
}

// A call with a field the wire cannot carry (top_k 3000000000, which a
// completion request could once pass to the API; token counts at MaxInt64,
// MaxInt32+1, negative) fails alone with bad_message, before a byte is
// sent; a token stream open on the same connection and every later call
// are unaffected.
func TestOutOfRangeFieldFailsAlone(t *testing.T) {
	for _, mac := range []bool{false, true} {
		svc := newCallSvc()
		addr, _ := serve(t, Config{Secret: secret, Encrypt: mac}, svc, svc)
		c := dial(t, addr, Config{Secret: secret})
		ctx := context.Background()
		other, err := c.Stream(ctx, handofftest.ID(1), handoff.StreamParams{})
		if err != nil {
			t.Fatal(err)
		}
		id := handofftest.ID(2)
		bad := []struct {
			name string
			call func() error
		}{
			{"prefill top_k 3e9", func() error {
				_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1, 2},
					Sampling: sample.Params{TopK: 3_000_000_000}})
				return err
			}},
			{"stream top_k 3e9", func() error {
				_, err := c.Stream(ctx, id, handoff.StreamParams{Sampling: sample.Params{TopK: 3_000_000_000}})
				return err
			}},
			{"stream top_k -1", func() error {
				_, err := c.Stream(ctx, id, handoff.StreamParams{Sampling: sample.Params{TopK: -1}})
				return err
			}},
			{"reserve max_tokens MaxInt64", func() error {
				_, err := c.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 3, MaxTokens: math.MaxInt64})
				return err
			}},
			{"reserve max_tokens MaxInt64-3", func() error {
				_, err := c.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 3, MaxTokens: math.MaxInt64 - 3})
				return err
			}},
			{"reserve prompt_tokens MaxInt32+1", func() error {
				_, err := c.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: math.MaxInt32 + 1, MaxTokens: 1})
				return err
			}},
			{"reserve max_tokens -1", func() error {
				_, err := c.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 3, MaxTokens: -1})
				return err
			}},
			{"commit tokens MaxInt64", func() error {
				return c.Commit(ctx, &handoff.Commit{Handoff: id, Tokens: math.MaxInt64, Digest: []byte{1}})
			}},
			{"write block -1", func() error {
				return c.Write(ctx, []handoff.PageWrite{{Handoff: id, Block: -1, Slots: 1, Data: []byte{1}}})
			}},
			{"write slots MaxInt32+1", func() error {
				return c.Write(ctx, []handoff.PageWrite{{Handoff: id, Slots: math.MaxInt32 + 1, Data: []byte{1}}})
			}},
			{"prefill reservation page_size MaxInt64", func() error {
				_, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1},
					Reservation: &handoff.Reservation{Handoff: id, PageSize: math.MaxInt64}})
				return err
			}},
		}
		before := len(svc.seen())
		for _, b := range bad {
			if err := b.call(); !errors.Is(err, handoff.ErrBadMessage) {
				t.Fatalf("mac=%v %s: %v, want bad_message", mac, b.name, err)
			}
			if err := c.Err(); err != nil {
				t.Fatalf("mac=%v %s tore the shared connection: %v", mac, b.name, err)
			}
		}
		if got := svc.seen()[before:]; len(got) != 0 {
			t.Fatalf("mac=%v: refused calls reached the service: %v", mac, got)
		}
		close(svc.release)
		readStream(t, other)
		other.Close()
		if _, err := c.Prefill(ctx, &handoff.PrefillRequest{Handoff: id, Tenant: "b", Tokens: []int32{1, 2}, Sampling: sample.Params{TopK: 40}}); err != nil {
			t.Fatalf("mac=%v: a good call after the bad ones: %v", mac, err)
		}
	}
}

// rawBody builds message bodies the client's encoder refuses, to reach
// the server's decoder as a buggy or hostile peer would.
func rawBody(f func(e *enc)) []byte {
	var e enc
	f(&e)
	return e.b
}

// A good frame (length, checksum, MAC all hold) whose body does not decode
// is answered with bad_message on its own call, and the connection goes on
// serving: the next call on it is answered, and a stream open across it
// delivers every token.
func TestBadBodyAnsweredOnItsCall(t *testing.T) {
	id := handofftest.ID(5)
	outOfRange := uint64(3_000_000_000)
	goodWrite := func(e *enc, block, slots uint64, placed byte) {
		e.u32(1)
		e.id(id)
		e.u64(block)
		e.u32(0)
		e.u64(1)
		e.u64(slots)
		e.u32(0)
		e.u8(placed)
		e.u32(2)
		e.b = append(e.b, 9, 9) // the page data
	}
	cases := []struct {
		name string
		typ  byte
		body []byte
	}{
		{"stream open top_k 3e9", tStreamOpen, rawBody(func(e *enc) {
			e.id(id)
			e.u32(0)
			e.u64(outOfRange)
			e.u32(0)
			e.u64(0)
			e.bool(false)
		})},
		{"prefill top_k 3e9", tPrefill, rawBody(func(e *enc) {
			e.id(id)
			e.str("a")
			e.u32(1)
			e.u32(5)
			e.bool(false)
			e.u32(0)
			e.u64(outOfRange)
			e.u32(0)
			e.u64(0)
		})},
		{"reserve max_tokens MaxInt64", tReserve, rawBody(func(e *enc) {
			e.id(id)
			e.str("a")
			e.u64(3)
			e.u64(math.MaxInt64)
		})},
		{"reserve prompt_tokens -1", tReserve, rawBody(func(e *enc) {
			e.id(id)
			e.str("a")
			e.u64(math.MaxUint64)
			e.u64(1)
		})},
		{"reserve truncated", tReserve, rawBody(func(e *enc) { e.id(id); e.u32(1000) })},
		{"reserve trailing bytes", tReserve, append(mustEnc(encReserve(&handoff.Reserve{Handoff: id, Tenant: "a", PromptTokens: 4})), 0)},
		{"commit tokens MaxInt32+1", tCommit, rawBody(func(e *enc) {
			e.id(id)
			e.u64(math.MaxInt32 + 1)
			e.bytes([]byte{1})
			e.u32(0)
		})},
		{"abort bad length", tAbort, rawBody(func(e *enc) { e.id(id); e.u32(math.MaxUint32) })},
		{"cancel short id", tCancel, []byte{1, 2, 3}},
		{"write block 3e9", tWrite, rawBody(func(e *enc) { goodWrite(e, outOfRange, 1, 0) })},
		{"write slots MaxInt64", tWrite, rawBody(func(e *enc) { goodWrite(e, 0, math.MaxInt64, 0) })},
		{"write bad boolean", tWrite, rawBody(func(e *enc) { goodWrite(e, 0, 1, 7) })},
	}
	for _, mac := range []bool{false, true} {
		svc := newCallSvc()
		addr, _ := serve(t, Config{Secret: secret}, svc, svc)
		c, nc := rawAuthed(t, addr, mac)
		// Another tenant's stream, open across every bad call.
		if err := c.send(tStreamOpen, 1, mustEnc(encStreamOpen(handofftest.ID(1), handoff.StreamParams{}))); err != nil {
			t.Fatal(err)
		}
		if f, err := c.fr.readFrame(nc, nil); err != nil || f.typ != tOK || f.stream != 1 {
			t.Fatalf("stream open: %+v %v", f, err)
		}
		for i, tc := range cases {
			stream := uint32(10 + i)
			var err error
			if tc.typ == tWrite {
				// The page data is outside a Write frame's CRC (frame.go).
				meta := 4 + writeRecLen
				err = c.sendData(tc.typ, stream, [][]byte{tc.body[:meta], tc.body[meta:]}, []bool{false, true})
			} else {
				err = c.send(tc.typ, stream, tc.body)
			}
			if err != nil {
				t.Fatal(err)
			}
			f, err := c.fr.readFrame(nc, nil)
			if err != nil {
				t.Fatalf("mac=%v %s: the connection went: %v", mac, tc.name, err)
			}
			if f.typ != tError || f.stream != stream {
				t.Fatalf("mac=%v %s: frame type %d on stream %d, want an error on the call's stream %d", mac, tc.name, f.typ, f.stream, stream)
			}
			if e := decError(f.payload); !errors.Is(e, handoff.ErrBadMessage) {
				t.Fatalf("mac=%v %s: %v, want bad_message", mac, tc.name, e)
			}
			// The connection still serves: a good call is answered.
			if err := c.send(tDrained, 99, encID(id)); err != nil {
				t.Fatal(err)
			}
			if f, err := c.fr.readFrame(nc, nil); err != nil || f.typ != tOK || f.stream != 99 {
				t.Fatalf("mac=%v after %s: %+v %v", mac, tc.name, f, err)
			}
		}
		close(svc.release)
		for want := 1; want <= 4; want++ {
			f, err := c.fr.readFrame(nc, nil)
			if err != nil || f.typ != tToken || f.stream != 1 {
				t.Fatalf("mac=%v: the open stream's item %d: %+v %v", mac, want, f, err)
			}
		}
		for _, call := range svc.seen() {
			if call != "stream" && call != "drained" {
				t.Fatalf("mac=%v: a bad message reached the service as %q", mac, call)
			}
		}
	}
}

// A reply the server cannot encode (a reservation with a page size beyond
// the wire's range, a token with a negative count) fails only its call:
// the reservation is aborted on the server so its pages are not stranded,
// the bad stream ends with bad_message, the connection stays up.
func TestUnencodableReplyFailsAlone(t *testing.T) {
	svc := newCallSvc()
	svc.badReply, svc.badToken = handofftest.ID(7), handofftest.ID(8)
	addr, _ := serve(t, Config{Secret: secret}, svc, svc)
	c := dial(t, addr, Config{Secret: secret})
	ctx := context.Background()
	other, err := c.Stream(ctx, handofftest.ID(1), handoff.StreamParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reserve(ctx, &handoff.Reserve{Handoff: svc.badReply, Tenant: "a", PromptTokens: 4, MaxTokens: 1}); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("reserve answered with an unencodable reservation: %v", err)
	}
	svc.mu.Lock()
	aborted := append([]kv.ID(nil), svc.aborted...)
	svc.mu.Unlock()
	if len(aborted) != 1 || aborted[0] != svc.badReply {
		t.Fatalf("the unsendable reservation was not aborted on the server: %v", aborted)
	}
	bad, err := c.Stream(ctx, svc.badToken, handoff.StreamParams{})
	if err != nil {
		t.Fatal(err)
	}
	close(svc.release)
	if tok, err := bad.Recv(); err != nil || !errors.Is(tok.Err, handoff.ErrBadMessage) {
		t.Fatalf("stream with an unencodable token: %+v %v", tok, err)
	}
	readStream(t, other)
	if err := c.Drained(ctx, handofftest.ID(3)); err != nil || c.Err() != nil {
		t.Fatalf("connection after the bad replies: %v %v", err, c.Err())
	}
}

// A reply whose body does not decode inside intact framing (a server that
// sends a reservation with a page size out of range, a token with a bad
// boolean) fails only that call on the client: the pages it stands for
// are aborted, the stream is closed, and the connection carries on.
func TestBadReplyBodyFailsAlone(t *testing.T) {
	got := make(chan byte, 16) // the frame types the fake server received
	addr := fakeServer(t, func(nc net.Conn) {
		c := fakeServerConn(nc)
		if c == nil {
			return
		}
		for {
			f, err := c.fr.readFrame(nc, nil)
			if err != nil {
				return
			}
			got <- f.typ
			switch f.typ {
			case tReserve: // a page size out of the wire's range
				c.send(tReservation, f.stream, rawBody(func(e *enc) {
					e.id(kv.ID{})
					e.u64(math.MaxInt64)
					e.u64(4)
					e.u64(0)
					e.u32(0)
				}))
			case tStreamOpen:
				c.send(tOK, f.stream)
				c.send(tToken, f.stream, rawBody(func(e *enc) { e.u32(1); e.u8(7) }))
			case tStreamClose:
			default:
				c.send(tOK, f.stream)
			}
		}
	})
	c := dial(t, addr, Config{Secret: secret})
	ctx := context.Background()
	if _, err := c.Reserve(ctx, &handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "a", PromptTokens: 4, MaxTokens: 1}); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("reserve with an undecodable reply: %v", err)
	}
	next := func() byte {
		select {
		case typ := <-got:
			return typ
		case <-time.After(10 * time.Second): // a hang guard, not a measurement
			t.Fatal("the fake server got no further frame")
			return 0
		}
	}
	if a, b := next(), next(); a != tReserve || b != tAbort {
		t.Fatalf("the fake server got frames %d, %d: want the Reserve, then an Abort of the unusable reservation", a, b)
	}
	ts, err := c.Stream(ctx, handofftest.ID(1), handoff.StreamParams{})
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := ts.Recv(); err != nil || !errors.Is(tok.Err, handoff.ErrBadMessage) {
		t.Fatalf("token that does not decode: %+v %v", tok, err)
	}
	if a, b := next(), next(); a != tStreamOpen || b != tStreamClose {
		t.Fatalf("the fake server got frames %d, %d: want the open, then a StreamClose", a, b)
	}
	if err := c.Drained(ctx, handofftest.ID(1)); err != nil || c.Err() != nil {
		t.Fatalf("connection after bad replies: %v %v", err, c.Err())
	}
	if typ := next(); typ != tDrained {
		t.Fatalf("frame %d, want Drained", typ)
	}
}

// The Redialer sends an Abort (or Drained, Cancel: idempotent clean-up)
// once more on a fresh connection when its connection dies under it, so
// the clean-up of a failed handoff is not lost with the connection that
// failed it; a Reserve in the same situation is never sent twice (its
// outcome is unknown: the caller aborts).
func TestRedialerResendsCleanUpOnly(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan byte, 16) // frame types, in arrival order, over all connections
	go func() {
		for n := 0; ; n++ {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			go func(n int) {
				defer nc.Close()
				c := fakeServerConn(nc)
				if c == nil {
					return
				}
				// The first connection dies unanswered at its first call,
				// every connection at a Reserve.
				for first := true; ; first = false {
					f, err := c.fr.readFrame(nc, nil)
					if err != nil {
						return
					}
					got <- f.typ
					if (first && n == 0) || f.typ == tReserve {
						return
					}
					c.send(tOK, f.stream)
				}
			}(n)
		}
	}()
	rd, err := ConnectRedialer(context.Background(), l.Addr().String(), Config{Secret: secret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx := context.Background()
	if err := rd.Abort(ctx, &handoff.Abort{Handoff: handofftest.ID(1), Reason: "x"}); err != nil {
		t.Fatalf("abort whose connection died: %v, want it delivered on a fresh connection", err)
	}
	if a, b := <-got, <-got; a != tAbort || b != tAbort {
		t.Fatalf("frames %d, %d: want the abort twice (once per connection)", a, b)
	}
	_, err = rd.Reserve(ctx, &handoff.Reserve{Handoff: handofftest.ID(2), Tenant: "a", PromptTokens: 4, MaxTokens: 1})
	if !errors.Is(err, handoff.ErrTransport) {
		t.Fatalf("reserve whose connection died: %v, want ErrTransport", err)
	}
	if typ := <-got; typ != tReserve {
		t.Fatalf("frame %d, want the reserve", typ)
	}
	if err := rd.Drained(ctx, handofftest.ID(2)); err != nil {
		t.Fatal(err)
	}
	if typ := <-got; typ != tDrained {
		t.Fatalf("frame %d after the reserve: want the next call, not the reserve again", typ)
	}
}
