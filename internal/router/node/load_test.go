package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/gguf"
)

// TestLoadModelRefusalEndsWithCode: a file the model loader refuses (here
// a vocabulary-only GGUF, no weights) fails the start with the refusal's
// stable code from docs/models.md, as a missing file ends with
// [model_not_found].
func TestLoadModelRefusalEndsWithCode(t *testing.T) {
	_, err := LoadModel("../../../testdata/vocab/ggml-vocab-qwen2.gguf", gguf.MemoryMap)
	if err == nil {
		t.Fatal("a vocabulary-only file loaded as a model")
	}
	if msg := err.Error(); !strings.HasSuffix(msg, "[model_missing_tensor]") || !strings.Contains(msg, "token_embd.weight") {
		t.Errorf("error %q: want the missing tensor named and [model_missing_tensor] last", msg)
	}
}

// A file gguf refuses is named once: "model X: gguf: X: bad magic" said
// the path twice.
func TestLoadModelNamesTheFileOnce(t *testing.T) {
	p := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(p, []byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadModel(p, gguf.MemoryMap)
	if err == nil || strings.Count(err.Error(), p) != 1 || !strings.HasSuffix(err.Error(), "[gguf_bad_magic]") {
		t.Errorf("error %v: want the path once and [gguf_bad_magic] last", err)
	}
}
