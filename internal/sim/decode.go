package sim

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/shm"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
)

// decode is one incarnation of the decode worker: the real handoff.Receiver
// over a real kv.Pool, and continuous batching over the real model forward
// pass. Everything around them (message handling, the batching loop, the
// reservation timeout) is this simulator's own single-threaded wrapper; it
// mirrors engine.DecodeWorker's rules, which run on goroutines and a wall
// clock and so cannot be replayed from a seed.
type decode struct {
	w      *world
	gen    int
	up     bool
	pool   *kv.Pool
	recv   *handoff.Receiver
	run    *model.Runner
	hs     map[kv.ID]*dh
	order  []*dh // live handoffs in reservation order (deterministic scans)
	active []*dseq
	busy   bool // a batching step is scheduled
	samp   *sample.Sampler
}

// dh is the wrapper's record of one handoff.
type dh struct {
	id        kv.ID
	since     time.Duration
	committed bool
	cancelled bool // client left; applied after the first token (I10)
	over      bool
	q         *dseq
	idx       int // next stream item index
}

type dseq struct {
	h       *dh
	owner   kv.Owner
	table   []kv.PageRef
	view    *kv.View
	prompt  int
	fed     int
	next    int32
	first   bool // the commit's first token is still to be emitted
	gen, mx int
	stop    error // set by Abort while decoding: end with this error
}

func (w *world) newDecode(gen int) (*decode, error) {
	d := &decode{w: w, gen: gen, up: true, hs: map[kv.ID]*dh{}, run: w.env.model.NewRunner(nil), samp: sample.New(sample.Params{})}
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
	d.recv = handoff.NewReceiver(handoff.ReceiverConfig{
		PageSize:   w.geo.PageSize,
		OneSided:   w.pl.oneSided,
		Lease:      w.recvLease,
		Tombstone:  tombstone,
		Safeguards: w.cfg.Bugs.Receiver,
	}, recvPool(w.cfg.Bugs, p))
	return d, nil
}

func (d *decode) alive() bool { return d.up }

// close frees the instance's memory, at the end of the run: a crashed
// incarnation's mapping stays (posted writes may still land in it).
func (d *decode) close() {
	d.pool.Close()
}

// sharedFile is the decode pool's shared file path, the same for every
// incarnation.
func (w *world) sharedFile() string {
	return filepath.Join(w.env.dir, fmt.Sprintf("decode-%d.kv", w.seed))
}

func (d *decode) now() time.Time { return d.w.clock() }

func (d *decode) crash() {
	d.up = false
	d.w.logf("decode#%d CRASH (%d handoffs, %d decoding)", d.gen, len(d.order), len(d.active))
}

// reserve is the decode side of Reserve: admission is repeated here (I1/I2),
// then the Receiver reserves.
func (d *decode) reserve(m *handoff.Reserve) (*handoff.Reservation, error) {
	if m.PromptTokens <= 0 || m.MaxTokens <= 0 || !kv.TokensFit(m.PromptTokens, m.MaxTokens, d.w.ctx) {
		return nil, handoff.ErrRefused.With("%d+%d tokens exceed the decode context %d", m.PromptTokens, m.MaxTokens, d.w.ctx)
	}
	if _, dup := d.hs[m.Handoff]; dup {
		return nil, handoff.ErrDuplicate
	}
	res, err := d.recv.Reserve(d.now(), m)
	if err != nil {
		return nil, err
	}
	d.w.logf("decode#%d reserves prompt pages %s for %s", d.gen, pagesText(res.Pages), short(m.Handoff))
	h := &dh{id: m.Handoff, since: d.w.now}
	d.hs[m.Handoff] = h
	d.order = append(d.order, h)
	return res, nil
}

func (d *decode) write(ws []handoff.PageWrite) error {
	if len(ws) == 0 {
		return nil
	}
	for i := range ws {
		if ws[i].Handoff != ws[0].Handoff {
			return handoff.ErrProtocol.With("one Write call carries writes of two handoffs")
		}
	}
	err := d.recv.Write(d.now(), ws)
	if err != nil {
		d.end(ws[0].Handoff, err)
	}
	return err
}

func (d *decode) commit(c *handoff.Commit) error {
	acc, err := d.recv.Commit(d.now(), c)
	if err != nil {
		d.end(c.Handoff, err)
		return err
	}
	h := d.hs[c.Handoff]
	if h == nil || h.over {
		// Ended by the wrapper meanwhile: the pages are ours, nobody reads them.
		_ = d.pool.Release(acc.Owner, acc.Pages)
		return handoff.ErrAborted.With("the handoff ended while it was committing")
	}
	h.committed = true
	d.w.oracleAccepted(d, acc)
	q := &dseq{h: h, owner: acc.Owner, table: acc.Pages, prompt: acc.Tokens, fed: acc.Tokens,
		next: acc.FirstToken, first: true, mx: acc.MaxTokens}
	q.view = d.pool.View(acc.Owner, acc.Pages)
	h.q = q
	d.active = append(d.active, q)
	d.kick()
	return nil
}

func (d *decode) abort(a *handoff.Abort) {
	h := d.hs[a.Handoff]
	if h != nil && h.q != nil {
		// Decoding already: stop between steps and report the failure.
		if h.q.stop == nil {
			h.q.stop = handoff.ErrAborted.With("%s", a.Reason)
		}
		d.kick()
		return
	}
	d.recv.Abort(d.now(), a.Handoff, a.Reason)
	d.end(a.Handoff, handoff.ErrAborted.With("%s", a.Reason))
}

