// Package shm is the one-sided shared-memory handoff transport. The decode
// pool lives in a MAP_SHARED file (kv.Config.SharedFile); the prefill side
// maps the same file and copies page bytes straight into the decode pool's
// memory, as an RDMA write would, then sends only a small notice (the
// PageWrite with Placed set, no data) over the control channel. The decode
// side checks the notice (owner, generation, slots, checksum of the bytes in
// its own memory) before it marks the page written.
//
// Because the decode side cannot stop a one-sided write, an abort or a
// failure before the commit quarantines the handoff's pages until this
// writer's drain acknowledgement (Decode.Drained) or until the pool's lease
// runs out (I6). Writes go in bounded batches (handoff.SenderConfig.
// MaxBatchBytes), so the in-flight time the lease must cover stays small.
package shm

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// Writer is the prefill side: a handoff.Decode whose Write places page
// bytes into the shared mapping and forwards notices to next; every other
// call goes to next unchanged.
type Writer struct {
	next      handoff.Decode
	mem       []byte
	pageBytes int

	mu sync.Mutex
	// ended holds handoffs this writer committed or aborted: it never
	// places another byte for them (a writer-side fence). Their notices are
	// still forwarded so the decode side counts the late write.
	ended map[kv.ID]struct{}
	order []kv.ID // fence entries, oldest first; bounded by maxFence
}

// maxFence bounds the fence memory; a handoff older than the last maxFence
// ended ones is long gone from the decode side too.
const maxFence = 1 << 16

// Open maps the decode pool's shared file. g must be the decode pool's
// geometry: page p lives at p*PageBytes (kv.Pool.SharedOffset).
func Open(path string, g kv.Geometry, next handoff.Decode) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	size := int(st.Size())
	if size == 0 || size%g.PageBytes() != 0 {
		return nil, fmt.Errorf("shm: %s is %d bytes, not a whole number of %d-byte pages", path, size, g.PageBytes())
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map %s: %w", path, err)
	}
	return &Writer{next: next, mem: mem, pageBytes: g.PageBytes(), ended: map[kv.ID]struct{}{}}, nil
}

// Close unmaps the file. No Write may run during or after it.
func (w *Writer) Close() error { return syscall.Munmap(w.mem) }

func (w *Writer) isEnded(id kv.ID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.ended[id]
	return ok
}

func (w *Writer) end(id kv.ID) {
	w.mu.Lock()
	defer w.mu.Unlock()
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

// Write copies each page image into the shared mapping, then sends the
// batch's notices and returns when the decode side has checked and marked
// them (next.Write's contract). When Write returns, none of its memory
// writes is in flight.
func (w *Writer) Write(ctx context.Context, ws []handoff.PageWrite) error {
	notices := make([]handoff.PageWrite, len(ws))
	for i, pw := range ws {
		n := pw
		n.Data = nil
		n.Placed = true
		notices[i] = n
		if pw.Placed || w.isEnded(pw.Handoff) {
			continue
		}
		if len(pw.Data) != w.pageBytes {
			return handoff.ErrBadWrite.With("page image of %d bytes, the shared pool's pages are %d", len(pw.Data), w.pageBytes)
		}
		off := int64(pw.Page.Page) * int64(w.pageBytes)
		if off < 0 || off+int64(w.pageBytes) > int64(len(w.mem)) {
			// A reservation naming a page outside the mapping is refused
			// here, before a byte lands anywhere.
			return handoff.ErrBadWrite.With("page %d is outside the shared pool", pw.Page.Page)
		}
		copy(w.mem[off:off+int64(w.pageBytes)], pw.Data)
	}
	return w.next.Write(ctx, notices)
}

func (w *Writer) Reserve(ctx context.Context, r *handoff.Reserve) (*handoff.Reservation, error) {
	return w.next.Reserve(ctx, r)
}

func (w *Writer) Commit(ctx context.Context, c *handoff.Commit) error {
	w.end(c.Handoff)
	return w.next.Commit(ctx, c)
}

// Abort tells the decode side first and fences the handoff here after: a
// Write racing the abort then either lands before the decode side ended
// the handoff (applied, then quarantined with it) or after (a counted
// late write into quarantined pages, I6), never as a notice for bytes this
// writer skipped, which the decode side would take for a corrupt page.
func (w *Writer) Abort(ctx context.Context, a *handoff.Abort) error {
	err := w.next.Abort(ctx, a)
	w.end(a.Handoff)
	return err
}

// Drained fences the handoff locally, then acknowledges the drain: Write
// calls are synchronous copies, so once the caller's Writes have returned
// none of its bytes is in flight.
func (w *Writer) Drained(ctx context.Context, id kv.ID) error {
	w.end(id)
	return w.next.Drained(ctx, id)
}

func (w *Writer) Stream(ctx context.Context, id kv.ID, p handoff.StreamParams) (handoff.TokenStream, error) {
	return w.next.Stream(ctx, id, p)
}

func (w *Writer) Cancel(ctx context.Context, id kv.ID) error { return w.next.Cancel(ctx, id) }

// PlaceRaw writes bytes at a page's offset with no fence and no notice. It
// exists ONLY for tests that play a stale one-sided writer whose write was
// posted before an abort and lands after it (I6).
func (w *Writer) PlaceRaw(page uint32, data []byte) {
	off := int(page) * w.pageBytes
	copy(w.mem[off:off+w.pageBytes], data)
}

var _ handoff.Decode = (*Writer)(nil)
