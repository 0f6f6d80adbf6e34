package sched

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func arrive(id ID, tenant string, cost int, now time.Time) Event {
	return Event{Kind: EvArrive, ID: id, Tenant: tenant, Cost: cost, Now: now}
}

func admits(acts []Action) []ID {
	var ids []ID
	for _, a := range acts {
		if a.Kind == ActAdmit {
			ids = append(ids, a.ID)
		}
	}
	return ids
}

func want(t *testing.T, got []Action, w ...Action) {
	t.Helper()
	if !slices.Equal(got, w) {
		t.Fatalf("actions %v, want %v", got, w)
	}
}

func TestOneAdmissionAtATimeAndMaxRunning(t *testing.T) {
	c := New(Config{MaxRunning: 2, Quantum: 100})
	want(t, c.Step(arrive(1, "a", 10, at(0))), Action{Kind: ActAdmit, ID: 1})
	// An admission is outstanding: the next waits for its report.
	want(t, c.Step(arrive(2, "a", 10, at(0))))
	want(t, c.Step(arrive(3, "a", 10, at(0))))
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(1)}), Action{Kind: ActAdmit, ID: 2})
	// Two running: 3 waits for a Done.
	want(t, c.Step(Event{Kind: EvReserved, ID: 2, Now: at(1)}))
	if s := c.Stats(); s.Running != 2 || s.Waiting != 1 {
		t.Fatalf("stats %+v", s)
	}
	want(t, c.Step(Event{Kind: EvDone, ID: 1, Now: at(2)}), Action{Kind: ActAdmit, ID: 3})
}

func TestQueueFullAndDraining(t *testing.T) {
	c := New(Config{MaxQueue: 2, MaxRunning: 1, Quantum: 100})
	c.Step(arrive(1, "a", 10, at(0))) // admitting: not counted against the queue
	c.Step(arrive(2, "a", 10, at(0)))
	c.Step(arrive(3, "b", 10, at(0)))
	want(t, c.Step(arrive(4, "c", 10, at(0))), Action{Kind: ActReject, ID: 4, Reason: ReasonQueueFull})
	want(t, c.Step(Event{Kind: EvDrain, Now: at(1)}))
	want(t, c.Step(arrive(5, "c", 10, at(1))), Action{Kind: ActReject, ID: 5, Reason: ReasonDraining})
	// Draining still serves what waits.
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(2)}))
	want(t, c.Step(Event{Kind: EvDone, ID: 1, Now: at(2)}), Action{Kind: ActAdmit, ID: 2})
	// Shutdown ends the rest.
	want(t, c.Step(Event{Kind: EvShutdown, Now: at(3)}), Action{Kind: ActReject, ID: 3, Reason: ReasonShutdown})
	want(t, c.Step(Event{Kind: EvDropped, ID: 2, Now: at(3)}))
	if s := c.Stats(); s.Waiting != 0 || s.Running != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTimeoutAndCancelLeaveAtOnce(t *testing.T) {
	c := New(Config{MaxRunning: 1, Quantum: 100, QueueTimeout: 100 * time.Millisecond})
	c.Step(arrive(1, "a", 10, at(0)))
	c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)})
	c.Step(arrive(2, "a", 10, at(10)))
	c.Step(arrive(3, "b", 10, at(20)))
	c.Step(arrive(4, "b", 10, at(30)))
	if d, ok := c.Deadline(); !ok || !d.Equal(at(110)) {
		t.Fatalf("deadline %v %v, want %v", d, ok, at(110))
	}
	want(t, c.Step(Event{Kind: EvCancel, ID: 3, Now: at(40)}))
	want(t, c.Step(Event{Kind: EvTick, Now: at(109)}))
	want(t, c.Step(Event{Kind: EvTick, Now: at(110)}), Action{Kind: ActReject, ID: 2, Reason: ReasonTimeout})
	// The cancelled request is never admitted: 4 is next.
	want(t, c.Step(Event{Kind: EvDone, ID: 1, Now: at(120)}), Action{Kind: ActAdmit, ID: 4})
	// A cancel of a request not waiting changes nothing.
	want(t, c.Step(Event{Kind: EvCancel, ID: 4, Now: at(121)}))
	want(t, c.Step(Event{Kind: EvReserved, ID: 4, Now: at(121)}))
	if s := c.Stats(); s.Running != 1 || s.Waiting != 0 || s.Rejected[ReasonTimeout] != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestNoRoomRetriesTheSameRequestFirst(t *testing.T) {
	c := New(Config{MaxRunning: 8, Quantum: 100, RetryInterval: 50 * time.Millisecond})
	c.Step(arrive(1, "a", 10, at(0)))
	c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)})
	want(t, c.Step(arrive(2, "a", 90, at(1))), Action{Kind: ActAdmit, ID: 2})
	c.Step(arrive(3, "a", 5, at(1)))
	// The pool cannot hold 2 now: its tenant pauses; 3 (small, same
	// tenant) does not overtake it.
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 2, Now: at(2)}))
	want(t, c.Step(Event{Kind: EvTick, Now: at(3)}))
	want(t, c.Step(Event{Kind: EvDone, ID: 1, Now: at(4)}), Action{Kind: ActAdmit, ID: 2})
	// Refused again with nothing running: the retry pause wakes it.
	c.Step(Event{Kind: EvNoRoom, ID: 2, Now: at(5)})
	want(t, c.Step(Event{Kind: EvTick, Now: at(54)}))
	if d, _ := c.Deadline(); !d.Equal(at(55)) {
		t.Fatalf("deadline %v, want the retry at %v", d, at(55))
	}
	want(t, c.Step(Event{Kind: EvTick, Now: at(55)}), Action{Kind: ActAdmit, ID: 2})
	want(t, c.Step(Event{Kind: EvReserved, ID: 2, Now: at(56)}), Action{Kind: ActAdmit, ID: 3})
}

