package kv

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestSizing(t *testing.T) {
	for _, c := range []struct{ tokens, ps, want int }{{0, 16, 0}, {1, 16, 1}, {16, 16, 1}, {17, 16, 2}, {1048576, 16, 65536}} {
		if got := PagesFor(c.tokens, c.ps); got != c.want {
			t.Errorf("PagesFor(%d,%d)=%d want %d", c.tokens, c.ps, got, c.want)
		}
	}
	// stories260K: 5 layers, 4 KV heads x 8 dims: 5*32*2*4 = 1280 B/token,
	// 20480 B per 16-slot page.
	g := Geometry{Layers: 5, KVDim: 32, PageSize: 16, Type: F32}
	if g.PageBytes() != 20480 {
		t.Fatalf("PageBytes %d", g.PageBytes())
	}
	if got := SizeFromBytes(g, 512<<20); got != 512<<20/20480 {
		t.Errorf("SizeFromBytes 512MiB = %d", got)
	}
	if got := SizeFromTokens(Geometry{Layers: 1, KVDim: 1, Type: F32}, 33); got != 3 {
		t.Errorf("SizeFromTokens with default page size = %d, want 3", got)
	}
	for s, want := range map[string]int64{"512MiB": 512 << 20, "2GiB": 2 << 30, "1.5GB": 1500000000, "64M": 64 << 20, "1048576": 1048576, " 10 KB ": 10000, "3b": 3} {
		got, err := ParseBytes(s)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "MiB", "12XB", "-1GiB", "1e99TB", "1.2.3"} {
		if _, err := ParseBytes(s); err == nil {
			t.Errorf("ParseBytes(%q) accepted", s)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{Geometry: Geometry{Layers: 0, KVDim: 4, Type: F32}, Pages: 1},
		{Geometry: tg, Pages: 0},
		{Geometry: tg, Pages: 1, Scrub: 7},
		{Geometry: tg, Pages: 1, Order: 3},
		{Geometry: tg, Pages: 1, Lease: -time.Second},
	} {
		_, err := New(c)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeBadConfig {
			t.Errorf("New(%+v) = %v, want %s", c, err, CodeBadConfig)
		}
	}
}

func TestReserveAllOrNothing(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t1", 1)
	if _, err := p.Reserve(a, 5); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("reserve 5 of 4: %v", err)
	}
	if p.FreePages() != 4 {
		t.Fatalf("a failed reservation took pages: %d free", p.FreePages())
	}
	refs, err := p.Reserve(a, 3)
	if err != nil || len(refs) != 3 {
		t.Fatal(refs, err)
	}
	if _, err := p.Reserve(a, 2); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("reserve 2 of 1: %v", err)
	}
	if p.FreePages() != 1 {
		t.Fatalf("%d free", p.FreePages())
	}
	if err := p.Release(a, refs); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// I3: the generation changes on every allocation, so a page reused at once
// (LIFO) carries a tag the old table cannot match.
func TestGenerationsNeverRepeat(t *testing.T) {
	p := newPool(t, 2)
	seen := map[PageRef]bool{}
	var last PageRef
	for i := range 100 {
		refs, err := p.Reserve(owner("t", byte(i)), 1)
		if err != nil {
			t.Fatal(err)
		}
		r := refs[0]
		if seen[r] {
			t.Fatalf("(page, gen) %v handed out twice", r)
		}
		if i > 0 && r.Page == last.Page && r.Gen <= last.Gen {
			t.Fatalf("generation did not advance: %v after %v", r, last)
		}
		seen[r], last = true, r
		if err := p.Release(owner("t", byte(i)), refs); err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) != 100 {
		t.Fatal(len(seen))
	}
}

func TestOrder(t *testing.T) {
	for _, c := range []struct {
		o        Order
		sameNext bool
	}{{LIFO, true}, {FIFO, false}} {
		p := newPool(t, 4, func(c2 *Config) { c2.Order = c.o })
		a := owner("t", 1)
		r, _ := p.Reserve(a, 1)
		p.Release(a, r)
		r2, _ := p.Reserve(a, 1)
		if (r2[0].Page == r[0].Page) != c.sameNext {
			t.Errorf("order %v: released page %d, next reservation got %d", c.o, r[0].Page, r2[0].Page)
		}
	}
}

// I4: the forward pass writes layer by layer; layer l sees exactly the slots
// written in layer l so far, never a slot written only in another layer.
func TestPutBlockPerLayerExtent(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t", 1)
	refs, _ := p.Reserve(a, 2)
	v := p.View(a, refs)
	// positions 0..5 in layer 0 only
	for pos := range 6 {
		g := refs[pos/4].Gen
		if err := v.Put(0, pos, row(a, g, 0, pos, false, 4), row(a, g, 0, pos, true, 4)); err != nil {
			t.Fatal(err)
		}
	}
	k, val, n, err := v.Block(0, 1)
	if err != nil || n != 2 {
		t.Fatalf("block 1 layer 0: n=%d err=%v, want 2 slots", n, err)
	}
	for i := range n {
		pos := 4 + i
		if !sameBits(k[i*4:(i+1)*4], row(a, refs[1].Gen, 0, pos, false, 4)) || !sameBits(val[i*4:(i+1)*4], row(a, refs[1].Gen, 0, pos, true, 4)) {
			t.Fatalf("slot %d reads back wrong", i)
		}
	}
	if len(k) != 8 || cap(k) != 8 {
		t.Fatalf("block slice len %d cap %d: must not reach past the written rows", len(k), cap(k))
	}
	// layer 1 has nothing yet: reading it is an unwritten read.
	_, _, _, err = v.Block(1, 0)
	wantViolation(t, p, err, KindUnwrittenRead, refs[0].Page, true)
}

