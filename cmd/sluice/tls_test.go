package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/testenv"
	"sluice/internal/tlsload/tlstest"
)

// The API over TLS, end to end: the official OpenAI client, trusting a
// test CA, completes streamed and plain; a plaintext request to the port is
// refused; a certificate renewed on disk and announced with SIGHUP is what
// new connections get, while a stream begun before it runs to its end. The
// admin listener demands a client certificate from --tls-admin-client-ca.
func TestServeTLSWithOpenAIClientAndSIGHUP(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	certFile, keyFile := ca.Issue(t, dir, "server", 100, false)
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.Write(t, caFile, ca.PEM)
	model := testenv.Shared(t, "models/stories260K.gguf")
	p := startProc(t, "serve", "--model", model, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-admin-client-ca", caFile)
	addr := p.waitAddr(t)
	if !strings.Contains(p.log(), `"addr":"https://`) {
		t.Fatalf("the listening line does not say https:\n%s", p.log())
	}
	hc := ca.Client(nil)
	cl := openai.NewClient(option.WithBaseURL("https://"+addr+"/v1/"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}
	r, err := cl.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt, MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
	if err != nil || len(r.Choices) != 1 || r.Choices[0].Text == "" {
		t.Fatalf("completion over TLS: %v %+v", err, r)
	}
	want := r.Choices[0].Text

	// A long stream opened under certificate 100 ...
	st := cl.Completions.NewStreaming(ctx, openai.CompletionNewParams{Prompt: prompt, MaxTokens: openai.Int(400), Temperature: openai.Float(0)},
		option.WithJSONSet("ignore_eos", true))
	if !st.Next() {
		t.Fatalf("stream: %v", st.Err())
	}
	// ... then the certificate is renewed and SIGHUP sent.
	ca.Issue(t, dir, "server", 200, false)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !p.waitLog("TLS certificate reloaded") {
		t.Fatalf("no reload logged:\n%s", p.log())
	}
	resp, err := ca.Client(nil).Get("https://" + addr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 200 {
		t.Fatalf("after SIGHUP a new connection got certificate %d, want 200", got)
	}
	chunks := 1
	for st.Next() {
		chunks++
	}
	if err := st.Err(); err != nil || chunks < 100 {
		t.Fatalf("the stream begun before SIGHUP ended after %d chunks: %v", chunks, err)
	}

	// The same answer with the renewed certificate.
	r, err = cl.Completions.New(ctx, openai.CompletionNewParams{Prompt: prompt, MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
	if err != nil || r.Choices[0].Text != want {
		t.Fatalf("after the renewal: %v %+v, want %q", err, r, want)
	}

	// Plaintext gets no API answer.
	if pr, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/v1/models"); err == nil {
		b, _ := io.ReadAll(pr.Body)
		pr.Body.Close()
		if pr.StatusCode == http.StatusOK {
			t.Fatalf("a plaintext request was served: %s", b)
		}
	}

	// The admin listener: TLS, and a client certificate from the CA.
	admin := strings.TrimSuffix(strings.TrimPrefix(p.field("metrics listening", "addr"), "https://"), "/metrics")
	if admin == "" {
		t.Fatalf("no https admin listener logged:\n%s", p.log())
	}
	if _, err := ca.Client(nil).Get("https://" + admin + "/metrics"); err == nil {
		t.Fatal("the admin listener served a client without a certificate")
	}
	cc, ck := ca.Issue(t, dir, "scraper", 7, true)
	cert, _ := tls.LoadX509KeyPair(cc, ck)
	mr, err := ca.Client(&cert).Get("https://" + admin + "/metrics")
	if err != nil || mr.StatusCode != http.StatusOK {
		t.Fatalf("the admin listener with a client certificate: %v %v", err, mr)
	}
	mr.Body.Close()
}

// A half-given TLS configuration refuses to start rather than serve
// plaintext where TLS was meant.
func TestServeTLSHalfConfigRefused(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t)
	certFile, _ := ca.Issue(t, dir, "server", 1, false)
	p := startProc(t, "serve", "--listen", "127.0.0.1:0", "--tls-cert", certFile)
	if code := p.wait(t); code == 0 || !strings.Contains(p.log(), "--tls-key") {
		t.Fatalf("--tls-cert alone: exit %d\n%s", code, p.log())
	}
	_ = os.Remove(certFile)
}
