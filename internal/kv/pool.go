package kv

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// A page's tag packs its generation and state into one word so the data
// path checks both with a single atomic load (I3).
const (
	stateBits = 3
	stateMask = 1<<stateBits - 1
	maxGen    = 1<<(64-stateBits) - 1
)

func mkTag(gen uint64, s State) uint64 { return gen<<stateBits | uint64(s) }

func tagGen(t uint64) uint64  { return t >> stateBits }
func tagState(t uint64) State { return State(t & stateMask) }

// page is the metadata of one page.
type page struct {
	// tag is gen<<stateBits | state: the only field the lock-free data path
	// reads. Every change of state or generation stores it under Pool.mu,
	// except the owner's own Reserved -> Filling, which is a CAS.
	tag atomic.Uint64
	// sealed is how many leading slots Seal froze; writes below it are
	// violations.
	sealed atomic.Int32
	// summed says sum/sumSlots hold the block hash of the page's bytes as
	// they are now (sum.go). Set under Pool.mu when a transfer write or a
	// send hashes the page; cleared, lock-free, by anything that changes
	// the bytes: Put, scrub, a new allocation.
	summed atomic.Bool
	// tenant is the interned tenant of the page's owner (cache.go): a view
	// compares it with its own on every read, so a page of another tenant
	// is refused at read time even through a cached page table entry.
	tenant atomic.Uint32

	// The fields below are guarded by Pool.mu.

	// owner is the allocation's owner; kept after release so a late
	// operation can be classified (foreign vs released).
	owner Owner
	// holder is the interned id of owner.Tenant, the tenant whose count
	// the page is in while it counts (hold.go); 0 for a public entry.
	// Apart from tenant, the data path's word, which a test corrupts.
	holder uint32
	// live: the allocation's owner still holds the page and may release it.
	// Quarantine() clears it (the owner gives the page up to the lease).
	live bool
	// qTransfer: a transfer may still write the page; it leaves quarantine
	// only on DrainAck or when until has passed (I6).
	qTransfer bool
	// scrubbing: Release is scrubbing the page without the lock; it is
	// Quarantined meanwhile and only that Release may free it.
	scrubbing bool
	// fill: a fill claimed the page (ClaimFill) and has not ended: its
	// holder writes the page's bytes without the lock (fill.go). Nothing
	// frees the page meanwhile (I6).
	fill bool
	// freeAtEnd: the owner released the page while a fill was in flight;
	// it is Quarantined (in no quarantine entry) and the fill's End
	// scrubs and frees it.
	freeAtEnd bool
	// sum is the block hash of the first sumSlots slots; valid while summed.
	sum      [16]byte
	sumSlots int
	// Doubly linked free list (indices, -1 = none): O(1) pop at either end
	// and O(1) removal when a violation quarantines a free page.
	prev, next int32
	onFree     bool
}

// Pool is a fixed set of KV pages. All methods are safe for concurrent use;
// a View is not (it belongs to one sequence). No method may be called after
// Close.
type Pool struct {
	cfg       Config
	geo       Geometry
	pageElems int
	pageBytes int

	mem   []byte    // all pages, contiguous; page i at i*pageBytes
	f32   []float32 // the same memory as float32s (F32 pools; nil for F16)
	f16   []uint16  // the same memory as binary16s (F16 pools; else nil)
	u32   []uint32  // the same memory as 32-bit words (scrub)
	unmap func() error
	inc   uint64 // incarnation of a shared pool (shm.go); 0 on the heap
	// gens are a shared pool's generation words in its file (shm.go): the
	// page's generation while it is Reserved, else 0. nil on the heap.
	gens SharedGens

	pages   []page
	written []atomic.Int32 // [page*Layers+layer]: slots written in that layer (I4)

	checks   atomic.Bool // owner/generation checks on the data path (I3)
	noExtent bool        // Unsafe.NoExtentCheck (I4 off)

	mu         sync.Mutex
	head, tail int32
	nfree      int
	gen        uint64
	// quarantine maps each quarantined page to its lease end; zero means
	// "stamp now+Lease at the next Expire", so the pool never reads a clock.
	quarantine map[uint32]time.Time
	digests    [][16]byte // seal digest per page; meaningful only while Sealed
	violations map[Kind]uint64
	lateWrites uint64
	scrubbed   uint64
	verified   uint64 // seal digests re-hashed (Stats.Verified)
	verifyAt   int    // VerifyStep's cursor: the next page it looks at
	closed     bool
	scrubbers  sync.WaitGroup // Releases scrubbing without the lock
	fills      sync.WaitGroup // fills in flight (ClaimFill until End)
	cache      cacheState     // prefix cache (cache.go)
	// holds is each interned tenant's count of the pages it holds, by
	// interned id (0 unused); holding lists the ids holding any (hold.go).
	holds   []tenantHold
	holding []uint32
	// waiting are the tenants the engine last named as waiting for pages
	// of this pool (SetWaiting): contenders in the pool share
	// (holdShareLocked) like the tenants holding pages.
	waiting [waitSources][]string
}

