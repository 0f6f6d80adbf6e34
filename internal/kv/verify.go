package kv

// Seal verification (--kv-verify, item 5 of I11's cache). A sealed page is
// read for a long time, and a cached one by many sequences: bytes that
// change behind the pool's back (a stray one-sided write, a memory fault)
// would silently change every answer that reads them. The seal digest
// recorded by Seal catches that when it is compared again: on a cache hit
// (VerifyHit, Lookup), and under VerifySample by a bounded sweep that runs
// once per scheduler step.

// sealIntactLocked re-hashes a sealed page's sealed slots and compares
// them with its seal digest. It reads the bytes afresh, never a recorded
// block hash: the point is to see what memory holds now.
func (p *Pool) sealIntactLocked(pg uint32) bool {
	p.verified++
	return p.pageDigest(pg, int(p.pages[pg].sealed.Load())) == p.digests[pg]
}

// Sweeps reports whether VerifyStep does anything (--kv-verify sample or
// all), so a caller can skip timing it.
func (p *Pool) Sweeps() bool { return p.cfg.Verify == VerifySample || p.cfg.Verify == VerifyAll }

// VerifyMode is the pool's --kv-verify mode.
func (p *Pool) VerifyMode() Verify { return p.cfg.Verify }

// VerifyStep is one scheduler step's share of --kv-verify sample (and
// all): it re-hashes sealed pages, cached or private, against their seal
// digests, resuming where the previous call stopped, round-robin over the
// pool. Under sample it hashes at most VerifyPages pages and looks at most
// at verifyScanPerPage tags per page of that budget, so its work per step
// is bounded; since each call moves the cursor past at least VerifyPages
// pages, every sealed page is re-hashed at least once every
// ceil(Pages/VerifyPages) calls. Under all it sweeps the whole pool. Under
// hit and off it does nothing.
//
// A mismatch is a digest_mismatch violation: the page is quarantined (a
// cached one leaves the index at once), so every sequence reading it fails
// at its next read. It returns the first violation, for logs; the pool has
// already counted it.
//
// The hash runs under the pool lock: no release can scrub the page
// meanwhile, and its sealed slots cannot change through the pool (a write
// below the seal is refused), so what differs was changed behind the
// pool's back. An owner appending past a private page's sealed prefix
// writes other bytes than the ones hashed.
func (p *Pool) VerifyStep() error {
	if !p.Sweeps() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	n := len(p.pages)
	budget, scan := n, n
	if p.cfg.Verify == VerifySample {
		budget = p.cfg.VerifyPages
		if budget <= 0 {
			budget = DefaultVerifyPages
		}
		budget = min(budget, n)
		scan = min(n, budget*verifyScanPerPage)
	}
	var first error
	for i := 0; i < scan && budget > 0; i++ {
		pg := uint32(p.verifyAt)
		if p.verifyAt++; p.verifyAt >= n {
			p.verifyAt = 0
		}
		m := &p.pages[pg]
		if tagState(m.tag.Load()) != Sealed || m.sealed.Load() == 0 {
			continue
		}
		budget--
		if !p.sealIntactLocked(pg) {
			v := p.violateLocked(KindDigestMismatch, pg, true,
				"sealed page %d no longer matches its seal digest (--kv-verify sweep); its readers fail", pg)
			if first == nil {
				first = v
			}
		}
	}
	return first
}

// CachedPagesForTest lists the pages cache entries own, in page order.
// TEST HOOK ONLY: an engine test corrupts one of them behind the pool's
// back (through the shared file) and watches the sweep find it.
func (p *Pool) CachedPagesForTest() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []uint32
	for i := range p.cache.meta {
		if p.cache.meta[i].cached {
			out = append(out, uint32(i))
		}
	}
	return out
}
