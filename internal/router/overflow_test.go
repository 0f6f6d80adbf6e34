package router

import (
	"fmt"
	"math"
	"testing"
)

// The router's context check never forms prompt+max_tokens: with
// max_tokens near MaxInt64 the sum wrapped negative and the request went
// on to the engine. Every such request is a 400 and never reaches it.
func TestContextCheckDoesNotWrap(t *testing.T) {
	h := newHarness(t, 64, nil)
	const n = 4 // "abc" is BOS + 3 byte tokens
	for _, mt := range []int64{math.MaxInt64, math.MaxInt64 - n, math.MaxInt64 - n + 1, math.MaxInt32 + 1} {
		status, e := post(t, h.ts.URL+"/v1/completions", "", fmt.Sprintf(`{"prompt":"abc","max_tokens":%d}`, mt))
		if status != 400 {
			t.Fatalf("max_tokens %d: status %d (%+v), want 400", mt, status, e)
		}
	}
	if s := h.eng.submitted.Load(); s != 0 {
		t.Fatalf("the engine saw %d of the refused requests", s)
	}
}
