package main

import (
	"errors"
	"math"
	"testing"

	"sluice/internal/gguf"
)

// sluice generate refuses a max_tokens whose sum with the prompt wraps an
// int (before, prompt+max_tokens wrapped negative, passed the context
// check and sized a pool from the wrapped count).
func TestGenerateMaxTokensDoesNotWrap(t *testing.T) {
	lm, err := openModel("", gguf.MemoryAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	const text = "hello"
	n := len(lm.tok.Encode(text, true, false))
	for _, mt := range []int{math.MaxInt64, math.MaxInt64 - n, math.MaxInt64 - n + 1, math.MaxInt32 + 1} {
		_, err := generate(lm, genOptions{Prompt: text, MaxTokens: mt, Threads: 1})
		var ge *genError
		if !errors.As(err, &ge) || ge.Code != "context_length_exceeded" {
			t.Fatalf("max_tokens %d: %v, want context_length_exceeded", mt, err)
		}
	}
}
