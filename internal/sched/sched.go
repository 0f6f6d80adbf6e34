// Package sched is the admission scheduler of an engine as a pure state
// machine (etcd raft style, like request.Machine and handoff.Receiver):
// events in, actions out, time as an argument, no goroutines, clock or I/O.
// The engine's goroutines are thin wrappers that carry out its actions.
//
// What it decides: which waiting request may try to take KV pages next.
// Requests wait in a bounded queue made of one FIFO sub-queue per tenant;
// the sub-queues are served by deficit round robin (DRR) over tokens, with
// an optional weight per tenant. A request leaves the queue by being
// admitted (then the engine reserves its pages), by timing out, by its
// client leaving, or at shutdown. It never touches the pool itself: the
// engine tries the reservation and reports back (Reserved, or NoRoom when
// the pool cannot hold it now), so the same core serves the colocated
// engine (a local pool) and the disaggregated router (a remote decode pool
// it only learns about through refusals and completions).
//
// The queue discipline, and the bound it gives (see docs/operations.md, "Queueing"):
//
//   - Tenants with waiting requests form a ring; the cursor's tenant gets
//     Quantum x weight tokens of credit once per turn and is served while
//     the cost (prompt + max tokens) of its oldest request fits its credit;
//     then the turn passes. A tenant whose sub-queue empties leaves the
//     ring and forgets its credit. A tenant joining the ring joins just
//     behind the cursor, so it is served after at most one turn of every
//     other tenant.
//   - Hence, with Quantum >= the largest cost C, a request that reaches the
//     head of its tenant's sub-queue is admitted after at most
//     sum over the other tenants j of (Quantum*w_j + C - 1) tokens of their
//     requests: a flooding tenant delays another tenant's request by one
//     turn's worth of its own tokens, whatever its backlog.
//   - Admission is head of line per tenant: when the pool refuses the
//     chosen request (NoRoom), nothing more of its tenant is admitted until
//     pages come back (Done, Freed) or RetryInterval passes, and then the
//     refused requests are tried first, oldest refusal first, before any
//     other waiting request: within a tenant a small request never
//     overtakes a large one, and every refused request has the first claim
//     on the pages that come back. Other tenants' requests are still
//     admitted meanwhile: one tenant's request that does not fit a pool its
//     own running requests fill never holds another tenant's request, which
//     may fit (or, refused within its KV share, makes the pool take the
//     first tenant's over-share pages back), out of the pool. A request
//     refused for room of each tenant may wait at once; when every tenant
//     with waiting requests has one, nothing is admitted until pages come
//     back, as with a single tenant. How far a tenant can starve
//     another's large request is bounded twice: by the KV quota
//     (pages.go), a tenant refused within its share holding the others
//     at their shares; and, for a request the quota does not cover
//     (larger than its tenant's share), by overtaking ending once every
//     request it waits for (running at its refusal, or admitted ahead of
//     it since; with none running, the first to overtake it) has ended: from then on the queue's head of line is
//     whole until it starts (see overtaken).
//
// The queue is shared by weight (see overShare): a tenant of weight w,
// among tenants with waiting requests of total weight W (its own
// included), always finds room for floor(MaxQueue' * w / W) waiting
// requests, MaxQueue' being MaxQueue less the preempted and refused-for-
// room requests waiting outside the tenants' sub-queues. When the queue
// is full, an arrival of a tenant under its share displaces the newest
// waiting request of the tenant furthest over its share (ReasonDisplaced,
// 429); an arrival of a tenant at or over its share is refused
// (ReasonQueueFull, 429). So a flooding tenant cannot keep another
// tenant's first request out of the queue, and what it loses is its own
// most recent request, the one that has waited least.
//
// A running request the engine preempted (EvPreempted: its pages are
// gone, its KV will be rebuilt) is admitted again before any waiting
// request, oldest preemption first, and never times out: it has already
// sent tokens, so refusing it would break a stream.
//
// The core tracks MaxRunning (requests admitted and not yet done) and at
// most one admission in progress, so the engine's reservation attempts are
// serialised in the order the discipline chose.
package sched

