package kv

import (
	"fmt"
	"testing"
)

// holdBenchPool is a pool of the given size half held by a flooding
// tenant's sequences, a quarter cached by it (idle) and an eighth cached
// by a second tenant, the rest free: the crowding case AvailableFor
// decides on.
func holdBenchPool(tb testing.TB, pages int) *Pool {
	tb.Helper()
	g := Geometry{Layers: 1, KVDim: 2, PageSize: 4, Type: F32}
	p, err := New(Config{Geometry: g, Pages: pages, Order: LIFO, Scrub: ScrubOff})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	img := make([]byte, g.PageBytes())
	cache := func(tenant string, n int) {
		o := Owner{Tenant: tenant, ID: ID{0xca}}
		refs, err := p.Reserve(o, n)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range refs {
			if err := p.WritePage(o, r, g.PageSize, img); err != nil {
				tb.Fatal(err)
			}
		}
		if err := p.Seal(o, refs); err != nil {
			tb.Fatal(err)
		}
		for i, r := range refs {
			var k BlockKey
			copy(k[:], fmt.Sprintf("%s/%d", tenant, i))
			if ok, err := p.Insert(o, r, k); err != nil || !ok {
				tb.Fatalf("insert %d: %v %v", i, ok, err)
			}
		}
		if err := p.Release(o, refs); err != nil {
			tb.Fatal(err)
		}
	}
	cache("flood", pages/4)
	cache("b", pages/8)
	for i := range pages / 64 {
		if _, err := p.Reserve(Owner{Tenant: "flood", ID: ID{byte(i), byte(i >> 8), 1}}, 32); err != nil {
			tb.Fatal(err)
		}
	}
	return p
}

// BenchmarkAvailableFor is one colocated admission check on a pool half
// held by a flooding tenant, with both tenants' cached entries: the
// tenant over its share (the eviction budget path) and the one within.
// Run at 1k, 16k and 128k pages.
func BenchmarkAvailableFor(b *testing.B) {
	for _, pages := range []int{1 << 10, 1 << 14, 1 << 17} {
		p := holdBenchPool(b, pages)
		for _, tenant := range []string{"flood", "b"} {
			b.Run(fmt.Sprintf("pages=%d/%s", pages, tenant), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					p.AvailableFor(tenant, 4)
				}
			})
		}
	}
}
