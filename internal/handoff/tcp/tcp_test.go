package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

var secret = []byte("0123456789abcdef-test-secret")

// serve starts a Server for r on loopback and returns its address.
func serve(t testing.TB, cfg Config, d handoff.Decode, p handoff.Prefill) (string, *Server) {
	t.Helper()
	s, err := NewServer(cfg, d, p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return l.Addr().String(), s
}

func dial(t testing.TB, addr string, cfg Config) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fakeServer listens on loopback and hands the first connection to handle
// (closed after it returns): a peer that misbehaves in a way no Server
// would. It returns the address to dial.
func fakeServer(t *testing.T, handle func(nc net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		nc, err := l.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		handle(nc)
	}()
	return l.Addr().String()
}

// rawClient dials addr for a test that speaks the protocol by hand (frames
// it builds itself), with a deadline so a silent server fails the test
// instead of hanging it; the connection is closed when the test ends.
func rawClient(t *testing.T, addr string) (net.Conn, *framer) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	return nc, &framer{maxFrame: 1 << 20, isClient: true}
}

// fakeServerConn runs the server side of the handshake on nc, with the
// test secret, for fake servers that misbehave after it; nil if the
// handshake failed.
func fakeServerConn(nc net.Conn) *conn {
	cfg, _ := Config{Secret: secret}.withDefaults()
	c := &conn{nc: nc, cfg: cfg, fr: framer{maxFrame: cfg.MaxFrame}}
	if c.serverHandshake() != nil {
		return nil
	}
	return c
}

func TestHonestHandoff(t *testing.T) {
	for _, mac := range []bool{false, true} {
		r := handofftest.New(t, handofftest.Options{})
		addr, _ := serve(t, Config{Secret: secret, Encrypt: mac}, r.Server, nil)
		c := dial(t, addr, Config{Secret: secret})
		for i, n := range []int{1, 4, 5, 61} {
			handofftest.Honest(t, r, c, i, n, handoff.SenderConfig{MaxBatchBytes: 3 * r.Geo.PageBytes(), Window: 3})
		}
		r.CheckDrained(t)
	}
}

func TestAbortEveryPhase(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	handofftest.AbortEveryPhase(t, r, dial(t, addr, Config{Secret: secret}))
}

func TestForeignWrite(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	handofftest.ForeignWrite(t, r, dial(t, addr, Config{Secret: secret}))
}

// Many handoffs at once on one connection (multiplexed), under -race.
func TestConcurrentHandoffs(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Pages: 256})
	addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
	c := dial(t, addr, Config{Secret: secret})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := &testing.T{}
			_ = sub
			mu.Lock()
			src := r.Sequence(t, handofftest.ID(i), "t"+string(rune('a'+i%3)), 9+i*3, byte(i))
			mu.Unlock()
			ctx := context.Background()
			res, err := c.Reserve(ctx, &handoff.Reserve{Handoff: handofftest.ID(i), Tenant: src.Owner.Tenant, PromptTokens: src.Tokens, MaxTokens: 2})
			if err != nil {
				t.Error(err)
				return
			}
			s, err := handoff.NewSender(handoff.SenderConfig{MaxBatchBytes: r.Geo.PageBytes(), Window: 2}, res, src.Tokens, int32(i), src)
			if err != nil {
				t.Error(err)
				return
			}
			if err := handoff.Push(ctx, s, c); err != nil {
				t.Error(err)
				return
			}
			a := r.Dec.Accepted(handofftest.ID(i))
			if err := r.SameKV(a, src); err != nil {
				t.Error(err)
			}
			r.Dec.Release(handofftest.ID(i))
			r.ReleaseSource(t, src)
		}()
	}
	wg.Wait()
	r.CheckDrained(t)
}

