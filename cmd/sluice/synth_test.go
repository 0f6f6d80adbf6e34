package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sluice/internal/gguf"
	"sluice/internal/synth"
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

// Every flag of sluice synth (read from its help, so a new flag is
// covered) that a preset would not honour is refused with every preset,
// exit 2 naming it, and no file is written: never a flag silently dropped.
func TestSynthPresetRefusesFlagsItIgnores(t *testing.T) {
	vocab := filepath.Join("..", "..", "testdata", "vocab", "ggml-vocab-llama-spm.gguf")
	var help bytes.Buffer
	defer func(w io.Writer) { helpOut = w }(helpOut)
	helpOut = &help
	if rc := runSynth([]string{"--help"}); rc != 0 {
		t.Fatalf("--help exit %d", rc)
	}
	type fl struct {
		name string
		bool bool
	}
	var flags []fl
	for _, l := range strings.Split(help.String(), "\n") {
		if f := strings.Fields(l); strings.HasPrefix(l, "  -") && len(f) > 0 {
			flags = append(flags, fl{strings.TrimPrefix(f[0], "-"), len(f) == 1})
		}
	}
	if len(flags) < 20 {
		t.Fatalf("read %d flags from the help", len(flags))
	}
	presets := slices.Sorted(maps.Keys(synth.Presets))
	refused := 0
	for _, pr := range presets {
		for _, f := range flags {
			if presetFlags[f.name] {
				continue
			}
			out := filepath.Join(t.TempDir(), "m.gguf")
			args := []string{"--out", out, "--preset", pr, "--vocab-from", vocab, "--" + f.name}
			if !f.bool {
				args = append(args, "2")
			}
			var errb bytes.Buffer
			rc := withStderr(&errb, func() int { return runSynth(args) })
			if rc != 2 || !strings.Contains(errb.String(), "--"+f.name+" would be ignored") {
				t.Errorf("%v: exit %d, stderr %q", args, rc, errb.String())
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%v wrote a file", args)
			}
			refused++
		}
	}
	if refused < 20*len(presets) {
		t.Errorf("only %d refusals checked", refused)
	}
}

// withStderr runs f with os.Stderr going to w.
func withStderr(w io.Writer, f func() int) int {
	r, pw, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	old := os.Stderr
	os.Stderr = pw
	done := make(chan struct{})
	go func() { io.Copy(w, r); close(done) }()
	rc := f()
	pw.Close()
	os.Stderr = old
	<-done
	return rc
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
