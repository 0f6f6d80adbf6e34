package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Parallel is a persistent pool of worker goroutines that split loops over
// [0, n). Chunk boundaries depend only on n and the thread count; which
// goroutine runs a chunk does not matter to callers whose chunks compute
// disjoint outputs (MatMul's rows), so results never depend on scheduling.
//
// Workers park on a channel between loops. A spin-then-park variant was
// measured (BenchmarkParallelFor, t2) on the shared 2-vCPU machine under
// load ~15: 4.5-11 µs per loop against 1.9-2.9 µs for parking at once, since
// a spinner burns the time slice its peer needs; revisit on idle hosts.
//
// A nil *Parallel runs everything on the caller's goroutine.
type Parallel struct {
	threads int
	mu      sync.Mutex // one For at a time uses the workers
	wake    []chan struct{}
	wg      sync.WaitGroup

	// The current loop, set by For before waking the workers.
	fn     func(lo, hi int)
	n      int
	chunk  int
	next   atomic.Int64
	closed bool
}

// NewParallel starts threads-1 workers (the caller of For is the last
// thread). threads <= 0 means runtime.GOMAXPROCS(0), i.e. every core.
func NewParallel(threads int) *Parallel {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Parallel{threads: threads}
	for i := 1; i < threads; i++ {
		ch := make(chan struct{})
		p.wake = append(p.wake, ch)
		go p.worker(ch)
	}
	return p
}

// Threads is the number of goroutines a For uses (1 for a nil pool).
func (p *Parallel) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// Close stops the workers. For after Close runs on the caller alone.
func (p *Parallel) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, ch := range p.wake {
		close(ch)
	}
}

func (p *Parallel) worker(ch chan struct{}) {
	for range ch {
		p.run()
		p.wg.Done()
	}
}

func (p *Parallel) run() {
	for {
		lo := int(p.next.Add(1)-1) * p.chunk
		if lo >= p.n {
			return
		}
		p.fn(lo, min(lo+p.chunk, p.n))
	}
}

// chunksPerThread > 1 lets the faster core take more chunks: the two vCPUs
// of our machines differ in speed by up to 1.7x.
const chunksPerThread = 4

// For calls fn on disjoint ranges covering [0, n) and returns when all have
// finished. fn runs concurrently on up to Threads() goroutines. A For issued
// while the pool is busy (from another goroutine, or nested inside fn) runs
// on its caller alone instead of waiting.
func (p *Parallel) For(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if p == nil || p.threads == 1 || n == 1 || !p.mu.TryLock() {
		fn(0, n)
		return
	}
	defer p.mu.Unlock()
	if p.closed {
		fn(0, n)
		return
	}
	chunks := min(n, chunksPerThread*p.threads)
	p.fn, p.n, p.chunk = fn, n, (n+chunks-1)/chunks
	p.next.Store(0)
	p.wg.Add(len(p.wake))
	for _, ch := range p.wake {
		ch <- struct{}{}
	}
	p.run()
	p.wg.Wait()
	p.fn = nil
}
