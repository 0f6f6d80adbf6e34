package kv

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// Small geometry: 2 layers, 4 floats per row, 4 slots per page.
var tg = Geometry{Layers: 2, KVDim: 4, PageSize: 4, Type: F32}

func newPool(t testing.TB, pages int, mut ...func(*Config)) *Pool {
	t.Helper()
	cfg := Config{Geometry: tg, Pages: pages, Order: LIFO, Lease: time.Second}
	for _, f := range mut {
		f(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func owner(tenant string, n byte) Owner { return Owner{Tenant: tenant, ID: ID{n}} }

// row is the value an owner writes: a function of who wrote it and where,
// so a read can tell whose data it got. Bits are kept finite (never NaN, so
// never the poison pattern) and never zero (never the zero scrub).
func row(o Owner, gen uint64, layer, pos int, isV bool, dim int) []float32 {
	out := make([]float32, dim)
	for j := range out {
		var b [40]byte
		copy(b[:16], o.ID[:])
		binary.LittleEndian.PutUint64(b[16:], gen)
		binary.LittleEndian.PutUint32(b[24:], uint32(layer))
		binary.LittleEndian.PutUint32(b[28:], uint32(pos))
		binary.LittleEndian.PutUint32(b[32:], uint32(j))
		if isV {
			b[36] = 1
		}
		h := fnv32(append(b[:], o.Tenant...))
		out[j] = math.Float32frombits(h&0x3F7FFFFF | 0x00800000)
	}
	return out
}

func fnv32(b []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	return h
}

// fill writes positions [from, to) in every layer, layer-major as a prefill
// step does.
func fill(t testing.TB, v *View, gens []PageRef, from, to int) {
	t.Helper()
	ps := v.PageSize()
	for l := range tg.Layers {
		for pos := from; pos < to; pos++ {
			g := gens[pos/ps].Gen
			if err := v.Put(l, pos, row(v.Owner(), g, l, pos, false, tg.KVDim), row(v.Owner(), g, l, pos, true, tg.KVDim)); err != nil {
				t.Fatalf("put layer %d pos %d: %v", l, pos, err)
			}
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// wantViolation asserts the I8 triple: typed error of kind k, a counted
// metric, and (when quarantined is true) the page out of service.
func wantViolation(t *testing.T, p *Pool, err error, k Kind, page uint32, quarantined bool) {
	t.Helper()
	var v *Violation
	if !errors.As(err, &v) {
		t.Fatalf("want a *Violation of kind %s, got %v", k, err)
	}
	if v.Kind != k {
		t.Fatalf("want kind %s, got %s (%v)", k, v.Kind, v)
	}
	if st := p.Stats(); st.Violations[k] == 0 {
		t.Fatalf("violation %s not counted: %v", k, st.Violations)
	}
	if quarantined {
		if v.Page != page {
			t.Fatalf("violation names page %d, want %d", v.Page, page)
		}
		if s := tagState(p.pages[page].tag.Load()); s != Quarantined {
			t.Fatalf("page %d is %v after a %s violation, want quarantined", page, s, k)
		}
	}
	if err := p.audit(); err != nil {
		t.Fatal(err)
	}
}

func pageFloats(p *Pool, pg uint32) []float32 {
	return p.f32[int(pg)*p.pageElems : int(pg+1)*p.pageElems]
}