// New builds a pool: heap-backed, or a MAP_SHARED mapping of cfg.SharedFile.
// Every page starts scrubbed and free.
func New(cfg Config) (*Pool, error) {
	if cfg.PageSize == 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	g := cfg.Geometry
	switch {
	case g.Layers <= 0 || g.KVDim <= 0 || g.PageSize <= 0:
		return nil, badConfig("geometry needs positive layers, KV dim and page size, got %d, %d, %d", g.Layers, g.KVDim, g.PageSize)
	case cfg.Pages <= 0:
		return nil, badConfig("a pool needs at least one page, got %d", cfg.Pages)
	case cfg.Pages >= math.MaxInt32:
		return nil, badConfig("%d pages is more than a pool can index (%d)", cfg.Pages, math.MaxInt32-1)
	case cfg.Scrub < ScrubZero || cfg.Scrub > ScrubOff:
		return nil, badConfig("unknown scrub mode %d", cfg.Scrub)
	case cfg.Order != FIFO && cfg.Order != LIFO:
		return nil, badConfig("unknown free-list order %d", cfg.Order)
	case cfg.Verify < VerifyHit || cfg.Verify > VerifyAll:
		return nil, badConfig("unknown verify mode %d", cfg.Verify)
	case cfg.VerifyPages < 0:
		return nil, badConfig("negative verify budget %d pages per step", cfg.VerifyPages)
	case cfg.Lease < 0:
		return nil, badConfig("negative quarantine lease %v", cfg.Lease)
	case !g.Type.Valid():
		return nil, badConfig("unknown KV type %d", g.Type)
	case g.Type == Q8_0 && g.KVDim%Q8Block != 0:
		return nil, badConfig("q8_0 KV pages need a KV dim that is a multiple of %d, the model's is %d; use --kv-type f16", Q8Block, g.KVDim)
	}
	size := int64(cfg.Pages) * int64(g.PageBytes())
	if size/int64(cfg.Pages) != int64(g.PageBytes()) || size > math.MaxInt {
		return nil, badConfig("%d pages of %d bytes overflow the address space", cfg.Pages, g.PageBytes())
	}
	p := &Pool{
		cfg:        cfg,
		geo:        g,
		pageElems:  g.pageElems(),
		pageBytes:  g.PageBytes(),
		pages:      make([]page, cfg.Pages),
		written:    make([]atomic.Int32, cfg.Pages*g.Layers),
		noExtent:   cfg.Unsafe.NoExtentCheck,
		quarantine: make(map[uint32]time.Time),
		digests:    make([][16]byte, cfg.Pages),
		violations: make(map[Kind]uint64),
		head:       -1,
		tail:       -1,
		holds:      []tenantHold{{at: -1}},
	}
	p.cache.init(cfg.Pages)
	if cfg.SharedFile != "" {
		mem, gens, inc, unmap, err := mapShared(cfg.SharedFile, g, cfg.Pages, cfg.Unsafe.ReuseSharedFile)
		if err != nil {
			return nil, err
		}
		p.mem, p.gens, p.unmap, p.inc = mem, gens, unmap, inc
		p.u32 = unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(mem))), len(mem)/4)
	} else {
		// A page is a whole number of 32-bit words (K and V rows pair up),
		// and word-aligned memory serves every element type.
		p.u32 = make([]uint32, int(size/4))
		p.mem = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(p.u32))), len(p.u32)*4)
		adviseHuge(p.mem)
	}
	switch g.Type {
	case F32:
		p.f32 = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(p.u32))), len(p.u32))
	case F16:
		p.f16 = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(p.u32))), 2*len(p.u32))
	}
	if cfg.Scrub == ScrubPoison {
		// Fresh memory is zero; poison it so a never-used page reads as
		// loudly as a reused one.
		fillPoison(p.u32, p.poisonWord())
	}
	p.checks.Store(!cfg.Unsafe.NoOwnerCheck)
	for i := range p.pages {
		p.pages[i].prev, p.pages[i].next = -1, -1
		p.pushFreeLocked(int32(i))
	}
	return p, nil
}

// Close releases the page memory (unmaps a shared file; the file stays).
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	// A Release scrubbing without the lock, or a fill writing a page,
	// must finish before the mapping goes away under it.
	p.scrubbers.Wait()
	p.fills.Wait()
	p.mu.Lock()
	if p.unmap == nil {
		// Heap memory stays until the Pool is unreachable: a straggling
		// view gets stale data checks, not a crash.
		return nil
	}
	err := p.unmap()
	p.mem, p.f32, p.f16, p.u32 = nil, nil, nil, nil
	return err
}

// Geometry is the page shape.
func (p *Pool) Geometry() Geometry { return p.geo }

// Pages is the number of pages.
func (p *Pool) Pages() int { return len(p.pages) }

// CapacityTokens is the number of token slots in the pool: what preflight and
// admission compare the context against (I2).
func (p *Pool) CapacityTokens() int { return len(p.pages) * p.geo.PageSize }

// FreePages is the number of free pages right now.
func (p *Pool) FreePages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nfree
}

// AvailablePages is the pages a Reserve could take right now: the free
// ones and the idle prefix-cache pages it would evict.
func (p *Pool) AvailablePages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nfree + p.cache.idle
}

// Counts are a pool's page counts that need no pass over the pages.
type Counts struct {
	Pages, Free int
	// CacheIdle are idle prefix-cache entries (evictable), Cached all
	// cache entries (read or idle).
	CacheIdle, Cached int
}

// Counts reads the counters Stats would recount: O(1) under the lock, for
// a load report a router polls (Stats walks every page).
func (p *Pool) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Counts{Pages: len(p.pages), Free: p.nfree, CacheIdle: p.cache.idle, Cached: p.cache.cached}
}

