package tcp

import (
	"context"
	"sync"
)

// slots hands out one connection's call slots (the server runs at most
// that many calls of the connection at once) to the calls waiting for
// one, fairly across tenants in proportion to their weights. A connection
// has two: its Prefill calls' and its other calls' (page writes, commits,
// reservations, aborts). A router keeps up to --max-concurrency prompts
// in flight; past a connection's bound they wait here, unsent, and the
// worker's fair queue never sees them: a FIFO here would put one tenant's
// flood ahead of another tenant's prompt, the very crowding the worker's
// queue prevents. Likewise a prefill worker streaming many handoffs of
// one tenant to a decode worker would queue their page writes ahead of
// another tenant's commit. It is a pure state machine (no goroutines,
// locks or clock); Client wraps it (fairSlots).
//
// The rule: a freed slot goes to the waiting tenant whose holding would
// be the smallest for its weight once it has the slot ((held+1)/weight;
// with equal weights, the tenant holding the fewest); among those equal,
// to the one whose last slot was granted longest ago, then to the one
// waiting longest. A tenant's weight is its latest call's (0 counts as 1).
// A tenant holding none and waiting for none is forgotten; on its return
// it counts as granted just then, behind the tenants already waiting: were
// it oldest, a tenant whose calls end quickly would win tie after tie
// against one that kept waiting.
// Within a tenant, calls get slots in arrival order (a handoff's page
// writes may be two in flight and apply in any order; its commit is sent
// only after every write was acknowledged, so nothing here reorders what
// the protocol orders). So when a slot goes to tenant t, no waiting
// tenant would hold less for its weight than t, and a tenant flooding the
// connection (holding every slot, a hundred more waiting) leaves the next
// free slot to another tenant's first call: a waiting tenant is passed
// over only by tenants whose next slot keeps them no further over it,
// and by each of those tied with it at most once in turn. Two tenants of
// weights 2 and 1 that keep calls waiting hold the slots 2:1.
type slots struct {
	cap, used int
	held      map[string]int
	weight    map[string]int      // each tenant in play's latest weight
	waiting   map[string][]uint64 // tickets per tenant, oldest first
	// last orders ties: twice the number of the tenant's last grant, or
	// twice the grants so far plus one for a tenant arriving afresh.
	last    map[string]uint64
	grants  uint64
	tickets uint64
}

func newSlots(n int) *slots {
	return &slots{cap: n, held: map[string]int{}, weight: map[string]int{}, waiting: map[string][]uint64{}, last: map[string]uint64{}}
}

// take asks for a slot for a call of tenant, of weight weight: granted at
// once when one is free (nothing waits then: a waiting call exists only
// while every slot is used), else the call waits under the returned
// ticket.
func (s *slots) take(tenant string, weight int) (ticket uint64, granted bool) {
	s.tickets++
	if _, ok := s.last[tenant]; !ok {
		s.last[tenant] = 2*s.grants + 1
	}
	s.weight[tenant] = max(weight, 1)
	if s.used < s.cap {
		s.grant(tenant)
		return s.tickets, true
	}
	s.waiting[tenant] = append(s.waiting[tenant], s.tickets)
	return s.tickets, false
}

func (s *slots) grant(tenant string) {
	s.used++
	s.held[tenant]++
	s.grants++
	s.last[tenant] = 2 * s.grants
}

// put gives back a slot tenant held and hands it to the next waiting
// call by the rule above, if any: its ticket and tenant.
func (s *slots) put(tenant string) (ticket uint64, to string, ok bool) {
	if s.held[tenant] <= 0 {
		panic("tcp: a call slot given back by a tenant that holds none")
	}
	s.used--
	if s.held[tenant]--; s.held[tenant] == 0 {
		delete(s.held, tenant)
		if len(s.waiting[tenant]) == 0 {
			s.forget(tenant) // the maps stay as small as the tenants in play
		}
	}
	first := true
	for t, q := range s.waiting {
		if first || s.before(t, q[0], to, ticket) {
			to, ticket, first = t, q[0], false
		}
	}
	if first {
		return 0, "", false
	}
	if q := s.waiting[to][1:]; len(q) > 0 {
		s.waiting[to] = q
	} else {
		delete(s.waiting, to)
	}
	s.grant(to)
	return ticket, to, true
}

func (s *slots) forget(tenant string) {
	delete(s.last, tenant)
	delete(s.weight, tenant)
}

// before orders two waiting tenants (each by its oldest ticket): the
// smaller holding for its weight once granted first ((held+1)/weight,
// compared without division; weights are at most handoff.MaxWeight), then
// the older last grant, then the older ticket.
func (s *slots) before(a string, ta uint64, b string, tb uint64) bool {
	if x, y := (s.held[a]+1)*s.weight[b], (s.held[b]+1)*s.weight[a]; x != y {
		return x < y
	}
	if la, lb := s.last[a], s.last[b]; la != lb {
		return la < lb
	}
	return ta < tb
}

// cancel withdraws a waiting call; false when the ticket is not waiting
// (it was granted meanwhile: its holder must put the slot back).
func (s *slots) cancel(tenant string, ticket uint64) bool {
	q := s.waiting[tenant]
	for i, t := range q {
		if t == ticket {
			q = append(q[:i:i], q[i+1:]...)
			if len(q) > 0 {
				s.waiting[tenant] = q
			} else {
				delete(s.waiting, tenant)
				if s.held[tenant] == 0 {
					s.forget(tenant)
				}
			}
			return true
		}
	}
	return false
}

// fairSlots is slots for concurrent callers: a waiting call blocks on its
// own channel, closed when put grants it the slot.
type fairSlots struct {
	mu    sync.Mutex
	s     *slots
	ready map[uint64]chan struct{}
}

func newFairSlots(n int) *fairSlots {
	return &fairSlots{s: newSlots(n), ready: map[uint64]chan struct{}{}}
}

// acquire takes a slot for tenant, of weight weight, waiting while every
// slot is held; it leaves without one (the error of the first to end)
// when ctx or done ends first.
func (f *fairSlots) acquire(ctx context.Context, done <-chan struct{}, tenant string, weight int, doneErr func() error) error {
	f.mu.Lock()
	ticket, ok := f.s.take(tenant, weight)
	if ok {
		f.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	f.ready[ticket] = ch
	f.mu.Unlock()
	var err error
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-done:
		err = doneErr()
	}
	f.mu.Lock()
	delete(f.ready, ticket)
	withdrawn := f.s.cancel(tenant, ticket)
	f.mu.Unlock()
	if !withdrawn {
		// Granted as it gave up: the slot goes on to the next call.
		f.release(tenant)
	}
	return err
}

// release gives back a slot tenant held and wakes the call it goes to.
func (f *fairSlots) release(tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ticket, _, ok := f.s.put(tenant); ok {
		if ch := f.ready[ticket]; ch != nil {
			delete(f.ready, ticket)
			close(ch)
		}
	}
}

// limit is the number of slots.
func (f *fairSlots) limit() int { return f.s.cap }

// inUse is the number of slots held.
func (f *fairSlots) inUse() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s.used
}
