package kv

import "fmt"

// Filling a page in place, without the pool lock.
//
// A transport writes a transferred page straight into the page it reserved
// (an encrypted one opens the page's record there; see
// handoff.PageWrite.Open), so the bytes are written once, where they stay.
// The pool lock is not held while they are written: ClaimFill checks the
// write as WritePage does (owner, generation, state, size: I3) and marks
// the page "fill in flight", the caller writes the page's memory with the
// lock released, and Fill.End retakes the lock to mark the page written
// and record its hash, or to scrub it when the write failed. Opening a
// 256 KiB page took the lock for ~70 us (Intel Xeon model 167, session
// 19); a claim holds it for the checks and the bookkeeping only, so two
// pages can be filled at once (on two goroutines) and every other
// Reserve, Commit and decode page growth no longer waits for an open.
//
// The isolation contract holds because:
//
//   - I3: the page handed out is Reserved for exactly this owner and
//     generation, checked under the lock before the claim, and nothing can
//     re-allocate it while the claim lasts (below).
//   - I4, I5, I15: nothing marks the page written until End(nil): no view,
//     Digest or Seal reads a slot of it meanwhile, and a handoff's pages
//     are used only after its commit's digest check. A fill that failed
//     (a record whose tag does not verify: altered, replayed or injected)
//     leaves the page scrubbed (cleared even under ScrubOff) and unwritten,
//     before End returns; the caller fails its handoff (I8).
//   - I6: a page with a fill in flight never reaches the free list. A
//     Release of it does not wait for the fill (a Release that waited
//     could deadlock with a filler that needs its caller's lock, and
//     would stall the abort path on a slow fill): the page is taken out
//     of service at once (Quarantined: every check refuses it) and the
//     fill's End scrubs and frees it (freeAtEnd), returning a late-write
//     error to the filler. Expire and DrainAck never free a page with a
//     fill in flight; a second write to it (WritePage, MarkWritten,
//     another claim) is a duplicate write (quarantined). Close waits for
//     every fill to end before the memory goes (a shared mapping), so a
//     fill must end promptly: it must not block on anything but the CPU
//     or a bounded read.
//   - I7: whatever a fill wrote into a page it does not keep (failed,
//     released, quarantined, sealed by its owner meanwhile) is scrubbed
//     by End before the lock is released.
//
// The hash of a good page is taken by End before it retakes the lock (the
// page is the claim's alone), so the lock is held for neither the write
// nor the hash.

// Fill is a claim on one reserved page for one transfer write of a whole
// page (ClaimFill). Dst is the page's memory: the claim's holder writes
// all of it, then calls End exactly once, whatever happened (defer it):
// until End the page is fenced (I6) and Close waits for it.
type Fill struct {
	p     *Pool
	o     Owner
	ref   PageRef
	slots int
	// Dst is the page's memory (PageBytes bytes, aliasing the pool), valid
	// until End returns: never retain it.
	Dst   []byte
	ended bool
}

// ClaimFill claims one of o's reserved pages for a transfer write of a
// whole page (slots == PageSize) of size bytes (the sender's image:
// PageBytes, as WritePage checks), with every check of WritePage, under
// the pool lock, and returns the claim; the lock is not held when it
// returns. A page of fewer slots has the per-run layout of WritePage:
// write it with WritePageSum.
func (p *Pool) ClaimFill(o Owner, ref PageRef, slots, size int) (*Fill, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if slots != p.geo.PageSize {
		return nil, p.violateLocked(KindBadRange, ref.Page, false,
			"a fill writes a whole page of %d slots, not %d; write a partial page with WritePage", p.geo.PageSize, slots)
	}
	if err := p.transferLocked(o, ref, slots, size, opTransfer); err != nil {
		return nil, err
	}
	m := &p.pages[ref.Page]
	if m.fill {
		// Unchecked pools (the incident demo) reach here too: one claim
		// per page at a time keeps the fence's bookkeeping whole.
		return nil, p.violateLocked(KindDuplicateWrite, ref.Page, p.checks.Load(), "a write to page %d is already in flight", ref.Page)
	}
	m.fill = true
	p.fills.Add(1)
	base := int(ref.Page) * p.pageBytes
	return &Fill{p: p, o: o, ref: ref, slots: slots, Dst: p.mem[base : base+p.pageBytes : base+p.pageBytes]}, nil
}