// SetChecks turns the owner/generation checks of the data path on or off.
// TEST AND BENCHMARK HOOK ONLY: benchmarks measure what the checks cost and
// the incident demo shows each other safeguard holding alone.
func (p *Pool) SetChecks(on bool) { p.checks.Store(on) }

// SharedOffset is the byte offset of a page in the shared pool file (shm
// transport): after the file's header.
func (p *Pool) SharedOffset(ref PageRef) int64 {
	return SharedHeaderBytes + int64(ref.Page)*int64(p.pageBytes)
}

// Incarnation names this pool's shared memory: 64 random bits chosen when
// the shared file was created, 0 for a heap pool. A Reservation carries it
// so a one-sided writer never places bytes in another incarnation's
// memory (I6 across a decode restart).
func (p *Pool) Incarnation() uint64 { return p.inc }

// Reserve allocates n pages for o, all or nothing, each with a fresh
// generation (I3), in state Reserved with nothing written.
func (p *Pool) Reserve(o Owner, n int) ([]PageRef, error) {
	if n < 0 {
		return nil, badConfig("cannot reserve %d pages", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	return p.reserveLocked(o, n, nil)
}

func (p *Pool) reserveLocked(o Owner, n int, table []PageRef) ([]PageRef, error) {
	p.evictForLocked(o.Tenant, n) // idle prefix-cache pages are the first to go
	if n > p.nfree {
		return nil, fmt.Errorf("%w: %d pages (%d tokens) requested, %d of %d pages free",
			ErrNoCapacity, n, n*p.geo.PageSize, p.nfree, len(p.pages))
	}
	out := make([]PageRef, len(table), len(table)+n)
	copy(out, table)
	L := p.geo.Layers
	tid := p.internLocked(o.Tenant)
	for range n {
		pg := p.popFreeLocked()
		m := &p.pages[pg]
		m.tenant.Store(tid)
		p.gen++
		if p.gen > maxGen {
			panic("kv: generation counter exhausted")
		}
		m.owner = o
		m.holder = tid
		m.live = true
		m.qTransfer = false
		m.sealed.Store(0)
		m.summed.Store(false)
		for l := range L {
			p.written[int(pg)*L+l].Store(0)
		}
		// The tag is stored last: a stale ref racing with this sees either
		// the old generation or the new one, never a half-built page (I3).
		m.tag.Store(mkTag(p.gen, Reserved))
		if p.gens != nil {
			// Open to its owner's one-sided write, at this generation only.
			p.gens[pg].Store(p.gen)
		}
		out = append(out, PageRef{Page: uint32(pg), Gen: p.gen})
	}
	if n > 0 {
		p.addHeldLocked(tid, n) // in use now (a free page is never a cache entry)
	}
	return out, nil
}

// Extend reserves n more pages for a decoding sequence whose current table
// is table, after checking that every entry still belongs to o (I3). It
// returns the whole new table (table's entries then the new ones), like
// append; on error nothing is reserved.
func (p *Pool) Extend(o Owner, table []PageRef, n int) ([]PageRef, error) {
	if n < 0 {
		return nil, badConfig("cannot extend by %d pages", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	for _, ref := range table {
		if v := p.checkLocked(o, ref, opHold); v != nil {
			return nil, v
		}
	}
	return p.reserveLocked(o, n, table)
}

// Release scrubs (I7) and frees o's pages. Each ref is checked on its own:
// valid ones are freed, a bad one (double release, stale, foreign) is a
// violation and the first one is returned.
func (p *Pool) Release(o Owner, refs []PageRef) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errClosed
	}
	// A big release is scrubbed with the lock dropped, so one long sequence
	// ending does not stall every other sequence's reservations for the
	// memory-bandwidth time of its scrub.
	unlocked := p.cfg.Scrub != ScrubOff && len(refs)*p.pageBytes >= scrubUnlockedBytes
	var first error
	var later []uint32
	var shared []PageRef
	for _, ref := range refs {
		if v := p.checkLocked(o, ref, opRelease); v != nil {
			if first == nil {
				first = v
			}
			continue
		}
		if p.cache.meta[ref.Page].cached {
			shared = append(shared, ref) // a reader share, not a page
			continue
		}
		m := &p.pages[ref.Page]
		m.live = false
		if m.qTransfer {
			continue // still fenced for a transfer (I6)
		}
		if m.fill {
			// A fill writes it without the lock: out of service now, and
			// the fill's End scrubs and frees it (I6). Not waited for: a
			// filler may need a lock this Release's caller holds.
			if tagState(m.tag.Load()) == Quarantined {
				delete(p.quarantine, ref.Page)
			}
			m.freeAtEnd = true
			p.setStateLocked(ref.Page, Quarantined)
			continue
		}
		if unlocked {
			// Out of service while it is scrubbed: Quarantined in its tag
			// (every check refuses it) but not in the quarantine map, so
			// Expire and DrainAck cannot free it under the scrubber.
			if tagState(m.tag.Load()) == Quarantined {
				delete(p.quarantine, ref.Page)
			}
			m.scrubbing = true
			p.setStateLocked(ref.Page, Quarantined)
			later = append(later, ref.Page)
			continue
		}
		p.freeLocked(ref.Page)
	}
	p.dropSharesLocked(o, shared)
	if len(later) == 0 {
		p.mu.Unlock()
		return first
	}
	p.scrubbers.Add(1)
	defer p.scrubbers.Done()
	p.mu.Unlock()
	for _, pg := range later {
		p.scrubPage(pg) // I7: before the page can reach the free list
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return first
	}
	for _, pg := range later {
		p.freeScrubbedLocked(pg)
	}
	p.scrubbed += uint64(len(later))
	return first
}

// scrubUnlockedBytes is the release size from which Release scrubs with the
// pool lock dropped.
const scrubUnlockedBytes = 1 << 20

// Quarantine takes o's pages out of service instead of releasing them: a
// one-sided transfer (shm, RDMA) may still write them (I6). They leave, are
// scrubbed and freed, only on DrainAck or when until has passed (Expire); a
// zero until means "the pool's Lease from the next Expire". The owner gives
// the pages up: a later Release of them is a double release. Refs that fail
// their check are counted violations and skipped.
func (p *Pool) Quarantine(o Owner, refs []PageRef, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	var shared []PageRef
	for _, ref := range refs {
		if p.checkLocked(o, ref, opQuarantine) != nil {
			continue
		}
		if p.cache.meta[ref.Page].cached {
			// No transfer writes a cached page (only sealed, unfenced
			// pages are cached): giving it up is ending the share.
			shared = append(shared, ref)
			continue
		}
		m := &p.pages[ref.Page]
		m.live = false
		if p.cfg.Unsafe.NoQuarantine {
			p.freeLocked(ref.Page) // the early free I6 exists to prevent
			continue
		}
		m.qTransfer = true
		p.setStateLocked(ref.Page, Quarantined)
		p.quarantine[ref.Page] = until
	}
	p.dropSharesLocked(o, shared)
}

// DrainAck is the transport's word that no write to these pages is in
// flight any more: quarantined pages of o leave quarantine, scrubbed (I6,
// I7). An ack never frees a page early: one naming another owner's page is
// counted (foreign_owner) and ignored; one for a page that is not waiting
// for a transfer (already acked, or freed by its lease) is ignored.
func (p *Pool) DrainAck(o Owner, refs []PageRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for _, ref := range refs {
		if int(ref.Page) >= len(p.pages) {
			p.countLocked(KindBadRange)
			continue
		}
		m := &p.pages[ref.Page]
		t := m.tag.Load()
		switch {
		case tagGen(t) != ref.Gen:
			// A slow ack for pages a lease already freed: harmless, and it
			// cannot free anything.
		case p.cache.meta[ref.Page].cached:
			// A cached page in the acked table: never a transfer target.
		case m.owner != o:
			p.countLocked(KindForeignOwner)
		case tagState(t) != Quarantined || !m.qTransfer:
			// Already drained or expired: acks may be repeated.
		default:
			m.qTransfer = false
			switch {
			case m.live:
			case m.fill:
				// Still written by a fill of its own: its End frees it (I6).
				delete(p.quarantine, ref.Page)
				m.freeAtEnd = true
			default:
				p.freeLocked(ref.Page)
			}
		}
	}
}

// Expire frees the quarantined pages whose lease has passed at now, scrubbed,
// and returns how many. Time enters the pool only here ("clock at the
// edge"), so the simulator drives leases with its own clock. A quarantined
// page without a lease (a violation on a page nobody holds) gets one now.
func (p *Pool) Expire(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	// Sorted so a seeded simulation frees pages, and so refills the free
	// list, in the same order every run.
	qs := make([]uint32, 0, len(p.quarantine))
	for pg := range p.quarantine {
		qs = append(qs, pg)
	}
	slices.Sort(qs)
	n := 0
	for _, pg := range qs {
		m := &p.pages[pg]
		if m.live || m.scrubbing {
			continue // its owner, or the scrubbing Release, frees it
		}
		until := p.quarantine[pg]
		if until.IsZero() {
			p.quarantine[pg] = now.Add(p.cfg.Lease)
			continue
		}
		if now.Before(until) || m.fill {
			continue // a fill in flight writes it: freed after its End (I6)
		}
		m.qTransfer = false
		p.freeLocked(pg)
		n++
	}
	return n
}

// Seal freezes the written prefix of o's pages and records each page's
// digest: later writes to those slots are violations. A sealed page that is
// not full still accepts appends past its sealed prefix (decode continues
// the prompt's last page).
func (p *Pool) Seal(o Owner, refs []PageRef) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	var first error
	for _, ref := range refs {
		if v := p.checkLocked(o, ref, opSeal); v != nil {
			if first == nil {
				first = v
			}
			continue
		}
		if p.cache.meta[ref.Page].cached {
			continue // sealed for good when it was cached; a reader cannot re-digest it
		}
		m := &p.pages[ref.Page]
		n := p.minWrittenLocked(ref.Page)
		m.sealed.Store(int32(n))
		p.digests[ref.Page] = p.blockHashLocked(ref.Page, n)
		p.setStateLocked(ref.Page, Sealed)
	}
	return first
}

// PageData returns the image of one of o's pages (PageBytes bytes, aliasing
// the pool: copy it before the page is released) and how many slots are
// written in every layer. Bytes past that count are not the owner's data
// and a receiver must ignore them (WritePage does).
func (p *Pool) PageData(o Owner, ref PageRef) ([]byte, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pageDataLocked(o, ref)
}

func (p *Pool) pageDataLocked(o Owner, ref PageRef) ([]byte, int, error) {
	if p.closed {
		return nil, 0, errClosed
	}
	if int(ref.Page) >= len(p.pages) {
		return nil, 0, p.violateLocked(KindBadRange, ref.Page, false, "page %d is outside the pool of %d pages", ref.Page, len(p.pages))
	}
	if p.checks.Load() {
		if v := p.checkLocked(o, ref, opRead); v != nil {
			return nil, 0, v
		}
	}
	off := int(ref.Page) * p.pageBytes
	return p.mem[off : off+p.pageBytes : off+p.pageBytes], p.minWrittenLocked(ref.Page), nil
}

// WritePage applies one transferred page: data is a full page image whose
// first slots slots (in every layer) are valid. Owner, generation and state
// are checked; a page accepts one transfer write (Reserved -> Filling). A
// write for an old generation (a writer that outlived an abort) is dropped
// and counted as a late write. Only the valid slots are copied, so bytes a
// sender did not own never enter this pool.
func (p *Pool) WritePage(o Owner, ref PageRef, slots int, data []byte) error {
	_, err := p.writePage(o, ref, slots, data, false)
	return err
}

// MarkWritten records that slots slots of a page arrived out of band, in the
// shared mapping (one-sided shm transport), with the same checks as
// WritePage. A stale generation here means bytes already landed in a page
// that was re-allocated: the page is quarantined (I8) unless it was still
// fenced in quarantine for exactly this case (I6), where the write is only
// counted as late.
func (p *Pool) MarkWritten(o Owner, ref PageRef, slots int) error {
	_, err := p.markWritten(o, ref, slots, false)
	return err
}

func (p *Pool) writePage(o Owner, ref PageRef, slots int, data []byte, sum bool) (PageSum, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PageSum{}, errClosed
	}
	if err := p.transferLocked(o, ref, slots, len(data), opTransfer); err != nil {
		return PageSum{}, err
	}
	g := p.geo
	base := int(ref.Page) * p.pageBytes
	run := slots * g.RowBytes()
	stride := g.PageSize * g.RowBytes()
	if slots == g.PageSize {
		copy(p.mem[base:base+p.pageBytes], data) // one run: the whole page
	} else {
		for half := range 2 * g.Layers {
			off := half * stride
			copy(p.mem[base+off:base+off+run], data[off:off+run])
		}
	}
	p.markLocked(ref.Page, slots)
	if !sum {
		return PageSum{}, nil
	}
	// Hashed from the pool's copy, right after the copy put it in cache.
	return p.sumLocked(ref.Page, slots), nil
}

