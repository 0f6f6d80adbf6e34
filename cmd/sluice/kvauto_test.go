package main

import (
	"bytes"
	"strings"
	"testing"

	"sluice/internal/testenv"
)

func TestCapForShm(t *testing.T) {
	for _, c := range []struct {
		per, room, want int64
		lowered         bool
	}{{100, 1000, 100, false}, {600, 1000, 500, true}, {600, -1, 600, false}, {1, 0, 0, true}} {
		if got, l := capForShm(c.per, c.room); got != c.want || l != c.lowered {
			t.Errorf("capForShm(%d, %d) = %d %v", c.per, c.room, got, l)
		}
	}
}

// An explicit --context that no auto-sized pool on this machine can hold
// (10^9 tokens of stories260K at 640 bytes: 640 GB a sequence) refuses,
// naming the auto sizing and what to give (I2 stays loud with auto).
func TestAutoPoolRefusesExplicitContext(t *testing.T) {
	model := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb bytes.Buffer
	code := runPreflight([]string{"--model", model, "--context", "1000000000", "--role", "decode"}, &out, &errb)
	if code != 1 || !strings.Contains(out.String(), "sized by --kv-memory auto") || !strings.Contains(out.String(), "--context 1000000000") {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
}
