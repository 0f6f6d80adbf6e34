package main

import (
	"encoding/json"
	"io"
	"os"
	"slices"
	"testing"

	"sluice/internal/testenv"
)

// runTokenizeOut runs the tokenize command and returns its standard output.
func runTokenizeOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	rc := runTokenize(args)
	os.Stdout = old
	w.Close()
	return string(<-done), rc
}

// TestTokenizeCommandJSON: the prompt ids llama.cpp reports in
// ../shared/reference/reference.json (stories260K adds BOS; llama-tokenize on
// the Qwen2 vocab adds none).
func TestTokenizeCommandJSON(t *testing.T) {
	cases := []struct {
		file, text string
		extra      []string
		want       []int32
	}{
		{"models/stories260K.gguf", "Once upon a time", nil, []int32{1, 403, 407, 261, 378}},
		{"vocab/ggml-vocab-qwen2.gguf", "Once upon a time", nil, []int32{12522, 5193, 264, 882}},
		{"vocab/ggml-vocab-llama-bpe.gguf", "Once upon a time", nil, []int32{128000, 12805, 5304, 264, 892}},
		{"vocab/ggml-vocab-llama-bpe.gguf", "Once upon a time", []string{"--no-special"}, []int32{12805, 5304, 264, 892}},
	}
	for _, c := range cases {
		p := testenv.Shared(t, c.file)
		out, rc := runTokenizeOut(t, append([]string{"--model", p, "--text", c.text, "--json"}, c.extra...)...)
		if rc != 0 {
			t.Fatalf("%s: exit %d", c.file, rc)
		}
		var got struct {
			TokenIDs []int32 `json:"token_ids"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s: output %q is not one JSON object: %v", c.file, out, err)
		}
		if !slices.Equal(got.TokenIDs, c.want) {
			t.Errorf("%s %v: got %v want %v", c.file, c.extra, got.TokenIDs, c.want)
		}
	}
	if _, rc := runTokenizeOut(t, "--model", "/nonexistent.gguf", "--text", "x"); rc != 1 {
		t.Errorf("missing model: exit %d, want 1", rc)
	}
	if _, rc := runTokenizeOut(t, "--text", "x"); rc != 2 {
		t.Errorf("no --model: exit %d, want 2", rc)
	}
}