func (p *Pool) markWritten(o Owner, ref PageRef, slots int, sum bool) (PageSum, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return PageSum{}, errClosed
	}
	if err := p.transferLocked(o, ref, slots, p.pageBytes, opMark); err != nil {
		return PageSum{}, err
	}
	p.markLocked(ref.Page, slots)
	if !sum {
		return PageSum{}, nil
	}
	// The bytes came out of band: they are hashed here, from this pool's
	// own memory, after the notice; nothing the sender claims is trusted.
	// Not recorded for Digest: the peer can still change them (I5).
	return p.hashLocked(ref.Page, slots), nil
}

func (p *Pool) transferLocked(o Owner, ref PageRef, slots, size int, op op) error {
	if int(ref.Page) >= len(p.pages) {
		return p.violateLocked(KindBadRange, ref.Page, false, "page %d is outside the pool of %d pages", ref.Page, len(p.pages))
	}
	if !p.checks.Load() {
		if size != p.pageBytes || slots < 1 || slots > p.geo.PageSize {
			return p.violateLocked(KindBadRange, ref.Page, false, "page write of %d bytes with %d slots does not fit a page", size, slots)
		}
		return nil // Unsafe.NoOwnerCheck: the incident's unchecked write
	}
	if v := p.checkLocked(o, ref, op); v != nil {
		return v
	}
	if p.pages[ref.Page].fill {
		// A claimed fill writes the page right now (fill.go): a second
		// write would race it, and a page accepts one transfer write.
		return p.violateLocked(KindDuplicateWrite, ref.Page, true, "a write to page %d is already in flight; a page accepts one transfer write", ref.Page)
	}
	if size != p.pageBytes || slots < 1 || slots > p.geo.PageSize {
		return p.violateLocked(KindBadRange, ref.Page, true,
			"page write of %d bytes with %d slots; a page is %d bytes of %d slots", size, slots, p.pageBytes, p.geo.PageSize)
	}
	switch tagState(p.pages[ref.Page].tag.Load()) {
	case Reserved:
		return nil
	case Sealed:
		return p.violateLocked(KindSealedWrite, ref.Page, true, "transfer write to sealed page %d", ref.Page)
	default:
		return p.violateLocked(KindDuplicateWrite, ref.Page, true, "page %d was already written; a page accepts one transfer write", ref.Page)
	}
}

