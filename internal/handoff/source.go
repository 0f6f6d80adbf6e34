package handoff

import "sluice/internal/kv"

// PrefillPool is what PoolSource reads from the prefill worker's pool.
type PrefillPool interface {
	PageData(o kv.Owner, ref kv.PageRef) ([]byte, int, error)
	Digest(o kv.Owner, refs []kv.PageRef, tokens int) ([16]byte, error)
}

// PoolSource is the Source of a sequence prefilled into a kv pool: its
// page table and length. Every read goes through the pool's owner and
// generation checks (I3), so a sender can only ship its own sequence.
type PoolSource struct {
	Pool   PrefillPool
	Owner  kv.Owner
	Pages  []kv.PageRef
	Tokens int
}

// Page returns block b's page image and its written slot count. The Sender
// checks the count against the reservation.
func (s *PoolSource) Page(b int) ([]byte, int, error) {
	return s.Pool.PageData(s.Owner, s.Pages[b])
}

// PageSummer is a Source that hashes each page once as it reads it (kv's
// PageDataSum): the page checksum comes from that pass, and its Digest then
// combines the per-block hashes the pool recorded instead of reading every
// page again. summed is false when the checksum could not come from that
// pass (a short last page, a pool that cannot); the Sender then computes
// it. A Source over a kv pool implements it with PoolPageSum.
type PageSummer interface {
	PageSum(b int) (data []byte, slots int, checksum uint32, summed bool, err error)
}

// summingPrefillPool is a PrefillPool that hashes pages as it hands them out.
type summingPrefillPool interface {
	PageDataSum(o kv.Owner, ref kv.PageRef) ([]byte, int, kv.PageSum, error)
}

// PoolPageSum reads one page of o's sequence for a Sender (PageSummer):
// its image, written slots and checksum, all from one hash of the page
// that the pool also records for its Digest. With a pool that cannot hash
// as it reads, it is PageData and summed is false.
func PoolPageSum(p PrefillPool, o kv.Owner, ref kv.PageRef) (data []byte, slots int, checksum uint32, summed bool, err error) {
	sp, ok := p.(summingPrefillPool)
	if !ok {
		data, slots, err = p.PageData(o, ref)
		return data, slots, 0, false, err
	}
	data, slots, sum, err := sp.PageDataSum(o, ref)
	return data, slots, uint32(sum.Image), sum.ImageOK, err
}

// PageSum is Page plus the page checksum from one hash of the page (PageSummer).
func (s *PoolSource) PageSum(b int) ([]byte, int, uint32, bool, error) {
	return PoolPageSum(s.Pool, s.Owner, s.Pages[b])
}

func (s *PoolSource) summing() bool {
	_, ok := s.Pool.(summingPrefillPool)
	return ok
}

// Digest is the pool's digest of the prompt's KV.
func (s *PoolSource) Digest() ([]byte, error) {
	d, err := s.Pool.Digest(s.Owner, s.Pages, s.Tokens)
	if err != nil {
		return nil, err
	}
	return d[:], nil
}

// The kv pool is the Receiver's pool.
var _ Pool = (*kv.Pool)(nil)

// PrefetchDigest returns src with its Digest computed in the background,
// starting now. The prefill pool's pages of a prefilled sequence no longer
// change, so hashing them while the pages travel takes the prefill-side
// digest off the handoff's critical path (it would otherwise run after the
// last write is acknowledged, just before the commit).
//
// A PoolSource whose pool hashes pages as they are sent (kv.Pool) is
// returned unchanged: its Digest only combines the hashes the send already
// made, and a background pass would read every page a second time.
func PrefetchDigest(src Source) Source {
	if ps, ok := src.(*PoolSource); ok && ps.summing() {
		return src
	}
	p := &prefetched{Source: src, done: make(chan struct{})}
	go func() {
		p.d, p.err = src.Digest()
		close(p.done)
	}()
	return p
}

type prefetched struct {
	Source
	done chan struct{}
	d    []byte
	err  error
}

func (p *prefetched) Digest() ([]byte, error) {
	<-p.done
	return p.d, p.err
}
