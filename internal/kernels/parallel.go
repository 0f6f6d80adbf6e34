package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel is a persistent pool of worker goroutines that split loops over
// [0, n). Chunk boundaries depend only on n and the thread count; which
// goroutine runs a chunk does not matter to callers whose chunks compute
// disjoint outputs (MatMul's rows), so results never depend on scheduling.
//
// The caller of For works too and waits only for chunks that some worker
// has claimed, never for a worker to wake up: on a busy machine a parked
// worker can take tens of microseconds to be scheduled, and by then the
// caller may have done every chunk itself. When a worker's chunk outlasts
// the caller's by much more than a chunk (its thread preempted by another
// process), the caller stops spinning and blocks until it finishes
// (callerSpin). Workers poll for the next loop
// for spinFor before parking: on an idle 2-vCPU machine parking at once
// left the worker joining each of a decode step's ~40 loops late (15M q8_0
// decode, 2 threads: ~1500 tok/s parking at once, ~2050 polling). On a
// machine whose other core is busy, the poll costs a little of its time.
//
// A nil *Parallel runs everything on the caller's goroutine.
type Parallel struct {
	threads int
	mu      sync.Mutex // one For at a time uses the workers
	wake    []chan struct{}
	parked  []atomic.Bool // worker i is (about to be) blocked on wake[i]
	exited  sync.WaitGroup

	// claim packs gen (24 bits, wrapping), the loop's chunk count and the
	// next chunk index (20 bits each). A worker takes a chunk only by a CAS
	// on the word it read, so a late riser never runs a newer loop's chunk
	// with an older loop's function, and reads nothing else before it owns
	// a chunk.
	claim atomic.Uint64
	done  atomic.Int64 // chunks of the current loop finished

	// A For that stops waiting for its loop's last chunks sets waiting;
	// the goroutine that finishes the last chunk and clears it sends on
	// finished.
	waiting  atomic.Bool
	finished chan struct{}

	// The current loop, written by For before claim is published and not
	// changed until every chunk is done.
	fn     func(lo, hi int)
	n      int
	chunk  int
	gen    uint32
	closed bool

	// locked: the workers run locked to threads of the compute class
	// (ComputeClass at NewParallel, not normal). A locked goroutine
	// readied can run only on its own thread, so the polls below do not
	// yield their P to it: each Gosched of a locked goroutine would be a
	// hand-off of the P between two OS threads.
	locked bool
}

// NewParallel starts threads-1 workers (the caller of For is the last
// thread). threads <= 0 means runtime.GOMAXPROCS(0), i.e. every core.
// The workers run in the compute class (SetComputeClass) in effect now.
func NewParallel(threads int) *Parallel {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	p := &Parallel{threads: threads, parked: make([]atomic.Bool, max(threads-1, 0)), finished: make(chan struct{}, 1),
		locked: ComputeClass() != ClassNormal}
	for i := 1; i < threads; i++ {
		ch := make(chan struct{}, 1)
		p.wake = append(p.wake, ch)
		p.exited.Add(1)
		go p.worker(ch, &p.parked[i-1])
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

// Close stops the workers and waits for them to exit. For after Close runs
// on the caller alone.
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
	p.exited.Wait()
}

// spinFor is how long a worker polls for the next loop before parking. A
// forward step issues its loops a few microseconds apart (norms, RoPE and
// K/V writes run between them on the caller), and waking a parked worker
// through the kernel takes longer than that gap: a worker that parks after
// every loop joins each next one late, and the caller does most chunks
// alone. The poll ends well before a step's longer serial parts, so an
// idle pool still sleeps.
const spinFor = 50 * time.Microsecond

// spinCheck is how many polls pass between a polling worker's Gosched
// and look at the clock. A poll is one PAUSE (~17 ns on our machines),
// so a worker yields its P about every microsecond: often enough that a
// goroutine For readied on the caller's P (a parked worker, which then
// runs on the caller's thread when the caller waits) gets a thread soon,
// and rarely enough that the scheduler is not most of the poll.
const spinCheck = 64

func (p *Parallel) worker(ch chan struct{}, parked *atomic.Bool) {
	defer p.exited.Done()
	if p.locked {
		LockComputeThread()
	}
	last := claimGen(p.claim.Load())
	for {
		// Poll for a newer loop than the last one this worker saw.
		deadline := time.Time{}
		for i := 0; ; i++ {
			if g := claimGen(p.claim.Load()); g != last {
				last = g
				p.run(g)
				deadline, i = time.Time{}, 0
				continue
			}
			spinPause()
			if i%spinCheck != spinCheck-1 {
				continue
			}
			// The poll holds one of the process's Ps: let other runnable
			// goroutines (another engine's pool, the HTTP server) have it.
			if !p.locked {
				runtime.Gosched()
			}
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(spinFor)
			} else if now.After(deadline) {
				break
			}
		}
		// Park. For clears parked before it sends, and checks it after
		// publishing a loop; re-checking claim after setting parked closes
		// the window where a loop was published in between.
		parked.Store(true)
		if g := claimGen(p.claim.Load()); g != last {
			if parked.CompareAndSwap(true, false) {
				continue // no wake-up was sent
			}
			// For took the flag and sent (or will send) a wake-up: consume
			// it below, then run the loop.
		}
		if _, ok := <-ch; !ok {
			return
		}
	}
}

