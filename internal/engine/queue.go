package engine

import (
	"context"
	"net/http"
	"sync"
	"time"

	"sluice/internal/sched"
)

// admission is an engine's waiting queue: the edge around the pure
// scheduler core (internal/sched). It serialises the core's events, wakes
// the Submit goroutine an action names, and runs the clock (one timer at
// the core's next deadline). Decisions (who is next, who times out) are
// all the core's; this file only carries them out.
type admission struct {
	mu      sync.Mutex
	core    *sched.Core
	waiters map[sched.ID]chan sched.Action
	next    sched.ID
	timer   *time.Timer
	now     func() time.Time
	// flight counts tickets from arrival to their end, for the drain.
	flight sync.WaitGroup

	// onAdmit, when set (tests), sees each request the core admits, in
	// order, under the lock.
	onAdmit func(tenant string)
	// onEvent, when set (tests), sees each event fed to the core, under
	// the lock.
	onEvent func(ev sched.Event)
	tenants map[sched.ID]string
	// arrived is each ticket's arrival time; wait is the histogram of the
	// time from arrival to reserved pages.
	arrived map[sched.ID]time.Time
	wait    waitHistogram
}

// QueueWaitBuckets are the upper bounds (seconds) of the queue-wait
// histogram.
var QueueWaitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30}

// waitHistogram counts waits per bucket (cumulative at snapshot).
type waitHistogram struct {
	counts []uint64 // per bucket, not cumulative; last is +Inf
	sum    float64
	n      uint64
}

func (h *waitHistogram) observe(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint64, len(QueueWaitBuckets)+1)
	}
	s := d.Seconds()
	i := 0
	for i < len(QueueWaitBuckets) && s > QueueWaitBuckets[i] {
		i++
	}
	h.counts[i]++
	h.sum += s
	h.n++
}

func newAdmission(cfg sched.Config) *admission {
	return &admission{core: sched.New(cfg), waiters: map[sched.ID]chan sched.Action{}, now: time.Now,
		tenants: map[sched.ID]string{}, arrived: map[sched.ID]time.Time{}}
}

// ticket is one request's place in the queue, then its running slot.
type ticket struct {
	a    *admission
	id   sched.ID
	ch   chan sched.Action
	once sync.Once
	// overShare, set by try with noRoom: the pool refused because the
	// tenant is over its KV share (sched.EvOverShare: only this tenant
	// waits for pages, the others are admitted meanwhile).
	overShare bool
}

// step feeds the core under the lock and delivers its actions.
func (a *admission) stepLocked(ev sched.Event) []sched.Action {
	ev.Now = a.now()
	if a.onEvent != nil {
		a.onEvent(ev)
	}
	acts := a.core.Step(ev)
	for _, act := range acts {
		if act.Kind == sched.ActAdmit && a.onAdmit != nil {
			a.onAdmit(a.tenants[act.ID])
		}
		if ch := a.waiters[act.ID]; ch != nil {
			ch <- act // buffered: one action is outstanding per ticket
		}
	}
	a.armLocked()
	return acts
}

func (a *admission) step(ev sched.Event) {
	a.mu.Lock()
	a.stepLocked(ev)
	a.mu.Unlock()
}

// armLocked sets the timer to the core's next deadline.
func (a *admission) armLocked() {
	d, ok := a.core.Deadline()
	if !ok {
		if a.timer != nil {
			a.timer.Stop()
		}
		return
	}
	wait := max(d.Sub(a.now()), 0)
	if a.timer == nil {
		a.timer = time.AfterFunc(wait, func() { a.step(sched.Event{Kind: sched.EvTick}) })
		return
	}
	a.timer.Reset(wait)
}

// arrive enters the queue, or refuses at once: 429 when the queue is full,
// 503 while draining.
func (a *admission) arrive(tenant string, weight, cost int) (*ticket, *Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	t := &ticket{a: a, id: a.next, ch: make(chan sched.Action, 1)}
	a.waiters[t.id] = t.ch
	a.tenants[t.id] = tenant
	a.arrived[t.id] = a.now()
	for _, act := range a.stepLocked(sched.Event{Kind: sched.EvArrive, ID: t.id, Tenant: tenant, Weight: weight, Cost: cost}) {
		if act.ID == t.id && act.Kind == sched.ActReject {
			<-t.ch
			delete(a.waiters, t.id)
			delete(a.tenants, t.id)
			delete(a.arrived, t.id)
			return nil, a.rejection(act.Reason)
		}
	}
	a.flight.Add(1)
	return t, nil
}

func (a *admission) rejection(r sched.Reason) *Error {
	cfg := a.core.Config()
	switch r {
	case sched.ReasonQueueFull:
		return errf(CodeOverloaded, http.StatusTooManyRequests, nil,
			"the server's queue is full (%d requests waiting); retry later", cfg.MaxQueue)
	case sched.ReasonDisplaced:
		return errf(CodeOverloaded, http.StatusTooManyRequests, nil,
			"the server's queue is full and your tenant holds more than its share of it; another tenant's request took this one's place; retry later")
	case sched.ReasonTimeout:
		return errf(CodeQueueTimeout, http.StatusServiceUnavailable, nil,
			"the request waited %s in the queue without room in the KV cache; retry later", cfg.QueueTimeout)
	case sched.ReasonDraining, sched.ReasonShutdown:
		return errf(CodeShutdown, http.StatusServiceUnavailable, nil, "the engine is shutting down")
	}
	return errf(CodeInternal, http.StatusInternalServerError, nil, "the queue refused the request (%s)", r)
}

