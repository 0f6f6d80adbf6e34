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
	"sluice/internal/model"
)

// Two models as roles would fingerprint them (I13).
var (
	modelA = model.Fingerprint{Name: "qwen2-synthetic", Sum: [16]byte{0xaa, 1, 2, 3}}
	modelB = model.Fingerprint{Name: "stories260K", Sum: [16]byte{0xbb, 4, 5, 6}}
)

// rawHello sends a Hello naming m and returns it with the server's
// HelloAck (its proof NOT checked: the peer plays a client that ignores it).
func rawHello(t *testing.T, nc net.Conn, fr *framer, m model.Fingerprint) (hello, ack []byte) {
	t.Helper()
	e := enc{b: append([]byte{minVersion, maxVersion, 0}, make([]byte, 64)...)} // nonce, X25519 key (unused: no encryption)
	e.model(m)
	e.u8(0)   // no KV (a router)
	e.u32(64) // call bound
	bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
	nb := net.Buffers(bufs)
	if _, err := nb.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	f, err := fr.readFrame(nc, nil)
	if err != nil || f.typ != tHelloAck {
		t.Fatalf("want a HelloAck, got %v %+v", err, f)
	}
	return e.b, f.payload[:len(f.payload)-32]
}

// I12 on the server's side: a client that ignores the server's proof and
// answers with a junk proof of its own, pipelining a Reserve right behind
// it, is refused with ErrAuth before the Reserve is read, and the
// connection is closed. (TestWrongSecretRefused's client gives up on the
// server's proof first, so it never reaches the server's check.)
func TestJunkClientProofRefusedBeforeReserve(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	for name, junk := range map[string][]byte{
		"zeros":        make([]byte, 32),
		"wrong secret": proof([]byte("another-secret-of-16+"), "sluice/client"),
		"short":        {1, 2, 3},
	} {
		t.Run(name, func(t *testing.T) {
			nc, fr := rawClient(t, addr)
			rawHello(t, nc, fr, model.Fingerprint{})
			auth, _ := fr.encode(helloVersion, tAuth, 0, [][]byte{junk})
			// Pipelined: as if the server had said AuthOK.
			res, _ := fr.encode(maxVersion, tReserve, 1, [][]byte{mustEnc(encReserve(&handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "x", PromptTokens: 4, MaxTokens: 1}))})
			nb := net.Buffers(append(auth, res...))
			nb.WriteTo(nc)
			expectErrorThenClose(t, nc, &framer{maxFrame: 1 << 20}, handoff.ErrAuth)
			if s := r.Server.Stats(); s.Reserved != 0 {
				t.Fatalf("a client with a junk proof reserved pages: %+v", s)
			}
		})
	}
	if err := r.Decode.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// addrListener reports another address than the one it listens on: a
// server "listening off loopback" while the test's traffic stays on it.
type addrListener struct {
	net.Listener
	addr net.Addr
}

func (l addrListener) Addr() net.Addr { return l.addr }

// remoteConn reports another remote address than its peer's.
type remoteConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.addr }

// Frame encryption is the default off loopback (I12, I15): a server
// whose listener is not on loopback, or a client whose peer is not, turns
// encryption on though neither side asked; on loopback it stays off
// unless asked.
func TestEncryptDefaultOffLoopback(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	offHost := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9002}
	listen := func(wrap bool) string {
		s, err := NewServer(Config{Secret: secret}, r.Server, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		if wrap {
			l = addrListener{l, offHost}
		}
		go s.Serve(l)
		t.Cleanup(func() { s.Close() })
		return addr
	}
	newClient := func(addr string, wrap, ask bool) *Client {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if wrap {
			nc = remoteConn{nc, offHost}
		}
		c, err := NewClient(nc, Config{Secret: secret, Encrypt: ask})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	loop, wide := listen(false), listen(true)
	for _, c := range []struct {
		name           string
		addr           string
		clientOff, ask bool
		want           bool
	}{
		{"loopback both sides", loop, false, false, false},
		{"loopback, asked for", loop, false, true, true},
		{"server listens off loopback", wide, false, false, true},
		{"client dials off loopback", loop, true, false, true},
	} {
		cl := newClient(c.addr, c.clientOff, c.ask)
		if cl.Encrypt() != c.want {
			t.Errorf("%s: encryption %v, want %v", c.name, cl.Encrypt(), c.want)
		}
		// The connection works either way.
		if err := cl.Cancel(context.Background(), handofftest.ID(9)); err != nil && !errors.Is(err, handoff.ErrUnknownHandoff) && !errors.Is(err, handoff.ErrState) {
			t.Errorf("%s: a call on the connection: %v", c.name, err)
		}
	}
}

// mismatchText checks that a model mismatch names both models and both
// fingerprints, under its stable code.
func mismatchText(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, handoff.ErrModelMismatch) {
		t.Fatalf("got %v, want %s", err, handoff.ErrModelMismatch.Code)
	}
	for _, m := range []model.Fingerprint{modelA, modelB} {
		if s := err.Error(); !strings.Contains(s, m.Name) || !strings.Contains(s, m.String()) {
			t.Fatalf("%q does not name %v", s, m)
		}
	}
}