func (p *Pool) markLocked(pg uint32, slots int) {
	L := p.geo.Layers
	for l := range L {
		p.written[int(pg)*L+l].Store(int32(slots))
	}
	if tagState(p.pages[pg].tag.Load()) == Reserved {
		p.setStateLocked(pg, Filling)
	}
}

// Digest is the digest of o's sequence KV over its first tokens positions,
// in logical order: for each block of the table in order, for each layer,
// the K rows then the V rows of the block's slots. It depends only on the
// sequence's content and the page size, never on which physical pages hold
// it, so prefill and decode compute the same value over different pages.
// Every covered slot must be written in every layer (I4).
func (p *Pool) Digest(o Owner, refs []PageRef, tokens int) ([16]byte, error) {
	ps := p.geo.PageSize
	if tokens < 0 || tokens > len(refs)*ps {
		p.mu.Lock()
		v := p.violateLocked(KindBadRange, 0, false, "digest of %d tokens over %d pages of %d slots", tokens, len(refs), ps)
		p.mu.Unlock()
		return [16]byte{}, v
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return [16]byte{}, errClosed
	}
	for b, ref := range refs {
		if int(ref.Page) >= len(p.pages) {
			v := p.violateLocked(KindBadRange, ref.Page, false, "page %d is outside the pool of %d pages", ref.Page, len(p.pages))
			p.mu.Unlock()
			return [16]byte{}, v
		}
		if p.checks.Load() {
			if v := p.checkLocked(o, ref, opRead); v != nil {
				p.mu.Unlock()
				return [16]byte{}, v
			}
		}
		if need := min(ps, tokens-b*ps); need > 0 && p.minWrittenLocked(ref.Page) < need {
			v := p.violateLocked(KindUnwrittenRead, ref.Page, true,
				"digest covers %d slots of page %d but only %d are written in every layer", need, ref.Page, p.minWrittenLocked(ref.Page))
			p.mu.Unlock()
			return [16]byte{}, v
		}
	}
	// Hashed under the lock: an abort path releasing (and scrubbing) these
	// pages from another goroutine must not race the hash.
	d := p.seqDigest(refs, tokens)
	p.mu.Unlock()
	return d, nil
}

