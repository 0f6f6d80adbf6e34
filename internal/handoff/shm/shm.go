// Package shm is the one-sided shared-memory handoff transport. The decode
// pool lives in a MAP_SHARED file (kv.Config.SharedFile); the prefill side
// maps the same file and copies page bytes straight into the decode pool's
// memory, as an RDMA write would, then sends only a small notice (the
// PageWrite with Placed set, no data) over the control channel. The decode
// side checks the notice (owner, generation, slots, checksum of the bytes in
// its own memory) before it marks the page written, and hashes such pages
// again from its memory for the commit's digest (I5).
//
// Because the decode side cannot stop a one-sided write, an abort or a
// failure before the commit quarantines the handoff's pages until this
// writer's drain acknowledgement (Decode.Drained) or until the pool's lease
// runs out (I6). Writes go in bounded batches (handoff.SenderConfig.
// MaxBatchBytes), so the in-flight time the lease must cover stays small.
//
// The writer is fenced the way an RDMA memory key scopes a peer to a
// registered region: it places bytes for a handoff only after it was given
// that handoff's Reservation (Register, or a Reserve made through it), only
// at the reservation's own (page, generation) for each block, and only into
// a mapping of the pool incarnation the reservation names. A write outside
// that is refused with ErrBadWrite before any byte of its batch is placed.
// A decode worker restarted on the same path creates a new file (kv), and
// the writer maps it when a reservation names the new incarnation; the
// crashed incarnation's memory is never the new pool's.
//
// The lease is not the only fence against a writer that outlived its
// handoff (stalled by CPU throttling or SIGSTOP past the lease, after the
// router or decode aborted without telling it). The shared file carries a
// generation word per page (kv/shm.go), which decode closes the moment it
// ends the handoff (whoever asked) and reopens only at the next owner's
// generation; the writer loads it immediately before each page copy and
// copies only at the generation it was given. So an abort reaches this
// writer's fence through the memory itself, with no message.
//
// The race window that remains is one page copy: a writer that loaded the
// word and stalls before its copy of that page has finished can still land
// bytes in a page re-used meanwhile. When they land before the new owner's
// commit, its commit digest refuses them, because a shared pool hashes
// every page from memory at the commit and trusts no hash recorded at the
// write (kv sum.go): the new owner fails closed, never decodes over them
// (TestStalledWriterAfterCheck). Only a stall inside one page's memcpy
// longer than the lease plus the new owner's whole handoff escapes both;
// that is what the lease (which must exceed one page copy, not a batch)
// still covers.
package shm

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Writer is the prefill side: a handoff.Decode whose Write places page
// bytes into the shared mapping and forwards notices to next; every other
// call goes to next unchanged.
type Writer struct {
	next      handoff.Decode
	path      string
	geo       kv.Geometry
	pageBytes int

	// NoFence switches the reservation fence off: bytes are placed at
	// whatever page a write names. TEST HOOK ONLY (the simulator's
	// foreign-placement bug); a server never sets it.
	NoFence bool
	// NoGenFence switches the shared generation-word check before each
	// copy off. TEST HOOK ONLY (a test shows the word alone stops a
	// stalled writer); a server never sets it.
	NoGenFence bool
	// beforeCopy, when set (tests), runs after a copy's generation check
	// and before the copy: a writer stalled inside the remaining window.
	beforeCopy func(page uint32)

	genFenced atomic.Uint64 // copies the generation words refused

	mu  sync.Mutex
	cur *mapping // the newest incarnation mapped
	// regs are the reservations this writer may place bytes for (I3).
	regs map[kv.ID]*registration
	// ended holds handoffs this writer committed or aborted: it never
	// places another byte for them (a writer-side fence). Their notices are
	// still forwarded so the decode side counts the late write.
	ended map[kv.ID]struct{}
	order []kv.ID // fence entries, oldest first; bounded by maxFence
}

// mapping is one incarnation's file mapped. It is unmapped once a newer
// incarnation replaced it and no registration or placement uses it.
type mapping struct {
	mem   []byte        // the whole file: header, pages, generation words
	gens  kv.SharedGens // the file's generation words (aliasing mem)
	inc   uint64
	users int
}

type registration struct {
	res *handoff.Reservation
	m   *mapping
}