import (
	"fmt"
	"slices"
	"time"
)

// ID names one request inside the core; the engine picks them (unique
// among live requests).
type ID uint64

// Config bounds the queue. Zero values pick the defaults noted.
type Config struct {
	// MaxQueue bounds waiting requests (default 256), shared by weight
	// between the tenants that wait (see overShare): beyond it an arrival
	// is refused (ReasonQueueFull) or, when its tenant is under its
	// share, displaces the newest request of the tenant most over its own.
	MaxQueue int
	// QueueTimeout bounds how long one request may wait (default 30s).
	QueueTimeout time.Duration
	// MaxRunning bounds requests admitted and not yet done (default 64).
	MaxRunning int
	// Quantum is the DRR credit in tokens a tenant of weight 1 gets per
	// turn (default 4096). Set it to at least the largest request cost
	// (the context) so every turn admits at least one request.
	Quantum int
	// RetryInterval is how long admission pauses after the pool refused a
	// request when no running request's end will wake it (default 20ms):
	// pages can also come back without a Done (quarantine leases).
	RetryInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxQueue <= 0 {
		c.MaxQueue = 256
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 30 * time.Second
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = 64
	}
	if c.Quantum <= 0 {
		c.Quantum = 4096
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 20 * time.Millisecond
	}
	return c
}

// EventKind is what happened.
type EventKind uint8

const (
	// EvArrive: a request wants pages. ID, Tenant, Weight, Cost.
	EvArrive EventKind = iota
	// EvCancel: the client of a waiting request left. It leaves the queue
	// at once; a request not waiting (admitting, running) is not affected.
	EvCancel
	// EvReserved: the admitted request got its pages; it now runs.
	EvReserved
	// EvNoRoom: the admitted request did not fit the pool now; it goes
	// back to the head of its sub-queue and admission pauses.
	EvNoRoom
	// EvDropped: the admitted request will not run (failed otherwise, or
	// its client left during the reservation attempt).
	EvDropped
	// EvDone: a running request ended and its pages went back.
	EvDone
	// EvTick: time passed (timeouts, the retry pause).
	EvTick
	// EvDrain: refuse every later arrival; waiting requests are still served.
	EvDrain
	// EvShutdown: refuse every later arrival and end every waiting request.
	EvShutdown
	// EvPreempted: a running request lost its pages (the engine preempted
	// it) and must be admitted again. It waits ahead of everything else,
	// oldest preemption first, with no timeout (it has sent tokens). ID,
	// Tenant.
	EvPreempted
	// EvFreed: pages came back without a running request ending (a
	// quarantine lease expired): admission paused after a NoRoom tries
	// again now rather than at the end of RetryInterval.
	EvFreed
	// EvOverShare: the admitted request did not fit because its tenant
	// holds more than its share of the pool's pages while others hold
	// some (the KV quota, pages.go). Unlike NoRoom it blocks only its own
	// tenant: it goes back to the head of its tenant's sub-queue, the
	// tenant is passed over until pages come back (Done, Freed) or
	// RetryInterval passes, and admission goes on with the other tenants.
	// So a tenant over its page share never holds the queue's head of
	// line against a tenant under it.
	EvOverShare
)

var eventNames = [...]string{"arrive", "cancel", "reserved", "no_room", "dropped", "done", "tick", "drain", "shutdown", "preempted", "freed", "over_share"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", k)
}

// Event is one input to Step.
type Event struct {
	Kind EventKind
	Now  time.Time
	ID   ID
	// EvArrive only:
	Tenant string
	Weight int // >= 1; 0 means 1
	Cost   int // tokens the request may hold: prompt + max tokens (>= 1)
}

// ActionKind is what the engine must do.
type ActionKind uint8

