// Package kv is the paged KV cache pool. Every page has an owner (tenant and
// request/handoff id) and a generation that changes on every allocation;
// every read, write, transfer and release is checked against them.
//
// The incident this package exists to prevent: decode attended over pages
// that another request had written, because nothing tied a page to its owner
// and nothing cleaned a page on release. Here a page table entry is a
// (page, generation) pair (I3), a page records how many slots its owner has
// written per layer (I4), released pages are scrubbed (I7), pages a transfer
// may still write wait in quarantine (I6), and every failed check is a typed
// *Violation that quarantines the page and counts a metric (I8).
//
// Life of a page:
//
//	Free --Reserve/Extend--> Reserved --Put/WritePage/MarkWritten--> Filling --Seal--> Sealed
//	  ^                         |                                       |                |
//	  +--scrub--Release---------+---------------------------------------+----------------+
//	  |                         |
//	  +--scrub--DrainAck/Expire-- Quarantined <--Quarantine (transfer may still write, I6)
//	                              Quarantined <--any violation (I8)
//
// A violation-quarantined page still held by its owner leaves on the
// owner's Release; one nobody holds (a write or double release after
// release) waits out a lease. Reserve hands out a new generation every
// time, so a table entry outliving its allocation fails every check.
//
// A full Sealed page may instead be handed to the prefix cache (cache.go):
// owned by a (tenant, chain key) entry, read by sequences of that tenant
// that hold a share, never written again, evicted (scrubbed, new
// generation) when nobody reads it and the pool needs room.
//
// The data path (View.Put and View.Block, called per token and layer by the
// forward pass) is lock-free: one atomic load of the page's tag (generation
// and state) and an owner check done once per view entry under the lock.
// Everything else takes the pool mutex.
package kv

import (
	"fmt"
	"time"
)

// Geometry is the shape of KV data. A page holds PageSize token slots of K
// and V for every layer, as ONE contiguous byte range laid out
// [layer][K then V][slot][KVDim]element (element: Type), so transfer,
// digest and scrub are one operation per page.
type Geometry struct {
	Layers   int  // transformer layers
	KVDim    int  // n_kv_heads * head_dim
	PageSize int  // token slots per page (default 16)
	Type     Type // element type of the rows (zero: F16, the default)
}

// Type is the element type of a pool's K and V rows (--kv-type).
type Type uint8

const (
	// F16 rows are IEEE binary16, rounded to nearest even from the
	// model's float32 rows exactly as ggml_fp32_to_fp16 (F16C's
	// vcvtps2ph) rounds them: llama.cpp's default KV type. Half the bytes
	// of F32 per token, so the same memory holds twice the context.
	F16 Type = iota
	// F32 rows are the model's float32 rows unrounded.
	F32
	// Q8_0 rows are ggml's block_q8_0, llama.cpp's -ctk/-ctv q8_0: each
	// run of 32 elements is a binary16 scale d then 32 int8s q, element
	// = q*d, quantized from the model's float32 row exactly as llama.cpp's
	// CPU backend writes a q8_0 cache (quant.QuantizeRowQ8_0: d =
	// amax/127, q = x*(127/amax) rounded half to even). 34 bytes per 32
	// elements: 1.88x the tokens of F16 in the same memory. KVDim must be
	// a multiple of 32 (a head dim that is one, as llama.cpp requires).
	Q8_0
	numTypes
)

// Q8Block is the elements of one Q8_0 block; Q8BlockBytes its size.
const (
	Q8Block      = 32
	Q8BlockBytes = 34
)

// ParseType reads the --kv-type flag value: f16, f32 or q8_0 (also q8,
// llama.cpp's spelling of -ctk being q8_0).
func ParseType(s string) (Type, error) {
	switch s {
	case "f16", "":
		return F16, nil
	case "f32":
		return F32, nil
	case "q8_0", "q8":
		return Q8_0, nil
	}
	return 0, &Error{Code: CodeBadConfig, Msg: "--kv-type must be f16, f32 or q8_0, not " + quote(s)}
}

