package sched

import (
	"cmp"
	"math"
	"slices"
)

// Step shares: which prompt chunks one forward step carries when several
// tenants have sequences in the batch. Pure like Core and Pages: the
// batch describes the step's candidates, Plan says how many tokens each
// runs, the batch reports what ran (Charge); the simulator drives the same
// batch.
//
// Every decoding sequence runs its token every step (decode first, as
// before); the rules are about the prompt chunks, which are what make a
// step long:
//
//   - Service. Each tenant with sequences in the batch has a counter of
//     the tokens the batch ran for it (prompt and decode), compared per
//     unit of weight (the key file's weight=). No counter lags the
//     greatest by more than Lag, and a tenant new to the batch starts Lag
//     behind: a light or returning tenant gets priority for at most Lag
//     tokens, and nobody banks more credit by being idle or light for a
//     long while (after the virtual token counter of Sheng et al.,
//     "Fairness in Serving Large Language Models", OSDI 2024, applied
//     per step).
//   - Least served first. Among the tenants with a prompt chunk waiting,
//     those within Slack tokens (per weight) of the least served one run
//     their chunks this step, taking turns (each one's oldest chunk, then
//     each one's next); the others' chunks wait for a later step. So a
//     light tenant's short prompt runs in a step a flooding tenant's
//     1k-token prompts do not lengthen, and a flooding tenant's chunks run
//     in every step where no lighter tenant has one. Two tenants both
//     flooding stay within Slack of each other and share steps as before.
//   - Part. While more than one tenant has sequences in the batch, one
//     tenant's prompt chunks take at most its weighted part of the step's
//     budget (budget x w / W, W over the tenants in the batch, at least
//     one chunk): a step another tenant is decoding in is at most that
//     much longer for a flood. Alone, a tenant takes the whole budget
//     (work-conserving: one tenant's throughput does not change).
//   - Short steps while shared. A prompt that arrives waits for the step
//     in progress, and a flood alone takes the whole budget (four chunks
//     by default): that step is what a co-tenant's next prompt waits for.
//     So while another tenant is in the batch, or was within the last
//     Recent steps (its next prompt is likely soon: a tenant repeating
//     requests leaves the prompt batch between them), a step's prompt
//     chunks take at most Short tokens together (one chunk by default).
//     A tenant alone for Recent steps has the whole budget again; one
//     that never shared the batch never loses it. The cost is the
//     flood's per-step overhead over more, shorter steps, paid only
//     while another tenant is around.
//
// The bound: a tenant's prompt chunk waits at most until it is the least
// served within Slack, and every step that passes it over runs only chunks
// of tenants less served than it, whose counters grow by what they run,
// and which start within Lag of the most served; so it waits at most for
// the others to run about Lag + Slack tokens per unit of weight, as long as
// its counter grows slower than theirs meanwhile. Its own decoding
// sequences grow it too: a tenant decoding many sequences at once can be
// served more per step by its decodes alone than the others by their
// chunks, and its new prompt then waits until enough of its own decodes
// end (a tenant's prompts never wait on another tenant's service beyond
// that bound, but may wait on its own; after Sheng et al.'s counters,
// where decode tokens are service too). Outputs do
// not depend on any of it (batch-invariant kernels: a chunk's size and
// its step's company change no result).

// Chunk is one prompt chunk a step could run: its tenant, the tenant's
// weight, and the tokens it would run (its sequence's prompt left, at most
// the chunk size). Candidates come in the batch's order (oldest first).
type Chunk struct {
	Tenant string
	Weight int // >= 1; 0 means 1
	Tokens int
}

// Member is a tenant with sequences in the batch and its weight.
type Member struct {
	Tenant string
	Weight int
}

// Shares is the per-tenant service state of one batch.
type Shares struct {
	// Slack is how far (tokens per unit of weight) a tenant's counter may
	// be over the least served one's for its chunks to share the step.
	Slack int64
	// Lag bounds how far (tokens per unit of weight) a counter may lag
	// the greatest.
	Lag int64
	// Short, when > 0, bounds a step's prompt tokens (every tenant's
	// together) while the batch is shared: another tenant than the
	// step's was in it within the last Recent steps (Syncs).
	Short  int
	Recent int
	served map[string]int64 // tokens run, per unit of weight
	// rem is each tenant's tokens charged that do not make a whole unit
	// of its weight yet (Charge carries them to the next charge).
	rem map[string]int64
	// steps counts Syncs; seen is the step each tenant was last in the
	// batch, kept Recent steps.
	steps uint64
	seen  map[string]uint64
}

