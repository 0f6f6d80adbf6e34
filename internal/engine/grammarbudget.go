package engine

import "time"

// The grammar budget bounds the constrained-decoding work a step does on
// the scheduler's goroutine, which every request in the batch shares: a
// request whose grammar needs a mask over a large vocabulary (a cold
// position of a wide schema is a walk of most of the token trie, ~3 ms of
// CPU at 151k tokens and more on a loaded machine) must not hold up the other tenants' next tokens. What
// does not fit is deferred to later steps (batch.draw, grammarWork);
// only the constrained request waits.
const (
	// GrammarShare is the grammar work a step may do, as a share of the
	// time its forward pass took: co-tenants' inter-token latency grows
	// by at most this share (plus one slice) however many constrained
	// requests are in the batch.
	GrammarShare = 0.1
	// GrammarFloor is the least grammar time a step allows, so a batch of
	// fast steps still makes progress on masks.
	GrammarFloor = 250 * time.Microsecond
	// GrammarIdle is the grammar time of a cycle that runs no forward
	// pass (every active sequence waits for its mask): nobody's step is
	// held up, but arrivals join only between cycles.
	GrammarIdle = 5 * time.Millisecond
	// grammarUnits is a driven (clockless, deterministic) step's budget in
	// grammar work units (grammar.MaskJob).
	grammarUnits = 1 << 14
)

// stepBudget is a step's grammar budget (sample.Budget). With a clock it
// counts the time spent between Left and Spend, i.e. in grammar work
// only; without one (driven mode) it counts work units, so the simulator
// stays deterministic.
type stepBudget struct {
	clock func() time.Time
	limit time.Duration
	spent time.Duration
	mark  time.Time
	units int
	grace bool
}

// start opens a step's budget. took is the forward pass's time; shared
// says other sequences ran in it (false: a cycle of deferred work only);
// units, when set, is a budget in work units instead of time.
func (b *stepBudget) start(clock func() time.Time, took time.Duration, shared bool, units int) {
	*b = stepBudget{clock: clock, units: grammarUnits}
	if units > 0 {
		b.clock, b.units = nil, units
	}
	switch {
	case !shared:
		b.limit = GrammarIdle
	default:
		b.limit = max(GrammarFloor, time.Duration(GrammarShare*float64(took)))
	}
}

// least lets one more slice of work through even when the budget is
// spent: the deferred sequence served first always progresses.
func (b *stepBudget) least() { b.grace = true }

// open reports whether budget is left, without taking the grace slice.
func (b *stepBudget) open() bool {
	if b.clock != nil {
		return b.spent < b.limit
	}
	return b.units > 0
}

// Left implements sample.Budget.
func (b *stepBudget) Left() bool {
	ok := b.units > 0
	if b.clock != nil {
		ok = b.spent < b.limit
		b.mark = b.clock()
	}
	if !ok && b.grace {
		b.grace, ok = false, true
	}
	return ok
}

// Spend implements sample.Budget.
func (b *stepBudget) Spend(units int) {
	b.units -= units
	if b.clock != nil && !b.mark.IsZero() {
		b.spent += b.clock().Sub(b.mark)
		b.mark = time.Time{}
	}
}
