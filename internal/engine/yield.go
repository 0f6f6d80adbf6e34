package engine

import (
	"slices"

	"sluice/internal/kv"
	"sluice/internal/sched"
)

// A step yields at a pause point to a co-tenant's prompt. A prompt
// that arrives while another tenant's prompt chunk is being computed
// would wait for that whole step (a chunk step of a 1k-token flood is
// the biggest part of a light tenant's wait at the prefill worker). So
// a step that carries prompt chunks pauses at its next pause point
// (after a layer's attention, or between two layers, or between two
// pieces of a long attention) when
// prompts arrived meanwhile: the batch takes them in, the pure core
// (sched.Shares.Yield) says whose first chunk runs now, and those chunks
// run as a complete step of their own on a second runner (Nested: its
// own scratch, the same thread pool, never at the same time as the
// paused step). Then the paused step goes on at its next layer.
//
// Nothing changes in any output: every row of a step is computed alone,
// the paused step's sequences are not in the nested one, and the K/V
// the paused step wrote so far (its layers up to the pause) belong to
// its own sequences' pages, which nothing else reads: those pages are
// shared through the prefix cache only once the prompt is complete
// (prefilled runs after its last chunk's step), and streamed to decode
// only up to positions whose step finished (chunked). The nested step
// follows the batch's rules: pages grow through the pool (a sequence
// that cannot grow now waits for the step boundary, where growAll can
// preempt for it), the KV quota (a tenant over its share while another
// waits waits for the boundary), the tenants' shares are charged, the
// grammar budget is the nested step's own; cancels are seen at step
// boundaries only, as before. One level only: a nested step never
// yields.

// YieldForwarder is a Forwarder whose steps can pause inside.
type YieldForwarder interface {
	Forwarder
	// ForwardBetween is Forward calling between(l) at the step's
	// pause points: after layer l's attention, and after layer l for
	// every layer but the last; a model may pause inside layer l too
	// (model.Runner pauses between pieces of a long attention).
	ForwardBetween(steps []Step, between func(layer int)) []StepResult
	// Nested is a forwarder with scratch of its own on the same threads,
	// for the steps run inside between.
	Nested() Forwarder
}

// forward runs one step on fwd; a step with prompt chunks may yield to
// prompts that arrive during it (yieldTo).
func (s *batch) forward(fwd Forwarder, steps []Step, members []*seq) []StepResult {
	s.yielded = false
	yf, ok := fwd.(YieldForwarder)
	if !ok || s.arrivals == nil {
		return fwd.Forward(steps)
	}
	var tenants []string
	for _, q := range members {
		if !q.decoded && !slices.Contains(tenants, q.owner.Tenant) {
			tenants = append(tenants, q.owner.Tenant)
		}
	}
	if len(tenants) == 0 {
		// Decode tokens only: a short step, never paused.
		return fwd.Forward(steps)
	}
	s.during = s.during[:0]
	total := 0
	for _, st := range steps {
		total += len(st.Tokens)
	}
	s.nest = sched.NestFor(total, s.cfg.nestForward())
	defer func() { clear(s.during); s.during = s.during[:0] }()
	res := yf.ForwardBetween(steps, func(int) { s.yieldTo(yf, tenants) })
	s.yielded = true
	if s.arrivalMark != nil {
		s.endMark = s.arrivalMark()
	}
	return res
}