const (
	// ActAdmit: try to reserve ID's pages now, then report EvReserved,
	// EvNoRoom or EvDropped. At most one admission is outstanding.
	ActAdmit ActionKind = iota
	// ActReject: ID is refused and out of the core: Reason says why.
	ActReject
)

// Reason is why a request was refused. Stable, machine-readable.
type Reason string

const (
	ReasonQueueFull Reason = "queue_full"      // arrival with MaxQueue already waiting: 429
	ReasonTimeout   Reason = "queue_timeout"   // waited QueueTimeout: 503
	ReasonDraining  Reason = "draining"        // arrival after EvDrain: 503
	ReasonShutdown  Reason = "shutdown"        // waiting at EvShutdown: 503
	ReasonInvalid   Reason = "invalid"         // malformed arrival (duplicate id, cost < 1)
	ReasonDisplaced Reason = "queue_displaced" // waiting, pushed out by a tenant under its share: 429
)

// Action is one output of Step.
type Action struct {
	Kind   ActionKind
	ID     ID
	Reason Reason // ActReject
}

// Stats is a snapshot for metrics.
type Stats struct {
	// Waiting is the requests in the queue; Running those admitted and not done.
	Waiting, Running int
	// WaitingByTenant is each tenant's waiting requests.
	WaitingByTenant map[string]int
	// Paused: admission waits for pages after the pool refused the
	// request at the head of the queue (head of line).
	Paused bool
	// Admitted and Rejected count requests by outcome of their wait.
	Admitted uint64
	Rejected map[Reason]uint64
}

type entry struct {
	id       ID
	t        *tenant
	cost     int
	deadline time.Time
	resumed  bool // preempted: in the resume list, never times out
	refused  bool // refused for room: in retries
	// ahead, while refused: the running requests it waits for, those
	// running at its first refusal and those admitted ahead of it since
	// (refused earlier, preempted). When none is left and it still waits,
	// the pages they gave back went to requests that overtook it (see
	// overtaken). Refused with nothing running here (the pages are held
	// by what this core does not see: another router's requests,
	// quarantine leases), it waits for the first request that overtakes
	// it instead (none until then).
	ahead map[ID]struct{}
	none  bool
}

type tenant struct {
	name    string
	weight  int
	deficit int
	// credited: the current turn's quantum was added.
	credited bool
	q        []*entry
	inRing   bool
	// held: refused for its page share (EvOverShare); passed over by
	// the DRR until pages come back or heldUntil.
	held bool
	// waits: a request of the tenant was refused for room and waits in
	// retries; set by pump.
	waits bool
}

// Core is the scheduler. Not safe for concurrent use; the engine
// serialises its events.
type Core struct {
	cfg     Config
	tenants map[string]*tenant
	ring    []*tenant
	cur     int
	waiting map[ID]*entry
	running map[ID]bool
	admit   *entry // the admission in progress
	// retries are the requests refused for room (NoRoom), at most one per
	// tenant (its oldest: its sub-queue waits behind it), oldest refusal
	// first; admitted before new requests once pages come back.
	retries []*entry
	resume  []*entry // preempted requests; admitted before anything else
	// blocked: the pool refused the last admission for room; the
	// refused requests (and preempted ones) wait until pages come back
	// or retryAt, the other tenants' requests do not.
	blocked bool
	retryAt time.Time
	// heldUntil ends the pass-over of held tenants (RetryInterval after
	// the last EvOverShare).
	heldUntil time.Time
	draining  bool
	closed    bool
	admitted  uint64
	rejected  map[Reason]uint64
}

// New returns an empty core.
func New(cfg Config) *Core {
	return &Core{cfg: cfg.withDefaults(), tenants: map[string]*tenant{}, waiting: map[ID]*entry{},
		running: map[ID]bool{}, rejected: map[Reason]uint64{}}
}

// Config is the effective configuration (defaults applied).
func (c *Core) Config() Config { return c.cfg }