func (t Type) String() string {
	switch t {
	case F16:
		return "f16"
	case F32:
		return "f32"
	case Q8_0:
		return "q8_0"
	}
	return "invalid"
}

// Valid reports whether t is a known type (a header or a frame may carry
// any byte).
func (t Type) Valid() bool { return t < numTypes }

// RowBytes is the size of one row of kvDim elements: 2 bytes an element
// (F16), 4 (F32), 34 per 32 (Q8_0).
func (t Type) RowBytes(kvDim int) int {
	switch t {
	case F32:
		return 4 * kvDim
	case Q8_0:
		return kvDim / Q8Block * Q8BlockBytes
	}
	return 2 * kvDim
}

// RowBytes is the size of one K (or V) row of one layer and position.
func (g Geometry) RowBytes() int { return g.Type.RowBytes(g.KVDim) }

// rowUnits is a row's length in the units of the pool's typed slice
// (Pool.f32, Pool.f16 or, for Q8_0, Pool.mem): the element offsets of
// View.Put and View.block.
func (g Geometry) rowUnits() int {
	if g.Type == Q8_0 {
		return g.RowBytes()
	}
	return g.KVDim
}

// DefaultPageSize is the page size used when Geometry.PageSize is zero.
const DefaultPageSize = 16

// BytesPerToken is layers x 2 (K and V) x the row size.
func (g Geometry) BytesPerToken() int { return g.Layers * 2 * g.RowBytes() }

// PageBytes is the size of one page.
func (g Geometry) PageBytes() int { return g.BytesPerToken() * g.PageSize }

// pageElems is the number of rowUnits (K and V, every layer) in one page.
func (g Geometry) pageElems() int { return g.Layers * g.rowUnits() * 2 * g.PageSize }

// ScrubMode says what a released page is overwritten with before reuse (I7).
type ScrubMode int

const (
	ScrubZero   ScrubMode = iota // default
	ScrubPoison                  // NaN pattern: a stale read shows up loudly
	ScrubOff                     // for measuring the cost only
)

// PoisonBits is the float32 bit pattern ScrubPoison fills pages with: a
// quiet NaN whose payload spells DEAD, so a stale read poisons every
// attention score it touches and is recognisable in a dump.
const PoisonBits uint32 = 0x7FC0DEAD

// PoisonBits16 is the binary16 pattern ScrubPoison fills F16 pages with:
// a quiet NaN with payload AD, for the same reasons. Q8_0 pages get it
// too: a row is a whole number of 16-bit words (34-byte blocks), so every
// block's scale is this NaN and every element it scales reads as NaN.
const PoisonBits16 uint16 = 0x7EAD

// ParseScrub reads the --kv-scrub flag value: zero, poison or off.
func ParseScrub(s string) (ScrubMode, error) {
	switch s {
	case "zero", "":
		return ScrubZero, nil
	case "poison":
		return ScrubPoison, nil
	case "off":
		return ScrubOff, nil
	}
	return 0, &Error{Code: CodeBadConfig, Msg: "--kv-scrub must be zero, poison or off, not " + quote(s)}
}

func (m ScrubMode) String() string {
	switch m {
	case ScrubZero:
		return "zero"
	case ScrubPoison:
		return "poison"
	case ScrubOff:
		return "off"
	}
	return "invalid"
}

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
// stale and every operation through it fails (I3). Generations come from a
// pool-wide counter, so a (Page, Gen) pair names one allocation forever.
type PageRef struct {
	Page uint32
	Gen  uint64
}

// State of a page.
type State uint8

const (
	Free        State = iota // on the free list, scrubbed
	Reserved                 // allocated, nothing written yet
	Filling                  // some slots written
	Sealed                   // written prefix frozen and digested
	Quarantined              // out of service: a violation, or a transfer may still write it (I6)
	numStates
)

