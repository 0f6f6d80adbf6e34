package kv

import (
	"encoding/binary"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// Digests use xxh3-128. Measured here (BenchmarkDigestPage, and a one-shot
// probe): xxh3 runs at 44-55 GB/s on a cached 20 KiB page against CRC32C's
// ~30 GB/s at the machine's quietest, and on par when memory-bound; its 128
// bits make an accidental match between a sequence and stale data
// negligible where CRC32C gives 1 in 4 billion.
//
// Definition (both sides of a handoff compute it, over different pages):
//
//	blockHash(b) = XXH3-128 of block b's first n slots: for each layer, the
//	               K rows then the V rows of those slots (f32, f16 or
//	               q8_0 blocks as the pool's Type, little endian)
//	Digest       = XXH3-128 of tokens, layers, KV dim, page size (u64 LE
//	               each) followed by blockHash(0), blockHash(1), ... for the
//	               blocks that hold the first tokens positions
//
// It depends only on the sequence's content in logical order and the page
// size, never on which physical pages hold it. A full page's slots are one
// contiguous byte range, hashed in one call (xxh3's no-copy path).

// seqDigest hashes the first tokens positions of refs. The caller has
// checked the pages.
func (p *Pool) seqDigest(refs []PageRef, tokens int) [16]byte {
	g := p.geo
	buf := make([]byte, 32, 32+16*len(refs))
	binary.LittleEndian.PutUint64(buf[0:], uint64(tokens))
	binary.LittleEndian.PutUint64(buf[8:], uint64(g.Layers))
	binary.LittleEndian.PutUint64(buf[16:], uint64(g.KVDim))
	binary.LittleEndian.PutUint64(buf[24:], uint64(g.PageSize))
	nb := min(len(refs), PagesFor(tokens, g.PageSize))
	hs := make([][16]byte, nb)
	var fresh []int // blocks without a recorded hash: read afresh
	for b := range nb {
		n := min(g.PageSize, tokens-b*g.PageSize)
		m := &p.pages[refs[b].Page]
		if m.summed.Load() && m.sumSlots == n {
			hs[b] = m.sum
		} else {
			fresh = append(fresh, b)
		}
	}
	p.hashBlocks(refs, tokens, fresh, hs)
	for _, h := range hs {
		buf = append(buf, h[:]...)
	}
	return xxh3.Hash128(buf).Bytes()
}

// parallelDigestBytes is how much unrecorded page data a digest must read
// before it splits the reading across cores: a one-sided handoff's commit
// re-reads every page (sum.go), and that read is on the handoff's critical
// path, after its last write.
const parallelDigestBytes = 2 << 20

// hashBlocks sets hs[b] to the block hash of each block b in todo, read
// from memory, on up to GOMAXPROCS goroutines when there is enough of it.
// The caller holds p.mu, so no release can scrub the pages meanwhile; the
// goroutines only read.
func (p *Pool) hashBlocks(refs []PageRef, tokens int, todo []int, hs [][16]byte) {
	ps := p.geo.PageSize
	one := func(b int) { hs[b] = p.pageDigest(refs[b].Page, min(ps, tokens-b*ps)) }
	workers := min(runtime.GOMAXPROCS(0), len(todo)*p.pageBytes/(parallelDigestBytes/2))
	if workers < 2 {
		for _, b := range todo {
			one(b)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(todo); i = int(next.Add(1) - 1) {
				one(todo[i])
			}
		}()
	}
	wg.Wait()
}

// pageDigest is blockHash of the first n slots of a page; Seal records it
// for the sealed prefix.
func (p *Pool) pageDigest(pg uint32, n int) [16]byte {
	g := p.geo
	base := int(pg) * p.pageBytes
	if n == g.PageSize {
		return xxh3.Hash128(p.mem[base : base+p.pageBytes]).Bytes()
	}
	h := xxh3.New()
	run := n * g.RowBytes()
	stride := g.PageSize * g.RowBytes()
	for half := range 2 * g.Layers {
		off := base + half*stride
		h.Write(p.mem[off : off+run])
	}
	return h.Sum128().Bytes()
}
