package engine

import (
	"testing"
)

// A step that ends a prompt puts that prompt's first token on its stream
// before the step's decoding sequences' tokens, though the decoding
// sequences are older (first in batch order): each token wakes its
// client's handler, and the first token's handler must not wait behind
// the others' (batch.run). Outputs are the same in either order.
func TestFirstTokensEmittedFirst(t *testing.T) {
	r := newQuotaRig(t, 64)
	var order []string
	var decoding []*seq
	for range 3 {
		q := r.add("a", 4, 40)
		q.emit = func(o outcome) {
			if !o.done && o.err == nil {
				order = append(order, "a")
			}
		}
		decoding = append(decoding, q)
	}
	for range 10 {
		r.s.turn()
	}
	for _, q := range decoding {
		if !q.decoded || q.emit == nil {
			t.Fatalf("a's sequences are not all decoding after 10 steps: decoded %v, generated %d, live %v", q.decoded, q.generated, q.emit != nil)
		}
	}
	b := r.add("b", 4, 4)
	first := -1
	b.emit = func(o outcome) {
		if !o.done && o.err == nil && first < 0 {
			first = len(order)
			order = append(order, "b")
		}
	}
	for i := 0; first < 0 && i < 10; i++ {
		order = order[:0]
		r.s.turn()
	}
	if first != 0 || len(order) != 1+len(decoding) {
		t.Fatalf("the step that ended b's prompt emitted %v: want b's first token first, then a's %d", order, len(decoding))
	}
}
