package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The router's start line logs the scorer weights under their flags'
// names, not as a Go struct dump ("{DecodeFreePages:2 ...}").
func TestWeightsLogReadably(t *testing.T) {
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, nil)).Info("router ready", "weights", DefaultWeights)
	got := b.String()
	want := "weights.decode_free_pages=2 weights.decode_queue=1 weights.prefill_queue=1 weights.prefix_affinity=2"
	if !strings.Contains(got, want) || strings.Contains(got, "{") {
		t.Errorf("logged %q, want %q", got, want)
	}
}
