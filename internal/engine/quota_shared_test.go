package engine

import (
	"slices"
	"testing"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

// addCached joins a sequence of tenant whose prompt p reads its leading
// full pages from the prefix cache pc (as Colocated.reserve does) and
// seals its own when its prompt is computed.
func (r *quotaRig) addCached(pc *prefixCache, tenant string, p []int32, maxTokens int) *seq {
	r.t.Helper()
	owner := kv.Owner{Tenant: tenant, ID: newID()}
	req := &Request{Tenant: tenant, Prompt: p}
	keys := pc.keys(req)
	hits := pc.lookup(owner, keys, len(p))
	n := kv.PagesFor(len(p)+min(maxTokens, r.cfg.PageSize), r.cfg.PageSize)
	table, err := r.pool.Extend(owner, hits, n-len(hits))
	if err != nil {
		r.t.Fatal(err)
	}
	samp, err := r.cfg.formats.sampler(r.t.Context(), tenant, sample.Params{}, p)
	if err != nil {
		r.t.Fatal(err)
	}
	cached := len(hits) * r.cfg.PageSize
	q := colocatedSeq(owner, table, p, cached, maxTokens, true, samp)
	q.weight = 1
	q.emit = func(outcome) {}
	q.onPreempt = func(string) { r.victim = append(r.victim, tenant) }
	q.public = min(pc.publicCount(keys), len(hits)) // as Colocated.Submit
	from := len(hits)
	q.prefilled = func(q *seq) { pc.insert(owner, q.table, keys, from) }
	q.relookup = func() []kv.PageRef {
		hits := pc.lookup(owner, keys, len(p))
		from = max(from, len(hits))
		q.public = min(pc.publicCount(keys), len(hits))
		return hits
	}
	r.s.add(q)
	return q
}

// prefixCache turns the rig's prefix cache on, with the rig's config as
// set so far (a public prefix), and returns it.
func (r *quotaRig) prefixCache() *prefixCache {
	r.t.Helper()
	r.cfg.PrefixCache = true
	pc := newPrefixCache(r.cfg, r.pool)
	if pc == nil {
		r.t.Fatal("no prefix cache on the rig's pool")
	}
	return pc
}

// turnUntil turns the batch until done, failing with what after limit
// turns.
func (r *quotaRig) turnUntil(limit int, what string, done func() bool) {
	r.t.Helper()
	for i := 0; !done(); i++ {
		if i > limit {
			r.t.Fatal(what)
		}
		r.s.turn()
	}
}

// A preempted sequence's rebuild starts from the prefix cache's pages of
// its prompt (red team: resume ignored the cache and recomputed them),
// and its tokens are those of the run that was never preempted.
func TestResumeReadsThePrefixCache(t *testing.T) {
	r := newQuotaRig(t, 32)
	pc := r.prefixCache()
	p := prompt(5, 17) // 4 full pages, the last token alone
	collect := func(q *seq, out *[]int32) {
		q.emit = func(o outcome) {
			if !o.done && o.err == nil {
				*out = append(*out, o.token)
			}
		}
	}
	var ref, got []int32
	first := r.addCached(pc, "a", p, 6)
	collect(first, &ref)
	r.turnUntil(50, "the reference never ended", func() bool { return first.emit == nil })
	q := r.addCached(pc, "a", p, 6)
	collect(q, &got)
	for q.generated < 2 {
		r.s.turn()
	}
	r.s.preempt(q)
	r.s.dropParked()
	if q.fed != 0 {
		t.Fatalf("preempted with %d positions fed", q.fed)
	}
	r.s.turn() // resumes
	if q.parked {
		t.Fatal("not resumed")
	}
	if q.recomputed != 17+1-16 {
		t.Fatalf("%d positions recomputed, want 2: the 16 cached ones are read, not computed", q.recomputed)
	}
	r.turnUntil(50, "the resumed sequence never ended", func() bool { return q.emit == nil })
	if !slices.Equal(got, ref) {
		t.Fatalf("resumed from the cache %v, never preempted %v", got, ref)
	}
}

// The public prefix's pages (--shared-prefix-file) count in no tenant's
// share: b's request reads the 2 public pages a computed and holds 3 of
// its own; counted as b's, every tenant using the prefix would look over
// its share by the same pages. After a preemption its rebuilt pages are
// all its own, and all count.
func TestKVQuotaPublicPrefixInNoShare(t *testing.T) {
	r := newQuotaRig(t, 32)
	pub := prompt(3, 8)
	r.cfg.PublicPrefix = pub
	pc := r.prefixCache()
	mk := func(seed int) []int32 { return append(slices.Clone(pub), prompt(seed, 8)...) }
	a := r.addCached(pc, "a", mk(11), 4)
	r.turnUntil(20, "a's prompt was never computed", func() bool { return a.fed >= 16 })
	b := r.addCached(pc, "b", mk(12), 4)
	if b.public != 2 {
		t.Fatalf("b read %d public pages, want 2", b.public)
	}
	r.s.turn()
	if got := r.held("b"); got != 3 {
		t.Fatalf("b holds %d pages by the quota, want 3 (5 in its table, 2 of them the public prefix's)", got)
	}
	r.s.preempt(b)
	r.s.dropParked()
	if b.public != 0 {
		t.Fatalf("a preempted sequence keeps %d public pages", b.public)
	}
}

// The quota counts the pages a tenant holds in the pool, not the entries
// of its sequences' page tables: prefix-cache pages shared by several of
// a tenant's sequences are one page each. Counted per sequence, a tenant
// whose requests share a system prompt (the cache working as meant) looks
// several times over its share, yields its sequences and is preempted
// for another tenant while it holds less than its share of the pool.
//
// Tenant a runs three requests with the same 12-token prompt (3 pages of
// 4, the first 2 shared from the cache by the second and third): 3 + 2 +
// 2 distinct pages of 16, while b waits for 2. a is within its share (8)
// and b's pages are free: the sequences that join while b waits do not
// yield, and nobody is preempted.
func TestKVQuotaCountsSharedPrefixPagesOnce(t *testing.T) {
	r := newQuotaRig(t, 16)
	pc := r.prefixCache()
	p := prompt(7, 12)
	first := r.addCached(pc, "a", p, 4)
	r.turnUntil(20, "the first prompt was never computed", func() bool { return first.fed >= len(p) })
	// b waits for 2 pages: a's share is now 8 of the 16.
	b := kv.Owner{Tenant: "b", ID: newID()}
	r.s.setWant(b, 1, 2)
	var qs []*seq
	for range 2 {
		q := r.addCached(pc, "a", p, 4)
		if q.fed != 8 {
			t.Fatalf("a later request read %d cached tokens, want 8", q.fed)
		}
		qs = append(qs, q)
	}
	for range 3 {
		r.s.turn()
		if len(r.victim) != 0 {
			t.Fatalf("preempted %v: a's sequences share a cached prefix, hold 8 distinct pages, within a's share %d, and %d are free for b's 2 (the quota counts %d)",
				r.victim, r.s.pages().Share("a"), r.free(), r.held("a"))
		}
	}
	distinct := map[uint32]bool{}
	for _, q := range append([]*seq{first}, qs...) {
		for _, ref := range q.table {
			distinct[ref.Page] = true
		}
	}
	if got := r.held("a"); got != len(distinct) {
		t.Fatalf("the quota counts %d pages held by a, which holds %d distinct pages of the pool", got, len(distinct))
	}
}
