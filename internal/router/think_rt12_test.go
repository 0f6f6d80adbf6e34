package router

import (
	"runtime"
	"strings"
	"testing"
)

// TestReasoningHeldSpaceLinear: a reasoning that ends in a long run of
// whitespace tokens (a tenant's logit_bias can make a model write one up
// to max_tokens) is held until more reasoning follows; holding it must
// cost memory linear in its length, not a copy of all of it per token
// (held += t: 4,000 pieces of 64 spaces made 512 MB of copies).
func TestReasoningHeldSpaceLinear(t *testing.T) {
	const pieces, size = 4000, 64
	sp := strings.Repeat(" ", size)
	var r reasoningText
	if out := r.push("a"); out != "a" {
		t.Fatalf("first push sent %q", out)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range pieces {
		if out := r.push(sp); out != "" {
			t.Fatalf("whitespace went out before more reasoning: %d bytes", len(out))
		}
	}
	runtime.ReadMemStats(&m1)
	if got, bound := m1.TotalAlloc-m0.TotalAlloc, uint64(16*pieces*size); got > bound {
		t.Errorf("holding %d bytes of whitespace allocated %d bytes (bound %d): quadratic", pieces*size, got, bound)
	}
	if out := r.push("b"); out != sp+strings.Repeat(sp, pieces-1)+"b" {
		t.Fatalf("the held whitespace did not go out with the next reasoning: %d bytes", len(out))
	}
	// The end drops what is held.
	r.push("  ")
	if r.heldLen() != 2 {
		t.Fatalf("held %d bytes, want 2", r.heldLen())
	}
}

// TestThinkingFirstTokenWriteOnlyWhenSent: first_token_write counts a
// streamed first token whose text went out at once; a thinking model's
// first token that is the reasoning's leading white space (dropped, as
// llama-server drops it) or a lead's white space after </think> was
// never written, so it is not counted. A first token of reasoning text
// is (it goes out as delta.reasoning_content).
func TestThinkingFirstTokenWriteOnlyWhenSent(t *testing.T) {
	h := thinkHarness(t, "")
	count := func() uint64 {
		var n uint64
		for _, p := range h.srv.metrics.phases.FirstTokenPhases() {
			if p.Phase == PhaseFirstTokenWrite {
				n += p.Count
			}
		}
		return n
	}
	// The prompt ends with <think>: the output starts inside the
	// reasoning, with "\n" (dropped).
	sseChunks(t, h, chatBody("\nI reason.<think>", `,"stream":true`))
	// The prompt ends with </think>: the output starts at the lead, " ".
	sseChunks(t, h, chatBody(" answer</think>", `,"stream":true`))
	if n := count(); n != 0 {
		t.Fatalf("first_token_write recorded %d times for first tokens whose text never went out", n)
	}
	// Reasoning text first: written at once.
	sseChunks(t, h, chatBody("I reason.<think>", `,"stream":true`))
	if n := count(); n != 1 {
		t.Fatalf("first_token_write recorded %d times, want 1 (a first token of reasoning text)", n)
	}
}