// yieldTo is a pause point of a step carrying prompt
// chunks of the tenants step: prompts that arrived since the step began
// join the batch, and the first chunks sched.Shares.YieldWithin picks
// run now as one nested step.
//
// The step's nested budget (s.nest, sched.Nest): a nested step is a
// whole forward pass, whose cost does not shrink with its tokens as the
// shares count them (every layer's weights are read for one token as for
// a chunk). So each costs a fixed
// nestForward tokens plus its own, charged to its tenants, and the
// nested steps of one paused step together cost at most the step
// itself: a tenant's burst of tiny prompts runs a few forward passes in
// another tenant's step, not one at every pause point (two a layer),
// and a light tenant's second prompt still goes at the next pause point
// (a bound of one nested step per paused step made it wait for the step
// boundary: in the crowding bench, 22-31% of the light tenant's prompts,
// the p99 of its TTFT). Prompts the budget leaves out wait for the step
// boundary.
//
// A prompt that arrives during a nested step (a light tenant's second
// prompt while its first runs nested) is taken at the same pause point
// as soon as that step returns, by the same rules and within the same
// budget, instead of at the paused step's next pause point: the paused
// step has not moved meanwhile, so this is what its next pause point
// would decide, without first waiting for the paused step's work up to
// it (a layer's FFN, an attention piece). Each round runs a nested step
// or ends, and each nested step spends at least a forward pass's fixed
// cost of the budget, so the rounds end. In the crowding bench 6-8% of
// the light tenant's prompts under a flood met such a collision (its
// second prompt arriving while its first ran nested; two diagnostic runs,
// loaded machine) and then waited 2.8-3.9 ms on average for the paused
// step's next pause point after the nested step had returned.
func (s *batch) yieldTo(yf YieldForwarder, step []string) {
	for first := true; ; first = false {
		qs := s.arrivals()
		if len(qs) > 0 {
			s.join(qs)
			s.during = append(s.during, qs...)
		} else if !first {
			return // nothing arrived during the nested step
		}
		how := StartNested
		if !first {
			how = StartAfterNested
		}
		if !s.nestAt(yf, step, how) {
			return
		}
	}
}

// nestAt is one nested step at a pause point: the first chunks of the
// step's arrivals that sched.Shares.YieldWithin picks, run now, each
// started as how. It reports whether a nested step ran.
func (s *batch) nestAt(yf YieldForwarder, step []string, how string) bool {
	var cands []*seq
	var waiting []sched.Chunk
	spent := s.nest.Left < s.nest.Forward+1
	for _, q := range s.during {
		if q.emit == nil || q.parked || q.decoded || q.recompute || q.held != nil || len(q.prompt) == 0 || q.cancelled() {
			continue
		}
		if spent {
			q.waited = StartBudget
			if slices.Contains(step, q.owner.Tenant) {
				q.waited = StartInStep // the reason with budget left too
			}
			continue
		}
		cands = append(cands, q)
		waiting = append(waiting, sched.Chunk{Tenant: q.owner.Tenant, Weight: q.weight, Tokens: min(len(q.prompt), s.cfg.ChunkTokens)})
	}
	if len(cands) == 0 {
		return false
	}
	chunk := min(s.cfg.SharedStepTokens, s.cfg.ChunkTokens)
	take, _ := s.shares.YieldWithin(step, waiting, chunk, s.nest)
	var steps []Step
	var members []*seq
	var sizes []int
	taken := map[string]int{} // each tenant's nested tokens so far
	for i, q := range cands {
		n := take[i]
		if n > 0 {
			taken[q.owner.Tenant] += n
		} else {
			switch {
			case slices.Contains(step, q.owner.Tenant):
				q.waited = StartInStep
			case taken[q.owner.Tenant] >= chunk:
				q.waited = StartSameTenant
			case s.shares.Ahead(step, q.owner.Tenant):
				q.waited = StartShare
			default:
				q.waited = StartBudget
			}
			continue
		}
		if more := kv.PagesFor(q.fed+n, s.cfg.PageSize) - len(q.table); more > 0 && !s.pages().MayTake(q.owner.Tenant, more) {
			q.waited = StartQuota
			continue // over its KV share while another tenant waits
		}
		if s.grow(q, q.fed+n) != nil {
			q.waited = StartGrow
			continue // the step boundary grows it, preempting if it must
		}
		if q.started != nil {
			q.started(how)
			q.started = nil
		}
		steps = append(steps, Step{Tokens: q.prompt[:n], Pos: q.fed, KV: q.view, NoLogits: n < len(q.prompt)})
		members = append(members, q)
		sizes = append(sizes, n)
	}
	if len(steps) == 0 {
		return false
	}
	// The budget pays for what runs (a chunk left out for its pages
	// costs nothing), and the forward pass's fixed cost is charged to
	// the nested step's tenants (one chunk each), beside their tokens.
	s.nest.Left -= s.nest.Forward
	if s.cfg.nestOnce {
		// Colocated, a's steps also carry b's later chunks and every
		// decode token, so each nested pass lengthens them for b too:
		// in the crowding bench the budget's several passes per step
		// made b's TTFT p50 1.25-1.49x of alone against 1.15-1.21x with
		// one pass (benchmarks.md). The prefill worker keeps the budget.
		s.nest.Left = 0
	}
	for i, q := range members {
		s.nest.Left -= sizes[i]
		s.shares.Charge(q.owner.Tenant, q.weight, sched.ForwardPart(s.nest.Forward, len(members), i))
	}
	// Only a prompt's first chunk runs nested: the rest take their turns
	// in the batch's steps.
	s.during = slices.DeleteFunc(s.during, func(q *seq) bool { return slices.Contains(members, q) })
	s.nestedSteps.Add(1)
	s.run(yf.Nested(), steps, members, sizes, true)
	return true
}

