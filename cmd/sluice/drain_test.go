package main

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// SIGTERM with a stream that outlasts --drain-timeout: the API port keeps
// answering meanwhile (/ready 503, a new request 503 draining, not a
// refused connection); at the timeout the stream ends with a drain_timeout
// error event and data: [DONE]; the log says it was cut by the drain (not
// a client disconnect); the process exits 1.
func TestDrainTimeoutCutsStreamAndExitsNonZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	p := startProc(t, "serve", "--listen", "127.0.0.1:0", "--kv-memory", "8MiB", "--threads", "1", "--drain-timeout", "1s")
	addr, rd := longStream(t, p)
	p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.waitLog("shutting down") {
		t.Fatalf("no drain in the log:\n%s", p.log())
	}
	ready, err := http.Get("http://" + addr + "/ready")
	if err != nil {
		t.Fatalf("/ready while draining: %v (the API port must stay open)", err)
	}
	ready.Body.Close()
	late, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":2}`))
	if err != nil {
		t.Fatalf("new request while draining: %v", err)
	}
	lateBody, _ := io.ReadAll(late.Body)
	late.Body.Close()
	if ready.StatusCode != 503 || late.StatusCode != 503 || !strings.Contains(string(lateBody), `"code":"draining"`) {
		t.Fatalf("while draining: /ready %d, new request %d %s", ready.StatusCode, late.StatusCode, lateBody)
	}
	wantCutAndExit1(t, p, rd)
	l := p.log()
	if !strings.Contains(l, "request cut by drain") || !strings.Contains(l, "requests were cut by the drain timeout") || strings.Contains(l, "client_disconnected") {
		t.Fatalf("the log does not say the stream was cut by the drain:\n%s", l)
	}
}

func tail(s string) string {
	if len(s) > 400 {
		return "..." + s[len(s)-400:]
	}
	return s
}

// A decode worker told to stop while a sequence still holds its pages
// waits --drain-timeout, then closes and exits 1 (it cut the sequence),
// not 0.
func TestWorkerDrainTimeoutExitsNonZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts three processes")
	}
	dec := startProc(t, "decode", "--listen", "127.0.0.1:0", "--kv-memory", "8MiB", "--threads", "1", "--drain-timeout", "300ms")
	daddr := dec.waitAddr(t)
	pre := startProc(t, "prefill", "--listen", "127.0.0.1:0", "--kv-memory", "8MiB", "--threads", "1", "--decode", daddr)
	paddr := pre.waitAddr(t)
	rt := startProc(t, "router", "--listen", "127.0.0.1:0", "--prefill", paddr, "--decode", daddr)
	raddr := rt.waitAddr(t)
	waitStatus(t, "http://"+raddr+"/ready", 200, "router ready")
	// 8 choices of 2000 tokens: seconds of decoding on one thread.
	resp, err := http.Post("http://"+raddr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hello","max_tokens":2000,"ignore_eos":true,"n":8,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event %q %v\n%s", line, err, rt.log())
	}
	dec.cmd.Process.Signal(syscall.SIGTERM)
	if code := dec.wait(t); code != 1 {
		t.Fatalf("decode exited %d after cutting sequences at its drain timeout, want 1:\n%s", code, dec.log())
	}
	if !strings.Contains(dec.log(), "drain timed out; closing with pages in use") {
		t.Fatalf("decode log:\n%s", dec.log())
	}
}

// A second SIGINT during the drain cuts what still runs at once, as
// llama-server's second Ctrl-C does, each stream with its error event and
// [DONE], and the process exits 1; before, it was swallowed and the drain
// ran to --drain-timeout.
func TestSecondSignalCutsDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a process")
	}
	p := startProc(t, "serve", "--listen", "127.0.0.1:0", "--kv-memory", "8MiB", "--threads", "1", "--drain-timeout", "10m")
	_, rd := longStream(t, p)
	p.cmd.Process.Signal(syscall.SIGINT)
	if !p.waitLog("shutting down") {
		t.Fatalf("no drain in the log:\n%s", p.log())
	}
	p.cmd.Process.Signal(syscall.SIGINT)
	wantCutAndExit1(t, p, rd)
	if !strings.Contains(p.log(), "second signal: cutting the requests still running now") {
		t.Fatalf("the log does not say the second signal cut the drain:\n%s", p.log())
	}
}

// longStream waits for p's API address and starts a stream that outlasts
// any drain the tests wait for (8 choices of 2000 tokens: seconds of
// decoding on one thread), returning the address and the stream after its
// first event.
func longStream(t *testing.T, p *proc) (string, *bufio.Reader) {
	t.Helper()
	addr := p.waitAddr(t)
	// 8 choices of 2000 tokens: seconds of decoding on one thread.
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hello","max_tokens":2000,"ignore_eos":true,"n":8,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event %q %v", line, err)
	}
	return addr, rd
}

// wantCutAndExit1 reads the rest of a stream the drain cut: it must end
// with a drain_timeout error event then data: [DONE], and the process
// must exit 1.
func wantCutAndExit1(t *testing.T, p *proc, rd *bufio.Reader) {
	t.Helper()
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("reading the stream: %v", err)
	}
	events := strings.Split(strings.TrimSpace(string(rest)), "\n\n")
	n := len(events)
	if n < 2 || !strings.Contains(events[n-2], `"code":"drain_timeout"`) || events[n-1] != "data: [DONE]" {
		t.Fatalf("cut stream ends %q, want a drain_timeout error event then data: [DONE]", tail(string(rest)))
	}
	if code := p.wait(t); code != 1 {
		t.Fatalf("exit %d after cutting a stream, want 1:\n%s", code, p.log())
	}
}
