package kv

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Digests use xxh3-128: measured here at several times CRC32C's speed (see
// BenchmarkDigestPage), and 128 bits make an accidental match between a
// sequence and stale data negligible.

// seqDigest hashes the first tokens positions of refs in logical order (see
// Pool.Digest). The caller has checked the pages.
func (p *Pool) seqDigest(refs []PageRef, tokens int) [16]byte {
	g := p.geo
	h := xxh3.New()
	var hdr [32]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(tokens))
	binary.LittleEndian.PutUint64(hdr[8:], uint64(g.Layers))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(g.KVDim))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(g.PageSize))
	h.Write(hdr[:])
	for b, ref := range refs {
		n := min(g.PageSize, tokens-b*g.PageSize)
		if n <= 0 {
			break
		}
		p.hashPage(h, ref.Page, n)
	}
	return h.Sum128().Bytes()
}

// pageDigest is the digest of the first n slots of a page (its seal digest).
func (p *Pool) pageDigest(pg uint32, n int) [16]byte {
	h := xxh3.New()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(n))
	h.Write(hdr[:])
	p.hashPage(h, pg, n)
	return h.Sum128().Bytes()
}

// hashPage feeds the first n slots of every layer's K then V of a page:
// 2*Layers contiguous runs.
func (p *Pool) hashPage(h *xxh3.Hasher, pg uint32, n int) {
	g := p.geo
	base := int(pg) * p.pageBytes
	if n == g.PageSize {
		// A full page is one contiguous run in the same order.
		h.Write(p.mem[base : base+p.pageBytes])
		return
	}
	run := n * g.KVDim * 4
	stride := g.PageSize * g.KVDim * 4
	for half := range 2 * g.Layers {
		off := base + half*stride
		h.Write(p.mem[off : off+run])
	}
}
