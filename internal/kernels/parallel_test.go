package kernels

import (
	"testing"
	"time"
)

// TestParallelAfterPark: loops spaced further apart than spinFor find the
// workers parked, so each For must wake them through the channel (and a
// worker that parks while a loop is being published must not be lost).
// Every index must still be covered exactly once, and Close must return.
func TestParallelAfterPark(t *testing.T) {
	p := NewParallel(3)
	for it := 0; it < 40; it++ {
		n := 5 + it%17
		hits := make([]int32, n)
		p.For(n, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				hits[i]++
			}
		})
		for i, h := range hits {
			if h != 1 {
				t.Fatalf("loop %d: index %d visited %d times", it, i, h)
			}
		}
		// Alternate between gaps inside and past the poll window.
		if it%2 == 0 {
			time.Sleep(2 * spinFor)
		}
	}
	p.Close()
}