// nestForward is a forward pass's fixed cost in prompt tokens, for the
// nested budget and charges (sched.Nest): NestForward, which the servers
// measure at start (forwardcost.go: 5-6 on bench-15M-q8_0, 2-4 on
// bench-110M-q8_0, 14-43 on bench-15M-f32 at 64-token chunks), else a
// quarter of a chunk (tests: deterministic), which over-charged q8_0
// models and under-charged f32 ones.
func (c Config) nestForward() int {
	if c.NestForward > 0 {
		return c.NestForward
	}
	return max(c.ChunkTokens/4, 1)
}

// How a prompt's first chunk started (the first-token phases
// prefill_wait and prefill_compute split by it, prefill_wait/<how> and
// prefill_compute/<how>): what the prompt met while it waited, so an
// operator sees why a tenant's prompt waited for another's step, and
// what its steps took after. The last pause point that saw the prompt decides; a
// prompt no pause point saw is next_step or after_last_pause.
const (
	// StartNested: at a pause point of another tenant's step, as a
	// nested step (yield.go).
	StartNested = "nested"
	// StartAfterNested: nested too, at the pause point where another
	// prompt's nested step had just returned: it arrived during that
	// nested step (a tenant's second prompt while its first ran nested),
	// so it waited for that step.
	StartAfterNested = "after_nested"
	// StartNextStep: it arrived while no step that can pause ran (the
	// batch idle, between two steps, or a step with no prompt chunk)
	// and ran in the next step.
	StartNextStep = "next_step"
	// StartAfterLastPause: it arrived during a step that can pause,
	// after the step's last pause point (the last layer's FFN and the
	// output projection have none after them).
	StartAfterLastPause = "after_last_pause"
	// StartBudget: a pause point saw it when the step's nested budget
	// (sched.Nest) could not pay for its chunk.
	StartBudget = "budget"
	// StartInStep: its tenant had a chunk in the paused step.
	StartInStep = "in_step"
	// StartSameTenant: its tenant's other prompts took the tenant's
	// nested tokens at that pause point (a chunk's worth per tenant).
	StartSameTenant = "same_tenant"
	// StartShare: its tenant was not within Slack of the step's least
	// served tenant (sched.Shares.Yield).
	StartShare = "share"
	// StartQuota: its pages would take its tenant over its KV share
	// while another tenant waits.
	StartQuota = "quota"
	// StartGrow: the pool had no pages for its chunk without preempting.
	StartGrow = "grow"
	// StartPlan: it was in the batch at a step boundary and that step
	// did not carry it (the tenants' step shares, sched.Shares.Plan, or
	// the step's token budget).
	StartPlan = "plan"
)

// startHow is how q's first chunk started when a step (not a pause
// point) carries it, steps being the batch's step count before that
// step: why it waited for that step.
func (q *seq) startHow(steps int64) string {
	switch {
	case steps > q.joinedStep:
		return StartPlan
	case q.waited == "":
		return StartNextStep
	}
	return q.waited
}