func TestPutRejectsGapsAndRange(t *testing.T) {
	p := newPool(t, 4)
	a := owner("t", 1)
	refs, _ := p.Reserve(a, 1)
	v := p.View(a, refs)
	r := make([]float32, 4)
	if err := v.Put(0, 4, r, r); !errors.Is(err, ErrBadRange) {
		t.Fatalf("put past the reservation: %v", err)
	}
	if err := v.Put(2, 0, r, r); !errors.Is(err, ErrBadRange) {
		t.Fatalf("put to layer 2 of 2: %v", err)
	}
	if err := v.Put(0, 0, r[:3], r); !errors.Is(err, ErrBadRange) {
		t.Fatalf("short row: %v", err)
	}
	err := v.Put(0, 2, r, r)
	wantViolation(t, p, err, KindBadRange, refs[0].Page, true)
}

// I7: a released page is scrubbed before anyone else can get it.
func TestScrubModes(t *testing.T) {
	for _, c := range []struct {
		mode ScrubMode
		want func(float32) bool
	}{
		{ScrubZero, func(f float32) bool { return math.Float32bits(f) == 0 }},
		{ScrubPoison, func(f float32) bool { return math.Float32bits(f) == PoisonBits }},
	} {
		p := newPool(t, 2, func(cfg *Config) { cfg.Scrub = c.mode })
		a := owner("a", 1)
		refs, _ := p.Reserve(a, 2)
		fill(t, p.View(a, refs), refs, 0, 8)
		if err := p.Release(a, refs); err != nil {
			t.Fatal(err)
		}
		for i, f := range p.f32 {
			if !c.want(f) {
				t.Fatalf("scrub %v: float %d is %#x after release", c.mode, i, math.Float32bits(f))
			}
		}
		if s := p.Stats(); s.Scrubbed != 2 {
			t.Fatalf("scrubbed %d pages, want 2", s.Scrubbed)
		}
	}
	// Off really leaves the data (so the benchmarks measure something).
	p := newPool(t, 1, func(cfg *Config) { cfg.Scrub = ScrubOff })
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	fill(t, p.View(a, refs), refs, 0, 1)
	p.Release(a, refs)
	if p.f32[0] == 0 {
		t.Fatal("ScrubOff scrubbed")
	}
}

// The incident, replayed at the pool: B reserves the page A just released
// (LIFO) and reads it without writing. With the safeguards on, it gets an
// error, never A's data.
func TestIncidentStaleSlotsNeverReachNewOwner(t *testing.T) {
	p := newPool(t, 2)
	a, b := owner("tenantA", 1), owner("tenantB", 2)
	ra, _ := p.Reserve(a, 2)
	fill(t, p.View(a, ra), ra, 0, 8)
	p.Release(a, ra)
	rb, _ := p.Reserve(b, 2)
	if rb[0].Page != ra[1].Page {
		t.Fatalf("LIFO did not reuse: %v after %v", rb, ra)
	}
	vb := p.View(b, rb)
	// B wrote one token (as the incident's one-token placeholder did).
	g := rb[0].Gen
	if err := vb.Put(0, 0, row(b, g, 0, 0, false, 4), row(b, g, 0, 0, true, 4)); err != nil {
		t.Fatal(err)
	}
	k, _, n, err := vb.Block(0, 0)
	if err != nil || n != 1 || !sameBits(k, row(b, g, 0, 0, false, 4)) {
		t.Fatalf("B's own slot: n=%d err=%v", n, err)
	}
	_, _, _, err = vb.Block(0, 1)
	wantViolation(t, p, err, KindUnwrittenRead, rb[1].Page, true)
}

// The switches exist for the incident demo; check they really switch.
func TestUnsafeHooks(t *testing.T) {
	p := newPool(t, 2, func(c *Config) { c.Scrub = ScrubOff; c.Unsafe.NoExtentCheck = true })
	a, b := owner("a", 1), owner("b", 2)
	ra, _ := p.Reserve(a, 1)
	fill(t, p.View(a, ra), ra, 0, 4)
	p.Release(a, ra)
	rb, _ := p.Reserve(b, 1)
	k, _, n, err := p.View(b, rb).Block(0, 0)
	if err != nil || n != 4 || !sameBits(k[:4], row(a, ra[0].Gen, 0, 0, false, 4)) {
		t.Fatalf("NoExtentCheck+ScrubOff should expose A's stale rows (the incident): n=%d err=%v", n, err)
	}

	q := newPool(t, 2)
	ra, _ = q.Reserve(a, 1)
	fill(t, q.View(a, ra), ra, 0, 2)
	q.SetChecks(false)
	if _, _, n, err := q.View(b, ra).Block(0, 0); err != nil || n != 2 {
		t.Fatalf("with owner checks off a foreign view reads: n=%d err=%v", n, err)
	}
	q.SetChecks(true)
	_, _, _, err = q.View(b, ra).Block(0, 0)
	wantViolation(t, q, err, KindForeignOwner, ra[0].Page, true)
}
