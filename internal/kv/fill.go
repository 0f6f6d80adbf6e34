package kv

// Filling a page in place.
//
// An encrypted transport opens each full page's record straight into the
// page it reserved: FillPageSum hands it the page itself, after the same
// checks as WritePage, so the plaintext is written once (opening into a
// frame buffer and copying it in was a second pass over every byte).
//
// The plaintext then lands in the page before its tag is known to verify.
// That keeps the isolation contract because nothing reads the page yet:
// it is Reserved for exactly this owner and generation (checked first,
// I3), nothing marks it written until fill returns nil (I4: no view, no
// Digest, no Seal reads an unwritten slot), and a handoff's pages are used
// only after its commit's digest check (I5). When fill fails (a record
// that does not verify: altered, replayed or injected) the page is
// scrubbed before the pool lock is released, so no byte of the unverified
// plaintext survives the call (Go's GCM clears its output on a bad tag; the
// pool does not rely on that), it stays Reserved and unwritten, and the
// caller fails the handoff closed (I8), which releases (and scrubs again)
// every page of it.
//
// Lock: fill runs under the pool lock, as WritePage's copy does, and
// holds it for one page's open and hash (a 256 KiB page: ~70 us on the
// Intel Xeon model 167, where a copy and hash took ~33 us; the transport
// applies writes page by page, so another handoff's Reserve or Commit
// waits for at most one page). Release takes the same lock, so a page
// cannot be released, scrubbed and reused while a fill writes it (I6).
// fill must not block on anything but the CPU: never a socket read.

// FillPageSum applies one transferred full page (slots == PageSize) of
// size bytes (the sender's image: PageBytes, as WritePage checks) whose
// bytes fill writes itself: with the checks of WritePage passed, fill gets
// the page's memory (PageBytes bytes, aliasing the pool; valid only during
// the call) and must write all of it or return an error. On nil the page
// is marked written (Reserved -> Filling) and hashed once, as WritePageSum
// does, and the hash is returned. On an error the page is scrubbed, left
// Reserved with nothing written, and fill's error is returned as is; the
// caller must fail its handoff. A page of fewer slots has the per-run
// layout of WritePage: open it into a buffer and use WritePageSum.
func (p *Pool) FillPageSum(o Owner, ref PageRef, slots, size int, fill func(dst []byte) error) (PageSum, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PageSum{}, errClosed
	}
	if slots != p.geo.PageSize {
		return PageSum{}, p.violateLocked(KindBadRange, ref.Page, false,
			"a fill writes a whole page of %d slots, not %d; write a partial page with WritePage", p.geo.PageSize, slots)
	}
	if err := p.transferLocked(o, ref, slots, size, opTransfer); err != nil {
		return PageSum{}, err
	}
	base := int(ref.Page) * p.pageBytes
	dst := p.mem[base : base+p.pageBytes : base+p.pageBytes]
	if err := fill(dst); err != nil {
		// Nothing of an unverified record may outlive the call.
		if !p.scrubPage(ref.Page) {
			clear(dst) // ScrubOff (the incident demo): still no plaintext
		}
		return PageSum{}, err
	}
	p.markLocked(ref.Page, slots)
	return p.sumLocked(ref.Page, slots), nil
}
