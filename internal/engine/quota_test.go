package engine

import (
	"fmt"
	"strings"
	"testing"

	"sluice/internal/kv"
	"sluice/internal/sample"
	"sluice/internal/sched"
)

// quotaRig drives the batch directly (no goroutine, no admission): the
// test adds sequences with their reservations, registers waiting
// requests, and turns the batch one step at a time, so every assertion
// is about one step of the real code.
type quotaRig struct {
	t      testing.TB
	cfg    Config
	pool   pagePool
	s      *scheduler
	seed   int
	victim []string // tenants of the preempted sequences, in order
}

func newQuotaRig(t testing.TB, pages int, set ...func(*Config)) *quotaRig {
	cfg := toyConfig(newToy(), pages)
	for _, f := range set {
		f(&cfg)
	}
	cfg = cfg.withDefaults()
	cfg.NoWatermark = true
	pool, err := cfg.newPool()
	if err != nil {
		t.Fatal(err)
	}
	r := &quotaRig{t: t, cfg: cfg, pool: pool}
	r.s = newDrivenScheduler(cfg, pool, func() {})
	t.Cleanup(r.s.stop)
	return r
}

// add joins a sequence of tenant with a reservation of its prompt plus
// min(maxTokens, a page), as Colocated.reserve takes.
func (r *quotaRig) add(tenant string, promptLen, maxTokens int) *seq {
	r.t.Helper()
	r.seed++
	owner := kv.Owner{Tenant: tenant, ID: newID()}
	p := prompt(r.seed, promptLen)
	table, err := r.pool.Reserve(owner, kv.PagesFor(promptLen+min(maxTokens, r.cfg.PageSize), r.cfg.PageSize))
	if err != nil {
		r.t.Fatal(err)
	}
	samp, err := r.cfg.formats.sampler(r.t.Context(), tenant, sample.Params{}, p)
	if err != nil {
		r.t.Fatal(err)
	}
	q := colocatedSeq(owner, table, p, 0, maxTokens, true, samp)
	q.weight = 1
	q.emit = func(outcome) {}
	q.onPreempt = func(string) { r.victim = append(r.victim, tenant) }
	r.s.add(q)
	return q
}

func (r *quotaRig) held(tenant string) int {
	for _, h := range r.s.pages().Holders {
		if h.Tenant == tenant {
			return h.Held
		}
	}
	return 0
}

func (r *quotaRig) free() int { return rawPool(r.pool).AvailablePages() }

// When the pool is dry, the victim is the tenant holding the most per
// weight, not the latest arrival: a's three sequences against b's one,
// b's the latest.
func TestKVQuotaVictimIsTenantOverShare(t *testing.T) {
	r := newQuotaRig(t, 16)
	for range 3 {
		r.add("a", 4, 100)
	}
	r.add("b", 4, 100)
	for i := 0; len(r.victim) == 0; i++ {
		if i > 100 {
			t.Fatal("the pool never ran dry")
		}
		r.s.turn()
	}
	if r.victim[0] != "a" {
		t.Fatalf("first victim of tenant %s, want a (12 of 16 pages against b's 4)", r.victim[0])
	}
}

// Work-conserving, then capped: tenant a alone takes the whole pool; once
// b waits, a's sequences (but the oldest, the batch's progress guarantee)
// never take another page, however many steps pass.
func TestKVQuotaCapsGrowthWhileOthersWait(t *testing.T) {
	r := newQuotaRig(t, 16)
	var as []*seq
	for range 4 {
		as = append(as, r.add("a", 4, 200))
	}
	for i := 0; r.held("a") < 16; i++ {
		if i > 100 {
			t.Fatalf("a alone holds %d of 16 pages: the quota is not work-conserving", r.held("a"))
		}
		r.s.turn()
	}
	b := kv.Owner{Tenant: "b", ID: newID()}
	r.s.setWant(b, 1, 1)
	for step := range 40 {
		oldest := r.s.oldest()
		before := map[*seq]int{}
		for _, q := range as {
			before[q] = len(q.table)
		}
		r.s.turn()
		for i, q := range as {
			if q != oldest && len(q.table) > before[q] {
				t.Fatalf("step %d: a's sequence %d grew from %d to %d pages while b waits (a holds %d, share %d)",
					step, i, before[q], len(q.table), r.held("a"), r.s.pages().Share("a"))
			}
		}
	}
	if r.free() < 1 {
		t.Fatalf("b still finds no page after 40 steps")
	}
	// b got its pages and left the queue: a takes the pool again.
	r.s.dropWant(b)
	for i := 0; r.free() > 0; i++ {
		if i > 100 {
			t.Fatalf("%d pages stay free with nobody waiting", r.free())
		}
		r.s.turn()
	}
}

