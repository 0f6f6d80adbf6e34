package engine

import (
	"slices"
	"testing"

	"sluice/internal/kv"
	"sluice/internal/sched"
)

// quotaCrowd is a batch as the crowding bench leaves it: tenant a's
// sequences reading one cached 3-page prefix, b's own, and a request of
// c waiting for pages; every prompt computed.
func quotaCrowd(t testing.TB) *quotaRig {
	r := newQuotaRig(t, 1024)
	pc := r.prefixCache()
	shared := prompt(7, 12)
	tail := func(i int) []int32 { return append(append([]int32(nil), shared...), prompt(100+i, 6)...) }
	first := r.addCached(pc, "a", tail(0), 500)
	qs := []*seq{first}
	// It seals the prefix the others read.
	r.turnUntil(20, "the first prompt was never computed", func() bool { return first.decoded })
	for i := range 7 {
		qs = append(qs, r.addCached(pc, "a", tail(1+i), 500))
	}
	for range 2 {
		qs = append(qs, r.add("b", 10, 500))
	}
	r.turnUntil(100, "the prompts were never computed", func() bool {
		return !slices.ContainsFunc(qs, func(q *seq) bool { return !q.decoded })
	})
	r.s.setWant(kv.Owner{Tenant: "c", ID: newID()}, 1, 2)
	return r
}

// The quota's snapshot runs a few times a step (growAll asks it for each
// sequence crossing a page, reclaim and publishPages every cycle): once
// its scratch has grown it allocates nothing, shared prefix pages
// counted once per tenant included (the crowding profile found a map per
// call, 14% of the engine's allocations). Publishing an unchanged
// snapshot allocates nothing either.
func TestQuotaSnapshotAllocatesNothing(t *testing.T) {
	r := quotaCrowd(t)
	p := r.s.pages()
	if len(p.Holders) != 3 {
		t.Fatalf("holders %+v, want a, b and c", p.Holders)
	}
	entries := 0
	for _, q := range r.s.active {
		if q.owner.Tenant == "a" {
			entries += len(q.table)
		}
	}
	if a := p.Holders[0]; a.Tenant != "a" || a.Held != entries-7*3 {
		t.Fatalf("a holds %+v with %d page-table entries, 7 of its 8 sequences reading the first one's 3 prefix pages", a, entries)
	}
	r.s.publishPages()
	if n := testing.AllocsPerRun(100, func() { r.s.pages() }); n != 0 {
		t.Fatalf("pages() allocates %.1f times a call", n)
	}
	if n := testing.AllocsPerRun(100, r.s.publishPages); n != 0 {
		t.Fatalf("publishing an unchanged snapshot allocates %.1f times a call", n)
	}
	// A change is published (a copy, not the scratch).
	r.s.setWant(kv.Owner{Tenant: "d", ID: newID()}, 1, 3)
	r.s.publishPages()
	got := r.s.held.Load()
	d := slices.IndexFunc(got.Holders, func(h sched.Holder) bool { return h.Tenant == "d" })
	if len(got.Holders) != 4 || d < 0 || got.Holders[d].Wants != 3 {
		t.Fatalf("published %+v after d began to wait", got.Holders)
	}
	for i := range r.s.pages().Holders {
		r.s.holdersBuf[i].Wants = 99
	}
	if got.Holders[d].Wants != 3 {
		t.Fatal("the published snapshot shares the scratch of pages()")
	}
	// Two tenants waiting (their order in the snapshot is a map's):
	// still nothing published again while nothing changes.
	if n := testing.AllocsPerRun(100, r.s.publishPages); n != 0 {
		t.Fatalf("publishing an unchanged snapshot with two waiting tenants allocates %.1f times a call", n)
	}
}

// BenchmarkQuotaSnapshot is one pages() and one publishPages, as a cycle
// without preemptions runs them at least (go test -bench QuotaSnapshot
// -benchmem ./internal/engine/).
func BenchmarkQuotaSnapshot(b *testing.B) {
	r := quotaCrowd(b)
	b.ReportAllocs()
	for b.Loop() {
		r.s.pages()
		r.s.publishPages()
	}
}
