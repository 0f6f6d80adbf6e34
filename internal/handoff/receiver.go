package handoff

import (
	"bytes"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/kv"
	"sluice/internal/model"
)

// Safeguards switches the Receiver's verification layers OFF, one by one.
//
// !!! FOR THE INCIDENT DEMO, THE SIMULATOR AND TESTS ONLY. !!!
// The zero value, every safeguard ON, is the only configuration a server may
// run with; nothing outside tests and `sluice demo incident` may set a
// field. They exist so a test can show that each layer ALONE turns the
// incident's leak into an error (DESIGN.md, "each safeguard must be able to
// stop the incident alone").
type Safeguards struct {
	// NoCount skips "tokens written == reserved == committed" (I5).
	NoCount bool
	// NoCoverage skips "every reserved page written exactly once" (I5).
	NoCoverage bool
	// NoDigest skips the digest comparison and accepts a missing digest (I5).
	NoDigest bool
	// NoReservationMatch skips the Receiver's own check that a write targets
	// this handoff's reserved page, generation and slot count; the pool's
	// owner and generation tags (I3) then stand alone.
	NoReservationMatch bool
	// NoChecksum skips the per-write page checksum (and the refusal of
	// one-sided notices to a pool that is not shared).
	NoChecksum bool
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// PageSize is the pool's token slots per page.
	PageSize int
	// OneSided says a peer can write the pool's memory without the Receiver
	// seeing the bytes first (shm, RDMA). A handoff that ends before its
	// commit then keeps its pages quarantined until the writer's drain
	// acknowledgement or until Lease has passed (I6).
	OneSided bool
	// Lease must exceed the one-sided transport's worst in-flight write time.
	Lease time.Duration
	// Headroom, when positive, is the room for generated tokens a
	// reservation takes beyond the prompt (at most MaxTokens): the decoder
	// then grows the table page by page (pages on demand). 0 reserves room
	// for all MaxTokens up front.
	Headroom int
	// Admit, when set, is asked before a reservation of pages that the
	// pool could hold: false answers ErrNoRoom, counted as such, as when
	// the pool itself has no room (the decode worker keeps a free-page
	// watermark for its running sequences' growth with it).
	Admit func(pages int) bool
	// Tombstone is how long an ended handoff is remembered so its late
	// messages are recognised and counted (default 1 minute).
	Tombstone time.Duration
	// Model is the fingerprint of the model whose KV this pool holds
	// (I13): a Reserve naming another is refused with ErrModelMismatch,
	// and every Reservation carries it.
	Model model.Fingerprint
	// Safeguards: zero value = all on. See the type's warning.
	Safeguards Safeguards
}

// CachingPool is a Pool with a prefix cache (kv.Pool): Reserve then
// starts the table with the cached prefix (reader shares) and extends it
// with fresh pages.
type CachingPool interface {
	Pool
	// Lookup takes reader shares of the longest cached run of keys for o.
	Lookup(o kv.Owner, keys []kv.BlockKey) ([]kv.PageRef, error)
	// Extend appends n fresh pages to table (whose entries o holds).
	Extend(o kv.Owner, table []kv.PageRef, n int) ([]kv.PageRef, error)
}

type phase uint8

const (
	phReserved    phase = iota // pages reserved, nothing written yet
	phTransfering              // at least one write applied
	phAccepted                 // commit verified; pages handed to the decoder
	phEnded                    // failed or aborted; kept as a tombstone
)

type rhandoff struct {
	owner   kv.Owner
	prompt  int          // PromptTokens of the Reserve
	refs    []kv.PageRef // all reserved pages; the first nPrompt carry the prompt
	nPrompt int
	// nCached leading prompt blocks are shared cached pages the decode
	// pool already held (Reservation.PrefixTokens): never written.
	nCached   int
	slots     []int // per prompt block: slots written, 0 = not yet
	writes    []int // per prompt block: number of writes applied
	tokens    int   // total slots written
	ph        phase
	endedAt   time.Time
	quar      bool  // pages are quarantined awaiting drain/lease
	err       error // why it ended
	maxTokens int
	// early: an Abort arrived before any Reserve for this id (a tombstone
	// with no pages); a Reserve that arrives later is refused.
	early bool
	// inflight counts this handoff's writes whose pages are claimed and
	// being opened outside the caller's lock (BeginWrite to EndWrite):
	// counted in writes already, not yet in slots and tokens.
	inflight int
}

// Accepted is what the Receiver hands the decoder when a commit verifies:
// from here on the pages are the decoder's to read, extend and release.
type Accepted struct {
	Handoff kv.ID
	Owner   kv.Owner
	// Pages are all pages reserved for the handoff in logical order: the
	// prompt's, then the room for generated tokens (see Headroom).
	Pages []kv.PageRef
	// Tokens is the verified prompt length (I9).
	Tokens     int
	FirstToken int32
	MaxTokens  int
	// CachedBlocks leading Pages are shared prefix-cache pages (reader
	// shares; Release gives them back).
	CachedBlocks int
}

