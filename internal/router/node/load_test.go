package node

import (
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
