package sim

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"sluice/internal/engine"
	"sluice/internal/handoff"
	"sluice/internal/handoff/shm"
	"sluice/internal/kv"
)

// decode is one incarnation of the decode worker: engine.DecodeWorker
// itself, the code that serves, built driven (engine.NewDrivenDecodeWorker:
// no goroutine, this run's clock). Its Receiver, its batch (growth page by
// page, preemption of the latest arrival, the "preempted" stream end), its
// handoff timeout and its streams are the engine's; this file is only the
// network edge: it turns delivered messages into the worker's calls, runs
// a step decodeStep after the worker asks for one, and carries each
// stream's items back to the router as messages.
type decode struct {
	w    *world
	gen  int
	up   bool
	pool *kv.Pool
	wp   *watchPool
	wk   *engine.DecodeWorker
	// streams are the open token streams in opening order (deterministic
	// pumping).
	streams []*dstream
	busy    bool // a step is scheduled
	closed  bool
	// stopped: this incarnation was stopped (SIGSTOP), declared dead and
	// replaced, then continued: it runs on, unused.
	stopped bool
	// committed are the handoffs whose commit this incarnation accepted:
	// the ones that became decode sequences, whose KV the oracle checks
	// at their release (an uncommitted reservation's pages, released at
	// its abort or timeout, hold whatever a peer wrote and nobody reads).
	committed map[kv.ID]bool
}

// dstream is one handoff's token stream, as the transport's stream pump
// would forward it.
type dstream struct {
	id kv.ID
	ts interface {
		TryRecv() (handoff.Token, bool, error)
	}
	idx int
}

func (w *world) newDecode(gen int) (*decode, error) {
	d := &decode{w: w, gen: gen, up: true, committed: map[kv.ID]bool{}}
	cfg := kv.Config{Geometry: w.geo, Pages: w.decPages, Order: kv.LIFO, Scrub: w.scrub, Lease: lease, Unsafe: w.cfg.Bugs.KV}
	if w.pl.oneSided {
		// Every incarnation on the same path, as a deployment's
		// configuration would have it: the pool makes the file new (I6
		// across restarts) unless Bugs.RestartSameFile reuses it.
		cfg.SharedFile = w.sharedFile()
		cfg.Unsafe.ReuseSharedFile = w.cfg.Bugs.RestartSameFile
	}
	p, err := kv.New(cfg)
	if err != nil {
		return nil, err
	}
	d.pool = p
	if w.pl.oneSided && w.wr == nil {
		// The prefill side's one-sided writer, for the whole run: it maps
		// a restarted decode's new file when a reservation names it.
		m, err := shm.Open(cfg.SharedFile, w.geo, nil)
		if err != nil {
			p.Close()
			return nil, err
		}
		m.NoFence = w.cfg.Bugs.ForeignPlacement
		m.NoGenFence = w.cfg.Bugs.NoGenFence
		w.wr = m
	}
	d.wp = &watchPool{PagePool: engine.KVPool(p), d: d, released: map[uint32]uint64{}, grantedTo: map[uint32]string{}}
	wk, err := engine.NewDrivenDecodeWorker(engine.Config{
		Model:          w.env.rt,
		Context:        w.ctx,
		PoolPages:      w.decPages,
		PageSize:       w.geo.PageSize,
		Lease:          w.recvLease,
		HandoffTimeout: w.handoffTimeout,
		// Decode's own prefix cache (main's decode cache): keyed by the
		// engine from the Reserve's tokens, salted like prefill's.
		PrefixCache:      w.dcacheOn,
		CacheSecret:      w.cacheSecret,
		ModelFingerprint: w.cacheFP,
		// The engine's own hook for the salt-less key (Bugs.CacheNoSalt);
		// the pool's tenant checks are Bugs.KV's.
		Unsafe: engine.Unsafe{TenantBlindCache: w.cfg.Bugs.CacheNoSalt},
	}, engine.Driven{Pool: d.wp, Raw: p, Now: w.clock, Wake: d.kick, OneSided: w.pl.oneSided, Safeguards: w.cfg.Bugs.Receiver})
	if err != nil {
		p.Close()
		return nil, err
	}
	d.wk = wk
	return d, nil
}