// ReceiverStats are counters for metrics.
type ReceiverStats struct {
	Reserved, Accepted, Aborted uint64
	// Failed counts handoffs that failed closed, by error code (I8).
	Failed map[Code]uint64
	// LateWrites counts writes for handoffs that already ended (aborted,
	// failed or accepted): dropped, never applied.
	LateWrites uint64
	// PagesTransferred and PagesSkipped count the prompt pages of accepted
	// handoffs that were written by the transfer, and that were not
	// because the decode pool's prefix cache already held them
	// (Reservation.PrefixTokens).
	PagesTransferred, PagesSkipped uint64
	// Live is the number of handoffs between Reserve and their end.
	Live int
}

// Receiver is the decode side of the handoff protocol: a pure state machine
// with no goroutines, clock or network. Time arrives as arguments. It is not
// safe for concurrent use; wrap it (see Server).
//
// Ordering contracts:
//   - Write returns nil only after the batch is applied to the pool; so
//     does EndWrite, for the batch its BeginWrite checked (between the
//     two, the caller opens the batch's sealed pages without the
//     Receiver: Writes.Open).
//   - Commit returns an Accepted only after count, coverage and digest are
//     verified (I5); otherwise the handoff has failed closed and its pages
//     are released, or quarantined when a one-sided writer may still write (I6).
//   - After any error other than ErrUnknownHandoff/ErrDuplicate/ErrRefused
//     on a live handoff, the handoff is over: every later message for it is
//     refused and counted.
type Receiver struct {
	cfg   ReceiverConfig
	pool  Pool
	live  map[kv.ID]*rhandoff
	stats ReceiverStats
	// early lists the ids of pre-reservation abort tombstones, oldest
	// first, so there are never more than maxEarlyAborts of them.
	early []kv.ID
}

// maxEarlyAborts bounds the tombstones left by aborts of handoffs this
// Receiver never reserved: an authenticated but confused peer cannot grow
// them without bound. A Reserve normally follows its early Abort within
// one network round trip, far sooner than the oldest of this many.
const maxEarlyAborts = 1 << 14

// NewReceiver returns a Receiver applying writes to pool.
func NewReceiver(cfg ReceiverConfig, pool Pool) *Receiver {
	if cfg.PageSize <= 0 {
		panic("handoff: ReceiverConfig.PageSize must be > 0")
	}
	if cfg.Tombstone == 0 {
		cfg.Tombstone = time.Minute
	}
	return &Receiver{cfg: cfg, pool: pool, live: map[kv.ID]*rhandoff{},
		stats: ReceiverStats{Failed: map[Code]uint64{}}}
}

// Stats returns a copy of the counters.
func (r *Receiver) Stats() ReceiverStats {
	s := r.stats
	s.Failed = make(map[Code]uint64, len(r.stats.Failed))
	for k, v := range r.stats.Failed {
		s.Failed[k] = v
	}
	for _, h := range r.live {
		if h.ph == phReserved || h.ph == phTransfering {
			s.Live++
		}
	}
	return s
}

// Reserve reserves ceil((PromptTokens+room)/PageSize) pages, all or
// nothing, owned by (Tenant, Handoff), room being MaxTokens or, with a
// Headroom, at most Headroom. The Reservation lists the first
// ceil(PromptTokens/PageSize) of them, which the prompt's writes must
// cover; the rest is room for decoding.
func (r *Receiver) Reserve(now time.Time, m *Reserve) (*Reservation, error) {
	return r.ReservePrefix(now, m, nil)
}

