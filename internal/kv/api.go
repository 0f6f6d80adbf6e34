// Package kv is the paged KV cache pool. Every page has an owner (tenant and
// request/handoff id) and a generation that changes on every allocation;
// every read, write, transfer and release is checked against them.
//
// THIS FILE IS THE AGREED API SKETCH. The kv helper implements it (and may
// refine names/signatures, updating callers). Bodies marked TODO.
package kv

import (
	"errors"
	"time"
)

// Geometry is the shape of KV data. A page holds PageSize token slots of K
// and V for every layer, as ONE contiguous byte range laid out
// [layer][K then V][slot][KVDim]float32, so transfer, digest and scrub are
// one operation per page.
type Geometry struct {
	Layers   int // transformer layers
	KVDim    int // n_kv_heads * head_dim
	PageSize int // token slots per page (default 16)
}

// BytesPerToken is layers x KV dim x 2 (K and V) x 4 bytes (F32).
func (g Geometry) BytesPerToken() int { return g.Layers * g.KVDim * 2 * 4 }

// PageBytes is the size of one page.
func (g Geometry) PageBytes() int { return g.BytesPerToken() * g.PageSize }

// ScrubMode says what a released page is overwritten with before reuse (I7).
type ScrubMode int

const (
	ScrubZero   ScrubMode = iota // default
	ScrubPoison                  // NaN pattern: a stale read shows up loudly
	ScrubOff                     // for measuring the cost only
)

// Order is the free-list discipline. LIFO hands a just-released page to the
// next reservation: the worst case for stale reads, used by tests.
type Order int

const (
	FIFO Order = iota
	LIFO
)

// ID names a request or handoff: 128 random bits.
type ID [16]byte

// Owner is who a page belongs to.
type Owner struct {
	Tenant string
	ID     ID
}

// PageRef is one page-table entry: a page and the generation it was
// allocated with. A ref whose generation is not the page's current one is
// stale and every operation through it fails (I3).
type PageRef struct {
	Page uint32
	Gen  uint64
}

// State of a page.
type State uint8

const (
	Free State = iota
	Reserved
	Filling
	Sealed
	Quarantined
)

// Config configures a pool.
type Config struct {
	Geometry
	Pages int
	Scrub ScrubMode
	Order Order
	// Lease is how long a quarantined page waits for a drain acknowledgement
	// before it may be scrubbed and freed anyway; it must exceed the
	// transport's worst in-flight time (I6).
	Lease time.Duration
	// SharedFile, when set, backs page memory with a MAP_SHARED mapping of
	// this file (e.g. under /dev/shm) so a peer process can write pages
	// one-sidedly, as RDMA does (shm transport).
	SharedFile string
}

// Kind classifies an integrity violation (metrics label, error code).
type Kind string

const (
	KindStaleGeneration Kind = "stale_generation"
	KindForeignOwner    Kind = "foreign_owner"
	KindUnwrittenRead   Kind = "unwritten_read"
	KindSealedWrite     Kind = "sealed_write"
	KindDoubleRelease   Kind = "double_release"
	KindReleasedWrite   Kind = "write_after_release"
	KindBadRange        Kind = "bad_range"
)

// Violation is the typed error of a failed check (I8): the page involved is
// quarantined and a counter of its Kind goes up. It never carries data.
type Violation struct {
	Kind Kind
	Page uint32
	Msg  string
}

func (v *Violation) Error() string { return "kv integrity violation (" + string(v.Kind) + "): " + v.Msg }

// ErrNoCapacity: a reservation that does not fit takes nothing.
var ErrNoCapacity = errors.New("kv: not enough free pages for the reservation")
