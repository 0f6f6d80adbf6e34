package tcp

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
	"sluice/internal/model"
)

// kvMismatch checks a KV type refusal: its stable code, both types named.
func kvMismatch(t *testing.T, err error, a, b kv.Type) {
	t.Helper()
	if !errors.Is(err, handoff.ErrKVTypeMismatch) {
		t.Fatalf("got %v, want %s", err, handoff.ErrKVTypeMismatch.Code)
	}
	if s := err.Error(); !strings.Contains(s, "are "+a.String()) || !strings.Contains(s, "are "+b.String()) {
		t.Fatalf("%q does not name both KV types (%v, %v)", s, a, b)
	}
}

// Two roles that hold KV pages of different types (a decode worker of
// F16 pages, a prefill worker of F32 or Q8_0 pages; Q8_0 against F32)
// never get a connection: both sides refuse with kv_type_mismatch,
// DialRetry does not retry it, and a client that skips its own check is
// refused by the server. A role without KV (the router) and a peer of the
// same type connect.
func TestKVTypeMismatchRefusedAtConnect(t *testing.T) {
	for _, c := range [][2]kv.Type{{kv.F16, kv.F32}, {kv.F16, kv.Q8_0}, {kv.Q8_0, kv.F32}, {kv.Q8_0, kv.F16}} {
		t.Run(c[0].String()+"-"+c[1].String(), func(t *testing.T) { kvTypeMismatch(t, c[0], c[1]) })
	}
}

func kvTypeMismatch(t *testing.T, mine, other kv.Type) {
	r := handofftest.New(t, handofftest.Options{})
	var mu sync.Mutex
	var serverErr error
	s, err := NewServer(Config{Secret: secret, HoldsKV: true, KVType: mine}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.OnError = func(_ net.Addr, err error) { mu.Lock(); serverErr = err; mu.Unlock() }
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	addr := l.Addr().String()

	_, err = Dial(context.Background(), addr, Config{Secret: secret, HoldsKV: true, KVType: other})
	kvMismatch(t, err, mine, other)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = DialRetry(ctx, addr, Config{Secret: secret, HoldsKV: true, KVType: other})
	kvMismatch(t, err, mine, other)
	if ctx.Err() != nil {
		t.Fatal("DialRetry retried a KV type mismatch until its deadline")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		se := serverErr
		mu.Unlock()
		if se != nil {
			kvMismatch(t, se, mine, other)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never reported the mismatch")
		}
		time.Sleep(time.Millisecond)
	}

	// A client that says other and ignores the server's answer, proving the
	// secret: the server refuses by itself.
	nc, fr := rawClient(t, addr)
	e := enc{b: append([]byte{minVersion, maxVersion, 0}, make([]byte, 64)...)} // nonce, X25519 key (unused: no encryption)
	e.model(model.Fingerprint{})
	e.u8(byte(other) + 1)
	e.u32(64)
	bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
	nb := net.Buffers(bufs)
	nb.WriteTo(nc)
	f, err := fr.readFrame(nc, nil)
	if err != nil || f.typ != tHelloAck {
		t.Fatalf("want a HelloAck, got %v %+v", err, f)
	}
	auth, _ := fr.encode(helloVersion, tAuth, 0, [][]byte{proof(secret, "sluice/client", e.b, f.payload[:len(f.payload)-32])})
	nb = net.Buffers(auth)
	nb.WriteTo(nc)
	expectErrorThenClose(t, nc, &framer{maxFrame: 1 << 20}, handoff.ErrKVTypeMismatch)

	// The router holds no KV; a prefill worker of the same type: both connect.
	for i, cfg := range []Config{{Secret: secret}, {Secret: secret, HoldsKV: true, KVType: mine}} {
		c := dial(t, addr, cfg)
		if _, err := c.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(2 + i), Tenant: "t", PromptTokens: 4, MaxTokens: 1}); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
	}
	if st := r.Server.Stats(); st.Reserved != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// An unknown KV type byte in a Hello is a malformed handshake.
func TestUnknownKVTypeIsMalformed(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret, HoldsKV: true}, r.Server, nil)
	nc, fr := rawClient(t, addr)
	e := enc{b: append([]byte{minVersion, maxVersion, 0}, make([]byte, 64)...)} // nonce, X25519 key (unused: no encryption)
	e.model(model.Fingerprint{})
	e.u8(9)
	e.u32(64)
	bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
	nb := net.Buffers(bufs)
	nb.WriteTo(nc)
	expectErrorThenClose(t, nc, fr, handoff.ErrProtocol)
}