// ReservePrefix is Reserve with a prefix-cache lookup: keys are the chain
// keys (kv.PrefixKeys) of m's full prompt pages in the decode pool's cache,
// which the worker derives from the authenticated tenant and its secret
// (kv.TenantSalt); nil looks nothing up. In a caching pool the table then
// starts with the longest cached run (reader shares, never the last
// prompt block) and Reservation.PrefixTokens says how many tokens that is.
func (r *Receiver) ReservePrefix(now time.Time, m *Reserve, keys []kv.BlockKey) (*Reservation, error) {
	if err := CheckModel(r.cfg.Model, m.Model, "the reserving peer"); err != nil {
		// I13: KV of this pool is never computed by, nor attended for,
		// another model's tokens.
		r.stats.Failed[ErrModelMismatch.Code]++
		return nil, err
	}
	// prompt+max_tokens must not wrap: near MaxInt the sum goes negative,
	// asks for no pages and would be admitted (then free to grow into the
	// whole pool). The pool refuses what it cannot hold.
	if m.PromptTokens <= 0 || m.MaxTokens < 0 || !kv.TokensFit(m.PromptTokens, m.MaxTokens, math.MaxInt) {
		r.stats.Failed[ErrRefused.Code]++
		return nil, ErrRefused.With("prompt_tokens %d, max_tokens %d", m.PromptTokens, m.MaxTokens)
	}
	if h, dup := r.live[m.Handoff]; dup {
		if h.early {
			// I6: the router gave this handoff up (its Abort overtook the
			// Reserve on another connection); reserving now would leave
			// pages nobody will ever release.
			r.stats.Failed[ErrAborted.Code]++
			return nil, ErrAborted.With("handoff %s was aborted before its reservation arrived: %v", IDString(m.Handoff), h.err)
		}
		return nil, ErrDuplicate.With("handoff %s", IDString(m.Handoff))
	}
	ps := r.cfg.PageSize
	nPrompt := kv.PagesFor(m.PromptTokens, ps)
	room := m.MaxTokens
	if r.cfg.Headroom > 0 {
		room = min(room, r.cfg.Headroom)
	}
	nAll := kv.PagesFor(m.PromptTokens+room, ps)
	o := kv.Owner{Tenant: m.Tenant, ID: m.Handoff}
	if len(m.Tokens) != 0 && len(m.Tokens) != m.PromptTokens {
		r.stats.Failed[ErrRefused.Code]++
		return nil, ErrRefused.With("%d prompt ids for a prompt of %d tokens", len(m.Tokens), m.PromptTokens)
	}
	if len(m.CacheScope) > MaxCacheScope {
		r.stats.Failed[ErrRefused.Code]++
		return nil, ErrRefused.With("cache scope of %d bytes, at most %d", len(m.CacheScope), MaxCacheScope)
	}
	hits := r.lookupPrefix(o, m, keys, nPrompt)
	if r.cfg.Admit != nil && nAll <= r.pool.Pages() && !r.cfg.Admit(nAll-len(hits)) {
		// Cached pages are shared, not taken: only the new ones count.
		if len(hits) > 0 {
			_ = r.pool.Release(o, hits) // gives the shares back
		}
		r.stats.Failed[ErrNoRoom.Code]++
		return nil, ErrNoRoom.With("%d pages for %d+%d tokens: not now (the pool keeps free pages for the sequences it holds)", nAll, m.PromptTokens, m.MaxTokens)
	}
	var refs []kv.PageRef
	var err error
	if len(hits) > 0 {
		refs, err = r.pool.(CachingPool).Extend(o, hits, nAll-len(hits))
		if err != nil {
			_ = r.pool.Release(o, hits) // gives the shares back
		}
	} else {
		refs, err = r.pool.Reserve(o, nAll)
	}
	if errors.Is(err, kv.ErrNoCapacity) && nAll > r.pool.Pages() {
		// Can never fit: refused for good, not queued.
		r.stats.Failed[ErrRefused.Code]++
		return nil, ErrRefused.With("%d pages for %d+%d tokens exceed the pool's %d pages", nAll, m.PromptTokens, m.MaxTokens, r.pool.Pages())
	}
	if err != nil {
		// No room now: the caller's queue waits and tries again (nothing
		// is kept here); counted apart from other refusals.
		refusal := ErrRefused
		if errors.Is(err, kv.ErrNoCapacity) {
			refusal = ErrNoRoom
		}
		r.stats.Failed[refusal.Code]++
		return nil, refusal.With("%d pages for %d+%d tokens: %v", nAll, m.PromptTokens, m.MaxTokens, err)
	}
	if len(refs) != nAll {
		// A pool that hands out a different count breaks coverage; refuse.
		_ = r.pool.Release(o, refs)
		return nil, ErrRefused.With("pool returned %d pages, asked for %d", len(refs), nAll)
	}
	r.live[m.Handoff] = &rhandoff{owner: o, prompt: m.PromptTokens, refs: refs, nPrompt: nPrompt, nCached: len(hits),
		slots: make([]int, nPrompt), writes: make([]int, nPrompt), maxTokens: m.MaxTokens}
	r.stats.Reserved++
	res := &Reservation{Handoff: m.Handoff, Pages: append([]kv.PageRef(nil), refs[:nPrompt]...),
		PageSize: ps, ExpectTokens: m.PromptTokens, Model: r.cfg.Model, PrefixTokens: len(hits) * ps}
	if ip, ok := r.pool.(incarnated); ok {
		res.Incarnation = ip.Incarnation()
	}
	return res, nil
}

