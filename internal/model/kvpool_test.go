package model

import (
	"errors"
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
	"sluice/internal/kv"
)

// newPool is a pool of the default KV type (F16).
func newPool(t *testing.T, m *Model, pages int, order kv.Order) *kv.Pool {
	return newPoolOf(t, m, pages, order, kv.F16)
}

func newPoolOf(t *testing.T, m *Model, pages int, order kv.Order, typ kv.Type) *kv.Pool {
	t.Helper()
	p, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: m.cfg.Layers, KVDim: m.cfg.KVDim(), PageSize: 4, Type: typ}, Pages: pages, Order: order})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func owner(tenant string, b byte) kv.Owner { return kv.Owner{Tenant: tenant, ID: kv.ID{b}} }

func reserve(t *testing.T, p *kv.Pool, o kv.Owner, tokens int) ([]kv.PageRef, *kv.View) {
	t.Helper()
	refs, err := p.Reserve(o, kv.PagesFor(tokens, 4))
	if err != nil {
		t.Fatal(err)
	}
	return refs, p.View(o, refs)
}

// TestRealPoolMatchesTestKV: through kv.Pool views (pages scattered by the
// free list, a second sequence batched alongside, two threads, chunks of
// 5) the logits are bitwise those of the plain test view in one pass, for
// F32 pages, F16 pages (rounded by the pool's SIMD conversion, the test
// view's by the scalar quant.FP32ToFP16) and Q8_0 pages (the pool's byte
// offsets of 34-byte blocks against the test view's packed rows).
func TestRealPoolMatchesTestKV(t *testing.T) {
	for _, c := range []struct {
		typ   kv.Type
		plain func(ps, layers, kvd int) *memKV
	}{{kv.F32, newMemKV}, {kv.F16, newMemKV16}, {kv.Q8_0, newMemKVQ8}} {
		t.Run(c.typ.String(), func(t *testing.T) { realPoolMatchesTestKV(t, c.typ, c.plain) })
	}
}

func realPoolMatchesTestKV(t *testing.T, typ kv.Type, plain func(ps, layers, kvd int) *memKV) {
	sh := shapes["llama-gqa"]
	m := mustBuild(newMemModel(sh, 21))
	rng := rand.New(rand.NewPCG(21, 21))
	a, b := randTokens(rng, 23, sh.vocab), randTokens(rng, 14, sh.vocab)
	want := m.NewRunner(nil).Forward([]Seq{{Tokens: a, KV: plain(4, sh.layers, m.cfg.KVDim()), AllLogits: true}})[0].Logits

	pool := newPoolOf(t, m, 32, kv.FIFO, typ)
	// Interleave the two reservations page by page so neither is contiguous.
	_, vb := reserve(t, pool, owner("t2", 2), 4)
	_, va := reserve(t, pool, owner("t1", 1), len(a))
	if err := vb.Ensure(len(b)); err != nil {
		t.Fatal(err)
	}
	par := kernels.NewParallel(2)
	defer par.Close()
	r := m.NewRunner(par)
	var got []float32
	for pos, ib := 0, 0; pos < len(a); {
		n := min(5, len(a)-pos)
		seqs := []Seq{{Tokens: a[pos : pos+n], Pos: pos, KV: va, AllLogits: true}}
		if ib < len(b) {
			seqs = append(seqs, Seq{Tokens: b[ib : ib+1], Pos: ib, KV: vb})
			ib++
		}
		res := r.Forward(seqs)
		for _, x := range res {
			if x.Err != nil {
				t.Fatal(x.Err)
			}
		}
		got = append(got, res[0].Logits...)
		pos += n
	}
	if !bitsEqual(got, want) {
		t.Fatalf("logits through kv.Pool differ from the plain view (first at %d)", firstDiff(got, want))
	}
}

// TestStaleViewFailsClosed (I3 from the model's side): a sequence whose
// pages were released and handed to another tenant gets an error on its
// next step, never the other tenant's K/V.
func TestStaleViewFailsClosed(t *testing.T) {
	sh := shapes["llama-gqa"]
	m := mustBuild(newMemModel(sh, 22))
	rng := rand.New(rand.NewPCG(22, 22))
	a, b := randTokens(rng, 10, sh.vocab), randTokens(rng, 10, sh.vocab)
	solo := m.NewRunner(nil).Forward([]Seq{{Tokens: b, KV: newMemKV16(4, sh.layers, m.cfg.KVDim())}})[0].Logits

	// LIFO: the pages A releases are exactly the ones B gets next.
	pool := newPool(t, m, 3, kv.LIFO)
	oa, ob := owner("alice", 1), owner("bob", 2)
	refsA, va := reserve(t, pool, oa, len(a)+1)
	r := m.NewRunner(nil)
	if res := r.Forward([]Seq{{Tokens: a, KV: va}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if err := pool.Release(oa, refsA); err != nil {
		t.Fatal(err)
	}
	_, vb := reserve(t, pool, ob, len(b))
	res := r.Forward([]Seq{{Tokens: []int32{5}, Pos: len(a), KV: va}, {Tokens: b, KV: vb}})
	if res[0].Err == nil || res[0].Logits != nil {
		t.Fatal("a step through a released, reused page table succeeded")
	}
	var me *Error
	if !errors.As(res[0].Err, &me) || me.Code != CodeKV {
		t.Fatalf("err %v: want code %s", res[0].Err, CodeKV)
	}
	var v *kv.Violation
	if !errors.As(res[0].Err, &v) {
		t.Fatalf("err %v does not carry the pool's violation", res[0].Err)
	}
	t.Logf("stale view refused: %v", res[0].Err)
	// The pool quarantines a page on any violation (I8), so the new owner
	// may be failed too; what must never happen is a success with logits
	// other than its own.
	if res[1].Err == nil && !bitsEqual(res[1].Logits, solo) {
		t.Fatal("the new owner's sequence succeeded with different logits")
	}
	if res[1].Err != nil && !errors.As(res[1].Err, &v) {
		t.Fatalf("the new owner's sequence failed without a KV violation: %v", res[1].Err)
	}
}

// TestForeignTableFailsClosed (I3): a view claiming another owner's pages
// cannot read or write them.
func TestForeignTableFailsClosed(t *testing.T) {
	sh := shapes["qwen2-tied"]
	m := mustBuild(newMemModel(sh, 23))
	pool := newPool(t, m, 4, kv.FIFO)
	refs, vb := reserve(t, pool, owner("bob", 2), 8)
	r := m.NewRunner(nil)
	if res := r.Forward([]Seq{{Tokens: []int32{1, 2, 3, 4, 5}, KV: vb}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	thief := pool.View(owner("mallory", 3), refs)
	res := r.Forward([]Seq{{Tokens: []int32{7}, Pos: 5, KV: thief}})
	if !errors.Is(res[0].Err, kv.ErrForeignOwner) {
		t.Fatalf("err = %v, want a foreign-owner violation", res[0].Err)
	}
}
