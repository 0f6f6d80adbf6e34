package sched

import (
	"fmt"
	"testing"
	"time"
)

// pool is a toy page pool for driving a Core end to end: an admission
// reserves cost pages when they are free, else the pool refuses it for
// room (EvNoRoom); the KV quota is left out (it caps nobody for a request
// larger than its tenant's share, which is the case these tests build).
type pool struct {
	t       *testing.T
	c       *Core
	free    int
	cost    map[ID]int
	tenant  map[ID]string
	running map[ID]bool
	started []ID // admission order
	now     time.Time
}

func newPool(t *testing.T, cfg Config, pages int) *pool {
	return &pool{t: t, c: New(cfg), free: pages, cost: map[ID]int{}, tenant: map[ID]string{},
		running: map[ID]bool{}, now: t0}
}

// step feeds ev and carries out the actions (and their reports) until the
// core has nothing more to do.
func (p *pool) step(ev Event) {
	ev.Now = p.now
	acts := p.c.Step(ev)
	for n := 0; len(acts) > 0; n++ {
		if n > 10000 {
			p.t.Fatalf("the core keeps asking for admissions the pool refuses (%v)", ev.Kind)
		}
		a := acts[0]
		acts = acts[1:]
		if a.Kind != ActAdmit {
			continue
		}
		n := p.cost[a.ID]
		if n <= p.free {
			p.free -= n
			p.running[a.ID] = true
			p.started = append(p.started, a.ID)
			acts = append(acts, p.c.Step(Event{Kind: EvReserved, ID: a.ID, Now: p.now})...)
		} else {
			acts = append(acts, p.c.Step(Event{Kind: EvNoRoom, ID: a.ID, Now: p.now})...)
		}
	}
}

func (p *pool) arrive(id ID, tenant string, cost int) {
	p.cost[id], p.tenant[id] = cost, tenant
	p.step(Event{Kind: EvArrive, ID: id, Tenant: tenant, Cost: cost})
}

func (p *pool) done(id ID) {
	if !p.running[id] {
		p.t.Fatalf("done of %d, not running", id)
	}
	delete(p.running, id)
	p.free += p.cost[id]
	p.step(Event{Kind: EvDone, ID: id})
}

// A request refused for room is not overtaken by another tenant for ever.
//
// Tenant a runs a steady client of 3 requests in flight (3 pages each, a
// 10-page pool); tenant b sends one request of 8 pages (it fits the empty
// pool, I2; it is larger than b's half of the pool, so the KV quota caps
// nobody for it). Every time one of a's requests ends, b's is tried first
// and refused (4 pages free), and a's next request, arriving just after,
// takes the pages. With head of line per tenant and nothing more, b waits
// until its queue timeout however long a keeps going. The bound it must
// get instead: once the requests running when it was refused have ended,
// nothing of another tenant overtakes it, so it starts after at most those
// and the ones that overtook it meanwhile.
func TestRefusedForRoomNotOvertakenForEver(t *testing.T) {
	p := newPool(t, Config{MaxRunning: 16, Quantum: 10, RetryInterval: time.Hour, QueueTimeout: time.Hour}, 10)
	next := ID(1)
	var aRunning []ID
	for range 3 {
		p.arrive(next, "a", 3)
		aRunning = append(aRunning, next)
		next++
	}
	const b = ID(1000)
	p.arrive(b, "b", 8)
	if p.running[b] {
		t.Fatalf("b started in a full pool")
	}
	for round := 0; round < 50 && !p.running[b]; round++ {
		p.now = p.now.Add(time.Millisecond)
		if len(aRunning) == 0 {
			break // a's latest waits (behind b): the pool drained
		}
		// The oldest of a's running requests ends; a's client sends its next.
		id := aRunning[0]
		aRunning = aRunning[1:]
		p.done(id)
		p.arrive(next, "a", 3)
		if p.running[next] {
			aRunning = append(aRunning, next)
		}
		next++
	}
	if !p.running[b] {
		t.Fatalf("b's request refused for room was overtaken by a for good: a started %d requests after it was refused (admissions %v)",
			len(p.started)-3, fmt.Sprint(p.started))
	}
	// How long it waited: the three a requests running when it was
	// refused, and at most the ones that overtook it meanwhile.
	if n := len(p.started) - 1 - 3; n > 3 {
		t.Fatalf("b's request started after %d of a's later requests, want at most 3 (admissions %v)", n, p.started)
	}
}