// maxFence bounds the fence memory; a handoff older than the last maxFence
// ended ones is long gone from the decode side too.
const maxFence = 1 << 16

// Open maps the decode pool's shared file. g must be the decode pool's
// geometry: page p lives at kv.Pool.SharedOffset.
func Open(path string, g kv.Geometry, next handoff.Decode) (*Writer, error) {
	w := &Writer{next: next, path: path, geo: g, pageBytes: g.PageBytes(),
		regs: map[kv.ID]*registration{}, ended: map[kv.ID]struct{}{}}
	m, err := w.mapFile()
	if err != nil {
		return nil, err
	}
	w.cur = m
	return w, nil
}

// mapFile maps the file now at w.path and checks its header.
func (w *Writer) mapFile() (*mapping, error) {
	f, err := os.OpenFile(w.path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	size := int(st.Size())
	if size < kv.SharedHeaderBytes {
		return nil, fmt.Errorf("shm: %s is %d bytes, shorter than a shared pool header", w.path, size)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %w", w.path, err)
	}
	h, err := kv.ParseSharedHeader(mem)
	if err == nil && (h.Geometry != w.geo || h.Pages <= 0 || kv.SharedFileBytes(h.Geometry, h.Pages) != int64(size)) {
		err = fmt.Errorf("pool geometry %+v of %d pages in %d bytes, this writer's %+v", h.Geometry, h.Pages, size, w.geo)
	}
	var gens kv.SharedGens
	if err == nil {
		gens, err = kv.SharedGensOf(mem, h)
	}
	if err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("shm: %s: %w", w.path, err)
	}
	return &mapping{mem: mem, gens: gens, inc: h.Incarnation}, nil
}

// Close unmaps the files. No Write may run during or after it.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[*mapping]bool{w.cur: true}
	var err error
	if e := syscall.Munmap(w.cur.mem); e != nil {
		err = e
	}
	for _, r := range w.regs {
		if !seen[r.m] {
			seen[r.m] = true
			if e := syscall.Munmap(r.m.mem); e != nil && err == nil {
				err = e
			}
		}
	}
	return err
}

