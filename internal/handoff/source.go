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
