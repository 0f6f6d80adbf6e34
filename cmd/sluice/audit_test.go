package main

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// tinyOpenAI answers just enough of the API for the audit's setup (model
// list, key check, calibration) and records every request's headers.
type tinyOpenAI struct {
	mu      sync.Mutex
	headers []http.Header
}

func (s *tinyOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"data":[{"id":"m","context_length":256}]}`)
	case "/v1/completions", "/v1/chat/completions":
		var req struct {
			Prompt string `json:"prompt"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		fmt.Fprintf(w, `{"choices":[{"text":"x","message":{"content":"x"}}],"usage":{"prompt_tokens":%d}}`, len(strings.Fields(req.Prompt))+1)
	default:
		http.NotFound(w, r)
	}
}

func TestAuditHelpExitsZero(t *testing.T) {
	r := auditCLI("--help")
	if r.code != 0 || !strings.Contains(r.stdout, "INCONCLUSIVE") {
		t.Fatalf("--help: exit %d, usage %q", r.code, r.stderr)
	}
	if r := auditCLI("--no-such-flag"); r.code != 2 {
		t.Fatalf("bad flag: exit %d", r.code)
	}
}

// TLS: an unknown CA is refused; --ca-cert and --insecure connect (the run
// then stops at the budget check, after the setup requests went through).
// --header reaches the server on every request, preflight's too.
func TestAuditTLSAndHeaders(t *testing.T) {
	h := &tinyOpenAI{}
	srv := httptest.NewTLSServer(h)
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--url", srv.URL + "/v1", "--quiet", "--max-requests", "5", "--header", "X-Route: blue"}
	if r := auditCLI(base...); r.code != 2 || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("unknown CA: exit %d %q", r.code, r.stderr)
	}
	for _, extra := range [][]string{{"--ca-cert", ca}, {"--insecure"}} {
		r := auditCLI(append(base, extra...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "budget_too_small") {
			t.Fatalf("%v: exit %d %q; want to connect and stop at the budget check", extra, r.code, r.stderr)
		}
	}
	if r := preflightCLI("--endpoint", srv.URL, "--ca-cert", ca, "--header", "X-Route: blue"); r.code != 0 || !strings.Contains(r.stdout, "advertised context") {
		t.Fatalf("preflight over TLS: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.headers) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, hd := range h.headers {
		if hd.Get("X-Route") != "blue" {
			t.Fatalf("a request without --header: %v", hd)
		}
	}
	if r := auditCLI("--url", srv.URL, "--header", "novalue"); r.code != 2 || !strings.Contains(r.stderr, "want K:V") {
		t.Fatalf("bad --header: exit %d %q", r.code, r.stderr)
	}
}

// preflight --endpoint: nothing exposed is INCONCLUSIVE (exit 2), a 401 is
// an error naming --api-key (exit 2), a /v1 suffix finds the same server.
func TestPreflightRemoteExitCodes(t *testing.T) {
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
			return
		}
		http.NotFound(w, r)
	}))
	defer bare.Close()
	if r := preflightCLI("--endpoint", bare.URL); r.code != 2 || !strings.Contains(r.stdout, "INCONCLUSIVE") {
		t.Errorf("nothing exposed: exit %d\n%s", r.code, r.stdout)
	}
	locked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer locked.Close()
	if r := preflightCLI("--endpoint", locked.URL+"/v1"); r.code != 2 || !strings.Contains(r.stderr, "HTTP 401") || !strings.Contains(r.stderr, "pass --api-key") {
		t.Errorf("401: exit %d %q", r.code, r.stderr)
	}
	ok := httptest.NewServer(&tinyOpenAI{})
	defer ok.Close()
	if r := preflightCLI("--endpoint", ok.URL+"/v1/"); r.code != 0 || !strings.Contains(r.stdout, "256") {
		t.Errorf("/v1 suffix: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// cliRun is one in-process run of a subcommand: exit code and both streams.
type cliRun struct {
	code           int
	stdout, stderr string
}

func runCLI(f func([]string, *strings.Builder, *strings.Builder) int, args ...string) cliRun {
	var out, errb strings.Builder
	code := f(args, &out, &errb)
	return cliRun{code, out.String(), errb.String()}
}

func auditCLI(args ...string) cliRun {
	return runCLI(func(a []string, o, e *strings.Builder) int { return runAudit(a, o, e) }, args...)
}

func preflightCLI(args ...string) cliRun {
	return runCLI(func(a []string, o, e *strings.Builder) int { return runPreflight(a, o, e) }, args...)
}