// Issue 28: head of line per tenant. A request of one tenant refused for
// room holds back that tenant's later requests, never another tenant's:
// they are admitted while it waits (the pool may hold them, or take back
// the first tenant's over-share pages for them). When pages come back,
// the refused requests are tried first, oldest refusal first; with every
// waiting tenant refused, nothing is admitted until then.
func TestNoRoomHoldsOnlyItsTenant(t *testing.T) {
	c := New(Config{MaxRunning: 8, Quantum: 100, RetryInterval: 50 * time.Millisecond})
	c.Step(arrive(1, "a", 10, at(0)))
	c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)})
	want(t, c.Step(arrive(2, "a", 90, at(1))), Action{Kind: ActAdmit, ID: 2})
	c.Step(arrive(3, "a", 5, at(1)))
	c.Step(arrive(4, "b", 5, at(1)))
	// 2 is refused: b's 4 goes (a's 3 waits behind 2).
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 2, Now: at(2)}), Action{Kind: ActAdmit, ID: 4})
	c.Step(arrive(5, "b", 5, at(3)))
	c.Step(arrive(6, "c", 5, at(3)))
	// 4 is refused too: c's 6 goes; b's 5 waits behind 4.
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 4, Now: at(4)}), Action{Kind: ActAdmit, ID: 6})
	// 6 is refused: every waiting tenant waits for pages.
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 6, Now: at(5)}))
	c.Step(arrive(7, "b", 5, at(6)))
	want(t, c.Step(Event{Kind: EvTick, Now: at(6)}))
	if s := c.Stats(); !s.Paused || s.Waiting != 6 {
		t.Fatalf("stats %+v", s)
	}
	// Pages come back: the refused first, oldest refusal first.
	want(t, c.Step(Event{Kind: EvDone, ID: 1, Now: at(7)}), Action{Kind: ActAdmit, ID: 2})
	want(t, c.Step(Event{Kind: EvReserved, ID: 2, Now: at(8)}), Action{Kind: ActAdmit, ID: 4})
	// Refused again: it keeps its place ahead of 6, and 6 ahead of the
	// tenants' queues, once pages come back.
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 4, Now: at(9)}), Action{Kind: ActAdmit, ID: 3})
	want(t, c.Step(Event{Kind: EvReserved, ID: 3, Now: at(10)}))
	want(t, c.Step(Event{Kind: EvDone, ID: 2, Now: at(11)}), Action{Kind: ActAdmit, ID: 4})
	want(t, c.Step(Event{Kind: EvReserved, ID: 4, Now: at(12)}), Action{Kind: ActAdmit, ID: 6})
	want(t, c.Step(Event{Kind: EvReserved, ID: 6, Now: at(13)}), Action{Kind: ActAdmit, ID: 5})
	want(t, c.Step(Event{Kind: EvReserved, ID: 5, Now: at(14)}), Action{Kind: ActAdmit, ID: 7})
	// A refused request whose client leaves is out of the retries.
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 7, Now: at(15)}))
	want(t, c.Step(Event{Kind: EvCancel, ID: 7, Now: at(16)}))
	if s := c.Stats(); s.Waiting != 0 || s.Running != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// A preempted request is admitted again before anything that waits, even