// I13 at connect: roles with different model fingerprints never get a
// connection; both sides say why. The same model connects.
func TestModelMismatchRefusedAtConnect(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Model: modelA})
	var mu sync.Mutex
	var serverErr error
	s, err := NewServer(Config{Secret: secret, Model: modelA}, r.Server, nil)
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

	_, err = Dial(context.Background(), addr, Config{Secret: secret, Model: modelB})
	mismatchText(t, err)
	// DialRetry gives up at once: retrying cannot change the model.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = DialRetry(ctx, addr, Config{Secret: secret, Model: modelB})
	mismatchText(t, err)
	if ctx.Err() != nil {
		t.Fatal("DialRetry retried a model mismatch until its deadline")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		se := serverErr
		mu.Unlock()
		if se != nil {
			mismatchText(t, se)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never reported the mismatch")
		}
		time.Sleep(time.Millisecond)
	}

	// The server checks by itself: a client that skips its own check
	// (ignores the server's fingerprint, proves the secret) is refused.
	nc, fr := rawClient(t, addr)
	hello, ack := rawHello(t, nc, fr, modelB)
	auth, _ := fr.encode(helloVersion, tAuth, 0, [][]byte{proof(secret, "sluice/client", hello, ack)})
	nb := net.Buffers(auth)
	nb.WriteTo(nc)
	expectErrorThenClose(t, nc, &framer{maxFrame: 1 << 20}, handoff.ErrModelMismatch)

	// Same model: connects and reserves.
	c := dial(t, addr, Config{Secret: secret, Model: modelA})
	res, err := c.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "t", PromptTokens: 4, MaxTokens: 1, Model: modelA})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Model.Same(modelA) || res.Model.Name != modelA.Name {
		t.Fatalf("the reservation names model %v, want %v", res.Model, modelA)
	}
	_ = c.Abort(context.Background(), &handoff.Abort{Handoff: handofftest.ID(1)})
	if st := r.Server.Stats(); st.Reserved != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// I13 at Reserve: a peer that lies in the handshake (claims the decode
// worker's model) but reserves for another model is refused, and nothing
// is reserved; a zero-fingerprint Reserve to a worker with a model too.
func TestModelMismatchRefusedAtReserve(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Model: modelA})
	addr, _ := serve(t, Config{Secret: secret, Model: modelA}, r.Server, nil)
	c := dial(t, addr, Config{Secret: secret, Model: modelA}) // the lie
	for _, m := range []model.Fingerprint{modelB, {}} {
		_, err := c.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(2), Tenant: "t", PromptTokens: 4, MaxTokens: 1, Model: m})
		if !errors.Is(err, handoff.ErrModelMismatch) {
			t.Fatalf("reserve for %v: %v, want %s", m, err, handoff.ErrModelMismatch.Code)
		}
		if m == modelB {
			mismatchText(t, err)
		}
	}
	if s := r.Server.Stats(); s.Reserved != 0 || s.Failed[handoff.ErrModelMismatch.Code] != 2 {
		t.Fatalf("stats after mismatched reserves: %+v", s)
	}
	if err := r.Decode.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	// The connection is fine: the refusal answered that call only.
	if _, err := c.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(3), Tenant: "t", PromptTokens: 4, MaxTokens: 1, Model: modelA}); err != nil {
		t.Fatal(err)
	}
	_ = c.Abort(context.Background(), &handoff.Abort{Handoff: handofftest.ID(3)})
}

// The client checks by itself too: a server that proves the secret but
// runs another model (and would not check) never gets the client's proof;
// the client refuses with both models named and tells the server why.
func TestClientRefusesServerOfAnotherModel(t *testing.T) {
	got := make(chan *frame, 1)
	addr := fakeServer(t, func(nc net.Conn) {
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		fr := &framer{maxFrame: 1 << 20}
		f, err := fr.readFrame(nc, nil)
		if err != nil {
			return
		}
		hello := f.payload
		e := enc{b: append([]byte{minVersion, 0, 0, 0x10, 0, 0}, make([]byte, 64)...)} // version, no encryption, 1 MiB frames, nonce, X25519 key
		e.model(modelB)
		e.u8(0)
		e.u32(64)
		ack := e.b
		bufs, _ := fr.encode(helloVersion, tHelloAck, 0, [][]byte{ack, proof(secret, "sluice/server", hello, ack)})
		nb := net.Buffers(bufs)
		nb.WriteTo(nc)
		f, _ = fr.readFrame(nc, nil)
		got <- f
	})
	_, err := Dial(context.Background(), addr, Config{Secret: secret, Model: modelA})
	mismatchText(t, err)
	f := <-got
	if f == nil || f.typ != tError {
		t.Fatalf("the client answered a server of another model with %+v, want an error frame and no proof", f)
	}
	mismatchText(t, decError(f.payload))
}