func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Reserved:
		return "reserved"
	case Filling:
		return "filling"
	case Sealed:
		return "sealed"
	case Quarantined:
		return "quarantined"
	}
	return "invalid"
}

// Unsafe switches off individual safeguards. TEST AND DEMO HOOK ONLY: the
// incident demo and the simulator use it to show that each safeguard stops
// the leak alone, with the others off. A production configuration never sets
// it; the zero value (everything on) is the only safe setting.
type Unsafe struct {
	// NoOwnerCheck skips the owner and generation checks (I3) on the data
	// path: View.Put/Block, WritePage, MarkWritten, PageData and Digest.
	// Allocation bookkeeping (Reserve/Release/Quarantine) stays checked so
	// the free list itself cannot be corrupted.
	NoOwnerCheck bool
	// NoExtentCheck makes View.Block return every slot of a page whether or
	// not the owner wrote it, and lets Put leave gaps: exactly the
	// incident's stale-slot read (I4 off).
	NoExtentCheck bool
	// NoQuarantine makes Quarantine free the pages at once (scrubbed) instead
	// of fencing them until DrainAck or the lease: a page freed while a
	// one-sided transfer may still write it (I6 off).
	NoQuarantine bool
	// ReuseSharedFile maps an existing Config.SharedFile in place
	// (truncated) instead of creating a new file: a writer that still maps
	// the crashed previous incarnation's memory then writes into this pool
	// (the simulator's restart-same-file hazard).
	ReuseSharedFile bool
	// CacheIgnoresTenant makes the prefix cache find and read entries
	// whatever the reader's tenant: no tenant in the index, no tenant check
	// on a cached page's read (I11 off). With a salt-less key (the engine's
	// matching hook) it is the cross-tenant cache the auditor must catch.
	CacheIgnoresTenant bool
	// NoCacheTenantCheck drops only the read-time tenant check of a cached
	// page (checkCachedLocked and the view's second check): the index
	// stays keyed by tenant and the keys salted, so only a share handed
	// out wrongly (a lookup or index bug, which the simulator injects)
	// reaches it. I11's last layer off.
	NoCacheTenantCheck bool
}

// Verify says when sealed pages are re-hashed against their seal digest
// (--kv-verify). A mismatch is an integrity violation (digest_mismatch, I8):
// the page is quarantined and every sequence reading it fails at its next
// read, never finishes on bytes that changed behind the pool's back.
type Verify int

const (
	// VerifyHit (the zero value) re-hashes a cached page when Lookup hands
	// it out: one hash per page per hit, never per step.
	VerifyHit Verify = iota
	// VerifyOff trusts every seal (measurement only).
	VerifyOff
	// VerifySample is VerifyHit plus a bounded sweep: each scheduler step
	// (VerifyStep) re-hashes up to Config.VerifyPages sealed pages, cached
	// or private, round-robin over the pool, so every sealed page is
	// re-hashed at least once every ceil(Pages/VerifyPages) steps.
	VerifySample
	// VerifyAll is VerifyHit plus every sealed page re-hashed at each
	// view's first touch and every sealed page swept at every step
	// (debugging: unbounded work per step).
	VerifyAll
)

// DefaultVerifyPages is Config.VerifyPages when zero: sealed pages
// re-hashed per step under VerifySample.
const DefaultVerifyPages = 1

// verifyScanPerPage bounds the page tags one VerifyStep looks at per page
// of its budget (pages that are not sealed are skipped, not hashed).
const verifyScanPerPage = 64

// ParseVerify reads the --kv-verify flag value: off, hit, sample or all
// ("always" is an old name of all).
func ParseVerify(s string) (Verify, error) {
	switch s {
	case "hit", "":
		return VerifyHit, nil
	case "off":
		return VerifyOff, nil
	case "sample":
		return VerifySample, nil
	case "all", "always":
		return VerifyAll, nil
	}
	return 0, &Error{Code: CodeBadConfig, Msg: "--kv-verify must be off, hit, sample or all, not " + quote(s)}
}

