package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
)

// The wire format of version 2 (fingerprints in Hello, Reserve,
// Reservation and Prefill; sampling settings and logprobs in StreamOpen,
// Prefill, Commit and Token) cannot be read by a version-1 build, nor the
// reverse: each side must refuse the other at the handshake with
// ErrVersion, never get as far as a Reserve it would misread.

// A version-1 client (this build's Hello with the version-1 range) is
// refused by the server with ErrVersion, on the wire and in OnError,
// before it can reserve anything.
func TestVersion1ClientRefused(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	errs := make(chan error, 1)
	s, err := NewServer(Config{Secret: secret}, r.Server, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.OnError = func(_ net.Addr, err error) {
		select {
		case errs <- err:
		default:
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	// Both version-1 Hello shapes: with a fingerprint (the build before the
	// bump) and without (the build before I13).
	for name, withModel := range map[string]bool{"with fingerprint": true, "before I13": false} {
		t.Run(name, func(t *testing.T) {
			nc, fr := rawClient(t, l.Addr().String())
			e := enc{b: append([]byte{1, 1, 0}, make([]byte, 32)...)}
			if withModel {
				e.model(modelA)
			}
			bufs, _ := fr.encode(helloVersion, tHello, 0, [][]byte{e.b})
			nb := net.Buffers(bufs)
			nb.WriteTo(nc)
			f, err := fr.readFrame(nc, nil)
			if err != nil || f.typ != tError {
				t.Fatalf("want an error frame, got %v %+v", err, f)
			}
			versionText(t, decError(f.payload))
			requireClosed(t, nc)
			select {
			case err := <-errs:
				versionText(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("the server reported no error")
			}
		})
	}
	if st := r.Server.Stats(); st.Reserved != 0 {
		t.Fatalf("a version-1 client reserved pages: %+v", st)
	}
}

// A server of a version-1 build answers this build's Hello with a
// protocol error (it cannot read it); Dial reports ErrVersion saying so,
// not a bare "malformed frame", and DialRetry gives up at once: dialling
// again cannot fix a build mismatch (a role would otherwise wait for its
// peer until its start-up deadline).
func TestVersion1ServerRefused(t *testing.T) {
	addr := version1Server(t)
	_, err := Dial(context.Background(), addr, Config{Secret: secret, Model: modelA})
	versionText(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = DialRetry(ctx, addr, Config{Secret: secret, Model: modelA})
	versionText(t, err)
	if ctx.Err() != nil {
		t.Fatal("DialRetry kept dialling a server of another protocol version until its deadline")
	}
}

// version1Server answers every Hello as a version-1 build does.
func version1Server(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			nc.SetDeadline(time.Now().Add(5 * time.Second))
			fr := &framer{maxFrame: 1 << 20}
			if f, err := fr.readFrame(nc, nil); err == nil {
				msg := protoErr("no common protocol version: client speaks %d..%d, server 1..1", f.payload[0], f.payload[1])
				bufs, _ := fr.encode(helloVersion, tError, 0, [][]byte{encError(msg)})
				nb := net.Buffers(bufs)
				nb.WriteTo(nc)
			}
			nc.Close()
		}
	}()
	return l.Addr().String()
}

func versionText(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, handoff.ErrVersion) {
		t.Fatalf("got %v, want %s", err, handoff.ErrVersion.Code)
	}
	if s := err.Error(); !strings.Contains(s, "version") || !strings.Contains(s, "same sluice") {
		t.Fatalf("%q does not say the builds differ", s)
	}
}

// A long served model name (the operator's --served-model-name) is not a
// protocol fault: names are for messages only, so the handshake carries at
// most maxModelName bytes of it and the roles connect (it was refused by
// the peer's decoder, which this build then took for another version).
func TestLongModelNameConnects(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	m := modelA
	m.Name = strings.Repeat("n", 3*maxModelName)
	addr, _ := serve(t, Config{Secret: secret, Model: m}, r.Server, nil)
	c, err := Dial(context.Background(), addr, Config{Secret: secret, Model: m})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// Only a sluice refusal of the Hello means another build: something else
// on the port (an HTTP server, say) is a protocol error, not a version.
func TestNonSluiceServerIsNotAVersion(t *testing.T) {
	addr := fakeServer(t, func(nc net.Conn) {
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
		io.Copy(io.Discard, nc) // until the client hangs up
	})
	_, err := Dial(context.Background(), addr, Config{Secret: secret})
	if !errors.Is(err, handoff.ErrProtocol) {
		t.Fatalf("got %v, want %s", err, handoff.ErrProtocol.Code)
	}
}
