package kv

import (
	"errors"
	"testing"
	"time"
)

// Each test forges one violation and checks the I8 triple: a typed error,
// the page quarantined, a counter of the kind. None of them returns data.

// I3: A's table outlives A's release; B got the page (LIFO). A's stale
// generation must not read B's data.
func TestViolationStaleGeneration(t *testing.T) {
	p := newPool(t, 1)
	a, b := owner("a", 1), owner("b", 2)
	ra, _ := p.Reserve(a, 1)
	va := p.View(a, ra)
	fill(t, va, ra, 0, 2)
	if _, _, _, err := va.Block(0, 0); err != nil { // warm the view's owner cache
		t.Fatal(err)
	}
	p.Release(a, ra)
	rb, _ := p.Reserve(b, 1)
	fill(t, p.View(b, rb), rb, 0, 3)
	k, val, n, err := va.Block(0, 0)
	if k != nil || val != nil || n != 0 {
		t.Fatal("a stale read returned data")
	}
	if !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("got %v", err)
	}
	wantViolation(t, p, err, KindStaleGeneration, rb[0].Page, true)
	// B's request now fails closed too, and releases normally.
	if _, _, _, err := p.View(b, rb).Block(0, 0); !errors.Is(err, ErrQuarantined) {
		t.Fatalf("owner of a quarantined page reads: %v", err)
	}
	if err := p.Release(b, rb); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// I3: a stale table's write is refused before it touches the new owner's
// page.
func TestViolationStaleGenerationOnPut(t *testing.T) {
	p := newPool(t, 1)
	a, b := owner("a", 1), owner("b", 2)
	ra, _ := p.Reserve(a, 1)
	va := p.View(a, ra)
	fill(t, va, ra, 0, 1)
	p.Release(a, ra)
	rb, _ := p.Reserve(b, 1)
	fill(t, p.View(b, rb), rb, 0, 1)
	before := append([]float32(nil), p.f32...)
	err := va.Put(0, 1, row(a, ra[0].Gen, 0, 1, false, 4), row(a, ra[0].Gen, 0, 1, true, 4))
	wantViolation(t, p, err, KindStaleGeneration, rb[0].Page, true)
	if !sameBits(before, p.f32) {
		t.Fatal("a refused write changed page memory")
	}
}

// I3: another tenant presenting a valid (page, generation) is refused on
// every path: view read, page read, digest, release.
func TestViolationForeignOwner(t *testing.T) {
	p := newPool(t, 2)
	a, b := owner("a", 1), owner("b", 1) // same ID, other tenant: still foreign
	ra, _ := p.Reserve(a, 1)
	fill(t, p.View(a, ra), ra, 0, 2)
	k, _, _, err := p.View(b, ra).Block(0, 0)
	if k != nil {
		t.Fatal("foreign read returned data")
	}
	wantViolation(t, p, err, KindForeignOwner, ra[0].Page, true)
	if _, _, err := p.PageData(b, ra[0]); !errors.Is(err, ErrForeignOwner) {
		t.Fatalf("foreign PageData: %v", err)
	}
	if _, err := p.Digest(b, ra, 2); !errors.Is(err, ErrForeignOwner) {
		t.Fatalf("foreign Digest: %v", err)
	}
	if err := p.Release(b, ra); !errors.Is(err, ErrForeignOwner) {
		t.Fatalf("foreign Release: %v", err)
	}
	if err := p.Release(a, ra); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// I4: a read of a block whose slots were never written in that layer, and a
// digest that claims more tokens than were written.
func TestViolationReadPastWrittenExtent(t *testing.T) {
	p := newPool(t, 4)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 2)
	v := p.View(a, refs)
	fill(t, v, refs, 0, 3) // 3 of 8 slots
	_, _, _, err := v.Block(0, 1)
	wantViolation(t, p, err, KindUnwrittenRead, refs[1].Page, true)

	refs2, _ := p.Reserve(a, 1)
	fill(t, p.View(a, refs2), refs2, 0, 3)
	_, err = p.Digest(a, refs2, 4)
	wantViolation(t, p, err, KindUnwrittenRead, refs2[0].Page, true)
}