// Step applies one event and returns the actions to carry out, in order.
// Events naming an ID the core does not hold in the matching state are
// ignored (a cancel racing an admission, a late duplicate report).
func (c *Core) Step(ev Event) []Action {
	var out []Action
	switch ev.Kind {
	case EvArrive:
		out = c.arrive(ev)
	case EvCancel:
		if e := c.waiting[ev.ID]; e != nil {
			c.remove(e)
		}
	case EvReserved:
		if c.admit != nil && c.admit.id == ev.ID {
			for _, r := range c.retries {
				if c.admit.refused || c.admit.resumed || r.none {
					// Ahead of the requests still refused (or the
					// first to overtake one refused with nothing
					// running): they wait for it.
					r.ahead[ev.ID] = struct{}{}
					r.none = false
				}
			}
			c.admit = nil
			c.running[ev.ID] = true
			c.admitted++
		}
	case EvNoRoom:
		if c.admit != nil && c.admit.id == ev.ID {
			// It keeps its place: the next admission tries it again
			// (its tenant was charged once, when it was picked).
			e := c.admit
			c.admit = nil
			switch {
			case e.resumed:
				// First of the resume list again (refused new requests
				// stay behind).
				c.resume = append([]*entry{e}, c.resume...)
			case e.refused:
				// Tried again first: it keeps its place among the
				// refused.
				c.retries = append([]*entry{e}, c.retries...)
			default:
				e.refused = true
				e.ahead = make(map[ID]struct{}, len(c.running))
				e.none = len(c.running) == 0
				for id := range c.running {
					e.ahead[id] = struct{}{}
				}
				c.retries = append(c.retries, e)
			}
			c.waiting[e.id] = e
			c.blocked = true
			c.retryAt = ev.Now.Add(c.cfg.RetryInterval)
		}
	case EvOverShare:
		if c.admit != nil && c.admit.id == ev.ID {
			e := c.admit
			c.admit = nil
			c.waiting[e.id] = e
			if e.resumed {
				c.resume = append([]*entry{e}, c.resume...)
				c.blocked = true
				c.retryAt = ev.Now.Add(c.cfg.RetryInterval)
				break
			}
			e.refused, e.ahead = false, nil // back in its tenant's sub-queue
			t := c.tenants[e.t.name]
			if t == nil {
				t = e.t
				c.tenants[t.name] = t
			}
			e.t = t
			t.q = append([]*entry{e}, t.q...)
			c.join(t)
			t.held = true
			c.heldUntil = ev.Now.Add(c.cfg.RetryInterval)
		}
	case EvDropped:
		if c.admit != nil && c.admit.id == ev.ID {
			c.admit = nil
		}
	case EvDone:
		if c.running[ev.ID] {
			c.ended(ev.ID)
			delete(c.running, ev.ID)
			c.blocked = false // pages came back: try again
			c.release()
		}
	case EvPreempted:
		if c.running[ev.ID] {
			c.ended(ev.ID)
			delete(c.running, ev.ID)
			e := &entry{id: ev.ID, t: &tenant{name: ev.Tenant}, cost: 1, resumed: true}
			c.resume = append(c.resume, e)
			c.waiting[e.id] = e
			c.blocked = false // its pages came back
		}
	case EvFreed:
		c.blocked = false
		c.release()
	case EvTick:
	case EvDrain:
		c.draining = true
	case EvShutdown:
		c.draining, c.closed = true, true
		// In queue order, so the order of the actions is deterministic.
		for _, e := range c.resume {
			out = append(out, c.reject(e.id, ReasonShutdown))
		}
		c.resume = nil
		for _, e := range c.retries {
			out = append(out, c.reject(e.id, ReasonShutdown))
		}
		c.retries = nil
		for _, t := range c.ring {
			for _, e := range t.q {
				out = append(out, c.reject(e.id, ReasonShutdown))
			}
		}
		for _, t := range c.ring {
			c.drop(t)
		}
		c.ring, c.cur = nil, 0
		clear(c.waiting)
		return out
	}
	out = append(out, c.expire(ev.Now)...)
	if c.blocked && !ev.Now.Before(c.retryAt) {
		c.blocked = false
	}
	if !c.heldUntil.IsZero() && !ev.Now.Before(c.heldUntil) {
		c.release()
	}
	return append(out, c.pump()...)
}