// Register gives the writer a handoff's Reservation: from now on it places
// bytes for that handoff at exactly the reservation's pages and
// generations, in the incarnation it names (mapping the decode pool's file
// again if a restarted pool replaced it). handoff.Push calls it before the
// first write; a Reserve made through the Writer registers its answer.
func (w *Writer) Register(res *handoff.Reservation) error {
	if res == nil {
		return handoff.ErrState.With("no reservation to register")
	}
	if err := res.CheckPrefix(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.regs[res.Handoff]; ok {
		if sameReservation(r.res, res) {
			return nil
		}
		return handoff.ErrDuplicate.With("handoff %s is registered with another reservation", handoff.IDString(res.Handoff))
	}
	if _, ok := w.ended[res.Handoff]; ok {
		return handoff.ErrAborted.With("handoff %s already ended on this writer", handoff.IDString(res.Handoff))
	}
	if res.Incarnation != w.cur.inc {
		// The decode pool restarted (or the reservation is stale): map
		// what is at the path now and use it only if it IS that
		// incarnation.
		m, err := w.mapFile()
		if err != nil {
			return handoff.ErrBadWrite.With("reservation of pool incarnation %016x: %v", res.Incarnation, err)
		}
		if m.inc != res.Incarnation {
			syscall.Munmap(m.mem)
			return handoff.ErrBadWrite.With("reservation of pool incarnation %016x, the shared file holds %016x; refusing to place bytes in another incarnation's pages (I6)",
				res.Incarnation, m.inc)
		}
		old := w.cur
		w.cur = m
		w.release(old, 0)
	}
	w.cur.users++
	cp := *res
	cp.Pages = append([]kv.PageRef(nil), res.Pages...)
	w.regs[res.Handoff] = &registration{res: &cp, m: w.cur}
	return nil
}

func sameReservation(a, b *handoff.Reservation) bool {
	if a.Incarnation != b.Incarnation || len(a.Pages) != len(b.Pages) || a.PrefixTokens != b.PrefixTokens {
		return false
	}
	for i := range a.Pages {
		if a.Pages[i] != b.Pages[i] {
			return false
		}
	}
	return true
}

// release drops n users of m and unmaps it when it is superseded and
// unused. Called with w.mu held.
func (w *Writer) release(m *mapping, n int) {
	m.users -= n
	if m != w.cur && m.users == 0 {
		syscall.Munmap(m.mem)
		m.mem = nil
	}
}

// End fences a handoff on this writer: it never places another byte for
// it, and its registration is dropped. Commit, Abort and Drained do it;
// a driver that bypasses them (the simulator) calls it itself.
func (w *Writer) End(id kv.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r, ok := w.regs[id]; ok {
		delete(w.regs, id)
		w.release(r.m, 1)
	}
	if _, ok := w.ended[id]; ok {
		return
	}
	w.ended[id] = struct{}{}
	w.order = append(w.order, id)
	if len(w.order) > maxFence {
		delete(w.ended, w.order[0])
		w.order = w.order[1:]
	}
}

// Post checks a batch of page writes against the fence and returns, for
// each write, the copy that places it (nil for one not to be placed: a
// notice, or a write of a handoff this writer already ended); nothing is
// placed by Post itself, and on error no copy is returned. Each copy must
// be called exactly once (it pins its mapping until then). Write uses it
// and runs the copies at once; the simulator runs them later, as one-sided
// writes in flight. Each copy checks the page's generation word in the
// shared file immediately before it copies (see the package doc) and
// places nothing when the page is no longer reserved at the write's
// generation; the writer then fences the handoff.
func (w *Writer) Post(ws []handoff.PageWrite) ([]func(), error) {
	lands, err := w.post(ws)
	if err != nil {
		return nil, err
	}
	out := make([]func(), len(lands))
	for i, land := range lands {
		if land != nil {
			out[i] = func() { land(true) }
		}
	}
	return out, nil
}

// post is Post whose copies report whether they placed their bytes; a
// copy called with place false only unpins its mapping.
func (w *Writer) post(ws []handoff.PageWrite) ([]func(place bool) bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	type place struct {
		m    *mapping
		off  int64
		data []byte
		id   kv.ID
		ref  kv.PageRef
	}
	ps := make([]place, len(ws))
	for i := range ws {
		pw := &ws[i]
		if pw.Placed {
			continue
		}
		if _, ok := w.ended[pw.Handoff]; ok {
			continue
		}
		if len(pw.Data) != w.pageBytes {
			return nil, handoff.ErrBadWrite.With("page image of %d bytes, the shared pool's pages are %d", len(pw.Data), w.pageBytes)
		}
		m := w.cur
		if !w.NoFence {
			// I3 on the writer, as an RDMA memory key: only the
			// handoff's own reserved page at its reserved generation,
			// in the incarnation that reserved it.
			r, ok := w.regs[pw.Handoff]
			if !ok {
				return nil, handoff.ErrBadWrite.With("handoff %s: no reservation registered with this writer; no byte placed", handoff.IDString(pw.Handoff))
			}
			if pw.Block < 0 || pw.Block >= len(r.res.Pages) || r.res.Pages[pw.Block] != pw.Page {
				return nil, handoff.ErrBadWrite.With("handoff %s block %d names page %d gen %d, outside its reservation; no byte placed",
					handoff.IDString(pw.Handoff), pw.Block, pw.Page.Page, pw.Page.Gen)
			}
			if pw.Block < r.res.PrefixBlocks() {
				// A page of decode's prefix cache, shared with other
				// sequences: never a one-sided target.
				return nil, handoff.ErrSealedWrite.With("handoff %s block %d is in the decode worker's cached prefix of %d blocks; no byte placed",
					handoff.IDString(pw.Handoff), pw.Block, r.res.PrefixBlocks())
			}
			m = r.m
		}
		off := int64(kv.SharedHeaderBytes) + int64(pw.Page.Page)*int64(w.pageBytes)
		if int64(pw.Page.Page) >= int64(len(m.gens)) || off+int64(w.pageBytes) > kv.SharedGenOffset(w.geo, len(m.gens)) {
			// A reservation naming a page outside the mapping is refused
			// here, before a byte lands anywhere.
			return nil, handoff.ErrBadWrite.With("page %d is outside the shared pool", pw.Page.Page)
		}
		ps[i] = place{m, off, pw.Data, pw.Handoff, pw.Page}
	}
	out := make([]func(bool) bool, len(ps))
	for i, p := range ps {
		if p.m == nil {
			continue
		}
		p.m.users++
		out[i] = func(place bool) bool {
			// The last moment before the bytes land: the decode pool
			// must still hold the page Reserved at this generation (I6).
			open := place && (w.NoGenFence || p.m.gens.Open(p.ref.Page, p.ref.Gen))
			if open {
				if w.beforeCopy != nil {
					w.beforeCopy(p.ref.Page)
				}
				copy(p.m.mem[p.off:p.off+int64(w.pageBytes)], p.data)
			}
			w.mu.Lock()
			w.release(p.m, 1)
			w.mu.Unlock()
			if place && !open {
				w.genFenced.Add(1)
				w.End(p.id) // decode ended it: place nothing more for it
			}
			return open
		}
	}
	return out, nil
}

// GenFenced counts page copies the shared generation words stopped: the
// decode pool had ended the handoff or re-used the page before the copy.
func (w *Writer) GenFenced() uint64 { return w.genFenced.Load() }

// Write copies each page image into the shared mapping, then sends the
// batch's notices and returns when the decode side has checked and marked
// them (next.Write's contract). A write outside its handoff's reservation
// fails the whole call before any byte is placed. When Write returns, none
// of its memory writes is in flight.
func (w *Writer) Write(ctx context.Context, ws []handoff.PageWrite) error {
	lands, err := w.post(ws)
	if err == nil {
		for i, land := range lands {
			if land != nil && !land(true) {
				err = handoff.ErrAborted.With("handoff %s block %d: page %d is no longer reserved at generation %d in the shared pool (the decode worker ended the handoff); no byte placed",
					handoff.IDString(ws[i].Handoff), ws[i].Block, ws[i].Page.Page, ws[i].Page.Gen)
				for _, rest := range lands[i+1:] {
					if rest != nil {
						rest(false) // unpinned, never placed
					}
				}
				break
			}
		}
	}
	if err != nil {
		if len(ws) > 0 {
			// Decode's Write contract: an error means the handoff failed
			// closed there too (I8), so the refusal is carried over.
			_ = w.Abort(context.WithoutCancel(ctx), &handoff.Abort{Handoff: ws[0].Handoff, Reason: err.Error()})
		}
		return err
	}
	notices := make([]handoff.PageWrite, len(ws))
	for i, pw := range ws {
		pw.Data = nil
		pw.Placed = true
		notices[i] = pw
	}
	return w.next.Write(ctx, notices)
}

// Reserve forwards to the decode side and registers the reservation it
// answers with.
func (w *Writer) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	res, err := w.next.Reserve(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := w.Register(res); err != nil {
		_ = w.next.Abort(context.WithoutCancel(ctx), &handoff.Abort{Handoff: r.Handoff, Reason: err.Error()})
		return nil, err
	}
	return res, nil
}

func (w *Writer) Commit(ctx context.Context, c *handoff.Commit) error {
	w.End(c.Handoff)
	return w.next.Commit(ctx, c)
}

// Abort tells the decode side first and fences the handoff here after: a
// Write racing the abort then either lands before the decode side ended
// the handoff (applied, then quarantined with it) or after (a counted
// late write into quarantined pages, I6), never as a notice for bytes this
// writer skipped, which the decode side would take for a corrupt page.
func (w *Writer) Abort(ctx context.Context, a *handoff.Abort) error {
	err := w.next.Abort(ctx, a)
	w.End(a.Handoff)
	return err
}

// Drained fences the handoff locally, then acknowledges the drain: Write
// calls are synchronous copies, so once the caller's Writes have returned
// none of its bytes is in flight.
func (w *Writer) Drained(ctx context.Context, id kv.ID) error {
	w.End(id)
	return w.next.Drained(ctx, id)
}

func (w *Writer) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	return w.next.Stream(ctx, id, p)
}

func (w *Writer) Cancel(ctx context.Context, id kv.ID) error { return w.next.Cancel(ctx, id) }

// PlaceRaw writes bytes at a page's offset in the newest mapping with no
// fence and no notice. It exists ONLY for tests that play a stale
// one-sided writer whose write was posted before an abort and lands after
// it (I6).
func (w *Writer) PlaceRaw(page uint32, data []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	off := kv.SharedHeaderBytes + int(page)*w.pageBytes
	copy(w.cur.mem[off:off+w.pageBytes], data)
}

var _ handoff.Decode = (*Writer)(nil)