// Stats snapshots page counts and violation counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Stats{Pages: len(p.pages), Violations: make(map[Kind]uint64, len(p.violations)),
		LateWrites: p.lateWrites, Scrubbed: p.scrubbed, Verified: p.verified}
	for k, v := range p.violations {
		s.Violations[k] = v
	}
	c := &p.cache
	s.Cached, s.CacheIdle, s.CacheReaders = c.cached, c.idle, len(c.shares)
	s.CacheHits, s.CacheMisses, s.CacheInserts, s.CacheEvictions = c.hits, c.misses, c.inserts, c.evictions
	for i := range c.meta {
		if c.meta[i].cached && c.meta[i].public {
			s.CachePublic++
		}
	}
	for i := range p.pages {
		switch tagState(p.pages[i].tag.Load()) {
		case Free:
			s.Free++
		case Reserved:
			s.Reserved++
		case Filling:
			s.Filling++
		case Sealed:
			s.Sealed++
		case Quarantined:
			s.Quarantined++
		}
	}
	return s
}

// CheckDrained is nil iff no page is held: every page is free or an idle
// prefix-cache entry, the free list holds each free page exactly once
// (conservation), and every idle entry is what the cache says it is
// (sealed, indexed, unread, still matching its seal digest). Idle entries
// are not leaks (the cache keeps them on purpose, for the next request of
// their tenant) but they are not hidden either: Drained reports them
// apart, and a test that expects a given number of them checks it.
func (p *Pool) CheckDrained() error {
	_, err := p.Drained()
	return err
}

// DrainReport says where a pool's pages are: Free + CacheIdle + Held ==
// Pages.
type DrainReport struct {
	Pages, Free int
	// CacheIdle pages are prefix-cache entries nobody reads (evictable).
	CacheIdle int
	// Held pages are everything else: reserved, written, read by a
	// sequence (a cached page with a reader counts here) or quarantined.
	Held int
}

// Drained is CheckDrained with the counts: the error is non-nil when
// pages are held or the bookkeeping is wrong.
func (p *Pool) Drained() (DrainReport, error) {
	if err := p.audit(); err != nil {
		return DrainReport{}, err
	}
	s := p.Stats()
	r := DrainReport{Pages: s.Pages, Free: s.Free, CacheIdle: s.CacheIdle, Held: s.Held()}
	if err := p.checkIdleSeals(); err != nil {
		return r, err
	}
	if r.Held == 0 {
		return r, nil
	}
	return r, &Error{Code: CodeNotDrained, Msg: fmt.Sprintf(
		"pool not drained: %d of %d pages held (%d reserved, %d filling, %d sealed, %d quarantined); apart from them %d idle in the prefix cache",
		r.Held, s.Pages, s.Reserved, s.Filling, s.Sealed-s.CacheIdle, s.Quarantined, s.CacheIdle)}
}

// checkIdleSeals re-hashes every idle cache entry against its seal digest:
// a drained pool's idle entries are counted as good only if they are.
func (p *Pool) checkIdleSeals() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := &p.cache
	for pg := range c.meta {
		if !c.meta[pg].onLRU {
			continue
		}
		if tagState(p.pages[pg].tag.Load()) != Sealed || p.pageDigest(uint32(pg), p.geo.PageSize) != p.digests[pg] {
			return &Error{Code: CodeCorrupt, Msg: fmt.Sprintf("idle prefix-cache page %d no longer matches its seal digest", pg)}
		}
	}
	return nil
}

// CodeNotDrained is the code of CheckDrained's error.
const CodeNotDrained = "kv_not_drained"

// Audit checks the pool's own bookkeeping at any moment (conservation): the
// free list holds exactly the Free pages, once each, the free counter
// agrees, and every quarantined page is accounted for. The simulator calls
// it after every step; a non-nil result is a bug in kv (code kv_corrupt).
func (p *Pool) Audit() error { return p.audit() }

