package kv

import "github.com/zeebo/xxh3"

// Hash once per page.
//
// Checked naively, a handoff reads every page four times for integrity
// alone: the sender's page checksum, the prefill digest, the receiver's
// checksum and the decode digest after the last write (about 40% of a
// long handoff's time, BenchmarkHandoff*). Here a page is hashed once on
// each side: when a transfer write applies it (WritePageSum, hashed from
// the pool's copy just made, while it is in cache), when a one-sided
// notice marks it (MarkWrittenSum, hashed from this pool's own memory
// after the notice, I5: never a hash the sender supplies), or when a
// sender reads it (PageDataSum). The pool records that block hash (except a one-sided
// notice's, below); Digest and Seal then combine recorded hashes instead
// of re-reading the pages.
//
// A recorded hash is used only while the bytes are provably the ones
// hashed: any Put to the page, a scrub, or a new allocation drops it, and
// Digest and Seal hash such a page from memory as before. No page of a
// shared pool is ever recorded, however it was written (sumLocked); on a
// heap pool, a page written one-sidedly could not be either: a peer mapping the shared memory can
// change it after its notice, unseen by the pool, so the commit's Digest
// hashes it from memory (I5; the simulator found the gap when the notice's
// hash was recorded). That costs one more read of such a page per handoff
// (BenchmarkHandoffShm). Writes landing after the commit are fenced by
// generation and quarantine (I3, I6).
//
// The page checksum (handoff.Checksum: the low 32 bits of XXH3-64 of the
// page image) comes from the same pass: for a full page the block hash is
// XXH3-128 of the whole image, and for inputs longer than 240 bytes XXH3's
// 64-bit hash is the low half of its 128-bit one (one accumulator pass, two
// finalisations; TestPageSumImageIsXXH3_64 holds the library to it).

// PageSum is what the pool learned hashing one page once, over its own bytes.
type PageSum struct {
	// Block is the page's block hash (digest.go) over its written slots,
	// as Digest combines it.
	Block [16]byte
	// Image is XXH3-64 of the whole page image (PageBytes bytes) as the
	// pool holds it; valid only when ImageOK (every slot is written and a
	// page is longer than 240 bytes). Otherwise a caller that needs the
	// image hash computes it itself.
	Image   uint64
	ImageOK bool
}

// imageSumMin is the shortest input whose XXH3-64 is the low half of its
// XXH3-128 (XXH3's long-input path starts past 240 bytes).
const imageSumMin = 241

// WritePageSum is WritePage that also hashes the applied page once, from
// the pool's copy, records that hash for Digest and Seal and returns it.
func (p *Pool) WritePageSum(o Owner, ref PageRef, slots int, data []byte) (PageSum, error) {
	return p.writePage(o, ref, slots, data, true)
}

// MarkWrittenSum is MarkWritten that also hashes the page once from this
// pool's memory (the bytes that arrived out of band) and returns that hash
// for the notice's checksum. It does NOT record it for Digest: a one-sided
// peer can still change the shared bytes after the notice, so the commit's
// digest re-reads the page from memory (I5: verified over what decode
// holds at the commit, not what it held at the notice).
func (p *Pool) MarkWrittenSum(o Owner, ref PageRef, slots int) (PageSum, error) {
	return p.markWritten(o, ref, slots, true)
}

// PageDataSum is PageData that also hashes the page's written slots once,
// records the hash for Digest and returns it: a sender gets its checksum
// and its digest from one read of each page.
func (p *Pool) PageDataSum(o Owner, ref PageRef) ([]byte, int, PageSum, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	data, n, err := p.pageDataLocked(o, ref)
	if err != nil || n == 0 {
		return data, n, PageSum{}, err
	}
	return data, n, p.sumLocked(ref.Page, n), nil
}

// sumLocked hashes the first n slots of a page, records the result and
// returns it. A shared pool records nothing: any page of its memory, not
// only one written one-sidedly, can be changed by a peer that maps the
// file (a writer stalled past its lease, I6) after the hash, unseen by the
// pool, so its Digest and Seal always hash from memory (I5). That is one
// more read per page of a handoff an inline (TCP) writer sends to a shared
// pool; a heap pool keeps the saving.
func (p *Pool) sumLocked(pg uint32, n int) PageSum {
	s := p.hashLocked(pg, n)
	p.recordSumLocked(pg, n, s)
	return s
}

// recordSumLocked records s, the hash of the first n slots of a page as
// they are now (sumLocked), except in a shared pool.
func (p *Pool) recordSumLocked(pg uint32, n int, s PageSum) {
	if p.gens != nil {
		return
	}
	m := &p.pages[pg]
	m.sum, m.sumSlots = s.Block, n
	m.summed.Store(true)
}

// hashLocked hashes the first n slots of a page without recording it.
// The caller holds the pool lock, or a fill's claim on the page (fill.go:
// nothing else writes or frees it meanwhile).
func (p *Pool) hashLocked(pg uint32, n int) PageSum {
	var s PageSum
	if n == p.geo.PageSize {
		base := int(pg) * p.pageBytes
		h := xxh3.Hash128(p.mem[base : base+p.pageBytes])
		s.Block = h.Bytes()
		s.Image, s.ImageOK = h.Lo, p.pageBytes >= imageSumMin
	} else {
		s.Block = p.pageDigest(pg, n)
	}
	return s
}

// blockHashLocked is the block hash of the first n slots of a page: the
// recorded one when it still describes the page's bytes, else read afresh.
func (p *Pool) blockHashLocked(pg uint32, n int) [16]byte {
	m := &p.pages[pg]
	if m.summed.Load() && m.sumSlots == n {
		return m.sum
	}
	return p.pageDigest(pg, n)
}
