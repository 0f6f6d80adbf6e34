package handoff

import (
	"time"

	"sluice/internal/kv"
)

// Pool is what the Receiver needs from the decode worker's KV pool
// (internal/kv). Every method checks owner, generation and page state
// itself (I3); the Receiver's own checks come first and are independent of
// them, so either layer alone turns a bad write into an error.
type Pool interface {
	// Reserve allocates n pages for o, all or nothing (kv.ErrNoCapacity).
	Reserve(o kv.Owner, n int) ([]kv.PageRef, error)
	// Pages is the pool's size, so that a reservation that can never fit
	// is refused for good and one that does not fit now may wait.
	Pages() int
	// WritePage copies data (kv layout, slots token slots) into the page.
	WritePage(o kv.Owner, ref kv.PageRef, slots int, data []byte) error
	// MarkWritten records slots written one-sidedly into the shared mapping.
	MarkWritten(o kv.Owner, ref kv.PageRef, slots int) error
	// PageData returns the full page image (aliasing the pool) and its written slots.
	PageData(o kv.Owner, ref kv.PageRef) ([]byte, int, error)
	// Digest is the digest of the first tokens tokens of the pages in logical order.
	Digest(o kv.Owner, refs []kv.PageRef, tokens int) ([16]byte, error)
	// Release scrubs the pages and returns them to the free list; each ref
	// is checked on its own and a bad one is a counted violation.
	Release(o kv.Owner, refs []kv.PageRef) error
	// Quarantine takes the pages out of use until DrainAck or until.
	Quarantine(o kv.Owner, refs []kv.PageRef, until time.Time)
	// DrainAck frees quarantined pages early: no writer can still write them.
	DrainAck(o kv.Owner, refs []kv.PageRef)
	// Expire frees quarantined pages whose lease ended at or before now.
	Expire(now time.Time) int
}