// String is the flag value of v.
func (v Verify) String() string {
	switch v {
	case VerifyHit:
		return "hit"
	case VerifyOff:
		return "off"
	case VerifySample:
		return "sample"
	case VerifyAll:
		return "all"
	}
	return fmt.Sprintf("Verify(%d)", int(v))
}

// Config configures a pool.
type Config struct {
	Geometry
	Pages int
	Scrub ScrubMode
	Order Order
	// Lease is how long a quarantined page waits for a drain acknowledgement
	// before it may be scrubbed and freed anyway; it must exceed the
	// transport's worst in-flight time (I6). Zero means DefaultLease.
	Lease time.Duration
	// SharedFile, when set, backs page memory with a MAP_SHARED mapping of
	// this file (e.g. under /dev/shm) so a peer process can write pages
	// one-sidedly, as RDMA does (shm transport).
	SharedFile string
	// Verify says when sealed pages are re-hashed (--kv-verify).
	Verify Verify
	// VerifyPages is the sealed pages one VerifyStep re-hashes under
	// VerifySample (0: DefaultVerifyPages).
	VerifyPages int
	// CacheWeight is a tenant's weight in the prefix cache's shares
	// (cache.go, Quotas); nil or a value below 1 means 1.
	CacheWeight func(tenant string) int
	// PublicCachePages is the public scope's budget of cached pages
	// (0: a quarter of the pool).
	PublicCachePages int
	// Unsafe: test and demo hook only, see the type.
	Unsafe Unsafe
}

// DefaultLease is the quarantine lease when Config.Lease is zero.
const DefaultLease = 10 * time.Second

// Kind classifies an integrity violation (metrics label, error code).
type Kind string

const (
	KindStaleGeneration Kind = "stale_generation"
	KindForeignOwner    Kind = "foreign_owner"
	KindUnwrittenRead   Kind = "unwritten_read"
	KindSealedWrite     Kind = "sealed_write"
	KindDoubleRelease   Kind = "double_release"
	KindReleasedWrite   Kind = "write_after_release"
	KindReleasedRead    Kind = "read_after_release"
	KindDuplicateWrite  Kind = "duplicate_write"
	KindQuarantined     Kind = "quarantined"
	KindDigestMismatch  Kind = "digest_mismatch"
	KindBadRange        Kind = "bad_range"
	// KindLateWrite is a transfer write for a generation that is no longer
	// the page's: a writer that outlived an abort. Its data is dropped; it is
	// counted in Stats.LateWrites and does not quarantine the page (the page
	// now belongs to someone else, whose data the drop protected).
	KindLateWrite Kind = "late_write"
)

// Kinds lists every Kind, for metrics that want a zero series per label.
var Kinds = []Kind{
	KindStaleGeneration, KindForeignOwner, KindUnwrittenRead, KindSealedWrite,
	KindDoubleRelease, KindReleasedWrite, KindReleasedRead, KindDuplicateWrite,
	KindQuarantined, KindDigestMismatch, KindBadRange, KindLateWrite,
}

// Violation is the typed error of a failed check (I8): the page involved is
// quarantined and a counter of its Kind goes up. It never carries data, and
// its message never names the page's current owner (that would leak another
// tenant's identity to the caller who failed the check).
type Violation struct {
	Kind Kind
	Page uint32
	Msg  string
}

func (v *Violation) Error() string {
	return "kv integrity violation (" + string(v.Kind) + "): " + v.Msg
}

// Code is the stable machine-readable code: "kv_" + Kind.
func (v *Violation) Code() string { return "kv_" + string(v.Kind) }

