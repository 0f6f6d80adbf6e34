package engine

import (
	"slices"
	"sync"
	"time"

	"sluice/internal/handoff"
)

// The phases of a request's time to first token, so an operator (and the
// crowding benchmark) can see where a tenant's wait goes: in the queue,
// at the prefill worker's pool, behind other prompts' steps, computing,
// or in the handoff. Each role records the phases it sees, per tenant
// (the metrics name tenants only with --metrics-tenant-labels), for the
// first handoff of a request only (a resumed request's prompt is not a
// first token).
const (
	// PhaseQueue: from arrival to the pages the request's first token is
	// computed in (the router's or colocated engine's queue, the decode
	// reservation; a reservation revoked before the first token counts
	// here too).
	PhaseQueue = "queue"
	// PhaseHandoff (router): from the decode reservation to the first
	// token; the prefill worker's phases below are its parts, the rest
	// is the router's calls and the first token's way from decode (which
	// sends it as it accepts the commit, before the prefill worker hears
	// of it: the rest can be about zero).
	PhaseHandoff = "handoff"
	// PhasePrefillQueue (prefill worker): the Prefill call's arrival to
	// its prefill pages (the response format's grammar, compiled or
	// waited for, first, as in the colocated queue; then the wait for
	// pages).
	PhasePrefillQueue = "prefill_queue"
	// PhasePrefillWait: from the pages to the first step that runs a
	// chunk of the prompt (steps of other prompts in progress or
	// preferred).
	PhasePrefillWait = "prefill_wait"
	// PhasePrefillCompute: from that step to the prompt's last chunk
	// computed (steps that passed the prompt over included); colocated,
	// to the first token. Like PhasePrefillWait, it is recorded again
	// as prefill_compute/<how>, by how the prompt's first chunk started
	// (StartNested, StartNextStep, ...): a first chunk run nested is a
	// forward pass of its own, one run at a step boundary shares its
	// step, so the two can cost different times for the same rows.
	PhasePrefillCompute = "prefill_compute"
	// PhasePrefillPush (prefill worker): from the last chunk to the
	// accepted commit (the pages the streaming handoff did not hide).
	PhasePrefillPush = "prefill_push"
	// PhasePush (router, from the Timing decode sends with the first
	// token): the prefill worker's last chunk computed to its commit
	// sent (the first token's draw, the page writes the streaming
	// handoff did not hide, the digest). Unlike PhasePrefillPush it
	// stops where decode's part starts, so the request's phases follow
	// each other without overlapping.
	PhasePush = "push"
	// PhaseDecodeWait (router, from the same Timing): the decode
	// worker's commit arrival to the first token sent on its stream
	// (verification, the sampler and its grammar).
	PhaseDecodeWait = "decode_wait"
)

// handoffParts are the workers' parts of a request's first handoff as
// decode reported them with the first token (t), in the order they
// happened: the prefill worker's queue, wait, compute and push, then
// decode's wait. nil without a report, or when the parts do not fit in
// hd, the router's own measure of the same handoff (reservation to first
// token), which contains them all: figures that do not fit cannot all be
// true and are dropped whole, so a request's phases still add up.
func handoffParts(t *handoff.Timing, hd time.Duration) []PhaseTime {
	if t == nil {
		return nil
	}
	ps := []PhaseTime{{PhasePrefillQueue, t.PrefillQueue}, {PhasePrefillWait, t.PrefillWait}, {PhasePrefillCompute, t.PrefillCompute},
		{PhasePush, t.Push}, {PhaseDecodeWait, t.DecodeWait}}
	var sum time.Duration
	for _, p := range ps {
		if p.D < 0 || p.D > handoff.MaxTiming {
			return nil
		}
		sum += p.D
	}
	if sum > hd {
		return nil
	}
	return ps
}

// prefillTimes are a prefill's first-token phases as its worker sends
// them with the commit (handoff.Timing): set on the scheduler's
// goroutine, read on the push's as the commit goes.
type prefillTimes struct {
	mu       sync.Mutex
	t        handoff.Timing
	computed time.Time
}

func (p *prefillTimes) set(f func(t *handoff.Timing)) {
	p.mu.Lock()
	f(&p.t)
	p.mu.Unlock()
}

// prompted notes the prompt's last chunk computed, after its compute d.
func (p *prefillTimes) prompted(at time.Time, d time.Duration) {
	p.mu.Lock()
	p.t.PrefillCompute, p.computed = d, at
	p.mu.Unlock()
}

// commit is the Timing the commit carries, its push ending now.
func (p *prefillTimes) commit() *handoff.Timing {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.t
	if !p.computed.IsZero() {
		t.Push = time.Since(p.computed)
	}
	return &t
}

// PhaseTime is one request's time in one phase (Event.Phases).
type PhaseTime struct {
	Phase string
	D     time.Duration
}

// PhaseStat is one tenant's histogram of one phase: Buckets[i] counts
// the observations of at most QueueWaitBuckets[i] seconds (cumulative).
type PhaseStat struct {
	Tenant, Phase string
	Count         uint64
	Sum           float64
	Buckets       []uint64
}

// phases records the first-token phases of one role.
type phases struct {
	mu sync.Mutex
	m  map[[2]string]*waitHistogram
}

func (p *phases) observe(tenant, phase string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[[2]string]*waitHistogram{}
	}
	k := [2]string{tenant, phase}
	h := p.m[k]
	if h == nil {
		h = &waitHistogram{}
		p.m[k] = h
	}
	h.observe(max(d, 0))
}

// snapshot returns the histograms, sorted by tenant and phase.
func (p *phases) snapshot() []PhaseStat {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PhaseStat, 0, len(p.m))
	for k, h := range p.m {
		s := PhaseStat{Tenant: k[0], Phase: k[1], Count: h.n, Sum: h.sum, Buckets: make([]uint64, len(QueueWaitBuckets))}
		var cum uint64
		for i := range QueueWaitBuckets {
			cum += h.counts[i]
			s.Buckets[i] = cum
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b PhaseStat) int {
		if a.Tenant != b.Tenant {
			if a.Tenant < b.Tenant {
				return -1
			}
			return 1
		}
		if a.Phase < b.Phase {
			return -1
		}
		if a.Phase > b.Phase {
			return 1
		}
		return 0
	})
	return out
}

// FirstTokenPhases is implemented by the engines and workers that record
// first-token phases.
type FirstTokenPhases interface {
	FirstTokenPhases() []PhaseStat
}

// FirstTokenPhases implements FirstTokenPhases.
func (d *Disaggregated) FirstTokenPhases() []PhaseStat { return d.phases.snapshot() }

// FirstTokenPhases implements FirstTokenPhases.
func (w *PrefillWorker) FirstTokenPhases() []PhaseStat { return w.phases.snapshot() }

// FirstTokenPhases implements FirstTokenPhases.
func (c *Colocated) FirstTokenPhases() []PhaseStat { return c.phases.snapshot() }

// PhaseRecorder records first-token phases for a role outside the
// engine: the router's HTTP path (its http_* and first_token_* phases).
// The zero value is ready; it is safe from any goroutine.
type PhaseRecorder struct{ p phases }

// Observe adds one request's d to tenant's phase.
func (r *PhaseRecorder) Observe(tenant, phase string, d time.Duration) { r.p.observe(tenant, phase, d) }

// FirstTokenPhases implements FirstTokenPhases.
func (r *PhaseRecorder) FirstTokenPhases() []PhaseStat { return r.p.snapshot() }