// A waiting tenant owed pages within its share reclaims them at the next
// step, from the tenant over its share, even when nothing grows: a's
// three sequences hold 15 of 16 pages, fully reserved (prompt 16 +
// 4 tokens), and b waits for 3.
func TestKVQuotaReclaimsForWaitingTenant(t *testing.T) {
	r := newQuotaRig(t, 16)
	for range 3 {
		r.add("a", 16, 4)
	}
	r.s.turn()
	if r.free() != 1 {
		t.Fatalf("%d pages free, want 1", r.free())
	}
	b := kv.Owner{Tenant: "b", ID: newID()}
	r.s.setWant(b, 1, 3)
	r.s.turn()
	if r.free() < 3 {
		t.Fatalf("%d pages free a step after b waited for 3 (a holds %d, share %d)", r.free(), r.held("a"), r.s.pages().Share("a"))
	}
	if len(r.victim) != 1 || r.victim[0] != "a" {
		t.Fatalf("preempted %v, want one of a's sequences", r.victim)
	}
	// a, still over its share, does not take the pages back while b waits.
	for step := range 3 {
		r.s.turn()
		if r.free() < 3 {
			t.Fatalf("step %d: a took back the pages b waits for (%d free)", step, r.free())
		}
	}
}

// A sequence admitted (its pages reserved) for a tenant over its share
// while another waits yields at once when it joins the batch: the
// admission reserved it before the batch could see who waits.
func TestKVQuotaJoinOverShareYields(t *testing.T) {
	r := newQuotaRig(t, 16)
	for range 2 {
		r.add("a", 16, 4) // 10 pages
	}
	r.s.turn()
	b := kv.Owner{Tenant: "b", ID: newID()}
	r.s.setWant(b, 1, 4) // fits: 6 free
	q := r.add("a", 4, 4)
	r.s.turn()
	if !q.parked || r.free() < 4 {
		t.Fatalf("a's new sequence joined over a's share while b waits: parked %v, %d pages free", q.parked, r.free())
	}
	// Nobody waits: it resumes.
	r.s.dropWant(b)
	r.s.turn()
	if q.parked {
		t.Fatal("a's sequence stays parked with nobody waiting")
	}
}

// Prompt chunks take the steps one tenant at a time: b's prompt,
// arriving after five of a's, gets a chunk in the second step, not after
// a's five, and a's oldest prompt goes first. The batch is shared, so
// each step carries one chunk (sched.Shares.Short).
func TestPrefillBudgetTakesTenantsInTurn(t *testing.T) {
	r := newQuotaRig(t, 64)
	var as []*seq
	for range 5 {
		as = append(as, r.add("a", 20, 4))
	}
	b := r.add("b", 20, 4)
	r.s.turn()
	if as[0].fed == 0 {
		t.Fatal("the oldest prompt got no chunk")
	}
	r.s.turn()
	if b.fed == 0 {
		t.Fatal("b's prompt got no chunk of the first two steps behind a's five")
	}
}

// The oldest sequence is exempt even while preempted: a's only sequence
// needs 11 of 16 pages, more than a's share of 8 while b waits, and still
// resumes (else nothing would ever run it while b keeps waiting).
func TestKVQuotaOldestResumesOverShare(t *testing.T) {
	r := newQuotaRig(t, 16)
	a := r.add("a", 40, 4)
	r.s.turn()
	r.s.setWant(kv.Owner{Tenant: "b", ID: newID()}, 1, 2)
	r.s.preempt(a)
	r.s.dropParked()
	r.s.turn()
	if a.parked {
		t.Fatal("the oldest sequence stays parked over its share: nothing runs it")
	}
}