// Sync records the tenants in the batch now. Every counter is lifted to
// within Lag of the greatest; a tenant the batch has no counter for
// starts there (Lag behind), and one that left is forgotten once it is
// there (it would start there again anyway). So a tenant that was light
// or away has at most Lag tokens per unit of weight of priority, never
// more, however long it was away.
func (s *Shares) Sync(members []Member) {
	if s.served == nil {
		s.served = map[string]int64{}
	}
	most, any := int64(0), false
	for _, v := range s.served {
		if !any || v > most {
			most = v
		}
		any = true
	}
	floor := most - s.Lag
	in := make(map[string]bool, len(members))
	s.steps++
	if s.seen == nil {
		s.seen = map[string]uint64{}
	}
	for t, at := range s.seen {
		if s.steps-at > uint64(max(s.Recent, 0)) {
			delete(s.seen, t)
		}
	}
	for _, m := range members {
		in[m.Tenant] = true
		s.seen[m.Tenant] = s.steps
		if _, ok := s.served[m.Tenant]; !ok {
			s.served[m.Tenant] = floor
		}
	}
	for t, v := range s.served {
		switch {
		case v <= floor && !in[t]:
			delete(s.served, t)
			delete(s.rem, t)
		case v < floor:
			s.served[t] = floor
		}
	}
}

// Charge records that the step ran tokens for tenant (of weight): its
// counter grows by tokens / weight, the remainder carried to its next
// charge, so over any run of charges the counter grows by exactly the
// whole units of the tokens' sum (a light charge counts once its
// carried tokens make a unit). Rounding each charge up instead made a
// weight act smaller than it is: weight 3 as 64/22 = 2.9 at 64-token
// chunks, and as 1 for a decode step's one token a sequence.
func (s *Shares) Charge(tenant string, weight, tokens int) {
	if s.served == nil {
		s.served = map[string]int64{}
	}
	if s.rem == nil {
		s.rem = map[string]int64{}
	}
	w := int64(max(weight, 1))
	n := s.rem[tenant] + int64(max(tokens, 0))
	s.served[tenant] += n / w
	if n%w == 0 {
		delete(s.rem, tenant)
	} else {
		s.rem[tenant] = n % w
	}
}

// Served is tenant's counter (tokens per unit of weight), for tests.
func (s *Shares) Served(tenant string) int64 { return s.served[tenant] }

// Shared reports whether the step Plan decides is a shared one: Short
// is set and the batch has held more than one tenant (tenants, with the
// members of the last Sync) within the last Recent steps.
func (s *Shares) Shared(tenants map[string]bool) bool {
	if s.Short <= 0 {
		return false
	}
	n := 0
	for t := range s.seen {
		if !tenants[t] {
			n++
		}
	}
	return n+len(tenants) > 1
}

