package engine

import "sluice/internal/handoff"

// PageSum lets the Sender take each page's checksum from the prefill pool's
// one hash of the page (handoff.PageSummer, kv.Pool.PageDataSum). The pool
// records that hash, so the digest at the commit combines per-page hashes
// instead of reading the whole prompt's KV again after the last write.
func (s *poolSource) PageSum(b int) ([]byte, int, uint32, bool, error) {
	if b < 0 || b >= len(s.table) {
		return nil, 0, 0, false, handoff.ErrCoverage.With("block %d of %d", b, len(s.table))
	}
	return handoff.PoolPageSum(s.pool, s.owner, s.table[b])
}

var _ handoff.PageSummer = (*poolSource)(nil)
