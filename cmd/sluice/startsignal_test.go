package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testenv"
)

// SIGTERM or Ctrl-C while a role loads its model (here the Hub holds the
// weights back, as a large download would), or after it loaded while it
// still starts (a prefill worker waiting for its decode worker): the role
// logs which phase the signal cut and exits 0 at once. Before, Go's
// default action ended it with no log line and a signal's exit status.
func TestSignalDuringStartup(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	model := testenv.Shared(t, "models/stories260K.gguf")
	heldHub(t) // never opened: the weights never come
	const hf = "hf://test-org/stories260K-GGUF"
	const bound = msgBoundLoading
	for _, c := range []struct {
		role, phase, after string
		sig                syscall.Signal
		args               []string
	}{
		{"serve", "model load", bound, syscall.SIGTERM, []string{"--model", hf, "--context", "512", "--listen", "127.0.0.1:0"}},
		{"decode", "model load", bound, syscall.SIGINT, []string{"--model", hf, "--context", "512", "--kv-pool-tokens", "2048",
			"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}},
		{"router", "model load", bound, syscall.SIGTERM, []string{"--model", hf, "--context", "256", "--listen", "127.0.0.1:0",
			"--prefill", "127.0.0.1:1", "--decode", "127.0.0.1:1"}},
		{"prefill", "start-up", "model loaded", syscall.SIGTERM, []string{"--model", model, "--context", "256", "--kv-pool-tokens", "1024",
			"--listen", "127.0.0.1:0", "--decode", "127.0.0.1:1", "--connect-timeout", "5m"}},
	} {
		t.Run(c.role, func(t *testing.T) {
			p := startProc(t, c.role, c.args...)
			for deadline := time.Now().Add(time.Minute); !strings.Contains(p.log(), c.after); {
				select {
				case <-p.done:
					t.Fatalf("exited before a %q line:\n%s", c.after, p.log())
				case <-time.After(10 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("no %q line:\n%s", c.after, p.log())
				}
			}
			if err := p.cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.done:
			case <-time.After(20 * time.Second): // the signal is the only way out of a held load
				p.cmd.Process.Kill()
				t.Fatalf("still running 20s after %v during %s:\n%s", c.sig, c.phase, p.log())
			}
			if code := p.wait(t); code != 0 {
				t.Errorf("exit code %d after %v during %s, want 0:\n%s", code, c.sig, c.phase, p.log())
			}
			want := "shutting down during " + c.phase
			if !p.waitLog(want) {
				t.Errorf("no %q line:\n%s", want, p.log())
			}
			if testing.Verbose() {
				t.Log(p.log())
			}
		})
	}
}

// SIGHUP to a role with nothing to reload (no --tls-cert, no
// --workers-file), during its model load and once it serves: it logs
// that it ignored it and keeps running; before, Go's default action ended
// it at once, with no log line and no drain (operators send SIGHUP to
// pods after renewing a certificate, docs/operations.md).
func TestSIGHUPWithNothingToReload(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	open := heldHub(t)
	p := startProc(t, "decode", "--model", "hf://test-org/stories260K-GGUF", "--context", "256", "--kv-pool-tokens", "1024",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	const bound = msgBoundLoading
	const ignored = "SIGHUP: nothing to reload, ignored"
	waitFor := func(text string, n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); strings.Count(p.log(), text) < n; {
			select {
			case <-p.done:
				t.Fatalf("exited before %d %q lines:\n%s", n, text, p.log())
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %d %q lines:\n%s", n, text, p.log())
			}
		}
	}
	waitFor(bound, 1)
	p.cmd.Process.Signal(syscall.SIGHUP) // while loading
	waitFor(ignored, 1)
	open()
	p.waitAddr(t)
	p.cmd.Process.Signal(syscall.SIGHUP) // while serving
	waitFor(ignored, 2)
	resp, err := http.Get(p.field(bound, "admin") + "/ready")
	if err != nil {
		t.Fatalf("not serving after SIGHUP: %v\n%s", err, p.log())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/ready %d after SIGHUP:\n%s", resp.StatusCode, p.log())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM:\n%s", code, p.log())
	}
}