func (d *decode) alive() bool { return d.up }

// close ends the instance at the end of the run (its sequences end, its
// memory is freed): a crashed incarnation's mapping stays until then
// (posted writes may still land in it).
func (d *decode) close() {
	d.closed = true
	d.wk.Close()
	d.pool.Close()
}

// sharedFile is the decode pool's shared file path, the same for every
// incarnation.
func (w *world) sharedFile() string {
	return filepath.Join(w.env.dir, fmt.Sprintf("decode-%d.kv", w.seed))
}

func (d *decode) crash() {
	d.up = false
	st := d.wk.SchedStats()
	d.w.logf("decode#%d CRASH (%d streams, %d decoding, %d preempted)", d.gen, len(d.streams), st.Running, st.Preempted)
}

var bg = context.Background()

// reserve is the Reserve call, then (as the router does right after it)
// the opening of the handoff's stream with the request's sampling state.
func (d *decode) reserve(m *handoff.Reserve, sp handoff.StreamParams) (*handoff.Reservation, error) {
	res, err := d.wk.Reserve(bg, m)
	if err != nil {
		return nil, err
	}
	d.w.logf("decode#%d reserves pages %s for %s (%d+%d tokens)", d.gen, pagesText(res.Pages), short(m.Handoff), m.PromptTokens, m.MaxTokens)
	ts, err := d.wk.Stream(bg, m.Handoff, sp)
	if err != nil {
		_ = d.wk.Abort(bg, &handoff.Abort{Handoff: m.Handoff, Reason: "the stream did not open"})
		return nil, err
	}
	d.streams = append(d.streams, &dstream{id: m.Handoff, ts: ts.(interface {
		TryRecv() (handoff.Token, bool, error)
	})})
	d.pump()
	return res, nil
}

func (d *decode) write(ws []handoff.PageWrite) error {
	err := d.wk.Write(bg, ws)
	d.pump()
	return err
}

func (d *decode) commit(c *handoff.Commit) error {
	err := d.wk.Commit(bg, c)
	if err == nil {
		d.committed[c.Handoff] = true
	}
	d.pump()
	return err
}

func (d *decode) abort(a *handoff.Abort) {
	_ = d.wk.Abort(bg, a)
	d.pump()
}

func (d *decode) drained(id kv.ID) { _ = d.wk.Drained(bg, id) }

func (d *decode) cancel(id kv.ID) {
	_ = d.wk.Cancel(bg, id)
	d.pump()
}

// tick is the clock at the edge: leases expire, tombstones go, and the
// worker aborts handoffs that did not start decoding within its timeout.
func (d *decode) tick() {
	if !d.up {
		return
	}
	d.wk.Tick(d.w.clock())
	d.pump()
}

// kick is the worker's wake: a step runs decodeStep later. It only
// schedules (the worker calls it holding its locks).
func (d *decode) kick() {
	if d.busy || d.closed {
		return
	}
	d.busy = true
	d.w.after(decodeStep, "decode step", func() {
		d.busy = false
		if !d.up {
			return
		}
		more := d.wk.Step()
		d.pump()
		if more {
			d.kick()
		}
	})
}

// pump forwards every stream's available items to the router, in order.
func (d *decode) pump() {
	if !d.up {
		return
	}
	live := d.streams[:0]
	for _, s := range d.streams {
		open := true
		for open {
			tok, ok, err := s.ts.TryRecv()
			if err != nil {
				open = false
				break
			}
			if !ok {
				break
			}
			d.send(s, tok)
			if tok.Done || tok.Err != nil {
				open = false
			}
		}
		if open {
			live = append(live, s)
		}
	}
	clear(d.streams[len(live):])
	d.streams = live
}

func (d *decode) send(s *dstream, tok handoff.Token) {
	it := item{hid: s.id, idx: s.idx, tok: tok}
	s.idx++
	r := d.w.router
	d.w.send(fmt.Sprintf("decode#%d->router stream %s #%d", d.gen, short(s.id), it.idx), r.alive, func() { r.onStream(it) })
}

// item is one element of a decode token stream, numbered.
type item struct {
	hid kv.ID
	idx int
	tok handoff.Token
}