// Step shares (sched.Shares) in the batch: a's five long prompts have
// been running alone; b's short prompt then runs in a step of its own
// (none of a's chunks lengthen it), and while b decodes, a's chunks take
// at most one chunk of each step (a shared step); with shared steps as
// long as any (SharedStepTokens = StepTokens), at most a's half.
func TestPrefillLightTenantRunsAlone(t *testing.T) {
	for _, long := range []bool{false, true} {
		t.Run(fmt.Sprintf("long=%v", long), func(t *testing.T) { testPrefillLightTenantRunsAlone(t, long) })
	}
}

func testPrefillLightTenantRunsAlone(t *testing.T, long bool) {
	r := newQuotaRig(t, 64, func(c *Config) {
		if long {
			c.SharedStepTokens = c.StepTokens
		}
	})
	var as []*seq
	for range 5 {
		as = append(as, r.add("a", 40, 4))
	}
	fed := func() int { return fedTokens(as) }
	for range 3 {
		before := fed()
		r.s.turn()
		if got := fed() - before; got != r.cfg.StepTokens {
			t.Fatalf("a alone ran %d prompt tokens in a step, budget %d", got, r.cfg.StepTokens)
		}
	}
	b := r.add("b", 8, 40)
	before := fed()
	r.s.turn()
	if b.fed == 0 || fed() != before {
		t.Fatalf("b's prompt ran %d tokens and a's %d in the same step: want b's alone", b.fed, fed()-before)
	}
	for !b.decoded {
		r.s.turn()
	}
	most := r.cfg.ChunkTokens
	if long {
		most = (r.cfg.StepTokens - 1) / 2 // a's part, b's decode token taken
	}
	for range 3 {
		before := fed()
		r.s.turn()
		if got := fed() - before; got > most || got == 0 {
			t.Fatalf("a ran %d prompt tokens in a step b decodes in, want 1 to %d", got, most)
		}
	}
}

// Short steps while shared: a tenant's flood, alone, runs whole-budget
// steps; from the step another tenant joins the batch until sharedRecent
// steps after it left, every step carries at most one chunk of prompt
// tokens, so the next prompt of a tenant that comes and goes waits
// behind a step of one chunk, not the whole budget; then a, alone
// again, has the whole budget back. Decode tokens are not bounded by it.
func TestPrefillShortStepsWhileShared(t *testing.T) {
	r := newQuotaRig(t, 1024)
	var as []*seq
	for range 6 {
		as = append(as, r.add("a", 600, 2))
	}
	fed := func() int { return fedTokens(as) }
	step := func() int {
		before := fed()
		r.s.turn()
		return fed() - before
	}
	for i := range 3 {
		if got := step(); got != r.cfg.StepTokens {
			t.Fatalf("step %d: a alone ran %d prompt tokens, want the whole budget %d", i, got, r.cfg.StepTokens)
		}
	}
	b := r.add("b", 3, 2)
	for !b.decoded && b.emit != nil {
		if got := step(); got > r.cfg.ChunkTokens {
			t.Fatalf("a ran %d prompt tokens in a step b is in, want at most one chunk (%d)", got, r.cfg.ChunkTokens)
		}
	}
	for b.emit != nil {
		r.s.turn()
	}
	// b is gone: a's steps stay short for sharedRecent steps (counted
	// from b's last step), then take the whole budget.
	short := 0
	for got := step(); got != r.cfg.StepTokens; got = step() {
		if got > r.cfg.ChunkTokens {
			t.Fatalf("a ran %d prompt tokens, between one chunk (%d) and the budget", got, r.cfg.ChunkTokens)
		}
		if short++; short > sharedRecent {
			t.Fatalf("a's steps still short %d steps after b left (sharedRecent %d)", short, sharedRecent)
		}
	}
	if short < sharedRecent-2 {
		t.Fatalf("a's steps short only %d steps after b left, want about sharedRecent (%d)", short, sharedRecent)
	}
}