// a request refused for room, and never times out; its client can still
// leave.
func TestPreemptedGoesFirstAndDoesNotTimeOut(t *testing.T) {
	c := New(Config{MaxRunning: 2, Quantum: 100, QueueTimeout: 10 * time.Millisecond})
	c.Step(arrive(1, "a", 10, at(0)))
	c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)})
	c.Step(arrive(2, "b", 10, at(0)))
	c.Step(Event{Kind: EvNoRoom, ID: 2, Now: at(0)}) // 2 waits first in line
	c.Step(arrive(3, "b", 10, at(0)))                // behind 2, its tenant's oldest
	want(t, c.Step(Event{Kind: EvPreempted, ID: 1, Tenant: "a", Now: at(1)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 1, Now: at(2)}))
	// 2 and 3 time out; the preempted request does not.
	want(t, c.Step(Event{Kind: EvTick, Now: at(500)}), Action{Kind: ActReject, ID: 2, Reason: ReasonTimeout},
		Action{Kind: ActReject, ID: 3, Reason: ReasonTimeout}, Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(501)}))
	c.Step(Event{Kind: EvPreempted, ID: 1, Tenant: "a", Now: at(502)})
	c.Step(Event{Kind: EvDropped, ID: 1, Now: at(502)}) // admitted at once; the client left meanwhile
	if s := c.Stats(); s.Waiting != 0 || s.Running != 0 {
		t.Fatalf("stats %+v", s)
	}
	// Cancel of a waiting preempted request.
	c.Step(arrive(4, "d", 10, at(600)))
	c.Step(Event{Kind: EvReserved, ID: 4, Now: at(600)})
	want(t, c.Step(arrive(5, "d", 10, at(600))), Action{Kind: ActAdmit, ID: 5})
	want(t, c.Step(Event{Kind: EvPreempted, ID: 4, Tenant: "d", Now: at(601)})) // 5's admission is outstanding: 4 waits
	want(t, c.Step(Event{Kind: EvCancel, ID: 4, Now: at(602)}))
	want(t, c.Step(Event{Kind: EvReserved, ID: 5, Now: at(603)}))
	want(t, c.Step(Event{Kind: EvDone, ID: 5, Now: at(603)}))
	if s := c.Stats(); s.Waiting != 0 || s.Running != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// Regression: a new request waiting in the retry slot, then a preempted
// request admitted before it and refused for room: both must still be
// admitted later (the retry was once overwritten and lost).
func TestPreemptedRefusedForRoomKeepsTheRetry(t *testing.T) {
	c := New(Config{MaxRunning: 4, Quantum: 100, RetryInterval: time.Millisecond})
	c.Step(arrive(1, "a", 10, at(0)))
	c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)})
	want(t, c.Step(arrive(2, "b", 10, at(0))), Action{Kind: ActAdmit, ID: 2})
	c.Step(Event{Kind: EvNoRoom, ID: 2, Now: at(0)})
	want(t, c.Step(Event{Kind: EvPreempted, ID: 1, Tenant: "a", Now: at(0)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvNoRoom, ID: 1, Now: at(0)}))
	want(t, c.Step(Event{Kind: EvTick, Now: at(1)}), Action{Kind: ActAdmit, ID: 1})
	want(t, c.Step(Event{Kind: EvReserved, ID: 1, Now: at(1)}), Action{Kind: ActAdmit, ID: 2})
}