// lookupPrefix takes o's shares of the cached leading pages of m's prompt
// in a caching pool. It never covers the prompt's last block: that block
// holds the last prompt token, whose KV prefill computes with the first
// output token and always sends, so every handoff transfers at least one
// page. A failed lookup (a cached page that no longer matches its seal,
// counted and quarantined by the pool) is a miss.
func (r *Receiver) lookupPrefix(o kv.Owner, m *Reserve, keys []kv.BlockKey, nPrompt int) []kv.PageRef {
	cp, ok := r.pool.(CachingPool)
	if !ok || len(keys) == 0 || len(m.Tokens) == 0 {
		return nil
	}
	n := min(len(keys), nPrompt-1, (m.PromptTokens-1)/r.cfg.PageSize)
	if n <= 0 {
		return nil
	}
	hits, err := cp.Lookup(o, keys[:n])
	if err != nil {
		return nil
	}
	if len(hits) > n {
		_ = r.pool.Release(o, hits) // a pool that overanswers: no shares kept
		return nil
	}
	return hits
}

// incarnated is a pool whose shared memory has an incarnation (kv.Pool).
type incarnated interface{ Incarnation() uint64 }

// expectSlots is the slot count block b of a prompt of n tokens must carry.
func (r *Receiver) expectSlots(h *rhandoff, b int) int {
	ps := r.cfg.PageSize
	if b < h.nPrompt-1 {
		return ps
	}
	return h.prompt - (h.nPrompt-1)*ps
}

// lookup finds a handoff that may still take writes or a commit; an ended
// or accepted one counts as a late message.
func (r *Receiver) lookup(id kv.ID, late *uint64) (*rhandoff, error) {
	h, ok := r.live[id]
	if !ok {
		return nil, ErrUnknownHandoff.With("handoff %s", IDString(id))
	}
	switch h.ph {
	case phEnded:
		if late != nil {
			*late++
		}
		return nil, ErrAborted.With("handoff %s already ended: %v", IDString(id), h.err)
	case phAccepted:
		if late != nil {
			*late++
		}
		return nil, ErrState.With("handoff %s is already committed", IDString(id))
	}
	return h, nil
}

// Write applies a batch of page writes of one handoff. Any failed check
// fails the whole handoff closed (I8); writes of the batch before the bad
// one stay applied to pages that are then released or quarantined with the
// rest, never read. It is BeginWrite, Open and EndWrite in one call, the
// Receiver held throughout (tests; servers open without it).
func (r *Receiver) Write(now time.Time, ws []PageWrite) error {
	cw, err := r.BeginWrite(now, ws)
	if err != nil {
		return err
	}
	cw.Open()
	return r.EndWrite(now, cw)
}

// Writes is a checked batch of one handoff's writes whose sealed full
// pages are claimed in the pool and not yet opened (BeginWrite). Open
// opens them, without the Receiver (its caller's lock not held); EndWrite
// then ends each claim under it. Every Writes that BeginWrite returned
// must be passed to EndWrite, whatever happened: until then its pages are
// fenced in the pool (kv.Fill, I6) and the handoff cannot commit.
type Writes struct {
	h     *rhandoff
	id    kv.ID
	fills []claimedWrite
	done  bool
}

// claimedWrite is one sealed page write and the pool's claim on its page.
type claimedWrite struct {
	w   PageWrite
	ref kv.PageRef
	f   *kv.Fill
	err error // Open's result
}

// Pages is how many page records Open will open.
func (cw *Writes) Pages() int { return len(cw.fills) }