func (p *Pool) audit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	prev := int32(-1)
	for i := p.head; i != -1; i = p.pages[i].next {
		m := &p.pages[i]
		if !m.onFree || m.prev != prev || tagState(m.tag.Load()) != Free {
			return &Error{Code: CodeCorrupt, Msg: fmt.Sprintf("free list corrupt at page %d", i)}
		}
		prev = i
		if n++; n > len(p.pages) {
			return &Error{Code: CodeCorrupt, Msg: "free list has a cycle"}
		}
	}
	if prev != p.tail || n != p.nfree {
		return &Error{Code: CodeCorrupt, Msg: fmt.Sprintf("free list holds %d pages, counter says %d", n, p.nfree)}
	}
	free, quar := 0, 0
	for i := range p.pages {
		st := tagState(p.pages[i].tag.Load())
		if st == Free {
			free++
		}
		_, inQ := p.quarantine[uint32(i)]
		m := &p.pages[i]
		out := 0 // why a page is out of service: at most one reason
		for _, b := range []bool{inQ, m.scrubbing, m.freeAtEnd} {
			if b {
				out++
			}
		}
		if (st == Quarantined) != (out > 0) || out > 1 || (m.freeAtEnd && !m.fill) {
			return &Error{Code: CodeCorrupt, Msg: fmt.Sprintf("page %d state %v disagrees with the quarantine set", i, st)}
		}
		if st == Quarantined {
			quar++
		}
	}
	if free != n {
		return &Error{Code: CodeCorrupt, Msg: fmt.Sprintf("%d free pages but %d on the free list", free, n)}
	}
	if err := p.auditHoldsLocked(); err != nil {
		return err
	}
	return p.auditCacheLocked()
}

// CodeCorrupt: the pool's own bookkeeping is inconsistent (a bug in kv).
const CodeCorrupt = "kv_corrupt"

// --- checks -----------------------------------------------------------------

type op uint8

const (
	opRead       op = iota // Block, PageData, Digest
	opWrite                // Put
	opHold                 // Extend: the entry stays in the sequence's table
	opTransfer             // WritePage: data not yet written, droppable
	opMark                 // MarkWritten: bytes already landed
	opSeal                 // Seal
	opRelease              // Release
	opQuarantine           // Quarantine
)

// checkLocked is the full check of ref for o (I3): the page's generation is
// ref's, o owns it, o still holds it, and it is not quarantined. It
// classifies a failure, quarantines the page where I8 says so and counts it.
func (p *Pool) checkLocked(o Owner, ref PageRef, op op) *Violation {
	if int(ref.Page) >= len(p.pages) {
		return p.violateLocked(KindBadRange, ref.Page, false, "page %d is outside the pool of %d pages", ref.Page, len(p.pages))
	}
	m := &p.pages[ref.Page]
	t := m.tag.Load()
	st := tagState(t)
	if tagGen(t) != ref.Gen {
		switch {
		case op == opTransfer:
			// The data is dropped; the page's current holder is untouched.
			p.lateWrites++
			return p.violateLocked(KindLateWrite, ref.Page, false,
				"transfer write for generation %d of page %d arrived after the page was re-allocated; dropped", ref.Gen, ref.Page)
		case op == opMark && st == Quarantined && !m.live:
			p.lateWrites++
			return p.violateLocked(KindLateWrite, ref.Page, false,
				"one-sided write for generation %d of page %d landed while the page was fenced in quarantine (I6)", ref.Gen, ref.Page)
		case op == opMark:
			p.lateWrites++
		}
		return p.violateLocked(KindStaleGeneration, ref.Page, true,
			"page %d is at a different generation than the page table's %d", ref.Page, ref.Gen)
	}
	if p.cache.meta[ref.Page].cached {
		return p.checkCachedLocked(o, ref, op)
	}
	if m.owner != o {
		return p.violateLocked(KindForeignOwner, ref.Page, true, "page %d belongs to another owner", ref.Page)
	}
	if st == Free || !m.live {
		switch op {
		case opRelease, opQuarantine:
			return p.violateLocked(KindDoubleRelease, ref.Page, true, "page %d was already released", ref.Page)
		case opRead:
			return p.violateLocked(KindReleasedRead, ref.Page, true, "read of page %d after its release", ref.Page)
		case opTransfer, opMark:
			if st == Quarantined && m.qTransfer {
				p.lateWrites++
				return p.violateLocked(KindLateWrite, ref.Page, false,
					"transfer write to page %d after its owner gave it up; fenced by quarantine (I6)", ref.Page)
			}
		}
		return p.violateLocked(KindReleasedWrite, ref.Page, true, "write to page %d after its release", ref.Page)
	}
	if st == Quarantined && op != opRelease && op != opQuarantine {
		return p.violateLocked(KindQuarantined, ref.Page, false, "page %d is quarantined after an integrity violation", ref.Page)
	}
	return nil
}

// violateLocked counts a violation (I8), quarantines the page when asked and
// returns the typed error. Messages never name the page's owner.
func (p *Pool) violateLocked(k Kind, pg uint32, quarantine bool, format string, args ...any) *Violation {
	p.countLocked(k)
	if quarantine && int(pg) < len(p.pages) {
		p.quarantineLocked(pg)
	}
	return &Violation{Kind: k, Page: pg, Msg: fmt.Sprintf(format, args...)}
}

func (p *Pool) countLocked(k Kind) { p.violations[k]++ }

// quarantineLocked takes a page out of service after a violation. A page
// still held by its owner leaves when the owner releases it (the request has
// failed and releases through the normal path); a page nobody holds leaves
// after a lease, because whoever touched it may still be writing (I6).
func (p *Pool) quarantineLocked(pg uint32) {
	m := &p.pages[pg]
	switch tagState(m.tag.Load()) {
	case Quarantined:
		return
	case Free:
		p.removeFreeLocked(int32(pg))
		m.live = false
	}
	p.setStateLocked(pg, Quarantined)
	p.quarantine[pg] = time.Time{}
	p.quarantineCachedLocked(pg)
}