func TestDuplicateAndInvalidArrivalsRefused(t *testing.T) {
	c := New(Config{MaxRunning: 1})
	c.Step(arrive(1, "a", 10, at(0)))
	want(t, c.Step(arrive(1, "a", 10, at(0))), Action{Kind: ActReject, ID: 1, Reason: ReasonInvalid})
	want(t, c.Step(arrive(2, "a", 0, at(0))), Action{Kind: ActReject, ID: 2, Reason: ReasonInvalid})
}

// A flooding tenant: with equal weights and Quantum = 40 (two requests of
// 20 tokens per turn), light tenants' requests alternate with at most two
// of the heavy tenant's.
func TestDRRInterleavesAFlood(t *testing.T) {
	c := New(Config{MaxRunning: 1, MaxQueue: 1000, Quantum: 40})
	var order []string
	tenantOf := map[ID]string{}
	id := ID(0)
	add := func(tenant string) []Action {
		id++
		tenantOf[id] = tenant
		return c.Step(arrive(id, tenant, 20, at(0)))
	}
	var pending []Action
	for range 30 {
		pending = append(pending, add("heavy")...)
	}
	for range 3 {
		pending = append(pending, add("b")...)
		pending = append(pending, add("c")...)
	}
	for len(pending) > 0 {
		a := pending[0]
		pending = pending[1:]
		if a.Kind != ActAdmit {
			t.Fatalf("unexpected %v", a)
		}
		order = append(order, tenantOf[a.ID])
		pending = append(pending, c.Step(Event{Kind: EvReserved, ID: a.ID, Now: at(1)})...)
		pending = append(pending, c.Step(Event{Kind: EvDone, ID: a.ID, Now: at(1)})...)
	}
	got := fmt.Sprint(order[:16])
	// heavy's first request was admitted alone (its sub-queue emptied, so
	// it left the ring); its next 29 made it rejoin as the only, current
	// tenant; b and c joined behind the cursor. Each turn is 40 tokens =
	// two requests; b and c run out after their third.
	if w := "[heavy heavy heavy b b c c heavy heavy b c heavy heavy heavy heavy heavy]"; got != w {
		t.Fatalf("order %s, want %s", got, w)
	}
}

// The documented bound, as a property over random workloads: from the
// moment a request is the oldest of its tenant's waiting requests, the
// other tenants' requests chosen before it total at most
// sum_j (Quantum*w_j + C - 1) tokens, C the largest cost, Quantum >= C.
// Also: every request ends exactly once, never more than MaxRunning run,
// nothing is admitted while admission is paused after a NoRoom.
var debugProp = false