// Open opens every claimed page's record straight into its page (nothing
// of the Receiver is touched, so the caller's lock need not be held), on
// the caller's goroutine and helpers, each taking the next record in
// turn; they finish in any order. The goroutines come from the process's
// openers (openers.go): at most OpenParallelism of them open records at
// once over every call, so Open may first wait for another call's opens
// to end. A record is authenticated as it is opened (PageWrite.Open);
// EndWrite marks a page written only if its record verified (I15) and
// fails the handoff if any did not (I8).
func (cw *Writes) Open() {
	n := len(cw.fills)
	if n == 0 {
		return
	}
	tenant := cw.h.owner.Tenant
	par := openers.take(tenant, n)
	defer openers.give(tenant, par)
	var next atomic.Int32
	work := func() {
		for {
			i := int(next.Add(1)) - 1
			if i >= n {
				return
			}
			c := &cw.fills[i]
			c.err = c.w.Open(c.f.Dst)
		}
	}
	var wg sync.WaitGroup
	for range par - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

// BeginWrite checks a batch of page writes of one handoff, as Write does,
// and applies every write it can at once. A sealed full page (Open) in a
// pool that hands out claims (kv.Pool.ClaimFill) is not opened here: its
// page is claimed, the write counted against coverage (a second write of
// the block is refused), and the returned Writes carries it for Open and
// EndWrite. Any failed check fails the handoff closed (I8), ends the
// claims taken so far (their pages scrubbed) and returns the error.
func (r *Receiver) BeginWrite(now time.Time, ws []PageWrite) (*Writes, error) {
	cw := &Writes{}
	for i := range ws {
		if err := r.write(now, &ws[i], cw); err != nil {
			for _, c := range cw.fills {
				c.f.End(err) // scrubbed; freed if the failure released the page
				cw.h.inflight--
			}
			cw.fills, cw.done = nil, true
			return nil, err
		}
	}
	return cw, nil
}

// EndWrite ends the claims of cw in order, under the Receiver. Every
// record of the batch must have verified before any of its pages is kept
// (I15): if one did not, the handoff fails closed (I8) and every page of
// the batch is scrubbed, none marked written. Otherwise a page is marked
// written and counted once its checksum matches the pool's hash of it;
// the first that does not fails the handoff, and the claims after it are
// still ended (scrubbed, never marked). A handoff that ended while the
// pages were being opened (an Abort, another call's failure) has released
// them: they are scrubbed and freed here, and the writes count as late.
func (r *Receiver) EndWrite(now time.Time, cw *Writes) error {
	if cw == nil || cw.done {
		return nil
	}
	cw.done = true
	if len(cw.fills) == 0 {
		return nil
	}
	h := cw.h
	var first error
	if h.ph != phTransfering && h.ph != phReserved {
		r.stats.LateWrites++
		first = ErrAborted.With("handoff %s ended while its writes were being applied: %v", IDString(cw.id), h.err)
	} else {
		for i := range cw.fills {
			if c := &cw.fills[i]; c.err != nil {
				first = r.fail(now, h, openFailed(c.w.Block, c.err))
				break
			}
		}
	}
	for i := range cw.fills {
		c := &cw.fills[i]
		fillErr := c.err
		if first != nil && fillErr == nil {
			fillErr = errBatchDropped
		}
		sum, err := c.f.End(fillErr)
		h.inflight--
		switch {
		case first != nil:
			// Dropped with the handoff: scrubbed, freed by End.
		case err != nil:
			first = r.fail(now, h, ErrBadWrite.With("block %d: %v", c.w.Block, err))
		default:
			if e := r.checkApplied(h, c.ref, &c.w, sum, "write"); e != nil {
				first = r.fail(now, h, e)
				continue
			}
			h.slots[c.w.Block] = c.w.Slots
			h.tokens += c.w.Slots
			h.ph = phTransfering
		}
	}
	return first
}

// errBatchDropped ends the claim of a page whose own record verified in a
// batch that is not kept.
var errBatchDropped = errors.New("handoff: the page's batch was dropped")

func (r *Receiver) write(now time.Time, w *PageWrite, cw *Writes) error {
	h, err := r.lookup(w.Handoff, &r.stats.LateWrites)
	if err != nil {
		// Late writes with stale generations are dropped here: the pool is
		// never touched on behalf of an ended handoff (I6 fencing).
		return err
	}
	sg := r.cfg.Safeguards
	if w.Block < 0 || w.Block >= h.nPrompt {
		// Out of range blocks are refused even with NoReservationMatch: there
		// is no page to name.
		return r.fail(now, h, ErrBadWrite.With("block %d outside the %d reserved blocks", w.Block, h.nPrompt))
	}
	if w.Block < h.nCached {
		// The decode pool already holds this block in its prefix cache:
		// the page is shared with other sequences and read-only. Refused
		// before the pool is touched (a byte write never lands); a
		// one-sided notice cannot have landed either (the writer's fence
		// refuses the block and the sealed page's generation word is
		// closed), and if a rogue writer did, the commit's digest over
		// the cached page and the next hit's seal check catch it (I5).
		return r.fail(now, h, ErrSealedWrite.With("block %d of the %d blocks decode holds in its prefix cache", w.Block, h.nCached))
	}
	ref := h.refs[w.Block]
	if !sg.NoReservationMatch {
		// I3 at the protocol layer: the write must name exactly the page and
		// generation reserved for this block, with the block's slot count.
		if w.Page != ref {
			return r.fail(now, h, ErrBadWrite.With("block %d names page %d gen %d, reserved page %d gen %d",
				w.Block, w.Page.Page, w.Page.Gen, ref.Page, ref.Gen))
		}
		if want := r.expectSlots(h, w.Block); w.Slots != want {
			return r.fail(now, h, ErrBadWrite.With("block %d carries %d slots, want %d", w.Block, w.Slots, want))
		}
	} else {
		ref = w.Page
	}
	if !sg.NoCoverage && h.writes[w.Block] > 0 {
		// I5 coverage: exactly once. A second write could replace verified
		// bytes after the fact.
		return r.fail(now, h, ErrCoverage.With("block %d written twice", w.Block))
	}
	if w.Placed && !r.cfg.OneSided && !sg.NoChecksum {
		// No peer can have placed bytes in memory it cannot map. Part of the
		// checksum layer: the bytes the notice vouches for cannot be there.
		return r.fail(now, h, ErrBadWrite.With("block %d: a one-sided write notice, but this pool is not shared", w.Block))
	}
	if cp, ok := r.pool.(claimingPool); ok && w.Open != nil && !w.Placed && w.Slots == r.cfg.PageSize {
		// Claimed now, opened by the caller outside its lock (Writes).
		f, err := cp.ClaimFill(h.owner, ref, w.Slots, w.Size)
		if err != nil {
			return r.fail(now, h, ErrBadWrite.With("block %d: %v", w.Block, err))
		}
		cw.h, cw.id = h, w.Handoff
		cw.fills = append(cw.fills, claimedWrite{w: *w, ref: ref, f: f})
		h.writes[w.Block]++
		h.inflight++
		return nil
	}
	if w.Open != nil && !w.Placed {
		if _, ok := r.pool.(fillingPool); !ok || w.Slots != r.cfg.PageSize {
			// A partial page has the pool's per-run layout (a pool that
			// cannot fill: any page): its record is opened into a buffer
			// of its own and applied as bytes.
			if err := w.OpenData(); err != nil {
				return r.fail(now, h, openFailed(w.Block, err))
			}
		}
	}
	if sp, ok := r.pool.(summingPool); ok {
		if err := r.applySummed(sp, h, ref, w); err != nil {
			return r.fail(now, h, err)
		}
	} else if w.Placed {
		if err := r.pool.MarkWritten(h.owner, ref, w.Slots); err != nil {
			return r.fail(now, h, ErrBadWrite.With("block %d: %v", w.Block, err))
		}
		if !sg.NoChecksum {
			data, _, err := r.pool.PageData(h.owner, ref)
			if err != nil {
				return r.fail(now, h, ErrBadWrite.With("block %d: %v", w.Block, err))
			}
			if got := Checksum(data); got != w.Checksum {
				return r.fail(now, h, ErrChecksum.With("block %d: checksum %08x, notice says %08x", w.Block, got, w.Checksum))
			}
		}
	} else {
		if !sg.NoChecksum {
			if got := Checksum(w.Data); got != w.Checksum {
				return r.fail(now, h, ErrChecksum.With("block %d: checksum %08x, write says %08x", w.Block, got, w.Checksum))
			}
		}
		if err := r.pool.WritePage(h.owner, ref, w.Slots, w.Data); err != nil {
			return r.fail(now, h, ErrBadWrite.With("block %d: %v", w.Block, err))
		}
	}
	h.writes[w.Block]++
	h.slots[w.Block] = w.Slots
	h.tokens += w.Slots
	h.ph = phTransfering
	return nil
}

// summingPool is a Pool that hashes a page once as it applies it (kv's
// WritePageSum, MarkWrittenSum): the checksum below and the commit's digest
// then come from that one pass instead of three (see kv/sum.go).
type summingPool interface {
	WritePageSum(o kv.Owner, ref kv.PageRef, slots int, data []byte) (kv.PageSum, error)
	MarkWrittenSum(o kv.Owner, ref kv.PageRef, slots int) (kv.PageSum, error)
}

// fillingPool is a summing pool that hands a sealed write its page to open
// into (kv's FillPageSum): the plaintext is written once, into the page,
// instead of into a frame buffer and then copied.
type fillingPool interface {
	summingPool
	FillPageSum(o kv.Owner, ref kv.PageRef, slots, size int, fill func(dst []byte) error) (kv.PageSum, error)
}

// claimingPool is a filling pool that hands out a claim on a page for a
// sealed write to be opened into it outside any lock (kv's ClaimFill).
type claimingPool interface {
	fillingPool
	ClaimFill(o kv.Owner, ref kv.PageRef, slots, size int) (*kv.Fill, error)
}

// openFailed is the error of a sealed write whose record did not open:
// the transport's own (auth: altered, replayed or injected) when it is a
// handoff error.
func openFailed(block int, err error) *Error {
	var he *Error
	if errors.As(err, &he) {
		return he
	}
	return ErrAuth.With("block %d: the page's record does not open: %v", block, err)
}

// applySummed applies one checked write through a summing pool and checks
// its checksum against the pool's own hash of the bytes it now holds. The
// bytes land before the checksum is compared, but only in a page reserved
// for exactly this handoff and generation (checked above and by the pool,
// I3); a mismatch fails the handoff, whose pages are then released and
// scrubbed, or quarantined when one-sided (I6, I7), never read. A sealed
// write (Open) is opened straight into the page the same way, before its
// tag is known to verify: a record that does not verify leaves the page
// scrubbed and unwritten (kv.FillPageSum) and fails the handoff (I15:
// nothing unverified is used; the page is not even marked written).
func (r *Receiver) applySummed(sp summingPool, h *rhandoff, ref kv.PageRef, w *PageWrite) *Error {
	var sum kv.PageSum
	var err error
	what := "write"
	switch {
	case w.Placed:
		sum, err = sp.MarkWrittenSum(h.owner, ref, w.Slots)
		what = "notice"
	case w.Open != nil:
		var opened error
		sum, err = sp.(fillingPool).FillPageSum(h.owner, ref, w.Slots, w.Size, func(dst []byte) error {
			opened = w.Open(dst)
			return opened
		})
		if opened != nil {
			return openFailed(w.Block, opened)
		}
	default:
		sum, err = sp.WritePageSum(h.owner, ref, w.Slots, w.Data)
	}
	if err != nil {
		return ErrBadWrite.With("block %d: %v", w.Block, err)
	}
	return r.checkApplied(h, ref, w, sum, what)
}

// checkApplied compares an applied write's checksum with the pool's hash
// of the bytes it now holds (sum), or with its image hashed apart.
func (r *Receiver) checkApplied(h *rhandoff, ref kv.PageRef, w *PageWrite, sum kv.PageSum, what string) *Error {
	if r.cfg.Safeguards.NoChecksum {
		return nil
	}
	var got uint32
	switch {
	case sum.ImageOK:
		got = uint32(sum.Image) // the same pass as the digest's block hash
	case w.Placed || w.Data == nil:
		// A short last page (or a tiny one, or one opened in place): its
		// image is hashed apart.
		data, _, err := r.pool.PageData(h.owner, ref)
		if err != nil {
			return ErrBadWrite.With("block %d: %v", w.Block, err)
		}
		got = Checksum(data)
	default:
		got = Checksum(w.Data)
	}
	if got != w.Checksum {
		return ErrChecksum.With("block %d: checksum %08x, %s says %08x", w.Block, got, what, w.Checksum)
	}
	return nil
}

// Commit verifies the handoff (I5) and, if it holds, hands its pages to the
// decoder. On any failure the handoff fails closed.
func (r *Receiver) Commit(now time.Time, c *Commit) (*Accepted, error) {
	h, err := r.lookup(c.Handoff, nil)
	if err != nil {
		return nil, err
	}
	sg := r.cfg.Safeguards
	if h.inflight > 0 {
		// A sender commits after every write's acknowledgement: pages
		// still being opened cannot be verified (I5), nor kept.
		return nil, r.fail(now, h, ErrState.With("commit of handoff %s while %d of its page writes are still being applied", IDString(c.Handoff), h.inflight))
	}
	if !sg.NoCount {
		// I5 count: the incident's decode accepted one page for an N-page
		// reservation because nothing compared these three numbers.
		// The cached prefix counts as held: received + cached == reserved.
		if c.Tokens != h.prompt || h.tokens+h.nCached*r.cfg.PageSize != h.prompt {
			return nil, r.fail(now, h, ErrCountMismatch.With("reserved %d tokens (%d in the decode prefix cache), received %d, commit claims %d",
				h.prompt, h.nCached*r.cfg.PageSize, h.tokens, c.Tokens))
		}
	}
	if !sg.NoCoverage {
		for b := h.nCached; b < h.nPrompt; b++ {
			if h.writes[b] != 1 {
				return nil, r.fail(now, h, ErrCoverage.With("block %d of %d written %d times", b, h.nPrompt, h.writes[b]))
			}
		}
	}
	if !sg.NoDigest {
		if len(c.Digest) == 0 {
			// I5: a missing digest is a failure, never a pass.
			return nil, r.fail(now, h, ErrDigestMissing.With("handoff %s", IDString(c.Handoff)))
		}
		// Over the whole prompt, cached prefix included: a wrong hit on
		// either side (decode's cache or what prefill computed or took
		// from its own) is a mismatch, never a silent pass (I5).
		d, err := r.pool.Digest(h.owner, h.refs[:h.nPrompt], h.prompt)
		if err != nil {
			return nil, r.fail(now, h, ErrDigestMismatch.With("cannot digest what was received: %v", err))
		}
		if !bytes.Equal(d[:], c.Digest) {
			return nil, r.fail(now, h, ErrDigestMismatch.With("received %x, commit says %x", d[:], c.Digest))
		}
	}
	h.ph = phAccepted
	h.endedAt = now
	r.stats.Accepted++
	r.stats.PagesTransferred += uint64(h.nPrompt - h.nCached)
	r.stats.PagesSkipped += uint64(h.nCached)
	return &Accepted{Handoff: c.Handoff, Owner: h.owner, Pages: append([]kv.PageRef(nil), h.refs...),
		Tokens: h.prompt, FirstToken: c.FirstToken, MaxTokens: h.maxTokens, CachedBlocks: h.nCached}, nil
}

// Abort ends a live handoff: its pages are released, or quarantined until a
// drain acknowledgement or the lease when a one-sided writer may still be
// writing (I6). It reports whether the handoff was live. An accepted
// handoff's pages belong to the decoder and are not touched here.
//
// Aborting an id the Receiver does not know leaves a tombstone (for
// ReceiverConfig.Tombstone, at most maxEarlyAborts of them): an Abort can
// overtake its own Reserve (sent on another connection after the caller
// gave up waiting), and the Reserve that lands afterwards is then refused
// with ErrAborted instead of reserving pages nobody would release.
func (r *Receiver) Abort(now time.Time, id kv.ID, reason string) bool {
	h, ok := r.live[id]
	if !ok {
		r.tombstoneEarly(now, id, reason)
		return false
	}
	if h.ph == phEnded || h.ph == phAccepted {
		return false
	}
	r.stats.Aborted++
	r.end(now, h, ErrAborted.With("%s", reason))
	return true
}

func (r *Receiver) tombstoneEarly(now time.Time, id kv.ID, reason string) {
	for len(r.early) >= maxEarlyAborts {
		old := r.early[0]
		r.early = r.early[1:]
		if h, ok := r.live[old]; ok && h.early {
			delete(r.live, old)
		}
	}
	r.live[id] = &rhandoff{ph: phEnded, endedAt: now, early: true,
		err: ErrAborted.With("%s", reason)}
	r.early = append(r.early, id)
}

// fail ends a handoff closed (I8) and returns err for the caller.
func (r *Receiver) fail(now time.Time, h *rhandoff, err *Error) error {
	r.stats.Failed[err.Code]++
	r.end(now, h, err)
	return err
}

func (r *Receiver) end(now time.Time, h *rhandoff, err error) {
	h.ph = phEnded
	h.endedAt = now
	h.err = err
	if r.cfg.OneSided {
		// I6: a one-sided writer cannot be recalled; the pages may still be
		// written until it acknowledges its drain or the lease runs out.
		r.pool.Quarantine(h.owner, h.refs, now.Add(r.cfg.Lease))
		h.quar = true
		return
	}
	// Two-sided: every later write passes through lookup and is dropped, so
	// release (scrub, I7) is safe now. A page the pool itself quarantined on
	// a violation refuses the release; the pool counts it and keeps it
	// until its own lease, so the error carries no further duty here.
	_ = r.pool.Release(h.owner, h.refs)
}

// Drained is the writer's drain acknowledgement (I6): the quarantined pages
// of an ended handoff are scrubbed and freed now.
func (r *Receiver) Drained(now time.Time, id kv.ID) error {
	h, ok := r.live[id]
	if !ok {
		return nil
	}
	if h.ph != phEnded {
		// A live handoff's writer may drain between batches; nothing to free.
		return nil
	}
	if h.quar {
		h.quar = false
		r.pool.DrainAck(h.owner, h.refs)
	}
	return nil
}

// Tick advances time: expired quarantine leases free their pages and old
// tombstones are forgotten.
func (r *Receiver) Tick(now time.Time) {
	r.pool.Expire(now)
	for id, h := range r.live {
		if (h.ph == phEnded || h.ph == phAccepted) && now.Sub(h.endedAt) >= r.cfg.Tombstone {
			if h.ph == phEnded && h.quar && now.Before(h.endedAt.Add(r.cfg.Lease)) {
				continue
			}
			delete(r.live, id)
		}
	}
	if len(r.early) > 0 {
		kept := r.early[:0]
		for _, id := range r.early {
			if h, ok := r.live[id]; ok && h.early {
				kept = append(kept, id)
			}
		}
		clear(r.early[len(kept):])
		r.early = kept
	}
}

// Err returns why an ended handoff ended, nil while it is live or accepted.
func (r *Receiver) Err(id kv.ID) error {
	if h, ok := r.live[id]; ok && h.ph == phEnded {
		return h.err
	}
	return nil
}

func (r *Receiver) accepted(id kv.ID) bool {
	h, ok := r.live[id]
	return ok && h.ph == phAccepted
}

func (r *Receiver) isLive(id kv.ID) bool {
	h, ok := r.live[id]
	return ok && (h.ph == phReserved || h.ph == phTransfering)
}
