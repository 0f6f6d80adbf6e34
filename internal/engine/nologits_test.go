package engine

import (
	"slices"
	"sync"
	"testing"

	"sluice/internal/kv"
)

// logitsRuntime records every step's sequences: tokens, position,
// NoLogits and whether the forwarder returned logits.
type logitsRuntime struct {
	Runtime
	mu    sync.Mutex
	steps []loggedStep
}

type loggedStep struct {
	n, pos        int
	noLogits, got bool
}

func (l *logitsRuntime) NewForwarder(threads int) Forwarder {
	return hookForwarder(l.Runtime, threads, func(_ int, steps []Step, next func([]Step) []StepResult) []StepResult {
		res := next(steps)
		l.mu.Lock()
		for i, s := range steps {
			l.steps = append(l.steps, loggedStep{n: len(s.Tokens), pos: s.Pos, noLogits: s.NoLogits, got: res[i].Logits != nil})
		}
		l.mu.Unlock()
		return res
	})
}

// TestPromptChunksSkipLogits: a prompt's chunks before its last ask the
// model for no logits (nobody reads them: the output projection of a
// 1-row pass over the vocabulary was ~0.9 ms of a 64-token chunk's step
// on bench-15M-q8_0) and get none; its last chunk and every decode token
// ask for and get them, and the output is the one the engine gives with
// one chunk per prompt.
func TestPromptChunksSkipLogits(t *testing.T) {
	rt := &logitsRuntime{Runtime: defaultRuntime(t)}
	cfg := Config{Model: rt, Context: 256, PoolPages: 64, PageSize: 16, Order: kv.LIFO, ChunkTokens: 32, StepTokens: 32}
	e, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, e)
	prompt := make([]int32, 83) // chunks of 32, 32 and 19
	for i := range prompt {
		prompt[i] = int32((i*37 + 1) % rt.Vocab())
	}
	got := run1(t, e, &Request{ID: "r", Tenant: "t", Prompt: prompt, MaxTokens: 4})

	whole := cfg
	whole.Model, whole.ChunkTokens, whole.StepTokens = rt.Runtime, 128, 128
	w, err := NewColocated(whole)
	if err != nil {
		t.Fatal(err)
	}
	defer closeWithin(t, w)
	if want := run1(t, w, &Request{ID: "r", Tenant: "t", Prompt: prompt, MaxTokens: 4}); !slices.Equal(got.tokens, want.tokens) {
		t.Fatalf("chunked prompt generated %v, in one chunk %v", got.tokens, want.tokens)
	}

	rt.mu.Lock()
	defer rt.mu.Unlock()
	chunks, skipped := 0, 0
	for _, s := range rt.steps {
		last := s.pos+s.n >= len(prompt) // the prompt's last chunk, or a decode token
		if s.noLogits == last || s.got == s.noLogits {
			t.Errorf("step of %d tokens at %d: NoLogits %v, logits returned %v (prompt of %d)", s.n, s.pos, s.noLogits, s.got, len(prompt))
		}
		if s.pos < len(prompt) {
			chunks++
		}
		if s.noLogits {
			skipped++
		}
	}
	if chunks != 3 || skipped != 2 {
		t.Errorf("%d prompt chunks, %d without logits; want 3 and 2", chunks, skipped)
	}
}