func TestPropertyDRRBoundAndConservation(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		nTenants := rapid.IntRange(1, 4).Draw(rt, "tenants")
		maxCost := rapid.IntRange(1, 64).Draw(rt, "maxCost")
		quantum := rapid.IntRange(maxCost, 3*maxCost).Draw(rt, "quantum")
		weights := make([]int, nTenants)
		for i := range weights {
			weights[i] = rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("w%d", i))
		}
		cfg := Config{MaxRunning: rapid.IntRange(1, 4).Draw(rt, "maxRunning"), MaxQueue: rapid.IntRange(1, 40).Draw(rt, "maxQueue"),
			Quantum: quantum, QueueTimeout: time.Duration(rapid.IntRange(5, 200).Draw(rt, "timeoutMs")) * time.Millisecond,
			RetryInterval: 3 * time.Millisecond}
		c := New(cfg)

		type req struct {
			tenant, cost int
			state        string // waiting, admitting, running, done
			headAt       int    // tokens of others chosen when it became its tenant's oldest (-1: not yet)
			picked       bool
			resumed      bool
		}
		reqs := map[ID]*req{}
		queues := make([][]ID, nTenants) // the model's own per-tenant FIFO of waiting ids
		othersChosen := make([]int, nTenants)
		var admitting ID
		running := map[ID]bool{}
		now := at(0)
		nextID := ID(1)
		paused := false
		var retryAt time.Time
		// retries: the requests refused for room, oldest refusal first
		// (head of line per tenant: each holds back its own tenant).
		var retries []ID
		wasRetry := map[ID]bool{}
		waitsBehind := func(ti int) bool {
			for _, id := range retries {
				if reqs[id].tenant == ti {
					return true
				}
			}
			return false
		}
		preemptedWaiting := func() bool {
			for _, r := range reqs {
				if r.state == "preempted" {
					return true
				}
			}
			return false
		}

		markHeads := func() {
			for ti, q := range queues {
				if len(q) > 0 && reqs[q[0]].headAt < 0 {
					reqs[q[0]].headAt = othersChosen[ti]
				}
			}
		}
		dequeue := func(id ID) {
			retries = slices.DeleteFunc(retries, func(x ID) bool { return x == id })
			r := reqs[id]
			q := queues[r.tenant]
			i := slices.Index(q, id)
			if i >= 0 {
				queues[r.tenant] = slices.Delete(q, i, i+1)
			}
		}
		apply := func(acts []Action) {
			if debugProp {
				rt.Logf("now %v acts %v paused %v", now.Sub(t0), acts, paused)
			}
			for _, a := range acts {
				r := reqs[a.ID]
				if r == nil {
					rt.Fatalf("action for unknown id %d", a.ID)
				}
				switch a.Kind {
				case ActReject:
					if r.state != "waiting" && r.state != "new" && r.state != "retry" {
						rt.Fatalf("reject of %d in state %s (a preempted request must never time out)", a.ID, r.state)
					}
					dequeue(a.ID)
					r.state = "done"
				case ActAdmit:
					markHeads() // a reject earlier in this batch may have made it the oldest
					if admitting != 0 {
						rt.Fatalf("second admission %d while %d is outstanding", a.ID, admitting)
					}
					switch {
					case paused && preemptedWaiting():
						rt.Fatalf("admission of %d while a preempted request waits for room", a.ID)
					case paused && (r.state == "retry" || waitsBehind(r.tenant)):
						rt.Fatalf("admission of %d of tenant %d while its tenant waits for room", a.ID, r.tenant)
					case r.state != "preempted" && !paused && len(retries) > 0 && a.ID != retries[0]:
						rt.Fatalf("admission of %d before the request refused first (%d) once pages came back", a.ID, retries[0])
					}
					if r.state == "retry" {
						retries = slices.DeleteFunc(retries, func(x ID) bool { return x == a.ID })
					}
					if len(running) >= cfg.MaxRunning {
						rt.Fatalf("admission beyond MaxRunning")
					}
					if r.state != "waiting" && r.state != "retry" && r.state != "preempted" {
						rt.Fatalf("admit of %d in state %s", a.ID, r.state)
					}
					if !r.picked {
						r.picked = true
						if r.headAt < 0 {
							rt.Fatalf("request %d chosen before it was its tenant's oldest", a.ID)
						}
						bound := 0
						for j, w := range weights {
							if j != r.tenant {
								bound += quantum*w + maxCost - 1
							}
						}
						if waited := othersChosen[r.tenant] - r.headAt; waited > bound {
							rt.Fatalf("request %d of tenant %d waited for %d tokens of others, bound %d", a.ID, r.tenant, waited, bound)
						}
						for j := range othersChosen {
							// A tenant waiting behind its request refused
							// for room is not served meanwhile: the bound
							// is on the DRR, not on the pool.
							if j != r.tenant && !waitsBehind(j) {
								othersChosen[j] += r.cost
							}
						}
						dequeue(a.ID)
					}
					if r.state == "preempted" {
						r.resumed = true
					}
					r.state = "admitting"
					admitting = a.ID
				}
			}
			markHeads()
		}

		reserved := uint64(0)
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, 4).Draw(rt, "dt")) * time.Millisecond)
			if !now.Before(retryAt) {
				paused = false
			}
			switch rapid.IntRange(0, 6).Draw(rt, "op") {
			case 6: // a running request is preempted
				for id := range running {
					delete(running, id)
					reqs[id].state = "preempted"
					paused = false // its pages came back
					apply(c.Step(Event{Kind: EvPreempted, ID: id, Tenant: fmt.Sprint(reqs[id].tenant), Now: now}))
					break
				}
			case 0, 1: // arrival
				ti := rapid.IntRange(0, nTenants-1).Draw(rt, "tenant")
				id := nextID
				nextID++
				reqs[id] = &req{tenant: ti, cost: rapid.IntRange(1, maxCost).Draw(rt, "cost"), state: "new", headAt: -1}
				acts := c.Step(Event{Kind: EvArrive, Now: now, ID: id, Tenant: fmt.Sprint(ti), Weight: weights[ti], Cost: reqs[id].cost})
				shares := func() (map[int]int, int) {
					total, outside := weights[ti], 0
					for _, r := range reqs {
						if r.state == "retry" || r.state == "preempted" {
							outside++
						}
					}
					for j, q := range queues {
						if j != ti && len(q) > 0 {
							total += weights[j]
						}
					}
					sh := map[int]int{}
					for j := range weights {
						sh[j] = (cfg.MaxQueue - outside) * weights[j] / total
					}
					return sh, outside
				}
				if len(acts) > 0 && acts[0].Reason == ReasonDisplaced {
					// Displacement: the arriving tenant was under its share,
					// the victim is the newest of a tenant over its own.
					v := reqs[acts[0].ID]
					sh, _ := shares()
					if v == nil || len(queues[ti])+1 > sh[ti] || len(queues[v.tenant]) <= sh[v.tenant] ||
						queues[v.tenant][len(queues[v.tenant])-1] != acts[0].ID {
						rt.Fatalf("displacement of %v for tenant %d: queues %v, shares %v", acts[0], ti, queues, sh)
					}
				}
				if len(acts) > 0 && acts[0].ID == id && acts[0].Reason == ReasonQueueFull {
					// The queue's share bound: a tenant under its share
					// of the queue is never refused for a full queue.
					total, outside := weights[ti], 0
					for _, r := range reqs {
						if r.state == "retry" || r.state == "preempted" {
							outside++
						}
					}
					for j, q := range queues {
						if j != ti && len(q) > 0 {
							total += weights[j]
						}
					}
					if share := (cfg.MaxQueue - outside) * weights[ti] / total; len(queues[ti]) < share {
						rt.Fatalf("tenant %d refused with %d waiting, under its share %d", ti, len(queues[ti]), share)
					}
				}
				if len(acts) == 0 || acts[0].ID != id || acts[0].Kind != ActReject {
					reqs[id].state = "waiting"
					queues[ti] = append(queues[ti], id)
					markHeads()
				}
				apply(acts)
			case 2: // the admission's outcome
				if admitting == 0 {
					continue
				}
				id := admitting
				admitting = 0
				switch rapid.IntRange(0, 2).Draw(rt, "outcome") {
				case 0:
					reqs[id].state = "running"
					running[id] = true
					reserved++
					apply(c.Step(Event{Kind: EvReserved, ID: id, Now: now}))
				case 1:
					switch {
					case reqs[id].resumed:
						reqs[id].state = "preempted" // first of the resume list again
					case wasRetry[id]:
						retries = append([]ID{id}, retries...) // keeps its place
						reqs[id].state = "retry"
					default:
						wasRetry[id] = true
						retries = append(retries, id)
						reqs[id].state = "retry"
					}
					paused, retryAt = true, now.Add(cfg.RetryInterval)
					apply(c.Step(Event{Kind: EvNoRoom, ID: id, Now: now}))
				default:
					reqs[id].state = "done"
					apply(c.Step(Event{Kind: EvDropped, ID: id, Now: now}))
				}
			case 3: // a running request ends
				for id := range running {
					delete(running, id)
					reqs[id].state = "done"
					paused = false
					apply(c.Step(Event{Kind: EvDone, ID: id, Now: now}))
					break
				}
			case 4: // a waiting client leaves
				var ws []ID
				for id, r := range reqs {
					if r.state == "waiting" || r.state == "retry" || r.state == "preempted" {
						ws = append(ws, id)
					}
				}
				if len(ws) == 0 {
					continue
				}
				slices.Sort(ws)
				id := rapid.SampledFrom(ws).Draw(rt, "cancel")
				dequeue(id)
				reqs[id].state = "done"
				apply(c.Step(Event{Kind: EvCancel, ID: id, Now: now}))
			default:
				apply(c.Step(Event{Kind: EvTick, Now: now}))
			}
			s := c.Stats()
			nWaiting := 0
			for _, r := range reqs {
				if r.state == "waiting" || r.state == "retry" || r.state == "admitting" || r.state == "preempted" {
					nWaiting++
				}
			}
			if s.Admitted != reserved {
				rt.Fatalf("core counts %d admitted, model %d", s.Admitted, reserved)
			}
			byTenant := 0
			for _, n := range s.WaitingByTenant {
				byTenant += n
			}
			if byTenant != s.Waiting {
				rt.Fatalf("waiting by tenant sums to %d, waiting %d", byTenant, s.Waiting)
			}
			if s.Waiting != nWaiting || s.Running != len(running) {
				rt.Fatalf("core says %d waiting, %d running; model %d, %d", s.Waiting, s.Running, nWaiting, len(running))
			}
		}
		// Everything ends: finish the running, answer admissions, and let
		// time pass beyond every timeout.
		for range 10000 {
			if admitting != 0 {
				id := admitting
				admitting = 0
				reqs[id].state = "running"
				running[id] = true
				apply(c.Step(Event{Kind: EvReserved, ID: id, Now: now}))
				continue
			}
			if len(running) > 0 {
				for id := range running {
					delete(running, id)
					reqs[id].state = "done"
					paused = false
					apply(c.Step(Event{Kind: EvDone, ID: id, Now: now}))
					break
				}
				continue
			}
			if s := c.Stats(); s.Waiting == 0 {
				break
			}
			now = now.Add(time.Millisecond)
			if !now.Before(retryAt) {
				paused = false
			}
			apply(c.Step(Event{Kind: EvTick, Now: now}))
		}
		for id, r := range reqs {
			if r.state != "done" {
				rt.Fatalf("request %d never ended (%s)", id, r.state)
			}
		}
	})
}