// Is makes errors.Is(err, kv.ErrStaleGeneration) (and the other Err*
// violation sentinels) match any violation of the same Kind.
func (v *Violation) Is(target error) bool {
	t, ok := target.(*Violation)
	return ok && t.Kind == v.Kind
}

// Sentinels for errors.Is; a returned *Violation also carries page and message.
var (
	ErrStaleGeneration = &Violation{Kind: KindStaleGeneration, Msg: "stale page generation"}
	ErrForeignOwner    = &Violation{Kind: KindForeignOwner, Msg: "page belongs to another owner"}
	ErrUnwrittenRead   = &Violation{Kind: KindUnwrittenRead, Msg: "read of unwritten slots"}
	ErrSealedWrite     = &Violation{Kind: KindSealedWrite, Msg: "write to a sealed page"}
	ErrDoubleRelease   = &Violation{Kind: KindDoubleRelease, Msg: "page released twice"}
	ErrReleasedWrite   = &Violation{Kind: KindReleasedWrite, Msg: "write to a released page"}
	ErrReleasedRead    = &Violation{Kind: KindReleasedRead, Msg: "read of a released page"}
	ErrDuplicateWrite  = &Violation{Kind: KindDuplicateWrite, Msg: "page written twice by a transfer"}
	ErrQuarantined     = &Violation{Kind: KindQuarantined, Msg: "page is quarantined"}
	ErrDigestMismatch  = &Violation{Kind: KindDigestMismatch, Msg: "sealed page changed after sealing"}
	ErrBadRange        = &Violation{Kind: KindBadRange, Msg: "position, layer, page or size out of range"}
	ErrLateWrite       = &Violation{Kind: KindLateWrite, Msg: "late transfer write dropped"}
)

// Error is a non-violation failure of the pool (capacity, configuration):
// a stable Code and a sentence a user can act on.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return "kv: " + e.Msg }

// Stable codes of *Error.
const (
	CodeNoCapacity = "kv_no_capacity"
	CodeBadConfig  = "kv_bad_config"
	CodeClosed     = "kv_closed"
)

// ErrNoCapacity: a reservation that does not fit takes nothing. Returned
// errors wrap it with the numbers (errors.Is works).
var ErrNoCapacity error = &Error{Code: CodeNoCapacity, Msg: "not enough free pages for the reservation"}

// Stats is a snapshot of the pool for metrics and drain checks.
type Stats struct {
	Pages       int
	Free        int
	Reserved    int
	Filling     int
	Sealed      int
	Quarantined int
	// Violations counts refused operations by Kind (I8).
	Violations map[Kind]uint64
	// LateWrites counts transfer writes dropped for a stale generation.
	LateWrites uint64
	// Scrubbed counts pages scrubbed on their way to the free list (I7).
	Scrubbed uint64

	// Prefix cache (cache.go). Cached pages are owned by cache entries and
	// also counted in Sealed (or Quarantined).
	Cached         int    // pages owned by cache entries
	CacheIdle      int    // of those, read by nobody: evictable
	CacheReaders   int    // reader shares held (a page read by 3 sequences counts 3)
	CacheHits      uint64 // pages found by Lookup
	CacheMisses    uint64 // pages asked of Lookup and not found
	CacheInserts   uint64 // pages handed to the cache
	CacheEvictions uint64 // idle entries evicted (pressure, EvictIdle, invalidation)
	CachePublic    int    // of Cached, pages in the public scope (InsertPublic)
	// Verified counts seal-digest re-hashes (--kv-verify: hits, the
	// per-step sweep, first touches under all).
	Verified uint64
}

// InUse is every page that is not free.
func (s Stats) InUse() int { return s.Pages - s.Free }

// Held is every page that is neither free nor an idle prefix-cache entry:
// what a draining worker waits for (idle entries need no one to finish).
func (s Stats) Held() int { return s.Pages - s.Free - s.CacheIdle }

func quote(s string) string { return "\"" + s + "\"" }
