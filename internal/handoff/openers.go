package handoff

import (
	"runtime"
	"sync"
)

// Opening a call's sealed page records (Writes.Open) is the decode side's
// heaviest handoff work: AES-GCM over every byte of a prompt's KV. It runs
// on the cores that also run the decode worker's shared step, whose every
// pass makes the next token of every tenant's sequence; and the handoff's
// goroutines are ordinary threads, which under --compute-priority yield
// preempt the compute threads the moment they wake. Were one tenant's
// burst of long encrypted prompts opened on every core at once, the step
// would stall for it and every co-tenant's tokens with it (DESIGN.md:
// tenants cannot crowd each other out). So the process opens records on at
// most OpenParallelism goroutines at once, counted over every call, every
// connection and every Receiver: one core fewer than it may use (at least
// one), the core the step keeps whatever the handoffs send.
// Measured (docs/benchmarks.md, crowding with --encrypt, 2 vCPUs, load
// 6-12): b's inter-token p50 flooded/alone 1.44x with opens on both
// cores, 1.17x on one.

// OpenParallelism is how many goroutines of the process may open sealed
// page records at once (Writes.Open), over all its calls: one per core the
// process may use but one, at least one.
func OpenParallelism() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// openers is the process's count of goroutines opening records.
var openers openLimit

// openLimit hands out openers: a call waits for its first one in arrival
// order (queue); helpers are what is free once it has it (a call waits
// only while every opener is taken, and give hands the freed ones to the
// waiting calls first, one each).
type openLimit struct {
	mu    sync.Mutex
	busy  int             // openers taken, helpers included
	queue []chan struct{} // calls waiting for their first opener, oldest first
}

// take blocks until the caller has an opener and returns how many it got:
// 1 and up to want-1 helpers, busy never over limit (OpenParallelism).
func (l *openLimit) take(want int) int {
	limit := OpenParallelism()
	l.mu.Lock()
	// A waiting call keeps its place even if GOMAXPROCS grew meanwhile.
	if l.busy >= limit || len(l.queue) > 0 {
		ch := make(chan struct{})
		l.queue = append(l.queue, ch)
		l.mu.Unlock()
		<-ch // give counted this opener in busy for us
		l.mu.Lock()
	} else {
		l.busy++
	}
	extra := max(0, min(want-1, limit-l.busy))
	l.busy += extra
	l.mu.Unlock()
	return 1 + extra
}

// give returns n openers and hands them to the calls waiting, oldest
// first.
func (l *openLimit) give(n int) {
	limit := OpenParallelism()
	l.mu.Lock()
	l.busy -= n
	for l.busy < limit && len(l.queue) > 0 {
		ch := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.busy++
		close(ch)
	}
	l.mu.Unlock()
}