// I12: a peer without the secret cannot reserve, write or commit; a client
// never talks to a server that cannot prove it knows the secret.
func TestWrongSecretRefused(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	if _, err := Dial(context.Background(), addr, Config{Secret: []byte("another-secret-of-16+")}); !errors.Is(err, handoff.ErrAuth) {
		t.Fatalf("dial with a wrong secret: %v, want ErrAuth", err)
	}
	// A live handoff an attacker would like to write into and commit.
	res, err := r.Server.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(7), Tenant: "victim", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, r.Geo.PageBytes())
	wparts, wdata, _ := encWrites([]handoff.PageWrite{{Handoff: handofftest.ID(7), Page: res.Pages[0], Slots: 4, Data: data, Checksum: handoff.Checksum(data)}})
	// Peers that skip the handshake and send a request straight away.
	for _, m := range []struct {
		typ   byte
		parts [][]byte
		data  []bool
	}{
		{tReserve, [][]byte{mustEnc(encReserve(&handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "x", PromptTokens: 4}))}, nil},
		{tWrite, wparts, wdata},
		{tCommit, [][]byte{mustEnc(encCommit(&handoff.Commit{Handoff: handofftest.ID(7), Tokens: 4, Digest: []byte{1}}))}, nil},
	} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fr := framer{maxFrame: 1 << 20, isClient: true}
		var bufs [][]byte
		if m.data != nil {
			bufs, _ = fr.encode(maxVersion, m.typ, 1, m.parts, m.data)
		} else {
			bufs, _ = fr.encode(maxVersion, m.typ, 1, m.parts)
		}
		nb := net.Buffers(bufs)
		nb.WriteTo(nc)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		expectErrorThenClose(t, nc, &framer{maxFrame: 1 << 20}, handoff.ErrProtocol)
		nc.Close()
	}
	if s := r.Server.Stats(); s.Reserved != 1 || s.Accepted != 0 || len(s.Failed) != 0 {
		t.Fatalf("an unauthenticated peer changed the decode side: %+v", s)
	}
	if _, n, _ := r.Decode.PageData(kv.Owner{Tenant: "victim", ID: handofftest.ID(7)}, res.Pages[0]); n != 0 {
		t.Fatal("an unauthenticated peer wrote a page")
	}
	r.Server.Abort(context.Background(), &handoff.Abort{Handoff: handofftest.ID(7)})
	if _, err := NewServer(Config{}, r.Server, nil); !errors.Is(err, handoff.ErrAuth) {
		t.Fatalf("server without a secret: %v", err)
	}
}

func TestServerMustProveSecret(t *testing.T) {
	// An impostor server with the wrong secret.
	addr, _ := serve(t, Config{Secret: []byte("impostor-secret-0123456")}, nil, nil)
	_, err := Dial(context.Background(), addr, Config{Secret: secret})
	if !errors.Is(err, handoff.ErrAuth) || !strings.Contains(err.Error(), "server failed to prove") {
		t.Fatalf("dial an impostor: %v", err)
	}
}

// expectErrorThenClose reads frames until an error frame with the code,
// then requires the connection to be closed.
func expectErrorThenClose(t *testing.T, nc net.Conn, fr *framer, want *handoff.Error) {
	t.Helper()
	f, err := fr.readFrame(nc, nil)
	if err != nil {
		t.Fatalf("want an error frame, read %v", err)
	}
	if f.typ != tError {
		t.Fatalf("frame type %d, want an error", f.typ)
	}
	if e := decError(f.payload); !errors.Is(e, want) {
		t.Fatalf("error frame %v, want %s", e, want.Code)
	}
	requireClosed(t, nc)
}

// rawAuthed returns an authenticated raw connection to send crafted frames.
func rawAuthed(t *testing.T, addr string, mac bool) (*conn, net.Conn) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	cfg, _ := Config{Secret: secret, Encrypt: mac}.withDefaults()
	c := &conn{nc: nc, cfg: cfg, fr: framer{maxFrame: cfg.MaxFrame, isClient: true}}
	if err := c.clientHandshake(); err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	return c, nc
}

