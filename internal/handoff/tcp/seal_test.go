package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// recorder is a TCP proxy on loopback that forwards one connection to a
// server and keeps every byte it saw, both directions: what an on-path
// observer of the link between prefill and decode would capture.
type recorder struct {
	addr string
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func record(t *testing.T, to string) *recorder {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{addr: l.Addr().String(), done: make(chan struct{})}
	t.Cleanup(func() { l.Close() })
	go func() {
		defer close(r.done)
		in, err := l.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", to)
		if err != nil {
			return
		}
		defer out.Close()
		var wg sync.WaitGroup
		pipe := func(dst, src net.Conn) {
			defer wg.Done()
			b := make([]byte, 32<<10)
			for {
				n, err := src.Read(b)
				if n > 0 {
					r.mu.Lock()
					r.buf.Write(b[:n])
					r.mu.Unlock()
					dst.Write(b[:n])
				}
				if err != nil {
					// Close both ends so the other direction ends too.
					dst.Close()
					src.Close()
					return
				}
			}
		}
		wg.Add(2)
		go pipe(out, in)
		go pipe(in, out)
		wg.Wait()
	}()
	return r
}

// captured waits for the proxied connection to end and returns its bytes.
func (r *recorder) captured(t *testing.T) []byte {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the recording proxy did not see its connection end within 10s")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

// A capture of the link between prefill and decode holds neither the
// prompt's token ids (Reserve carries them for the decode-side prefix
// cache) nor any page's bytes when the connection is encrypted (I15); with
// encryption off the same capture holds both, which shows the test can
// see them.
func TestCaptureHoldsNoTenantDataWhenEncrypted(t *testing.T) {
	ids := []int32{0x51A7E001, 0x51A7E002, 0x51A7E003, 0x51A7E004, 0x51A7E005, 0x51A7E006, 0x51A7E007, 0x51A7E008}
	var idBytes []byte
	for _, id := range ids {
		idBytes = binary.BigEndian.AppendUint32(idBytes, uint32(id))
	}
	for _, encrypt := range []bool{false, true} {
		r := handofftest.New(t, handofftest.Options{})
		addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
		rec := record(t, addr)
		c, err := Dial(context.Background(), rec.addr, Config{Secret: secret, Encrypt: encrypt})
		if err != nil {
			t.Fatal(err)
		}
		if c.Encrypt() != encrypt {
			t.Fatalf("asked for encryption %v, the connection has %v", encrypt, c.Encrypt())
		}
		// The prompt's ids cross in a Reserve, whatever decode answers.
		id := handofftest.ID(100)
		_, _ = c.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: len(ids), Tokens: ids, MaxTokens: 2})
		_ = c.Abort(context.Background(), &handoff.Abort{Handoff: id})
		// A whole handoff's pages cross in Write frames.
		handofftest.Honest(t, r, c, 7, 3*r.Geo.PageSize+1, handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes(), Window: 2})
		c.Close()
		got := rec.captured(t)
		// Page b's bytes are seed ^ (i*31 + b*7) | 0x10 (handofftest.Rig.Sequence).
		page := make([]byte, 64)
		for i := range page {
			page[i] = byte(7) ^ byte(i*31) | 0x10
		}
		sawIDs, sawPage := bytes.Contains(got, idBytes), bytes.Contains(got, page)
		if encrypt && (sawIDs || sawPage) {
			t.Errorf("encrypted: the capture (%d bytes) shows the prompt ids: %v, a page's bytes: %v", len(got), sawIDs, sawPage)
		}
		if !encrypt && (!sawIDs || !sawPage) {
			t.Errorf("in clear the capture should show both (the test's own check): prompt ids %v, page bytes %v", sawIDs, sawPage)
		}
		if bytes.Contains(got, []byte("acme")) == encrypt {
			t.Errorf("encrypt=%v: the tenant name readable in the capture: %v", encrypt, !encrypt)
		}
	}
}

// The frame keys come from the ephemeral exchange, not from the secret
// alone: two connections with the same secret seal the same frame under
// different keys, so a recording of one cannot be opened with the other's
// keys (or with anything derived from the secret and the transcript,
// which is all a later holder of the secret has: forward secrecy).
func TestSessionKeysAreEphemeral(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
	a, _ := rawAuthed(t, addr, true)
	b, _ := rawAuthed(t, addr, true)
	if bytes.Equal(a.fr.tx.key, b.fr.tx.key) || bytes.Equal(a.fr.tx.key, a.fr.rx.key) {
		t.Fatal("two connections, or two directions of one, share a frame key")
	}
	msg := [][]byte{[]byte("the same page bytes")}
	fa, _ := a.fr.encode(maxVersion, tOK, 1, msg)
	fb, _ := b.fr.encode(maxVersion, tOK, 1, msg)
	if bytes.Equal(fa[0], fb[0]) {
		t.Fatal("the same frame sealed identically on two connections")
	}
	// b's receiver cannot open a's frame (both are client→server here, so
	// use a server-side view: a framer with a's client keys swapped in).
	rx := framer{maxFrame: 1 << 20, version: maxVersion}
	rx.enableSeal(b.fr.tx.key, b.fr.rx.key) // server view of b's keys
	f, n, err := rx.readHeader(bytes.NewReader(fa[0]))
	if err == nil {
		err = rx.readBody(bytes.NewReader(fa[0][headerLen:]), f, n)
	}
	if !errors.Is(err, handoff.ErrAuth) {
		t.Fatalf("a frame of one connection opened under another's keys: %v", err)
	}
}

