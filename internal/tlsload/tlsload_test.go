package tlsload

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sluice/internal/tlsload/tlstest"
	"strings"
	"testing"
	"time"
)

// serveTLS serves h over s on loopback and returns the base URL.
func serveTLS(t *testing.T, s *Server, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go Serve(hs, l, s)
	t.Cleanup(func() { hs.Close() })
	return "https://" + l.Addr().String()
}

// A client that trusts the CA connects and sees the certificate; a
// plaintext HTTP request to the TLS port is refused (no API answer); a
// certificate swapped in and reloaded (SIGHUP's work) is served to new
// connections while a stream begun under the old one runs to its end.
func TestServeReloadAndPlaintextRefused(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, dir, "server", 100, false)
	s, err := New(Config{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/serial", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates == nil) // no client cert asked
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "first")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprintln(w, "second")
	})
	base := serveTLS(t, s, mux)
	serialOf := func(c *http.Client, path string) *http.Response {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := serialOf(ca.Client(nil), "/serial")
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 100 {
		t.Fatalf("serial %d, want 100", got)
	}
	resp.Body.Close()

	// A stream opened under certificate 100.
	stream := serialOf(ca.Client(nil), "/stream")
	br := bufio.NewReader(stream.Body)
	if l, _ := br.ReadString('\n'); l != "first\n" {
		t.Fatalf("stream began %q", l)
	}

	// Renew: a new certificate and key in the same files, then Reload.
	ca.Issue(t, dir, "server", 200, false)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	resp = serialOf(ca.Client(nil), "/serial")
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 200 {
		t.Fatalf("after reload a new connection got serial %d, want 200", got)
	}
	resp.Body.Close()
	close(release)
	rest, _ := io.ReadAll(br)
	if string(rest) != "second\n" || stream.TLS.PeerCertificates[0].SerialNumber.Int64() != 100 {
		t.Fatalf("the old stream ended %q under serial %d", rest, stream.TLS.PeerCertificates[0].SerialNumber.Int64())
	}
	stream.Body.Close()

	// A broken renewal keeps the certificate in use.
	tlstest.Write(t, certFile, []byte("not a certificate"))
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("reloading a broken certificate: %v, want an error naming the file", err)
	}
	resp = serialOf(ca.Client(nil), "/serial")
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 200 {
		t.Fatalf("after a failed reload the serial is %d, want 200 still", got)
	}
	resp.Body.Close()

	// Plaintext to the TLS port gets no API answer.
	plain := &http.Client{Timeout: 5 * time.Second}
	if r, err := plain.Get("http://" + strings.TrimPrefix(base, "https://") + "/serial"); err == nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusOK {
			t.Fatalf("a plaintext request was served: %d %q", r.StatusCode, body)
		}
	}
	// A client that does not trust the CA refuses the server.
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/serial"); err == nil {
		t.Fatal("a client without the CA accepted the server's certificate")
	}
}

// With a client CA the listener demands a client certificate signed by it.
func TestClientCARequired(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, dir, "server", 1, false)
	caFile := filepath.Join(dir, "ca.PEM")
	tlstest.Write(t, caFile, ca.PEM)
	s, err := New(Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	base := serveTLS(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	if _, err := ca.Client(nil).Get(base); err == nil {
		t.Fatal("served a client without a certificate")
	}
	other := tlstest.NewCA(t)
	oc, ok := other.Issue(t, dir, "stranger", 3, true)
	stranger, _ := tls.LoadX509KeyPair(oc, ok)
	if _, err := ca.Client(&stranger).Get(base); err == nil {
		t.Fatal("served a client whose certificate another CA signed")
	}
	cc, ck := ca.Issue(t, dir, "scraper", 2, true)
	cert, _ := tls.LoadX509KeyPair(cc, ck)
	resp, err := ca.Client(&cert).Get(base)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "scraper" {
		t.Fatalf("got %q", b)
	}
}

func TestHalfConfigRefused(t *testing.T) {
	for _, c := range []Config{{CertFile: "a"}, {KeyFile: "b"}, {ClientCAFile: "c"}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	if (Config{}).Enabled() {
		t.Error("the zero Config asks for TLS")
	}
}