func rawFrame(version, typ byte, stream uint32, payload []byte, crcFix func(uint32) uint32) []byte {
	hdr := make([]byte, headerLen)
	hdr[0], hdr[1] = version, typ
	binary.BigEndian.PutUint32(hdr[4:], stream)
	binary.BigEndian.PutUint32(hdr[8:], uint32(len(payload)))
	c := crc32.Update(0, castagnoli, hdr[:12])
	c = crc32.Update(c, castagnoli, payload)
	if crcFix != nil {
		c = crcFix(c)
	}
	binary.BigEndian.PutUint32(hdr[12:], c)
	return append(hdr, payload...)
}

// Every malformed frame gets a clear error and the connection is closed.
// (A good frame whose body does not decode is answered on its call and the
// connection stays up: TestBadBodyAnsweredOnItsCall.)
func TestBadFrames(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	cfg := Config{Secret: secret, MaxFrame: 4096, ReadTimeout: 300 * time.Millisecond}
	addr, _ := serve(t, cfg, r.Server, nil)
	good := mustEnc(encReserve(&handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "x", PromptTokens: 4}))
	wparts, _, _ := encWrites([]handoff.PageWrite{{Handoff: handofftest.ID(1), Slots: 1}})
	goodWrite := bytes.Join(wparts, nil)
	cases := []struct {
		name  string
		bytes []byte
		close bool // half-close our side after sending (truncation)
		want  string
	}{
		{"truncated body", rawFrame(maxVersion, tReserve, 1, good, nil)[:headerLen+3], true, "truncated"},
		{"truncated body, peer stays silent", rawFrame(maxVersion, tReserve, 1, good, nil)[:headerLen+3], false, "truncated"},
		{"oversized", rawFrame(maxVersion, tWrite, 1, make([]byte, 5000), nil), false, "exceeds the limit"},
		{"unknown type", rawFrame(maxVersion, 99, 1, good, nil), false, "unknown frame type"},
		{"unknown version", rawFrame(maxVersion+1, tReserve, 1, good, nil), false, "version"},
		{"bad checksum", rawFrame(maxVersion, tReserve, 1, good, func(c uint32) uint32 { return c ^ 1 }), false, "checksum"},
		{"no call id", rawFrame(maxVersion, tReserve, 0, good, nil), false, "call id"},
		{"write frame, bad checksum", rawFrame(maxVersion, tWrite, 1, goodWrite, func(c uint32) uint32 { return c ^ 1 }), false, "checksum"},
		{"reply type as request", rawFrame(maxVersion, tOK, 1, nil, nil), false, "not a request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, nc := rawAuthed(t, addr, false)
			nc.Write(tc.bytes)
			if tc.close {
				nc.(*net.TCPConn).CloseWrite()
			}
			f, err := c.fr.readFrame(nc, nil)
			if err != nil {
				t.Fatalf("want an error frame, got %v", err)
			}
			if f.typ != tError || f.stream != 0 {
				t.Fatalf("frame type %d stream %d, want a connection-level error", f.typ, f.stream)
			}
			e := decError(f.payload)
			if !errors.Is(e, handoff.ErrProtocol) || !strings.Contains(e.Error(), tc.want) {
				t.Fatalf("error %v, want protocol error mentioning %q", e, tc.want)
			}
			requireClosed(t, nc)
		})
	}
	if s := r.Server.Stats(); s.Reserved != 0 {
		t.Fatalf("a malformed frame reserved pages: %+v", s)
	}
}