// watchPool is the decode worker's pool as the simulator sees it: every
// release and every grant goes through here, so the oracle can look at
// what a sequence read before its pages go (the KV must be the
// reference's), and check the page lifetime: a page granted again (to a
// successor: a resumed handoff, a retry, anyone) never carries its
// previous holder's generation, so the holder's old references, which
// the pool checks on every read (I3), cannot reach the successor's KV. With Bugs.NoQuarantine the
// Receiver's quarantine releases at once (release before drain, I6), the
// bug the quarantine exists to prevent.
type watchPool struct {
	engine.PagePool
	d *decode
	// released is each page's generation when it was last released.
	released map[uint32]uint64
	// grantedTo is the tenant each page was last granted to (reserved or
	// grown into): the tenant whose KV a page the decode cache holds is.
	grantedTo map[uint32]string
}

// Lookup is the decode cache's lookup (the Receiver's CachingPool): every
// hit must be a page computed for the reader's own tenant (I11, against
// the simulator's record of grants).
func (p *watchPool) Lookup(o kv.Owner, keys []kv.BlockKey) ([]kv.PageRef, error) {
	p.d.w.checkKeys(fmt.Sprintf("decode#%d %s", p.d.gen, short(o.ID)), o.Tenant, keys)
	hits, err := p.d.pool.Lookup(o, keys)
	if err != nil {
		return hits, err
	}
	for _, h := range hits {
		if by := p.grantedTo[h.Page]; by != o.Tenant {
			p.d.w.violate("decode#%d: %s of %s read cached page %d computed for %s (I11: the prefix cache crossed tenants)", p.d.gen, short(o.ID), o.Tenant, h.Page, by)
		}
	}
	p.d.w.res.DecodeCacheHits += len(hits)
	return hits, nil
}

func (p *watchPool) Release(o kv.Owner, refs []kv.PageRef) error {
	w := p.d.w
	if !p.d.closed && p.d.committed[o.ID] {
		w.oracleReleased(p.d, o, refs)
	}
	err := p.PagePool.Release(o, refs)
	if err != nil || p.d.closed {
		return err
	}
	// (Probing the old refs here would itself be a stale access, which
	// the pool counts and answers with a quarantine, I8.)
	for _, r := range refs {
		p.released[r.Page] = r.Gen
	}
	return nil
}

// Incarnation is the pool's (the Receiver puts it in every one-sided
// reservation, I6).
func (p *watchPool) Incarnation() uint64 { return p.d.pool.Incarnation() }

func (p *watchPool) Quarantine(o kv.Owner, refs []kv.PageRef, at time.Time) {
	if p.d.w.cfg.Bugs.NoQuarantine {
		_ = p.Release(o, refs)
		return
	}
	p.PagePool.Quarantine(o, refs, at)
}

func (p *watchPool) granted(o kv.Owner, refs []kv.PageRef) {
	for _, r := range refs {
		p.grantedTo[r.Page] = o.Tenant
		if g, ok := p.released[r.Page]; ok && g == r.Gen {
			p.d.w.violate("decode#%d page %d granted to %s with the generation %d of its previous holder (I3)", p.d.gen, r.Page, short(o.ID), r.Gen)
		}
	}
}

func (p *watchPool) Reserve(o kv.Owner, n int) ([]kv.PageRef, error) {
	refs, err := p.PagePool.Reserve(o, n)
	if err == nil {
		p.granted(o, refs)
		if q := p.d.w.router.byHandoff[o.ID]; q != nil && q.endedQueued {
			p.d.w.violate("%v left the queue (its client went away while it waited) but decode reserved %d pages for it", q, len(refs))
		}
	}
	return refs, err
}

func (p *watchPool) Extend(o kv.Owner, table []kv.PageRef, n int) ([]kv.PageRef, error) {
	refs, err := p.PagePool.Extend(o, table, n)
	if err == nil {
		p.granted(o, refs[len(table):])
		if len(refs) > len(table) {
			p.d.w.res.Growths++
		}
	}
	return refs, err
}

// pagesText renders page refs as page@generation for the trace.
func pagesText(refs []kv.PageRef) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range refs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d@%d", r.Page, r.Gen)
	}
	b.WriteByte(']')
	return b.String()
}