// I5 relies on it: a sealed (verified) prefix cannot change afterwards.
func TestViolationWriteToSealedPage(t *testing.T) {
	p := newPool(t, 2)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	v := p.View(a, refs)
	fill(t, v, refs, 0, 2)
	if err := p.Seal(a, refs); err != nil {
		t.Fatal(err)
	}
	// Appending past the sealed prefix is decode continuing the page: fine.
	fill(t, v, refs, 2, 3)
	before := append([]float32(nil), p.f32...)
	r := make([]float32, 4)
	err := v.Put(1, 1, r, r)
	wantViolation(t, p, err, KindSealedWrite, refs[0].Page, true)
	if !sameBits(before, p.f32) {
		t.Fatal("a refused write to a sealed page changed it")
	}

	refs2, _ := p.Reserve(a, 1)
	p.Seal(a, refs2)
	err = p.WritePage(a, refs2[0], 1, make([]byte, tg.PageBytes()))
	wantViolation(t, p, err, KindSealedWrite, refs2[0].Page, true)
}

// I6/I7: a page released twice must not enter the free list twice (two
// owners would share it); the second release quarantines it for a lease.
func TestViolationDoubleRelease(t *testing.T) {
	p := newPool(t, 2)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	if err := p.Release(a, refs); err != nil {
		t.Fatal(err)
	}
	err := p.Release(a, refs)
	wantViolation(t, p, err, KindDoubleRelease, refs[0].Page, true)
	// The free page went to quarantine: nobody can get it until a lease
	// passes (whoever double-released may still be using it).
	if p.FreePages() != 1 {
		t.Fatalf("%d free", p.FreePages())
	}
	now := time.Unix(1000, 0)
	if p.Expire(now) != 0 || p.Expire(now.Add(999*time.Millisecond)) != 0 {
		t.Fatal("left quarantine before the lease")
	}
	if p.Expire(now.Add(time.Second)) != 1 {
		t.Fatal("did not leave quarantine after the lease")
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	// Duplicates inside one call are a double release too.
	refs, _ = p.Reserve(a, 1)
	err = p.Release(a, []PageRef{refs[0], refs[0]})
	wantViolation(t, p, err, KindDoubleRelease, refs[0].Page, true)
}

// I6: a write through a table whose pages were released (not yet reused)
// is refused and fences the page.
func TestViolationWriteAfterRelease(t *testing.T) {
	p := newPool(t, 2)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	v := p.View(a, refs)
	fill(t, v, refs, 0, 1)
	p.Release(a, refs)
	r := []float32{1, 2, 3, 4}
	err := v.Put(0, 1, r, r)
	wantViolation(t, p, err, KindReleasedWrite, refs[0].Page, true)
	for i, f := range pageFloats(p, refs[0].Page) {
		if f != 0 {
			t.Fatalf("write after release reached page memory at %d", i)
		}
	}
	refs2, _ := p.Reserve(a, 1)
	p.Release(a, refs2)
	err = p.WritePage(a, refs2[0], 1, make([]byte, tg.PageBytes()))
	wantViolation(t, p, err, KindReleasedWrite, refs2[0].Page, true)
	if _, _, _, err := v.Block(0, 0); !errors.Is(err, ErrQuarantined) && !errors.Is(err, ErrReleasedRead) {
		t.Fatalf("read after release: %v", err)
	}
}

// I3: a read through a released table returns nothing.
func TestViolationReadAfterRelease(t *testing.T) {
	p := newPool(t, 2)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	fill(t, p.View(a, refs), refs, 0, 1)
	p.Release(a, refs)
	d, n, err := p.PageData(a, refs[0])
	if d != nil || n != 0 {
		t.Fatal("read after release returned data")
	}
	wantViolation(t, p, err, KindReleasedRead, refs[0].Page, true)
}

// I8: the error a failed check returns never names the page's owner.
func TestViolationMessagesDoNotNameOwners(t *testing.T) {
	p := newPool(t, 1)
	a, b := owner("secret-tenant-A", 1), owner("b", 2)
	ra, _ := p.Reserve(a, 1)
	_, _, _, err := p.View(b, ra).Block(0, 0)
	if err == nil {
		t.Fatal("foreign read passed")
	}
	for _, s := range []string{err.Error(), err.(*Violation).Msg} {
		if contains(s, "secret-tenant-A") {
			t.Fatalf("violation message leaks the owner's tenant: %q", s)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