// End ends the claim. fillErr nil says Dst now holds the whole page's
// bytes, verified: the page is marked written (Reserved -> Filling),
// hashed once (as WritePageSum) and the hash returned. A non-nil fillErr
// (the write failed: a record that does not verify) is returned as is,
// with the page scrubbed, left Reserved and unwritten; the caller must
// fail its handoff. If the page was given up while the fill ran (its
// owner released or quarantined it, or a violation quarantined it), the
// bytes are scrubbed and dropped whatever fillErr says, a released page
// is freed now, and the error is a late write (ErrLateWrite), or fillErr
// when the fill failed anyway.
func (f *Fill) End(fillErr error) (PageSum, error) {
	p := f.p
	if f.ended {
		panic(fmt.Sprintf("kv: fill of page %d ended twice", f.ref.Page))
	}
	f.ended = true
	var s PageSum
	if fillErr == nil {
		// The page is this claim's alone: hashed without the lock.
		s = p.hashLocked(f.ref.Page, f.slots)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.fills.Done() // the memory stays until Close has seen this
	pg := f.ref.Page
	m := &p.pages[pg]
	m.fill = false
	t := m.tag.Load()
	kept := !m.freeAtEnd && m.live && tagGen(t) == f.ref.Gen && tagState(t) == Reserved && m.owner == f.o
	if !p.checks.Load() {
		kept = !m.freeAtEnd // the incident's unchecked write lands wherever it points
	}
	if fillErr == nil && kept && !p.closed {
		p.markLocked(pg, f.slots)
		p.recordSumLocked(pg, f.slots, s)
		return s, nil
	}
	if tagGen(t) != f.ref.Gen {
		// Re-allocated under the fill: only an unsafe mode frees a page a
		// fill writes (Unsafe.NoQuarantine, the incident demo); the page
		// is its new owner's, not ours to scrub.
		p.lateWrites++
		return PageSum{}, p.violateLocked(KindLateWrite, pg, false,
			"transfer write to page %d landed after the page was re-allocated (I6 switched off)", pg)
	}
	// Nothing of a write the page does not keep may outlive the call.
	scrubbed := p.scrubPage(pg)
	if !scrubbed {
		clear(f.Dst) // ScrubOff (the incident demo): still no plaintext
	}
	if m.freeAtEnd {
		// Released while the fill ran: the Release left the free to us.
		m.freeAtEnd = false
		if !p.closed {
			p.freeScrubbedLocked(pg)
			if scrubbed {
				p.scrubbed++
			}
		}
	}
	switch {
	case fillErr != nil:
		return PageSum{}, fillErr
	case p.closed:
		return PageSum{}, errClosed
	}
	p.lateWrites++
	return PageSum{}, p.violateLocked(KindLateWrite, pg, false,
		"transfer write to page %d ended after its owner gave the page up; dropped and scrubbed (I6)", pg)
}

// FillPageSum applies one transferred full page through a claim: fill
// gets the page's memory (ClaimFill's Dst; the pool lock is not held) and
// must write all of it or return an error, then the claim ends (End): on
// nil the page is marked written and hashed and the hash returned; on an
// error the page is scrubbed, left Reserved with nothing written, and
// fill's error is returned as is. fill runs only if every check passed.
func (p *Pool) FillPageSum(o Owner, ref PageRef, slots, size int, fill func(dst []byte) error) (PageSum, error) {
	f, err := p.ClaimFill(o, ref, slots, size)
	if err != nil {
		return PageSum{}, err
	}
	ended := false
	defer func() {
		if !ended {
			f.End(errFillPanicked) // fill panicked: the page stays fenced no longer
		}
	}()
	err = fill(f.Dst)
	ended = true
	return f.End(err)
}

var errFillPanicked = &Error{Code: CodeCorrupt, Msg: "a page fill panicked"}