// A Write frame, which the server opens on the call's goroutine rather
// than the reader's (framer.deferOpen), altered in flight: ErrAuth, the
// connection closes, and no page byte reaches the pool (I15): the page
// record was opened straight into its page (kv.Pool.FillPageSum), and
// what the failed open left there is gone and never marked written.
func TestEncryptRejectsTamperedWriteFrame(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
	cl := dial(t, addr, Config{Secret: secret, Encrypt: true})
	res, err := cl.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	page := bytes.Repeat([]byte{0x5a}, r.Geo.PageBytes())
	parts, _, err := encWrites([]handoff.PageWrite{{Handoff: handofftest.ID(1), Block: 0, Page: res.Pages[0], Slots: 4, Data: page, Checksum: handoff.Checksum(page)}})
	if err != nil {
		t.Fatal(err)
	}
	c, nc := rawAuthed(t, addr, true)
	bufs, _ := c.fr.encode(maxVersion, tWrite, 1, parts)
	b := bytes.Join(bufs, nil)
	b[len(b)-tagLen-5] ^= 1 // inside the page bytes
	nc.Write(b)
	f, err := c.fr.readFrame(nc, nil)
	if err != nil || f.typ != tError || !errors.Is(decError(f.payload), handoff.ErrAuth) {
		t.Fatalf("tampered write frame: %v %+v", err, f)
	}
	requireClosed(t, nc)
	o := kv.Owner{Tenant: "acme", ID: handofftest.ID(1)}
	if _, n, err := r.Decode.PageData(o, res.Pages[0]); err == nil && n != 0 {
		t.Fatalf("the tampered frame wrote %d slots", n)
	}
	if s := r.Decode.Stats(); s.Filling != 0 || s.Sealed != 0 {
		t.Fatalf("a page of the tampered frame counts as written: %+v", s)
	}
	r.Decode.SetChecks(false) // read the page's memory whatever its state
	mem, _, err := r.Decode.PageData(o, res.Pages[0])
	if err != nil || bytes.Contains(mem, page[:64]) {
		t.Fatalf("the tampered frame's plaintext is in the pool (%v)", err)
	}
}

