package kernels

import (
	"sync/atomic"
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

// TestParallelSlowChunks: For must return only after every chunk ran,
// also when workers' chunks outlast the caller's by milliseconds (the
// caller then waits for them instead of finishing the loop). Chunk 0 is
// the caller's (it claims first); the others are slow.
func TestParallelSlowChunks(t *testing.T) {
	for _, threads := range []int{2, 3, 4} {
		p := NewParallel(threads)
		for it := 0; it < 20; it++ {
			n := 2 + it%5
			var hits [8]atomic.Int32
			p.For(n, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					if i > 0 {
						time.Sleep(2 * time.Millisecond)
					}
					hits[i].Add(1)
				}
			})
			for i := 0; i < n; i++ {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("threads=%d loop %d: index %d visited %d times when For returned", threads, it, i, h)
				}
			}
		}
		p.Close()
	}
}

// TestParallelCloseWhileAsleep: Close must wake parked workers and wait
// for them to exit; a For after it runs on the caller.
func TestParallelCloseWhileAsleep(t *testing.T) {
	p := NewParallel(4)
	p.For(8, func(lo, hi int) {})
	deadline := time.Now().Add(10 * time.Second)
	for asleep := 0; asleep != 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 3 workers parked after 10 s idle", asleep)
		}
		time.Sleep(time.Millisecond)
		asleep = 0
		for i := range p.parked {
			if p.parked[i].Load() {
				asleep++
			}
		}
	}
	p.Close()
	ran := 0
	p.For(5, func(lo, hi int) { ran += hi - lo })
	if ran != 5 {
		t.Fatalf("For after Close covered %d of 5", ran)
	}
}