// Issue 30 item 2: one tenant's backlog fills the queue; another tenant's
// first request still gets in (it is under its share), displacing the
// flooding tenant's NEWEST waiting request, which gets queue_full.
func TestQueueShareDisplacesTheOverShareTenantsNewest(t *testing.T) {
	c := New(Config{MaxQueue: 4, MaxRunning: 1, Quantum: 100})
	want(t, c.Step(arrive(1, "a", 10, at(0))), Action{Kind: ActAdmit, ID: 1})
	c.Step(Event{Kind: EvReserved, ID: 1, Now: at(0)})
	for id := ID(2); id <= 5; id++ {
		want(t, c.Step(arrive(id, "a", 10, at(int(id)))))
	}
	// Full, and every waiting request is a's.
	want(t, c.Step(arrive(6, "a", 10, at(6))), Action{Kind: ActReject, ID: 6, Reason: ReasonQueueFull})
	// b's first request: b's share of 4 with a (equal weights) is 2.
	want(t, c.Step(arrive(7, "b", 10, at(7))), Action{Kind: ActReject, ID: 5, Reason: ReasonDisplaced})
	want(t, c.Step(arrive(8, "b", 10, at(8))), Action{Kind: ActReject, ID: 4, Reason: ReasonDisplaced})
	// b now holds its share (2 of 4): its third is refused, a keeps 2.
	want(t, c.Step(arrive(9, "b", 10, at(9))), Action{Kind: ActReject, ID: 9, Reason: ReasonQueueFull})
	if s := c.Stats(); s.WaitingByTenant["a"] != 2 || s.WaitingByTenant["b"] != 2 || s.Waiting != 4 {
		t.Fatalf("stats %+v", s)
	}
	// A third tenant c of weight 2: share floor(4*2/4) = 2; a and b are
	// both over theirs (1 each); the victim is the most over (a tie
	// here: the larger count, then the earlier tenant name).
	ev := arrive(10, "c", 10, at(10))
	ev.Weight = 2
	want(t, c.Step(ev), Action{Kind: ActReject, ID: 3, Reason: ReasonDisplaced})
	// What was displaced never runs; the rest all do.
	var got []ID
	pending := admits(c.Step(Event{Kind: EvDone, ID: 1, Now: at(11)}))
	for len(pending) > 0 {
		id := pending[0]
		got = append(got, id)
		c.Step(Event{Kind: EvReserved, ID: id, Now: at(12)})
		pending = append(pending[1:], admits(c.Step(Event{Kind: EvDone, ID: id, Now: at(12)}))...)
	}
	slices.Sort(got)
	if !slices.Equal(got, []ID{2, 7, 8, 10}) {
		t.Fatalf("admitted %v, want [2 7 8 10]", got)
	}
}

