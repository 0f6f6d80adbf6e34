package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"sluice/internal/gguf"
)

// TestSynthThenInspect writes a small model with the synth command and
// reads it back with inspect --json.
func TestSynthThenInspect(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.gguf")
	if rc := runSynth([]string{"--out", p, "--layers", "1", "--embd", "32", "--heads", "2", "--kv-heads", "1", "--ff", "64", "--type", "f16", "--seed", "3"}); rc != 0 {
		t.Fatalf("synth exit %d", rc)
	}
	if rc := runSynth([]string{"--out", p + "2", "--type", "q8_0", "--embd", "48", "--heads", "2", "--kv-heads", "1"}); rc == 0 {
		t.Error("synth accepted q8_0 with 48-wide rows")
	}
	if _, err := os.Stat(p + "2"); err == nil {
		t.Error("failed synth left a file behind")
	}
	r, w, _ := os.Pipe()
	old := os.Stdout
	os.Stdout = w
	rc := runInspect([]string{"--json", "--model", p})
	w.Close()
	os.Stdout = old
	out, _ := io.ReadAll(r)
	if rc != 0 {
		t.Fatalf("inspect exit %d", rc)
	}
	var doc struct {
		Tensors []struct {
			Name  string   `json:"name"`
			Type  string   `json:"type"`
			Shape []uint64 `json:"shape"`
		} `json:"tensors"`
		Totals struct {
			Tensors int `json:"tensors"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// 3 global tensors + 9 per block.
	if doc.Totals.Tensors != 12 || len(doc.Tensors) != 12 {
		t.Fatalf("%d tensors", doc.Totals.Tensors)
	}
	for _, tt := range doc.Tensors {
		if tt.Name == "blk.0.attn_k.weight" && (tt.Type != "f16" || tt.Shape[0] != 32 || tt.Shape[1] != 16) {
			t.Errorf("attn_k = %+v", tt)
		}
	}
}

// TestSynthPresetContext: --context applies to a preset (a long-context
// bench needs the bench shape with a 16k context); before, a preset
// silently kept its 2048.
func TestSynthPresetContext(t *testing.T) {
	vocab := filepath.Join("..", "..", "testdata", "vocab", "ggml-vocab-llama-spm.gguf")
	p := filepath.Join(t.TempDir(), "b15.gguf")
	if rc := runSynth([]string{"--out", p, "--preset", "bench-15M", "--type", "f16", "--context", "16384", "--vocab-from", vocab}); rc != 0 {
		t.Fatalf("synth exit %d", rc)
	}
	f, err := gguf.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, ok := f.Uint("llama.context_length"); !ok || n != 16384 {
		t.Errorf("llama.context_length = %d, %v; want 16384", n, ok)
	}
}
