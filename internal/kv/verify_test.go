package kv

import (
	"errors"
	"fmt"
	"testing"
)

// --kv-verify sample: a cached page whose bytes change behind the pool's
// back while a sequence reads it is found by the per-step sweep within
// ceil(Pages/VerifyPages) steps, quarantined, and the reader's next read
// fails; no step hashes more than its budget.
func TestVerifyStepFindsCorruptCachedPage(t *testing.T) {
	for _, budget := range []int{1, 3} {
		for _, victim := range []int{0, 5} { // first and last page of the chain
			t.Run(fmt.Sprintf("budget%d/page%d", budget, victim), func(t *testing.T) {
				const pages = 16
				p := newPool(t, pages, func(c *Config) { c.Verify, c.VerifyPages = VerifySample, budget })
				a := owner("t1", 1)
				refs, keys := cachedSeq(t, p, a, prompt(1, 6))
				_ = p.Release(a, refs)
				b := owner("t1", 2)
				hits, err := p.Lookup(b, keys)
				if err != nil || len(hits) != len(keys) {
					t.Fatalf("lookup: %d hits, %v", len(hits), err)
				}
				// A private sealed page of b's too: the sweep covers it.
				own, _ := p.Extend(b, hits, 1)
				v := p.View(b, own)
				fill(t, v, own, len(keys)*tg.PageSize, len(keys)*tg.PageSize+2)
				if err := p.Seal(b, own[len(keys):]); err != nil {
					t.Fatal(err)
				}
				// A clean pool passes a whole cycle.
				bound := (pages + budget - 1) / budget
				for range bound {
					before := p.Stats().Verified
					if err := p.VerifyStep(); err != nil {
						t.Fatalf("intact pool: %v", err)
					}
					if n := p.Stats().Verified - before; n > uint64(budget) {
						t.Fatalf("one step re-hashed %d pages, budget %d", n, budget)
					}
				}
				if got := p.Stats().Verified; got < uint64(len(own)) {
					t.Fatalf("a full cycle re-hashed %d pages, %d are sealed", got, len(own))
				}
				if _, _, _, err := v.Block(0, victim); err != nil {
					t.Fatal(err)
				}
				pageFloats(p, hits[victim].Page)[2] += 1 // behind the pool's back
				steps := 0
				for ; steps < bound; steps++ {
					if err := p.VerifyStep(); err != nil {
						wantViolation(t, p, err, KindDigestMismatch, hits[victim].Page, true)
						break
					}
				}
				if steps == bound {
					t.Fatalf("corruption not found within %d steps", bound)
				}
				if _, _, _, err := v.Block(0, victim); !errors.Is(err, ErrQuarantined) {
					t.Fatalf("the reader's next read of the corrupt page: %v, want quarantined", err)
				}
				if got, _ := p.Lookup(owner("t1", 3), keys); len(got) > victim {
					t.Fatalf("the corrupt page is still found by a lookup (%d hits)", len(got))
				}
			})
		}
	}
}

// The sweep covers private sealed pages as well, and hit/off do no sweep.
func TestVerifyStepModes(t *testing.T) {
	for _, mode := range []Verify{VerifyOff, VerifyHit, VerifySample, VerifyAll} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPool(t, 4, func(c *Config) { c.Verify = mode })
			a := owner("t1", 1)
			refs, _ := p.Reserve(a, 2)
			fill(t, p.View(a, refs), refs, 0, 2*tg.PageSize)
			_ = p.Seal(a, refs)
			pageFloats(p, refs[1].Page)[0] += 1
			var err error
			for range 4 {
				if err = p.VerifyStep(); err != nil {
					break
				}
			}
			swept := mode == VerifySample || mode == VerifyAll
			if swept {
				wantViolation(t, p, err, KindDigestMismatch, refs[1].Page, true)
			} else if err != nil || p.Stats().Verified != 0 {
				t.Fatalf("%v swept: %v, %d verified", mode, err, p.Stats().Verified)
			}
		})
	}
}

// --kv-verify off trusts the seal of a cached page on a hit; hit (the
// zero value) re-hashes it.
func TestVerifyOffSkipsHitCheck(t *testing.T) {
	p := newPool(t, 4, func(c *Config) { c.Verify = VerifyOff })
	a := owner("t1", 1)
	refs, keys := cachedSeq(t, p, a, prompt(1, 2))
	_ = p.Release(a, refs)
	pageFloats(p, refs[1].Page)[3] += 1
	got, err := p.Lookup(owner("t1", 2), keys)
	if err != nil || len(got) != 2 || p.Stats().Verified != 0 {
		t.Fatalf("off: %d hits, %v, %d verified", len(got), err, p.Stats().Verified)
	}
}

func TestParseVerify(t *testing.T) {
	for s, want := range map[string]Verify{"off": VerifyOff, "hit": VerifyHit, "": VerifyHit, "sample": VerifySample, "all": VerifyAll, "always": VerifyAll} {
		if v, err := ParseVerify(s); err != nil || v != want {
			t.Errorf("%q: %v %v", s, v, err)
		}
	}
	if _, err := ParseVerify("sometimes"); err == nil {
		t.Error("a bad mode parsed")
	}
}

// BenchmarkVerifyStep: one --kv-verify sample step (one sealed page
// re-hashed) in the page shape of bench-15M (6 layers, KV row 288 floats,
// 16 slots: 221,184 bytes a page), over a pool of 256 sealed pages, so
// the pages come from memory as they would between decode steps.
func BenchmarkVerifyStep(b *testing.B) {
	g := Geometry{Layers: 6, KVDim: 288, PageSize: 16}
	p, err := New(Config{Geometry: g, Pages: 256, Verify: VerifySample})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	o := owner("t", 1)
	refs, _ := p.Reserve(o, 256)
	for _, r := range refs {
		_ = p.MarkWritten(o, r, g.PageSize)
	}
	if err := p.Seal(o, refs); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(g.PageBytes()))
	b.ResetTimer()
	for range b.N {
		if err := p.VerifyStep(); err != nil {
			b.Fatal(err)
		}
	}
}