// Issue 30 item 8: preempted requests resume oldest preemption first
// (the one preempted earliest has waited longest with a stream open).
func TestPreemptedResumeOldestPreemptionFirst(t *testing.T) {
	c := New(Config{MaxRunning: 4, Quantum: 100})
	for id := ID(1); id <= 3; id++ {
		want(t, c.Step(arrive(id, "a", 10, at(0))), Action{Kind: ActAdmit, ID: id})
		c.Step(Event{Kind: EvReserved, ID: id, Now: at(0)})
	}
	want(t, c.Step(arrive(4, "b", 10, at(1))), Action{Kind: ActAdmit, ID: 4})
	// 4's admission is outstanding, so the preempted ones wait: 2, 3, 1.
	for _, id := range []ID{2, 3, 1} {
		want(t, c.Step(Event{Kind: EvPreempted, ID: id, Tenant: "a", Now: at(2)}))
	}
	var order []ID
	next := admits(c.Step(Event{Kind: EvReserved, ID: 4, Now: at(3)}))
	for len(next) > 0 {
		order = append(order, next...)
		next = admits(c.Step(Event{Kind: EvReserved, ID: next[0], Now: at(3)}))
	}
	if !slices.Equal(order, []ID{2, 3, 1}) {
		t.Fatalf("resumed in order %v, want the preemption order [2 3 1]", order)
	}
}

// The zero Config gets its documented defaults, and they admit.
func TestConfigDefaults(t *testing.T) {
	c := New(Config{})
	if got := c.Config(); got.MaxQueue != 256 || got.MaxRunning != 64 || got.Quantum != 4096 ||
		got.QueueTimeout != 30*time.Second || got.RetryInterval != 20*time.Millisecond {
		t.Fatalf("defaults %+v", got)
	}
	want(t, c.Step(arrive(1, "a", 10, at(0))), Action{Kind: ActAdmit, ID: 1})
}

// An arrival costing more than a turn's credit is refused as invalid at
// once: DRR would otherwise go round the ring once per Quantum of it
// (the engines' I2 check keeps every cost within the context, Quantum).
func TestCostAboveOneTurnRefused(t *testing.T) {
	c := New(Config{Quantum: 100})
	want(t, c.Step(arrive(1, "a", 1<<40, at(0))), Action{Kind: ActReject, ID: 1, Reason: ReasonInvalid})
	ev := arrive(2, "b", 150, at(0))
	ev.Weight = 2
	want(t, c.Step(ev), Action{Kind: ActAdmit, ID: 2})
}
