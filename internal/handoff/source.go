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
func PrefetchDigest(src Source) Source {
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