// ended: a running request ended (or lost its pages); the refused
// requests no longer wait for it.
func (c *Core) ended(id ID) {
	for _, e := range c.retries {
		delete(e.ahead, id)
	}
	if c.admit != nil && c.admit.refused {
		// Tried again now; refused again, it keeps its place and its count.
		delete(c.admit.ahead, id)
	}
}

// overtaken reports whether a request refused for room has seen every
// request it waits for (running at its refusal, admitted ahead of it
// since) end and still waits: the pages they gave back went to other
// tenants' requests that overtook it. From then on nothing overtakes the
// refused requests (head of line for the whole queue, as with a single
// tenant) until they start, so such a request waits at most for those
// requests and the ones that overtook it meanwhile. Without it a tenant
// whose requests fit the pages one of its own requests gives back (a
// client with a few requests in flight) keeps another tenant's larger
// request (larger than its KV share, so the quota caps nobody for it)
// out until its queue timeout.
func (c *Core) overtaken() bool {
	for _, e := range c.retries {
		if len(e.ahead) == 0 && !e.none {
			return true
		}
	}
	return false
}

// release ends the pass-over of the tenants refused for their page share.
func (c *Core) release() {
	for _, t := range c.ring {
		t.held = false
	}
	c.heldUntil = time.Time{}
}

// Deadline is the earliest time a Tick would change something (a timeout
// or the end of the retry pause); ok is false when nothing is pending.
func (c *Core) Deadline() (t time.Time, ok bool) {
	for _, e := range c.waiting {
		if e.resumed {
			continue
		}
		if !ok || e.deadline.Before(t) {
			t, ok = e.deadline, true
		}
	}
	if c.blocked && (!ok || c.retryAt.Before(t)) {
		t, ok = c.retryAt, true
	}
	if !c.heldUntil.IsZero() && (!ok || c.heldUntil.Before(t)) {
		t, ok = c.heldUntil, true
	}
	return t, ok
}

// Stats returns a snapshot.
func (c *Core) Stats() Stats {
	s := Stats{Waiting: len(c.waiting), Running: len(c.running), WaitingByTenant: map[string]int{}, Paused: c.blocked,
		Admitted: c.admitted, Rejected: map[Reason]uint64{}}
	if c.admit != nil {
		s.Waiting++ // still waiting for its pages
		s.WaitingByTenant[c.admit.t.name]++
	}
	for _, e := range c.waiting {
		s.WaitingByTenant[e.t.name]++
	}
	for k, v := range c.rejected {
		s.Rejected[k] = v
	}
	return s
}

func (c *Core) reject(id ID, r Reason) Action {
	c.rejected[r]++
	return Action{Kind: ActReject, ID: id, Reason: r}
}