// Each direction's key is replaced after rekeyBytes of payload, at the
// same frame on both sides, and frames keep flowing across the change.
func TestRekeyKeepsBothSidesInStep(t *testing.T) {
	old := rekeyBytes
	rekeyBytes = 4 << 10
	t.Cleanup(func() { rekeyBytes = old })
	r := handofftest.New(t, handofftest.Options{Pages: 64})
	addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
	c := dial(t, addr, Config{Secret: secret})
	for i := range 4 {
		handofftest.Honest(t, r, c, i, 5*r.Geo.PageSize, handoff.SenderConfig{MaxBatchBytes: 2 * r.Geo.PageBytes(), Window: 2})
	}
	r.CheckDrained(t)
	if c.c.fr.tx.keyNo == 0 {
		t.Fatalf("no rekey after %d bytes sealed with a limit of %d", c.c.fr.tx.bytes, rekeyBytes)
	}
}

// The ratchet itself: after rekeyBytes, the next frame is sealed under a
// new key that the old key cannot open, and the sequence keeps counting
// (a nonce is never reused under any key).
func TestRekeyReplacesTheKey(t *testing.T) {
	old := rekeyBytes
	rekeyBytes = 100
	t.Cleanup(func() { rekeyBytes = old })
	k := make([]byte, 32)
	d := newDirKey(k, 'C')
	n1, _ := d.next(60)
	k1 := d.key
	n2, _ := d.next(60) // 120 > 100: rekeyed first
	if bytes.Equal(d.key, k1) || d.keyNo != 1 {
		t.Fatalf("no new key after %d bytes (limit %d)", 120, rekeyBytes)
	}
	if n1 == n2 {
		t.Fatal("a nonce repeated across the rekey")
	}
	if d.bytes != 60 {
		t.Fatalf("bytes under the new key %d, want 60", d.bytes)
	}
}

// A peer of the previous protocol version (7: no X25519 keys, frame MAC
// only) is refused at the handshake with ErrVersion, named, not served in
// clear.
func TestVersion7PeerRefused(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret}, r.Server, nil)
	nc, fr := rawClient(t, addr)
	e := enc{b: append([]byte{7, 7, 1}, make([]byte, 32)...)}
	bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
	nb := net.Buffers(bufs)
	nb.WriteTo(nc)
	f, err := fr.readFrame(nc, nil)
	if err != nil || f.typ != tError {
		t.Fatalf("a version-7 Hello got %v %+v, want an error frame", err, f)
	}
	if perr := decError(f.payload); !errors.Is(perr, handoff.ErrVersion) {
		t.Fatalf("a version-7 Hello: %v, want ErrVersion", perr)
	}
	if _, err := io.ReadAll(nc); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Logf("after the refusal: %v", err)
	}
}

// The frame keys depend on the X25519 exchange, not only on what a holder
// of the secret could rebuild from a recording (the salt: a proof over the
// secret and the transcript): with the same salt and peer key, another
// private key gives other keys; and both ends of one exchange agree.
func TestSessionKeysDependOnTheExchange(t *testing.T) {
	a, b, x := newX25519(), newX25519(), newX25519()
	salt := proof(secret, "sluice/session", []byte("hello"), []byte("ack"))
	ac, as, err := sessionKeys(a, b.PublicKey().Bytes(), salt)
	if err != nil {
		t.Fatal(err)
	}
	bc, bs, _ := sessionKeys(b, a.PublicKey().Bytes(), salt)
	if !bytes.Equal(ac, bc) || !bytes.Equal(as, bs) || bytes.Equal(ac, as) {
		t.Fatal("the two ends of one exchange derive different keys, or both directions share one")
	}
	xc, _, _ := sessionKeys(x, b.PublicKey().Bytes(), salt)
	if bytes.Equal(xc, ac) {
		t.Fatal("the frame keys do not depend on the ephemeral private key")
	}
	// A low-order peer key (all zeros gives an all-zero shared value) is
	// refused rather than keying the connection with a known value.
	if _, _, err := sessionKeys(a, make([]byte, 32), salt); !errors.Is(err, handoff.ErrProtocol) {
		t.Fatalf("an all-zero X25519 key: %v, want a protocol error", err)
	}
}