// Priority for the less served tenant is bounded: when b floods too, its
// counter catches up with a's and both tenants' prompts advance; a is
// never passed over for long.
func TestPrefillSharesNoStarvation(t *testing.T) {
	r := newQuotaRig(t, 320)
	var as, bs []*seq
	for range 3 {
		as = append(as, r.add("a", 60, 2))
	}
	r.s.turn()
	for range 3 {
		bs = append(bs, r.add("b", 300, 2))
	}
	fed := func(qs []*seq) int {
		n := 0
		for _, q := range qs {
			n += q.fed
		}
		return n
	}
	idle := 0
	for step := range 30 {
		before := fed(as)
		r.s.turn()
		if fed(as) == before && fed(as) < 180 {
			idle++
		} else {
			idle = 0
		}
		if limit := int(r.s.shares.Lag+r.s.shares.Slack)/r.cfg.ChunkTokens + 2; idle > limit {
			t.Fatalf("step %d: a's prompts passed over %d steps in a row while b floods (bound %d)", step, idle, limit)
		}
	}
	if fed(bs) == 0 {
		t.Fatal("b's prompts never ran")
	}
}

// SharedStepTokens out of its bounds (1 to the step budget) is refused
// with a sentence naming the budget.
func TestSharedStepTokensBounds(t *testing.T) {
	for _, n := range []int{-1, 25} {
		cfg := toyConfig(newToy(), 64)
		cfg.SharedStepTokens = n
		if _, err := NewColocated(cfg); err == nil || !strings.Contains(err.Error(), "step budget of 24") {
			t.Fatalf("SharedStepTokens %d: %v, want refused", n, err)
		}
	}
	cfg := toyConfig(newToy(), 64)
	cfg.SharedStepTokens = 24
	c, err := NewColocated(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeWithin(t, c)
}

// A flood that starts right after another tenant's prompts has priority
// for a few shared steps, not a few whole budgets: b ran 600 prompt
// tokens, then a's flood arrives (new to the batch, so Lag behind b) and
// b's next short prompt waits at most for a to catch up, which is
// counted in one-chunk steps: Lag is 4 shared steps' worth, so b's
// prompt runs within 4 + 1 (Slack) + 1 steps. With Lag a whole budget's
// worth (4 x 24 tokens) it waits ~19 steps of 5 tokens.
func TestPrefillFloodPriorityIsAFewSharedSteps(t *testing.T) {
	r := newQuotaRig(t, 1024)
	var bs []*seq
	for range 3 {
		bs = append(bs, r.add("b", 200, 1))
	}
	for bs[2].emit != nil {
		r.s.turn()
	}
	for range 6 {
		r.add("a", 200, 2)
	}
	r.s.turn()
	b := r.add("b", 3, 2)
	for waited := 0; b.fed == 0; waited++ {
		if bound := 4 + 1 + 1; waited > bound {
			t.Fatalf("b's prompt waited %d steps for a's new flood to catch up, want at most %d (Lag of 4 one-chunk steps, Slack, the step in progress)", waited, bound)
		}
		r.s.turn()
	}
}

// fedTokens is the prompt tokens the sequences have run so far.
func fedTokens(qs []*seq) int {
	n := 0
	for _, q := range qs {
		n += q.fed
	}
	return n
}

// cacheIdle leaves n idle prefix-cache pages of tenant in the rig's pool:
// reserved, written, sealed, cached, released.
func (r *quotaRig) cacheIdle(tenant string, n int) {
	r.t.Helper()
	cacheIdleIn(r.t, rawPool(r.pool), r.cfg.PageSize, tenant, n)
}

// cacheIdleIn leaves n idle prefix-cache pages of tenant in p, pages of
// pageSize tokens.
func cacheIdleIn(t testing.TB, p *kv.Pool, pageSize int, tenant string, n int) {
	t.Helper()
	o := kv.Owner{Tenant: tenant, ID: newID()}
	refs, err := p.Reserve(o, n)
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, p.Geometry().PageBytes())
	for i, ref := range refs {
		if err := p.WritePage(o, ref, pageSize, img); err != nil {
			t.Fatal(err)
		}
		if err := p.Seal(o, refs[i:i+1]); err != nil {
			t.Fatal(err)
		}
		if ok, err := p.Insert(o, ref, kv.BlockKey{byte(i), tenant[0]}); !ok || err != nil {
			t.Fatalf("insert: %v %v", ok, err)
		}
	}
	if err := p.Release(o, refs); err != nil {
		t.Fatal(err)
	}
}

