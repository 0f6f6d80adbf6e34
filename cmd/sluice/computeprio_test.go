package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"sluice/internal/kernels"
)

// --compute-priority: the roles that compute take it (default yield), the
// router does not; a value other than normal, yield, low or idle is refused at
// start with a sentence naming the flag.
func TestComputePriorityFlag(t *testing.T) {
	for _, cmd := range []string{"serve", "prefill", "decode"} {
		_, out, errb := runBin(t, cmd, "--help")
		out += errb
		i := strings.Index(out, "-compute-priority")
		if i < 0 || !strings.Contains(out[i:], `(default "yield")`) {
			t.Errorf("sluice %s --help: no --compute-priority defaulting to yield", cmd)
		}
	}
	if _, out, errb := runBin(t, "router", "--help"); strings.Contains(out+errb, "-compute-priority") {
		t.Error("sluice router --help offers --compute-priority (the router runs no forward pass)")
	}
	code, _, errb := runBin(t, "serve", "--compute-priority", "realtime")
	if code != 2 || !strings.Contains(errb, `--compute-priority "realtime": use normal, yield, low or idle`) {
		t.Errorf("serve --compute-priority realtime: exit %d, stderr %q", code, errb)
	}
}

// The class in use is logged at start: the one asked for, or a warning
// that compute stays normal.
func TestComputePriorityLogged(t *testing.T) {
	defer kernels.SetComputeClass(kernels.ClassNormal)
	var b bytes.Buffer
	o := roleOpts{logFormat: "text", logLevel: "info", computePrio: "idle"}
	if _, err := o.logger(); err != nil {
		t.Fatal(err)
	}
	o.lowerCompute(slog.New(slog.NewTextHandler(&b, nil)), true)
	want := "priority=idle"
	if kernels.ComputeClass() != kernels.ClassIdle {
		want = "not applied" // an OS that refuses it
	}
	if !strings.Contains(b.String(), want) {
		t.Fatalf("log %q does not say %q", b.String(), want)
	}
}