// A Write frame whose first write the decode side refuses before opening
// its record (a page it did not reserve) and whose second record is
// altered: the records the call never opened into the pool are still
// verified, so the altered frame closes the connection (ErrAuth) as a frame
// opened whole does, and nothing of it is written.
func TestEncryptVerifiesRecordsTheCallSkipped(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
	cl := dial(t, addr, Config{Secret: secret, Encrypt: true})
	res, err := cl.Reserve(context.Background(), &handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "acme", PromptTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	page := bytes.Repeat([]byte{0x5a}, r.Geo.PageBytes())
	wrong := res.Pages[0]
	wrong.Gen++ // not the page decode reserved: refused before its bytes
	parts, _, err := encWrites([]handoff.PageWrite{
		{Handoff: handofftest.ID(1), Block: 0, Page: wrong, Slots: 4, Data: page, Checksum: handoff.Checksum(page)},
		{Handoff: handofftest.ID(1), Block: 1, Page: res.Pages[1], Slots: 4, Data: page, Checksum: handoff.Checksum(page)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c, nc := rawAuthed(t, addr, true)
	bufs, _ := c.fr.encode(maxVersion, tWrite, 1, parts)
	b := bytes.Join(bufs, nil)
	b[len(b)-tagLen-5] ^= 1 // inside the second page's bytes
	nc.Write(b)
	f, err := c.fr.readFrame(nc, nil)
	if err != nil || f.typ != tError || !errors.Is(decError(f.payload), handoff.ErrAuth) {
		t.Fatalf("altered record after a refused write: %v %+v", err, f)
	}
	requireClosed(t, nc)
	if s := r.Decode.Stats(); s.Filling != 0 {
		t.Fatalf("a page of the altered frame counts as written: %+v", s)
	}
}

// On an encrypted connection a frame altered in flight, in its payload or
// in its header (the additional data), fails to decrypt: the server
// answers ErrAuth and nothing is reserved.
func TestEncryptRejectsTampering(t *testing.T) {
	for _, where := range []string{"payload", "header"} {
		r := handofftest.New(t, handofftest.Options{})
		addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
		c, nc := rawAuthed(t, addr, true)
		bufs, _ := c.fr.encode(maxVersion, tReserve, 1, [][]byte{mustEnc(encReserve(&handoff.Reserve{Handoff: handofftest.ID(1), Tenant: "acme", PromptTokens: 4}))})
		b := bytes.Join(bufs, nil)
		if bytes.Contains(b, []byte("acme")) {
			t.Fatal("the tenant is readable in an encrypted frame")
		}
		if where == "payload" {
			b[headerLen+3] ^= 1
		} else {
			b[7] ^= 1 // the stream id
		}
		nc.Write(b)
		f, err := c.fr.readFrame(nc, nil)
		if err != nil || f.typ != tError || !errors.Is(decError(f.payload), handoff.ErrAuth) {
			t.Fatalf("%s tampered: %v %+v", where, err, f)
		}
		if s := r.Server.Stats(); s.Reserved != 0 {
			t.Fatalf("a frame tampered in its %s reserved pages", where)
		}
	}
}

func TestCallTimeoutIsUnknownOutcome(t *testing.T) {
	block := make(chan struct{})
	addr, _ := serve(t, Config{Secret: secret}, slowDecode{block}, nil)
	c := dial(t, addr, Config{Secret: secret})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Commit(ctx, &handoff.Commit{})
	close(block)
	if !errors.Is(err, handoff.ErrTransport) {
		t.Fatalf("commit without a reply: %v, want ErrTransport (outcome unknown)", err)
	}
	// The connection is still usable for other calls.
	if err := c.Drained(context.Background(), kv.ID{}); err != nil {
		t.Fatal(err)
	}
}

type slowDecode struct{ block chan struct{} }

func (s slowDecode) Reserve(context.Context, *handoff.Reserve) (*handoff.Reservation, error) {
	return nil, nil
}
func (s slowDecode) Write(context.Context, []handoff.PageWrite) error { return nil }
func (s slowDecode) Commit(context.Context, *handoff.Commit) error    { <-s.block; return nil }
func (s slowDecode) Abort(context.Context, *handoff.Abort) error      { return nil }
func (s slowDecode) Drained(context.Context, kv.ID) error             { return nil }
func (s slowDecode) Stream(context.Context, kv.ID, handoff.StreamParams) (handoff.TokenStream, error) {
	return nil, handoff.ErrState
}
func (s slowDecode) Cancel(context.Context, kv.ID) error { return nil }

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "secret")
	os.WriteFile(p, []byte("  0123456789abcdef-xyz\n"), 0o600)
	if b, err := LoadSecret(p); err != nil || string(b) != "0123456789abcdef-xyz" {
		t.Fatalf("%q %v", b, err)
	}
	os.Chmod(p, 0o644)
	if _, err := LoadSecret(p); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("world-readable secret accepted: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "short"), []byte("short"), 0o600)
	if _, err := LoadSecret(filepath.Join(dir, "short")); err == nil {
		t.Fatal("short secret accepted")
	}
}

// requireClosed: the server closed the connection (EOF, or a reset when it
// closed with our unread bytes in its buffer).
func requireClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := nc.Read(make([]byte, 1))
	if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection not closed after a bad frame: %v", err)
	}
}

// Page data flipped in transit: the frame's framing is intact, the page's
// own checksum catches it, the handoff fails closed and the connection lives.
func TestPageDataCorruptedInTransit(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	c, nc := rawAuthed(t, addr, false)
	cl := dial(t, addr, Config{Secret: secret})
	id := handofftest.ID(1)
	res, err := cl.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, r.Geo.PageBytes())
	parts, isData, _ := encWrites([]handoff.PageWrite{{Handoff: id, Page: res.Pages[0], Slots: 4, Data: data, Checksum: handoff.Checksum(data)}})
	bufs, _ := c.fr.encode(maxVersion, tWrite, 1, parts, isData)
	b := bytes.Join(bufs, nil)
	b[len(b)-5] ^= 0x20 // inside the page data
	nc.Write(b)
	f, err := c.fr.readFrame(nc, nil)
	if err != nil || f.typ != tError || f.stream != 1 || !errors.Is(decError(f.payload), handoff.ErrChecksum) {
		t.Fatalf("corrupted page data: %v %+v", err, f)
	}
	if s := r.Server.Stats(); s.Failed[handoff.ErrChecksum.Code] != 1 {
		t.Fatalf("stats %+v", s)
	}
	// Same connection, next call works.
	if err := cl.Drained(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	r.CheckDrained(t)
}

// Version negotiation: a client speaking only versions this server does
// not know is refused with a clear error and the connection closed.
func TestNoCommonVersion(t *testing.T) {
	addr, _ := serve(t, Config{Secret: secret}, nil, nil)
	nc, fr := rawClient(t, addr)
	hello := append([]byte{maxVersion + 1, maxVersion + 3, 0}, make([]byte, 32)...)
	bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{hello})
	b := net.Buffers(bufs)
	b.WriteTo(nc)
	f, err := fr.readFrame(nc, nil)
	if err != nil || f.typ != tError {
		t.Fatalf("want an error frame, got %v %+v", err, f)
	}
	if e := decError(f.payload); !errors.Is(e, handoff.ErrVersion) || !strings.Contains(e.Error(), "no common protocol version") {
		t.Fatalf("error %v", e)
	}
	requireClosed(t, nc)
}

