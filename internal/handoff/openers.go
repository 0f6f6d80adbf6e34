package handoff

import (
	"runtime"
	"slices"
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
// Measured (docs/benchmarks.md, crowding with --encrypt, 2 vCPUs, under
// other processes' load): not resolved either way.

// OpenParallelism is how many goroutines of the process may open sealed
// page records at once (Writes.Open), over all its calls: one per core the
// process may use but one, at least one.
func OpenParallelism() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// openers is the process's count of goroutines opening records.
var openers openLimit

// openLimit hands out openers: a call waits for its first one (queue)
// while every opener is taken; helpers are what is free once it has it.
// Freed openers go to the waiting calls, one each, fairly across
// tenants: first the call whose tenant holds the fewest openers now, then
// whose tenant got its last opener longest ago, then the oldest. (In
// arrival order alone, one tenant's burst of long sealed prompts held
// every co-tenant's handoff behind all of it.)
type openLimit struct {
	mu    sync.Mutex
	busy  int        // openers taken, helpers included
	queue []openWait // calls waiting for their first opener, oldest first
	// tenants: each tenant whose calls hold or wait for openers;
	// grants counts the first openers handed out.
	tenants map[string]*openTenant
	grants  uint64
}

// openWait is a call waiting for its first opener.
type openWait struct {
	tenant string
	ch     chan struct{}
}

// openTenant is a tenant's calls at the openers: openers held, calls
// waiting, and when (grants) one of its calls last got its first.
type openTenant struct {
	held, waiting int
	last          uint64
}

func (l *openLimit) tenant(name string) *openTenant {
	if l.tenants == nil {
		l.tenants = map[string]*openTenant{}
	}
	ot := l.tenants[name]
	if ot == nil {
		ot = &openTenant{}
		l.tenants[name] = ot
	}
	return ot
}

// grant counts a call's first opener for its tenant ot.
func (l *openLimit) grant(ot *openTenant) {
	l.busy++
	ot.held++
	l.grants++
	ot.last = l.grants
}

// take blocks until the caller (a call of tenant) has an opener and
// returns how many it got: 1 and up to want-1 helpers, busy never over
// limit (OpenParallelism).
func (l *openLimit) take(tenant string, want int) int {
	limit := OpenParallelism()
	l.mu.Lock()
	ot := l.tenant(tenant)
	// A waiting call keeps its place even if GOMAXPROCS grew meanwhile.
	if l.busy >= limit || len(l.queue) > 0 {
		ch := make(chan struct{})
		l.queue = append(l.queue, openWait{tenant, ch})
		ot.waiting++
		l.mu.Unlock()
		<-ch // give counted this opener (grant) for us
		l.mu.Lock()
	} else {
		l.grant(ot)
	}
	extra := max(0, min(want-1, limit-l.busy))
	l.busy += extra
	ot.held += extra
	l.mu.Unlock()
	return 1 + extra
}

// give returns the n openers a call of tenant held and hands them to the
// calls waiting (next).
func (l *openLimit) give(tenant string, n int) {
	limit := OpenParallelism()
	l.mu.Lock()
	l.busy -= n
	ot := l.tenants[tenant]
	ot.held -= n
	if ot.held == 0 && ot.waiting == 0 {
		delete(l.tenants, tenant)
	}
	for l.busy < limit && len(l.queue) > 0 {
		i := l.next()
		w := l.queue[i]
		l.queue = slices.Delete(l.queue, i, i+1)
		wt := l.tenants[w.tenant]
		wt.waiting--
		l.grant(wt)
		close(w.ch)
	}
	l.mu.Unlock()
}

// next is the index in queue of the call to serve: of the tenant holding
// the fewest openers, then served longest ago, then the oldest call.
func (l *openLimit) next() int {
	best, bt := 0, l.tenants[l.queue[0].tenant]
	for i, w := range l.queue[1:] {
		t := l.tenants[w.tenant]
		if t.held < bt.held || t.held == bt.held && t.last < bt.last {
			best, bt = i+1, t
		}
	}
	return best
}