func (c *Core) arrive(ev Event) []Action {
	_, dup := c.waiting[ev.ID]
	w := ev.Weight
	if w < 1 {
		w = 1
	}
	switch {
	case dup || c.running[ev.ID] || (c.admit != nil && c.admit.id == ev.ID) || ev.Cost < 1:
		return []Action{c.reject(ev.ID, ReasonInvalid)}
	case ev.Cost > c.cfg.Quantum*w:
		// More than one turn's credit: DRR would go round the ring once
		// per Quantum of it before admitting anything (2^28 turns, under
		// the engine's lock, for a cost of 2^40). The engines never send
		// one (Quantum is the context and I2 bounds every cost by it), so
		// this is defence in depth, not a queue rule.
		return []Action{c.reject(ev.ID, ReasonInvalid)}
	case c.draining:
		return []Action{c.reject(ev.ID, ReasonDraining)}
	}
	var out []Action
	if len(c.waiting) >= c.cfg.MaxQueue {
		victim := c.overShare(ev.Tenant, w)
		if victim == nil {
			return []Action{c.reject(ev.ID, ReasonQueueFull)}
		}
		c.remove(victim)
		out = append(out, c.reject(victim.id, ReasonDisplaced))
	}
	t := c.tenants[ev.Tenant]
	if t == nil {
		t = &tenant{name: ev.Tenant}
		c.tenants[ev.Tenant] = t
	}
	t.weight = w // the latest arrival's weight (weights come from the key file and do not change)
	e := &entry{id: ev.ID, t: t, cost: ev.Cost, deadline: ev.Now.Add(c.cfg.QueueTimeout)}
	c.waiting[e.id] = e
	t.q = append(t.q, e)
	c.join(t)
	return out
}

// overShare decides a full queue's arrival for tenant name of weight w:
// when the tenant holds fewer waiting requests than its share, it returns
// the request to displace (the newest of the tenant furthest over its
// share); nil refuses the arrival.
//
// A tenant's share is floor((MaxQueue - R) * w / W): W the total weight
// of the tenants with requests in the queue, the arriving one included; R
// the requests waiting outside the tenants' sub-queues (preempted ones
// waiting to resume, the one refused for room waiting first in line),
// which count against MaxQueue but are nobody's to displace. The shares
// sum to at most MaxQueue - R, so when the queue is full and the arriving
// tenant is under its share some other tenant is over its own: a victim
// always exists.
func (c *Core) overShare(name string, w int) *entry {
	total, mine, queued := w, 0, 0
	for _, t := range c.ring {
		queued += len(t.q)
		if t.name == name {
			mine = len(t.q)
		} else {
			total += t.weight
		}
	}
	// Room the sub-queues may hold: MaxQueue less what waits outside them.
	room := c.cfg.MaxQueue - (len(c.waiting) - queued)
	share := func(weight int) int { return room * weight / total }
	if mine+1 > share(w) {
		return nil
	}
	var worst *tenant
	for _, t := range c.ring {
		if t.name == name || len(t.q) <= share(t.weight) {
			continue
		}
		// Furthest over: the largest waiting/weight; ties go to the
		// larger backlog, then the smaller name (deterministic).
		if worst == nil {
			worst = t
			continue
		}
		a, b := len(t.q)*worst.weight, len(worst.q)*t.weight
		if a > b || (a == b && (len(t.q) > len(worst.q) || (len(t.q) == len(worst.q) && t.name < worst.name))) {
			worst = t
		}
	}
	if worst == nil {
		return nil
	}
	return worst.q[len(worst.q)-1]
}

// join puts a tenant with waiting requests into the ring just behind the
// cursor: every other tenant has one turn before it.
func (c *Core) join(t *tenant) {
	if t.inRing {
		return
	}
	t.inRing = true
	t.deficit, t.credited = 0, false
	if len(c.ring) == 0 {
		c.ring = append(c.ring, t)
		c.cur = 0
		return
	}
	c.ring = append(c.ring, nil)
	copy(c.ring[c.cur+1:], c.ring[c.cur:])
	c.ring[c.cur] = t
	c.cur++
}

// leave takes a tenant whose sub-queue is empty out of the ring.
func (c *Core) leave(t *tenant) {
	for i, r := range c.ring {
		if r != t {
			continue
		}
		c.ring = append(c.ring[:i], c.ring[i+1:]...)
		if i < c.cur {
			c.cur--
		}
		if c.cur >= len(c.ring) {
			c.cur = 0
		}
		break
	}
	c.drop(t)
}

func (c *Core) drop(t *tenant) {
	t.inRing, t.deficit, t.credited, t.q, t.held = false, 0, false, nil, false
	delete(c.tenants, t.name)
}