const claimBits = 20

func claimGen(c uint64) uint32 { return uint32(c >> (2 * claimBits)) }

// run claims and runs chunks of loop gen until none is left, and returns
// how many it ran.
func (p *Parallel) run(gen uint32) (ran int) {
	for {
		c := p.claim.Load()
		next, total := int(c&(1<<claimBits-1)), int(c>>claimBits&(1<<claimBits-1))
		if claimGen(c) != gen || next >= total {
			return ran
		}
		if !p.claim.CompareAndSwap(c, c+1) {
			continue
		}
		// Owning an unfinished chunk of gen keeps For from starting the
		// next loop, so the fields below are this loop's.
		lo := next * p.chunk
		p.fn(lo, min(lo+p.chunk, p.n))
		ran++
		if p.done.Add(1) == int64(total) && p.waiting.CompareAndSwap(true, false) {
			p.finished <- struct{}{} // buffered; For takes it before the next loop
		}
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
	chunks := min(n, chunksPerThread*p.Threads())
	p.ForGrain(n, (n+chunks-1)/chunks, fn)
}

// ForGrain is For with chunks of grain indices (the last may be shorter),
// claimed one at a time: for loops whose indices are each worth a claim
// (a few microseconds of work), finer chunks than For's let the faster
// core take more and leave less idle time at the end of the loop.
func (p *Parallel) ForGrain(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	if p == nil || p.threads == 1 || n <= grain || !p.mu.TryLock() {
		fn(0, n)
		return
	}
	defer p.mu.Unlock()
	if p.closed {
		fn(0, n)
		return
	}
	// The claim word holds the chunk count in claimBits bits.
	grain = max(grain, ceilDiv(n, 1<<claimBits-1))
	p.fn, p.n, p.chunk = fn, n, grain
	total := (n + p.chunk - 1) / p.chunk
	p.gen = (p.gen + 1) & (1<<(64-2*claimBits) - 1)
	p.done.Store(0)
	p.claim.Store(uint64(p.gen)<<(2*claimBits) | uint64(total)<<claimBits) // publishes the loop
	for i, ch := range p.wake {
		// Only a parked worker needs the (costly) kernel wake-up; a
		// polling one sees claim change by itself.
		if p.parked[i].CompareAndSwap(true, false) {
			ch <- struct{}{} // buffered, and only this For sends on it
		}
	}
	t0 := time.Now()
	if ran := p.run(p.gen); p.done.Load() != int64(total) {
		// A running worker started its last chunk at most one chunk
		// before the caller ran out, and the slower vCPU takes up to
		// 1.7x as long: past twice the caller's mean chunk, the worker's
		// thread is most likely preempted by another process.
		spin := callerSpin
		if ran > 0 {
			spin += 2 * time.Since(t0) / time.Duration(ran)
		}
		p.wait(int64(total), spin)
	}
	p.fn = nil
}

// callerSpin (plus twice the caller's mean chunk) is how long For polls
// for chunks that workers still run before it blocks until the last one
// finishes. Spinning on, the caller would hold its core while the worker
// waits for a core; blocked, it leaves its core to the worker (or to the
// neighbour) and the goroutine finishing the loop wakes it.
const callerSpin = 200 * time.Microsecond

func (p *Parallel) wait(total int64, spin time.Duration) {
	var deadline time.Time
	for i := 1; p.done.Load() != total; i++ {
		spinPause()
		if i%16 != 0 {
			continue
		}
		// A worker woken by this For may still sit in this P's run
		// queue: let it run here (a locked worker runs only on its own
		// thread).
		if !p.locked {
			runtime.Gosched()
		}
		if i%64 != 0 {
			continue
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(spin)
		} else if now.After(deadline) {
			p.waiting.Store(true)
			if p.done.Load() == total && p.waiting.CompareAndSwap(true, false) {
				return // finished before the flag was seen: nothing will be sent
			}
			<-p.finished
			return
		}
	}
}