func (p *Pool) setStateLocked(pg uint32, s State) {
	m := &p.pages[pg]
	if s != Reserved {
		// Before the tag: by the time anyone can see the page in its new
		// state, no one-sided writer can start a copy into it (shm.go).
		p.closeGen(pg)
	}
	t := m.tag.Load()
	m.tag.Store(mkTag(tagGen(t), s))
	// A page that is not a cache entry counts for its tenant while in use
	// (hold.go); a cache entry counts whatever its state.
	if was, is := inUseState(tagState(t)), inUseState(s); was != is && m.holder != 0 && !p.cache.meta[pg].cached {
		if is {
			p.addHeldLocked(m.holder, +1)
		} else {
			p.addHeldLocked(m.holder, -1)
		}
	}
}

// closeGen closes a shared page's generation word: no one-sided writer
// may start a copy into it any more (shm.go). Lock-free: View.Put calls it.
func (p *Pool) closeGen(pg uint32) {
	if p.gens != nil {
		p.gens[pg].Store(0)
	}
}

// freeLocked scrubs a page (I7) and puts it on the free list.
func (p *Pool) freeLocked(pg uint32) {
	if p.scrubPage(pg) {
		p.scrubbed++
	}
	p.freeScrubbedLocked(pg)
}

func (p *Pool) freeScrubbedLocked(pg uint32) {
	m := &p.pages[pg]
	m.live = false
	m.qTransfer = false
	if m.scrubbing {
		m.scrubbing = false
	} else if tagState(m.tag.Load()) == Quarantined {
		delete(p.quarantine, pg)
	}
	p.setStateLocked(pg, Free)
	p.pushFreeLocked(int32(pg))
}

// scrubPage overwrites a page that nobody may use (I7) and says whether it
// did (ScrubOff does not).
func (p *Pool) scrubPage(pg uint32) bool {
	w := p.pageBytes / 4
	buf := p.u32[int(pg)*w : (int(pg)+1)*w]
	if p.cfg.Scrub != ScrubOff {
		p.pages[pg].summed.Store(false)
	}
	switch p.cfg.Scrub {
	case ScrubZero:
		clear(buf)
	case ScrubPoison:
		fillPoison(buf, p.poisonWord())
	default:
		return false
	}
	return true
}

// poisonWord is a 32-bit word of the pool's poison: PoisonBits, or two
// PoisonBits16 for F16 and Q8_0 pages, so every element reads as the NaN.
func (p *Pool) poisonWord() uint32 {
	if p.geo.Type == F32 {
		return PoisonBits
	}
	return uint32(PoisonBits16)<<16 | uint32(PoisonBits16)
}

// fillPoison doubles a poisoned prefix up to 4 KiB, then stamps that
// L1-resident chunk along the buffer: one pass of writes, no re-reads of
// memory that has left the cache.
func fillPoison(buf []uint32, word uint32) {
	if len(buf) == 0 {
		return
	}
	buf[0] = word
	chunk := min(len(buf), 1024)
	for n := 1; n < chunk; n *= 2 {
		copy(buf[n:chunk], buf[:n])
	}
	for n := chunk; n < len(buf); n += chunk {
		copy(buf[n:], buf[:chunk])
	}
}

func (p *Pool) minWrittenLocked(pg uint32) int {
	L := p.geo.Layers
	n := int(p.written[int(pg)*L].Load())
	for l := 1; l < L; l++ {
		n = min(n, int(p.written[int(pg)*L+l].Load()))
	}
	return n
}

// --- free list ----------------------------------------------------------------

func (p *Pool) pushFreeLocked(i int32) {
	m := &p.pages[i]
	if m.onFree {
		panic(fmt.Sprintf("kv: page %d freed twice (conservation)", i))
	}
	m.onFree = true
	m.prev, m.next = p.tail, -1
	if p.tail != -1 {
		p.pages[p.tail].next = i
	} else {
		p.head = i
	}
	p.tail = i
	p.nfree++
}

// popFreeLocked takes the oldest free page (FIFO) or the newest (LIFO).
func (p *Pool) popFreeLocked() int32 {
	i := p.head
	if p.cfg.Order == LIFO {
		i = p.tail
	}
	if i == -1 || tagState(p.pages[i].tag.Load()) != Free {
		panic("kv: free list out of step with the free counter (conservation)")
	}
	p.removeFreeLocked(i)
	return i
}

func (p *Pool) removeFreeLocked(i int32) {
	m := &p.pages[i]
	if !m.onFree {
		panic(fmt.Sprintf("kv: page %d is not on the free list", i))
	}
	if m.prev != -1 {
		p.pages[m.prev].next = m.next
	} else {
		p.head = m.next
	}
	if m.next != -1 {
		p.pages[m.next].prev = m.prev
	} else {
		p.tail = m.prev
	}
	m.prev, m.next, m.onFree = -1, -1, false
	p.nfree--
}

// --- errors -----------------------------------------------------------------

var errClosed = &Error{Code: CodeClosed, Msg: "the pool is closed"}

func badConfig(format string, args ...any) error {
	return &Error{Code: CodeBadConfig, Msg: fmt.Sprintf(format, args...)}
}
