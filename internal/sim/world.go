package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// epoch is the virtual clock's zero. Nothing in a run reads the wall clock:
// every component that needs time (handoff.Receiver, kv.Pool.Expire) gets
// it as an argument from the scheduler.
var epoch = time.Unix(1_000_000_000, 0).UTC()

// event is one scheduled step. Events run one at a time in (at, seq) order;
// seq breaks ties in scheduling order, so the whole run is a function of the
// seed alone.
type event struct {
	at   time.Duration
	seq  uint64
	what string
	fn   func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

// sched is the single-threaded discrete-event scheduler: a virtual clock, a
// seeded random source and a trace. It is the only source of time and
// randomness in a run.
type sched struct {
	now time.Duration
	q   eventHeap
	seq uint64
	rng *rand.Rand
	// crng is the prefix-cache faults' own stream (faults.go); mrng the
	// heartbeat, hang and migration choices' (so adding either left every
	// other choice of a seed as it was); prng the prefill batch's (its
	// chunk, step budget and step times, prefill.go).
	crng   *rand.Rand
	mrng   *rand.Rand
	prng   *rand.Rand
	trace  []string
	events int
}

func newSched(seed uint64) *sched {
	return &sched{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		crng: rand.New(rand.NewPCG(seed^0xc2b2ae3d27d4eb4f, seed)),
		mrng: rand.New(rand.NewPCG(seed^0x165667b19e3779f9, seed^0x27d4eb2f165667c5)),
		prng: rand.New(rand.NewPCG(seed^0x85ebca6b0c2b2ae3, seed^0x5bd1e9955bd1e995))}
}

// clock is the virtual wall time handed to the real components.
func (s *sched) clock() time.Time { return epoch.Add(s.now) }

// after schedules fn d from now.
func (s *sched) after(d time.Duration, what string, fn func()) {
	if d < 0 {
		d = 0
	}
	s.seq++
	heap.Push(&s.q, &event{at: s.now + d, seq: s.seq, what: what, fn: fn})
}

// run executes events until the queue is empty or the clock passes limit.
func (s *sched) run(limit time.Duration) {
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*event)
		if e.at > limit {
			return
		}
		s.now = e.at
		s.events++
		e.fn()
	}
}

func (s *sched) logf(format string, args ...any) {
	s.trace = append(s.trace, fmt.Sprintf("%10.3fms  ", float64(s.now)/1e6)+fmt.Sprintf(format, args...))
}

// chance is true with probability p.
func (s *sched) chance(p float64) bool { return p > 0 && s.rng.Float64() < p }

// cchance is chance on the prefix-cache faults' stream.
func (s *sched) cchance(p float64) bool { return p > 0 && s.crng.Float64() < p }

// mchance is chance on the heartbeat and migration stream.
func (s *sched) mchance(p float64) bool { return p > 0 && s.mrng.Float64() < p }

// mbetween is between on the heartbeat and migration stream.
func (s *sched) mbetween(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.mrng.Int64N(int64(hi-lo)+1))
}

// between is a uniform duration in [lo, hi].
func (s *sched) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)+1))
}

// pick is a uniform index in [0, n).
func (s *sched) pick(n int) int { return s.rng.IntN(n) }

// Trace renders the run's events, one per line.
func (r *Result) TraceText() string { return strings.Join(r.Trace, "\n") }