// A waiting tenant is owed what its request could not get, counted as its
// reservation counts it: the free pages and the idle cache entries it may
// evict. b caches 6 pages of 32 and a 2; a's twelve sequences hold the
// other 24 (8 over its share). b waits for 12 pages, within its share of
// 16; with its 6 cached it would hold 18, over its pool share, so it may
// evict only its own idle entries, not a's within a's cache share.
// Counted against every idle page, b was owed only until two preemptions
// left 4 + 8 idle "available", and its reservation (4 free + its own 6)
// still did not fit while a held 20 pages; now a is preempted until b's
// request fits (three: 6 free + 6).
func TestKVQuotaReclaimCountsWhatTheWaiterMayEvict(t *testing.T) {
	r := newQuotaRig(t, 32)
	r.cacheIdle("b", 6)
	r.cacheIdle("a", 2)
	for range 12 {
		r.add("a", 4, 4) // 2 pages
	}
	r.s.turn()
	p := rawPool(r.pool)
	if st := p.Stats(); st.Free != 0 || st.CacheIdle != 8 {
		t.Fatalf("%d pages free, %d idle cached; want 0 and 8", st.Free, st.CacheIdle)
	}
	b := kv.Owner{Tenant: "b", ID: newID()}
	r.s.setWant(b, 1, 12)
	r.s.turn()
	if got := p.AvailableFor("b", 12); got < 12 || len(r.victim) != 3 {
		t.Fatalf("a step after b waited for 12 pages: %d it may take, %d of a's sequences preempted (a holds %d, share %d); want 12 and 3",
			got, len(r.victim), r.held("a"), r.s.pages().Share("a"))
	}
	refs, err := p.Reserve(b, 12)
	if err != nil {
		t.Fatalf("b's reservation after the reclaim: %v", err)
	}
	if err := p.Release(b, refs); err != nil {
		t.Fatal(err)
	}
}

// The batch's quota and the pool's share check have one idea of a share
// (TestShareEngineAndPoolAgree drives the rules on a pool; this checks
// the batch's own snapshot): c holds only idle cached pages, b holds
// nothing and waits, a runs. Every tenant's share is the same number in
// the batch's snapshot and in the pool, and the pool's count of what a
// tenant holds is its running pages plus its idle cached ones. Before,
// the batch left c out of the contenders (a's share 16 of 32, the pool's
// 10) and the pool left b out (its a share 16, the batch's 10).
func TestKVQuotaShareIsThePools(t *testing.T) {
	r := newQuotaRig(t, 32, func(c *Config) {
		c.CacheWeight = func(t string) int { return map[string]int{"b": 2, "d": 2}[t] }
	})
	r.cacheIdle("c", 4)
	for range 4 {
		r.add("a", 4, 4) // 2 pages each
	}
	r.s.setWant(kv.Owner{Tenant: "b", ID: newID()}, 2, 12)
	r.s.turn()
	p, pool := r.s.pages(), rawPool(r.pool)
	want := map[string][3]int{"a": {8, 0, 8}, "b": {0, 0, 16}, "c": {0, 4, 8}} // running, idle cached, share
	for x, w := range want {
		var h sched.Holder
		for _, y := range p.Holders {
			if y.Tenant == x {
				h = y
			}
		}
		held, share := pool.ShareOf(x)
		if h.Held != w[0] || h.Cached != w[1] || p.Share(x) != w[2] || share != w[2] || held != w[0]+w[1] {
			t.Errorf("tenant %s: the batch counts %d running + %d idle cached, share %d; the pool %d held, share %d; want %d + %d, share %d",
				x, h.Held, h.Cached, p.Share(x), held, share, w[0], w[1], w[2])
		}
	}
	// d (weight 2) holds nothing and is in no snapshot yet: the
	// admission's checks count it at its weight, as the pool does (with
	// weight 1 its share was 32/5 = 6).
	if _, share := pool.ShareOf("d"); share != 10 || !r.s.withinShare("d", 10) || r.s.withinShare("d", 11) {
		t.Errorf("d's share: the pool's %d, the admission's within 10 pages %v, within 11 %v; want 10, true, false",
			share, r.s.withinShare("d", 10), r.s.withinShare("d", 11))
	}
}