// remove takes a waiting entry out (cancel, timeout).
func (c *Core) remove(e *entry) {
	delete(c.waiting, e.id)
	if e.refused {
		c.retries = slices.DeleteFunc(c.retries, func(x *entry) bool { return x == e })
		return
	}
	if e.resumed {
		c.resume = slices.DeleteFunc(c.resume, func(x *entry) bool { return x == e })
		return
	}
	t := e.t
	for i, x := range t.q {
		if x == e {
			t.q = append(t.q[:i], t.q[i+1:]...)
			break
		}
	}
	if len(t.q) == 0 {
		c.leave(t)
	}
}

func (c *Core) expire(now time.Time) []Action {
	var out []Action
	for len(c.waiting) > 0 {
		var oldest *entry
		for _, e := range c.waiting {
			if e.resumed || now.Before(e.deadline) {
				continue
			}
			if oldest == nil || e.deadline.Before(oldest.deadline) || (e.deadline.Equal(oldest.deadline) && e.id < oldest.id) {
				oldest = e
			}
		}
		if oldest == nil {
			break
		}
		c.remove(oldest)
		out = append(out, c.reject(oldest.id, ReasonTimeout))
	}
	return out
}

// pump admits the next request when nothing stops it.
func (c *Core) pump() []Action {
	if c.closed || c.admit != nil || len(c.running) >= c.cfg.MaxRunning {
		return nil
	}
	if len(c.resume) > 0 {
		if c.blocked {
			return nil // nothing overtakes a preempted request
		}
		e := c.resume[0]
		c.resume = c.resume[1:]
		delete(c.waiting, e.id)
		c.admit = e
		return []Action{{Kind: ActAdmit, ID: e.id}}
	}
	if len(c.retries) > 0 && !c.blocked {
		e := c.retries[0]
		c.retries = c.retries[1:]
		delete(c.waiting, e.id)
		c.admit = e
		return []Action{{Kind: ActAdmit, ID: e.id}}
	}
	if len(c.ring) == 0 || (c.blocked && c.overtaken()) {
		return nil
	}
	// A tenant with a request refused for room waits behind it (head of
	// line within the tenant); while the pool is refusing, the others go.
	for _, t := range c.ring {
		t.waits = false
	}
	for _, e := range c.retries {
		if t := c.tenants[e.t.name]; t != nil {
			t.waits = true
		}
	}
	t := c.ring[c.cur]
	for skipped := 0; t.held || t.waits; skipped++ {
		// Refused for its page share, or waiting for room: the other
		// tenants go first. It forfeits what was left of its turn: a
		// turn it resumes later would otherwise add a new quantum to
		// the old one's rest, past the DRR bound.
		if skipped == len(c.ring) {
			return nil
		}
		t.credited, t.deficit = false, 0
		c.cur = (c.cur + 1) % len(c.ring)
		t = c.ring[c.cur]
	}
	for {
		if t.held || t.waits {
			t.credited, t.deficit = false, 0
			c.cur = (c.cur + 1) % len(c.ring)
			t = c.ring[c.cur]
			continue
		}
		if !t.credited {
			t.deficit += c.cfg.Quantum * t.weight
			t.credited = true
		}
		if t.q[0].cost <= t.deficit {
			break
		}
		t.credited = false
		c.cur = (c.cur + 1) % len(c.ring)
		t = c.ring[c.cur]
	}
	e := t.q[0]
	t.q = t.q[1:]
	t.deficit -= e.cost
	delete(c.waiting, e.id)
	if len(t.q) == 0 {
		c.leave(t)
	} else if t.q[0].cost > t.deficit {
		// Its turn is over: the next pick starts at the next tenant.
		t.credited = false
		c.cur = (c.cur + 1) % len(c.ring)
	}
	c.admit = e
	return []Action{{Kind: ActAdmit, ID: e.id}}
}