// wait blocks until the core admits the ticket and try got its pages.
// try reports noRoom when the pool cannot hold the request now: the
// request then waits again, first in line. A client leaving (ctx) takes
// the request out of the queue at once; nothing was reserved for it.
func (t *ticket) wait(ctx context.Context, try func() (noRoom bool, err *Error)) *Error {
	for {
		select {
		case act := <-t.ch:
			if act.Kind == sched.ActReject {
				t.end(noEvent)
				return t.a.rejection(act.Reason)
			}
			if ctx.Err() != nil {
				t.end(sched.EvDropped)
				return errf(CodeCancelled, StatusClientClosed, nil, "the client disconnected while the request was queued")
			}
			noRoom, err := try()
			switch {
			case err != nil:
				t.end(sched.EvDropped)
				return err
			case noRoom:
				kind := sched.EvNoRoom
				if t.overShare {
					kind, t.overShare = sched.EvOverShare, false
				}
				t.a.step(sched.Event{Kind: kind, ID: t.id})
			default:
				t.a.mu.Lock()
				t.a.wait.observe(t.a.now().Sub(t.a.arrived[t.id]))
				delete(t.a.arrived, t.id)
				t.a.stepLocked(sched.Event{Kind: sched.EvReserved, ID: t.id})
				t.a.mu.Unlock()
				return nil
			}
		case <-ctx.Done():
			t.leave()
			return errf(CodeCancelled, StatusClientClosed, nil, "the client disconnected while the request was queued")
		}
	}
}

// waitingTenants is the tenants with requests in the queue now.
func (a *admission) waitingTenants() []string {
	a.mu.Lock()
	st := a.core.Stats()
	a.mu.Unlock()
	out := make([]string, 0, len(st.WaitingByTenant))
	for t := range st.WaitingByTenant {
		out = append(out, t)
	}
	return out
}

// leave takes a ticket that is not running out of the core at once.
func (t *ticket) leave() {
	t.a.mu.Lock()
	t.a.stepLocked(sched.Event{Kind: sched.EvCancel, ID: t.id})
	t.a.mu.Unlock()
	// An admission may have raced the cancel into the channel: the core
	// then waits for its outcome, which is "dropped".
	select {
	case act := <-t.ch:
		if act.Kind == sched.ActAdmit {
			t.end(sched.EvDropped)
			return
		}
	default:
	}
	t.end(noEvent)
}

// requeue puts a running ticket whose pages were taken back (preempted)
// at the head of the queue; wait then admits it again.
func (t *ticket) requeue(tenant string) {
	t.a.mu.Lock()
	t.a.arrived[t.id] = t.a.now()
	t.a.stepLocked(sched.Event{Kind: sched.EvPreempted, ID: t.id, Tenant: tenant})
	t.a.mu.Unlock()
}

// done ends a running ticket: its pages are back. Idempotent.
func (t *ticket) done() { t.end(sched.EvDone) }

// noEvent tells end to report nothing (the core already forgot the ticket).
// EvArrive is never reported through end.
const noEvent = sched.EvArrive

// end reports ev (noEvent: nothing) and forgets the ticket, once.
func (t *ticket) end(ev sched.EventKind) {
	t.once.Do(func() {
		a := t.a
		a.mu.Lock()
		delete(a.waiters, t.id)
		delete(a.tenants, t.id)
		delete(a.arrived, t.id)
		if ev != noEvent {
			a.stepLocked(sched.Event{Kind: ev, ID: t.id})
		}
		a.mu.Unlock()
		a.flight.Done()
	})
}

// close refuses later arrivals and waits for queued and running requests
// until ctx ends; what still waits then is refused with shutting_down.
func (a *admission) close(ctx context.Context) error {
	a.step(sched.Event{Kind: sched.EvDrain})
	err := waitGroup(ctx, &a.flight)
	a.mu.Lock()
	a.stepLocked(sched.Event{Kind: sched.EvShutdown})
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
	return err
}

// shutdown refuses every waiting and later request at once (no drain).
func (a *admission) shutdown() {
	a.mu.Lock()
	a.stepLocked(sched.Event{Kind: sched.EvShutdown})
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
}

// QueueStats are an engine's queue figures, for metrics.
type QueueStats struct {
	sched.Stats
	// WaitBuckets[i] counts requests that waited at most QueueWaitBuckets[i]
	// seconds from arrival to their pages (cumulative, Prometheus style);
	// WaitCount and WaitSum cover every admitted request.
	WaitBuckets []uint64
	WaitCount   uint64
	WaitSum     float64
}

// QueueReporter is implemented by the engines that queue requests.
type QueueReporter interface {
	QueueStats() QueueStats
}

var (
	_ QueueReporter = (*Colocated)(nil)
	_ QueueReporter = (*Disaggregated)(nil)
)

// QueueStats implements QueueReporter.
func (c *Colocated) QueueStats() QueueStats { return c.adm.stats() }

// QueueStats implements QueueReporter.
func (d *Disaggregated) QueueStats() QueueStats { return d.adm.stats() }

// stats snapshots the core and the wait histogram.
func (a *admission) stats() QueueStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := QueueStats{Stats: a.core.Stats(), WaitCount: a.wait.n, WaitSum: a.wait.sum,
		WaitBuckets: make([]uint64, len(QueueWaitBuckets))}
	var cum uint64
	for i := range QueueWaitBuckets {
		if a.wait.counts != nil {
			cum += a.wait.counts[i]
		}
		q.WaitBuckets[i] = cum
	}
	return q
}