func (d *decode) drained(id kv.ID) { _ = d.recv.Drained(d.now(), id) }

func (d *decode) cancel(id kv.ID) {
	if h := d.hs[id]; h != nil {
		h.cancelled = true
		d.kick()
	}
}

// end forgets a handoff that ended before decoding and tells the router.
func (d *decode) end(id kv.ID, err error) {
	h := d.hs[id]
	if h == nil || h.over || h.q != nil {
		return
	}
	d.forget(h)
	d.stream(h, item{err: err})
}

func (d *decode) forget(h *dh) {
	h.over = true
	delete(d.hs, h.id)
	for i, x := range d.order {
		if x == h {
			d.order = append(d.order[:i], d.order[i+1:]...)
			break
		}
	}
}

// item is one element of a decode token stream.
type item struct {
	idx        int
	tok        int32
	done       bool
	err        error
	prompt     int
	completion int
}

func (d *decode) stream(h *dh, it item) {
	it.idx = h.idx
	h.idx++
	r := d.w.router
	id := h.id
	d.w.send(fmt.Sprintf("decode#%d->router stream %s #%d", d.gen, short(id), it.idx), r.alive, func() { r.onStream(id, it) })
}

// tick is the clock at the edge: leases expire, tombstones go, and a
// handoff that did not start decoding within handoffTimeout is aborted so
// its pages come back (through quarantine when one-sided, I6).
func (d *decode) tick() {
	if !d.up {
		return
	}
	d.recv.Tick(d.now())
	var stale []*dh
	for _, h := range d.order {
		if h.q == nil && d.w.now-h.since > d.w.handoffTimeout {
			stale = append(stale, h)
		}
	}
	for _, h := range stale {
		d.w.logf("decode#%d handoff %s timed out before decoding", d.gen, short(h.id))
		d.abort(&handoff.Abort{Handoff: h.id, Reason: "the handoff did not start decoding within its timeout"})
	}
}

func (d *decode) kick() {
	if d.busy || len(d.active) == 0 {
		return
	}
	d.busy = true
	d.w.after(decodeStep, "decode step", func() {
		d.busy = false
		if d.up {
			d.step()
		}
	})
}

// step is one continuous-batching step: joiners emit the commit's first
// token, cancels and aborts apply between steps, then ONE forward pass runs
// over every active sequence.
func (d *decode) step() {
	live := d.active[:0]
	for _, q := range d.active {
		if q.first {
			// Before the cancel check: a cancel recorded during the
			// transfer still lets decode reach its first token (I10).
			q.first = false
			if !d.emit(q, q.next) {
				continue
			}
		}
		if q.stop != nil {
			d.finish(q, item{err: q.stop})
			continue
		}
		if q.h.cancelled {
			d.finish(q, item{done: true, err: nil, completion: -1})
			continue
		}
		live = append(live, q)
	}
	clear(d.active[len(live):])
	d.active = live
	if len(live) == 0 {
		return
	}
	seqs := make([]model.Seq, len(live))
	for i, q := range live {
		seqs[i] = model.Seq{Tokens: []int32{q.next}, Pos: q.fed, KV: q.view}
	}
	res := d.run.Forward(seqs)
	next := live[:0]
	for i, q := range live {
		if res[i].Err != nil {
			d.finish(q, item{err: res[i].Err})
			continue
		}
		q.fed++
		// As the engine does: a logits vector with no number in it (a
		// poisoned page read) fails the sequence instead of emitting.
		tok, err := d.samp.Sample(res[i].Logits)
		if err != nil {
			d.finish(q, item{err: err})
			continue
		}
		if d.emit(q, tok) {
			next = append(next, q)
		}
	}
	clear(d.active[len(next):])
	d.active = next
	d.kick()
}

// emit streams a token; false when that ended the sequence.
func (d *decode) emit(q *dseq, tok int32) bool {
	q.gen++
	d.stream(q.h, item{tok: tok})
	if q.gen >= q.mx {
		d.finish(q, item{done: true})
		return false
	}
	q.next = tok
	return true
}

// finish releases the sequence's pages the normal way (scrub, I7) and sends
// the terminal item. completion -1 marks a cancel.
func (d *decode) finish(q *dseq, it item) {
	if q.table == nil {
		return
	}
	d.w.oracleFinished(d, q)
	_ = d.pool.Release(q.owner, q.table)
	q.table, q.view = nil, nil
	cancelled := it.completion == -1
	it.prompt, it.completion = q.prompt, q.gen
	if cancelled {
		it.done = true
		it.err = errCancelled
	}
	d.forget(q.h)
	d.stream(q.h, it)
}

// errCancelled marks a stream that ended because the client left.
var errCancelled = fmt.Errorf("cancelled")

// recvPool is the pool the Receiver works on: the real one, or with
// Bugs.NoQuarantine one whose Quarantine releases at once (release before
// drain, I6), the bug the quarantine exists to prevent.
func recvPool(b Bugs, p *kv.Pool) handoff.Pool {
	if b.NoQuarantine {
		return releaseEarly{p}
	}
	return p
}

type releaseEarly struct{ *kv.Pool }

func (r releaseEarly) Quarantine(o kv.Owner, refs []kv.PageRef, _ time.Time) { _ = r.Release(o, refs) }

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
