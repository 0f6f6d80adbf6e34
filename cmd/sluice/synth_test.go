package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// TestSynthDenseArchsThenInspect: synth writes qwen3 (head dim 32 against
// embd/heads 16) and gemma3 (sliding window) files; inspect names their
// hyperparameters as sluice loads them, in text and JSON, and says why a
// file is refused.
func TestSynthDenseArchsThenInspect(t *testing.T) {
	dir := t.TempDir()
	inspect := func(args ...string) string {
		t.Helper()
		r, w, _ := os.Pipe()
		old := os.Stdout
		os.Stdout = w
		rc := runInspect(args)
		w.Close()
		os.Stdout = old
		out, _ := io.ReadAll(r)
		if rc != 0 {
			t.Fatalf("inspect %v: exit %d", args, rc)
		}
		return string(out)
	}
	q3 := filepath.Join(dir, "q3.gguf")
	if rc := runSynth([]string{"--out", q3, "--arch", "qwen3", "--layers", "2", "--embd", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--ff", "128"}); rc != 0 {
		t.Fatalf("synth qwen3 exit %d", rc)
	}
	g3 := filepath.Join(dir, "g3.gguf")
	if rc := runSynth([]string{"--out", g3, "--arch", "gemma3", "--layers", "6", "--embd", "64", "--heads", "2", "--kv-heads", "1", "--head-dim", "48", "--ff", "128", "--sliding-window", "16", "--spm-vocab", "--type", "f16"}); rc != 0 {
		t.Fatalf("synth gemma3 exit %d", rc)
	}
	for _, c := range []struct{ file, want string }{
		{q3, "Model: qwen3: vocab 514, n_embd 64, layers 2, heads 4 (kv 2, dim 32), ff 128, rope neox base 1e+06 dims 32, eps 1e-06, ctx 2048, q/k norm\n"},
		{g3, "Model: gemma3: vocab 613, n_embd 64, layers 6, heads 2 (kv 1, dim 48), ff 128, rope neox base 1e+06 dims 48, eps 1e-06, ctx 2048, q/k norm, sliding window 16 (every 6th layer global, sliding rope base 10000)\n"},
	} {
		if out := inspect("--model", c.file); !strings.HasSuffix(out, c.want) {
			t.Errorf("inspect %s ends %q, want %q", c.file, out[max(0, len(out)-len(c.want)):], c.want)
		}
	}
	var doc struct {
		Model struct {
			Config struct {
				Arch          string
				HeadDim       int
				SlidingWindow int
			} `json:"config"`
		} `json:"model"`
	}
	if err := json.Unmarshal([]byte(inspect("--json", "--model", g3)), &doc); err != nil {
		t.Fatal(err)
	}
	if c := doc.Model.Config; c.Arch != "gemma3" || c.HeadDim != 48 || c.SlidingWindow != 16 {
		t.Errorf("inspect --json model = %+v", c)
	}
}