// The count of the requests a refused request waits for goes on while it
// is being tried again: a request that ends during that attempt (the
// router's Reserve is a call to another process) is not waited for once
// the attempt is refused, or the request is never found overtaken.
func TestRefusedCountsEndsDuringItsRetry(t *testing.T) {
	c := New(Config{MaxRunning: 8, Quantum: 100, RetryInterval: time.Hour, QueueTimeout: time.Hour})
	want(t, c.Step(arrive(1, "a", 5, at(0))), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)}))
	want(t, c.Step(arrive(10, "b", 90, at(1))), Action{Kind: ActAdmit, ID: 10})
	// 10 is refused while 1 runs; a's 2 overtakes it.
	c.Step(arrive(2, "a", 5, at(2)))
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 10, Now: at(2)}), Action{Kind: ActAdmit, ID: 2})
	want(t, c.Step(Event{Kind: EvReserved, ID: 2, Now: at(3)}))
	// 2 ends: 10 is tried first; 1 ends while it is.
	want(t, c.Step(Event{Kind: EvDone, ID: 2, Now: at(4)}), Action{Kind: ActAdmit, ID: 10})
	want(t, c.Step(Event{Kind: EvDone, ID: 1, Now: at(5)}))
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 10, Now: at(6)}))
	// Every request running at its refusal has ended and it still waits:
	// nothing of a overtakes it any more.
	want(t, c.Step(arrive(3, "a", 5, at(7))))
	want(t, c.Step(Event{Kind: EvTick, Now: at(8)}))
	if s := c.Stats(); !s.Paused || s.Waiting != 2 {
		t.Fatalf("stats %+v", s)
	}
	// Pages come back: 10 first, then a's 3.
	want(t, c.Step(Event{Kind: EvFreed, Now: at(9)}), Action{Kind: ActAdmit, ID: 10})
	want(t, c.Step(Event{Kind: EvReserved, ID: 10, Now: at(10)}), Action{Kind: ActAdmit, ID: 3})
}

// A request refused with nothing running here (its pool is held by what
// the core does not see: another router's requests) is overtaken until
// the first request that overtook it ends, not at once (issue 28: another
// tenant's request still reaches the pool) and not for ever.
func TestRefusedWithNothingRunningWaitsForTheFirstOvertaker(t *testing.T) {
	c := New(Config{MaxRunning: 8, Quantum: 100, RetryInterval: time.Hour, QueueTimeout: time.Hour})
	want(t, c.Step(arrive(1, "a", 90, at(0))), Action{Kind: ActAdmit, ID: 1})
	c.Step(arrive(10, "b", 5, at(1)))
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 1, Now: at(1)}), Action{Kind: ActAdmit, ID: 10})
	c.Step(arrive(11, "b", 5, at(2)))
	want(t, c.Step(Event{Kind: EvReserved, ID: 10, Now: at(2)}), Action{Kind: ActAdmit, ID: 11})
	want(t, c.Step(Event{Kind: EvReserved, ID: 11, Now: at(3)}))
	// 10, the first to overtake 1, ends: 1 is tried first and refused
	// again; b's 12 no longer overtakes it (11 overtook it too, so it is
	// not waited for).
	want(t, c.Step(Event{Kind: EvDone, ID: 10, Now: at(4)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 1, Now: at(5)}))
	want(t, c.Step(arrive(12, "b", 5, at(6))))
	want(t, c.Step(Event{Kind: EvDone, ID: 11, Now: at(7)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(8)}), Action{Kind: ActAdmit, ID: 12})
}