// A peer that connects and never speaks is dropped after the handshake timeout.
func TestHandshakeTimeout(t *testing.T) {
	errs := make(chan error, 1)
	s, err := NewServer(Config{Secret: secret, HandshakeTimeout: 100 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.OnError = func(_ net.Addr, err error) { errs <- err }
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	defer s.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	requireClosed(t, nc)
	if err := <-errs; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("server reported %v, want a deadline", err)
	}
}

// I12: the shared secret never travels on a command line, where every
// local user can read it (ps, /proc/*/cmdline). No sluice subcommand may
// define a flag that takes the secret itself; a *-file flag (or the
// environment) is the way in.
func TestNoSecretFlag(t *testing.T) {
	files, _ := filepath.Glob("../../../cmd/sluice/*.go")
	if len(files) == 0 {
		t.Skip("cmd/sluice not found")
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			l := strings.ToLower(line)
			if !strings.Contains(l, ".string(\"") && !strings.Contains(l, ".stringvar(") {
				continue
			}
			if strings.Contains(l, "secret") && !strings.Contains(l, "secret-file") && !strings.Contains(l, "secret_file") {
				t.Errorf("%s:%d defines a flag that takes a secret on the command line: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// The server's frame limit is learned in the handshake: an oversized batch
// is refused on the client before sending, and the connection stays up.
func TestFrameLimitNegotiated(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret, MaxFrame: 1000}, r.Server, nil)
	c := dial(t, addr, Config{Secret: secret})
	err := c.Write(context.Background(), []handoff.PageWrite{{Handoff: handofftest.ID(1), Data: make([]byte, 2000)}})
	if !errors.Is(err, handoff.ErrProtocol) || !strings.Contains(err.Error(), "peer's limit of 1000") {
		t.Fatalf("oversized batch: %v", err)
	}
	if err := c.Drained(context.Background(), handofftest.ID(1)); err != nil {
		t.Fatalf("connection unusable after a refused oversized batch: %v", err)
	}
}

func TestNewSecret(t *testing.T) {
	if a, b := NewSecret(), NewSecret(); len(a) != 32 || string(a) == string(b) {
		t.Fatal("NewSecret is not 32 fresh random bytes")
	}
}

// A reservation whose connection ends before its stream did (the router
// died, or was cut off and declared dead, and its abort can never arrive)
// is aborted by the server, so its pages do not stay reserved forever;
// one the router aborted itself, or streamed to its end, is left alone.
func TestConnEndAbortsItsReservations(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	ctx := context.Background()
	c := dial(t, addr, Config{Secret: secret})
	for i := range 3 {
		if _, err := c.Reserve(ctx, &handoff.Reserve{Handoff: handofftest.ID(2000 + i), Tenant: "acme", PromptTokens: 9, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Abort(ctx, &handoff.Abort{Handoff: handofftest.ID(2000), Reason: "the router's own"}); err != nil {
		t.Fatal(err)
	}
	if s := r.Decode.Stats(); s.Free == s.Pages {
		t.Fatalf("nothing reserved: %+v", s)
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for s := r.Decode.Stats(); s.Free != s.Pages; s = r.Decode.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("the closed connection's reservations are still held: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.CheckDrained(t)
}