// Plan decides the step's prompt chunks: the order they take the budget
// (indexes into chunks) and the tokens each runs (0: not this step).
// budget is the step's token budget left after the decode tokens (at
// most Short of it is used while the batch is shared, Shared); members
// the tenants with sequences in the batch; minChunk the least part a
// tenant may take (one chunk).
func (s *Shares) Plan(budget, minChunk int, members []Member, chunks []Chunk) (order []int, take []int) {
	take = make([]int, len(chunks))
	order = make([]int, 0, len(chunks))
	tenants := map[string]bool{}
	for _, m := range members {
		tenants[m.Tenant] = true
	}
	for _, c := range chunks {
		tenants[c.Tenant] = true
	}
	if s.Shared(tenants) {
		budget = min(budget, s.Short)
	}
	if len(tenants) < 2 {
		// One tenant: every chunk in order, the whole budget (Short
		// while another tenant was recently in the batch).
		for i, c := range chunks {
			n := min(c.Tokens, budget)
			if n > 0 {
				take[i], budget = n, budget-n
			}
			order = append(order, i)
		}
		return order, take
	}
	// The tenants with chunks, in the order of their first chunk.
	var names []string
	weight := map[string]int{}
	for _, c := range chunks {
		if _, ok := weight[c.Tenant]; !ok {
			names = append(names, c.Tenant)
		}
		weight[c.Tenant] = max(c.Weight, 1)
	}
	if len(names) == 0 {
		return order, take
	}
	least := s.served[names[0]]
	for _, t := range names[1:] {
		least = min(least, s.served[t])
	}
	runs := map[string]bool{}
	for _, t := range names {
		runs[t] = s.served[t]-least <= s.Slack
	}
	// Parts: budget x w / W over the tenants in the batch.
	total := 0
	seen := map[string]bool{}
	for _, m := range members {
		if !seen[m.Tenant] {
			seen[m.Tenant] = true
			total += max(m.Weight, 1)
		}
	}
	for _, t := range names {
		if !seen[t] {
			seen[t] = true
			total += weight[t]
		}
	}
	part := map[string]int{}
	for _, t := range names {
		part[t] = max(budget*weight[t]/total, min(minChunk, budget))
	}
	// Turns: round r takes the r-th chunk of each running tenant, the
	// tenants least served first (ties: first chunk first).
	byService := slices.Clone(names)
	slices.SortStableFunc(byService, func(a, b string) int {
		switch x, y := s.served[a], s.served[b]; {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	rank := map[string]int{}
	for i, t := range byService {
		rank[t] = i
	}
	type slot struct{ round, tenant, i int }
	var slots []slot
	nth := map[string]int{}
	for i, c := range chunks {
		if !runs[c.Tenant] {
			continue
		}
		slots = append(slots, slot{nth[c.Tenant], rank[c.Tenant], i})
		nth[c.Tenant]++
	}
	slices.SortStableFunc(slots, func(a, b slot) int {
		if a.round != b.round {
			return a.round - b.round
		}
		return a.tenant - b.tenant
	})
	used := map[string]int{}
	for _, sl := range slots {
		c := chunks[sl.i]
		n := min(c.Tokens, budget, part[c.Tenant]-used[c.Tenant])
		if n > 0 {
			take[sl.i] = n
			budget -= n
			used[c.Tenant] += n
		}
		order = append(order, sl.i)
	}
	return order, take
}

// Yield decides, at a pause point of a step in progress, which
// prompts that arrived during the step run their first chunk now, as a
// nested step of their own, instead of waiting for the step to end (the
// engine pauses the step after a layer's attention or between two
// layers; outputs do not change,
// batch invariance). step is the tenants with prompt chunks in the
// paused step; waiting the first chunks that arrived, in the batch's
// order; chunk the most tokens one tenant's nested chunk runs.
//
// A waiting tenant's first chunk runs when its tenant has no chunk in
// the paused step and is under its share: its counter (a tenant new to
// the batch starts Lag behind the most served, as Sync would start it)
// within Slack of the least served tenant of the step, so Plan would
// have run its chunk beside theirs had it come before the step. Every
// such tenant's waiting chunks run, in order, chunk tokens of each tenant
// at most (its second prompt too when its first is short: one pass for
// both, not two): a tenant waits at most until the next pause point of
// another tenant's step (a layer's attention or its FFN), counted in the
// step's structure, not in time, while the step's nested budget lasts
// (YieldWithin).
// A paused step with no prompt chunk (decode tokens only) is short and
// never yields. take[i] is the tokens chunk i runs (0: it waits for the
// step boundary); the tenants that run enter the batch's counters (Charge
// them after the nested step) and count as seen for Shared.
func (s *Shares) Yield(step []string, waiting []Chunk, chunk int) (take []int) {
	take, _ = s.YieldWithin(step, waiting, chunk, Nest{Left: math.MaxInt / 2})
	return take
}

// Nest is the nested work a paused step may still take, in tokens, with
// a forward pass's fixed cost counted: a nested step is a whole forward
// pass, whose cost does not shrink with its tokens (every layer's
// weights are read for one token as for a chunk), so it costs Forward
// plus its tokens. A paused step of T tokens starts with Left = Forward
// + T (NestFor): its nested steps together cost at most the step
// itself, however many tenants arrive and however small their prompts.
// Without a budget a burst of 1-token prompts made every pause point of
// another tenant's step (two a layer) run a forward pass charged a token
// each; now it runs at most Left / (Forward + 1) of them.
type Nest struct {
	Left    int
	Forward int
}

// NestFor is the budget of a paused step of tokens tokens, a forward
// pass's fixed cost being forward tokens.
func NestFor(tokens, forward int) Nest {
	return Nest{Left: max(forward, 0) + max(tokens, 0), Forward: max(forward, 0)}
}

// YieldWithin is Yield within the paused step's nested budget: the
// chunks Yield would run, least served first (then in the waiting
// order), while Forward plus their tokens fit in n.Left; a chunk that does not fit waits for the step
// boundary (and takes no turn here: a later, smaller one may still fit).
// cost is what the nested step takes from the budget (0 when nothing
// runs); only the tenants that run enter the counters.
func (s *Shares) YieldWithin(step []string, waiting []Chunk, chunk int, n Nest) (take []int, cost int) {
	take = make([]int, len(waiting))
	if len(step) == 0 || chunk <= 0 {
		return take, 0
	}
	in := make(map[string]bool, len(step))
	least, any := int64(0), false
	for _, t := range step {
		in[t] = true
		if v := s.served[t]; !any || v < least {
			least, any = v, true
		}
	}
	cost = max(n.Forward, 0)
	// Least served first, as in Plan: when the budget cannot pay for
	// every waiting tenant's chunk, the tenants furthest behind get it,
	// whatever the order their prompts arrived in (ties, and a tenant's
	// own chunks, in that order). In arrival order, a third tenant's
	// 1-token prompt a moment ahead of a light tenant's chunk took the
	// budget the chunk needed, and what it left never fit the chunk
	// again in that step (TestYieldWithinLeastServedFirst).
	counters := make([]int64, len(waiting))
	order := make([]int, len(waiting))
	for i, c := range waiting {
		counters[i], order[i] = s.counter(c.Tenant), i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(counters[i], counters[j]) })
	done := map[string]int64{} // the tenants that run: where they enter
	used := map[string]int{}   // their tokens in the pass
	for _, i := range order {
		c := waiting[i]
		if in[c.Tenant] || c.Tokens <= 0 {
			continue
		}
		v := counters[i]
		if v > least+s.Slack {
			continue
		}
		k := min(c.Tokens, chunk-used[c.Tenant])
		if k <= 0 || cost+k > n.Left {
			continue
		}
		done[c.Tenant] = v
		used[c.Tenant] += k
		take[i] = k
		cost += k
	}
	if len(done) == 0 {
		return take, 0
	}
	if s.served == nil {
		s.served = map[string]int64{}
	}
	if s.seen == nil {
		s.seen = map[string]uint64{}
	}
	for t, v := range done {
		s.served[t], s.seen[t] = v, s.steps
	}
	return take, cost
}

// Ahead reports that tenant's counter is beyond Slack of the least
// served tenant of step (Yield does not run its chunk for that reason).
func (s *Shares) Ahead(step []string, tenant string) bool {
	least, any := int64(0), false
	for _, t := range step {
		if v := s.served[t]; !any || v < least {
			least, any = v, true
		}
	}
	return any && s.counter(tenant) > least+s.Slack
}

// ForwardPart is chunk i's part of a nested forward pass's fixed cost
// forward, split over the pass's n chunks (one per tenant, Yield): the
// parts add up to forward, the first forward % n take one more. The
// batch charges each chunk's tenant its tokens and its part, so the
// tenants whose prompts pause another tenant's step pay for the extra
// pass, not only for their tokens.
func ForwardPart(forward, n, i int) int {
	if n <= 0 || forward <= 0 {
		return 0
	}
	p := forward / n
	if i < forward%n {
		p++
	}
	return p
}

// counter is tenant's service counter, or where Sync would start a
// tenant the batch has none for: Lag behind the most served.
func (s *Shares) counter(tenant string) int64 {
	if v, ok := s.served[tenant]; ok {
		return v
	}
	most, any := int64(0), false
	for _, v := range s.served {
		if !any || v > most {
			most, any = v, true
		}
	}
	return most - s.Lag
}
