package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// I13 across processes (the reproduction of issue 10: workers on one model,
// the router on another answered HTTP 200 with the wrong model's text):
// a router whose model differs from its decode worker's refuses to start,
// naming both models and both fingerprints under the model_mismatch code,
// and so does a prefill worker; a router of the same model starts.
func TestRouterOfAnotherModelRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	// Decode runs the built-in default model; the other model is a
	// synthetic qwen2 file of the same KV geometry, so only the
	// fingerprint can tell them apart.
	other := filepath.Join(t.TempDir(), "qwen2.gguf")
	if rc := runSynth([]string{"--out", other, "--arch", "qwen2", "--type", "f32", "--seed", "7", "--name", "qwen2-synthetic"}); rc != 0 {
		t.Fatalf("synth exit %d", rc)
	}
	pool := []string{"--context", "128", "--kv-pool-tokens", "256"}
	dec := startProc(t, "decode", append(pool, "--listen", "127.0.0.1:0")...)
	daddr := dec.waitAddr(t)
	decFP := dec.field("model loaded", "fingerprint")
	if decFP == "" {
		t.Fatalf("decode did not log its fingerprint:\n%s", dec.log())
	}

	rt := startProc(t, "router", "--model", other, "--context", "128", "--listen", "127.0.0.1:0",
		"--prefill", "127.0.0.1:1", "--decode", daddr, "--connect-timeout", "20s")
	if code := rt.wait(t); code == 0 {
		t.Fatalf("a router of another model started:\n%s", rt.log())
	}
	if l := rt.log(); !strings.Contains(l, "refusing to start: the decode worker runs another model") {
		t.Errorf("router log does not say why it stops:\n%s", l)
	}
	rtFP := rt.field("model loaded", "fingerprint")
	if rtFP == "" || rtFP == decFP {
		t.Fatalf("router fingerprint %q, decode's %q", rtFP, decFP)
	}
	// Decode logs the refused connection on its own time.
	dec.waitLog("model_mismatch")
	for _, p := range []*proc{rt, dec} {
		l := p.log()
		for _, want := range []string{"model_mismatch", "qwen2", "sluice-default-synthetic", rtFP[strings.Index(rtFP, "["):], decFP[strings.Index(decFP, "["):]} {
			if !strings.Contains(l, want) {
				t.Errorf("%s log lacks %q:\n%s", p.name, want, l)
			}
		}
	}
	// A prefill worker of the other model is refused by decode too.
	pre := startProc(t, "prefill", "--model", other, "--context", "128", "--kv-pool-tokens", "256", "--listen", "127.0.0.1:0", "--decode", daddr)
	if code := pre.wait(t); code == 0 || !strings.Contains(pre.log(), "model_mismatch") {
		t.Fatalf("prefill of another model (exit %d):\n%s", code, pre.log())
	}
	// The same model: the router reaches decode and gets past the probe
	// (then gives up on the absent prefill worker).
	rt = startProc(t, "router", "--context", "128", "--listen", "127.0.0.1:0",
		"--prefill", "127.0.0.1:1", "--decode", daddr, "--connect-timeout", "2s")
	rt.wait(t)
	if l := rt.log(); strings.Contains(l, "model_mismatch") || !strings.Contains(l, "cannot reach the prefill worker") {
		t.Fatalf("router of the same model:\n%s", l)
	}
}
