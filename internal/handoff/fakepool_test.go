package handoff

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"sluice/internal/kv"
)

// memPool is an independent, minimal pool used until and beside internal/kv:
// owner and generation tags, page states, scrub on release, quarantine with
// leases. Its digest is SHA-256 (first 16 bytes) over the written slots.
type memPool struct {
	mu        sync.Mutex
	pageBytes int
	data      [][]byte
	owner     []kv.Owner
	gen       []uint64
	state     []kv.State
	slots     []int
	until     []time.Time
	free      []uint32 // LIFO: a released page is reused first
	nextGen   uint64
	ps        int
}

func newMemPool(pages, pageSize, pageBytes int) *memPool {
	p := &memPool{pageBytes: pageBytes, ps: pageSize}
	for i := 0; i < pages; i++ {
		p.data = append(p.data, make([]byte, pageBytes))
		p.owner = append(p.owner, kv.Owner{})
		p.gen = append(p.gen, 0)
		p.state = append(p.state, kv.Free)
		p.slots = append(p.slots, 0)
		p.until = append(p.until, time.Time{})
		p.free = append(p.free, uint32(pages-1-i))
	}
	return p
}

func (p *memPool) check(o kv.Owner, r kv.PageRef) error {
	if int(r.Page) >= len(p.data) {
		return &kv.Violation{Kind: kv.KindBadRange, Page: r.Page, Msg: "no such page"}
	}
	if p.gen[r.Page] != r.Gen {
		return &kv.Violation{Kind: kv.KindStaleGeneration, Page: r.Page, Msg: "stale generation"}
	}
	if p.owner[r.Page] != o {
		return &kv.Violation{Kind: kv.KindForeignOwner, Page: r.Page, Msg: "foreign owner"}
	}
	return nil
}

func (p *memPool) Reserve(o kv.Owner, n int) ([]kv.PageRef, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > len(p.free) {
		return nil, kv.ErrNoCapacity
	}
	var refs []kv.PageRef
	for i := 0; i < n; i++ {
		pg := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.nextGen++
		p.gen[pg], p.owner[pg], p.state[pg], p.slots[pg] = p.nextGen, o, kv.Reserved, 0
		refs = append(refs, kv.PageRef{Page: pg, Gen: p.nextGen})
	}
	return refs, nil
}

func (p *memPool) WritePage(o kv.Owner, r kv.PageRef, slots int, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check(o, r); err != nil {
		return err
	}
	if p.state[r.Page] != kv.Reserved {
		return &kv.Violation{Kind: kv.KindSealedWrite, Page: r.Page, Msg: "page not writable"}
	}
	if len(data) != p.pageBytes || slots < 0 || slots > p.ps {
		return &kv.Violation{Kind: kv.KindBadRange, Page: r.Page, Msg: "bad size"}
	}
	copy(p.data[r.Page], data)
	p.slots[r.Page] = slots
	p.state[r.Page] = kv.Filling
	return nil
}

func (p *memPool) MarkWritten(o kv.Owner, r kv.PageRef, slots int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check(o, r); err != nil {
		return err
	}
	if p.state[r.Page] != kv.Reserved {
		return &kv.Violation{Kind: kv.KindSealedWrite, Page: r.Page, Msg: "page not writable"}
	}
	p.slots[r.Page] = slots
	p.state[r.Page] = kv.Filling
	return nil
}

func (p *memPool) PageData(o kv.Owner, r kv.PageRef) ([]byte, int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.check(o, r); err != nil {
		return nil, 0, err
	}
	return p.data[r.Page], p.slots[r.Page], nil
}

// digestOf is the reference digest: written slots of each page in order.
// The page layout in these tests is [slot][bytesPerSlot].
func digestOf(pages [][]byte, slots []int, bytesPerSlot int) [16]byte {
	h := sha256.New()
	for i, d := range pages {
		h.Write(d[:slots[i]*bytesPerSlot])
	}
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

func (p *memPool) Digest(o kv.Owner, refs []kv.PageRef, tokens int) ([16]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var pages [][]byte
	var slots []int
	left := tokens
	for _, r := range refs {
		if err := p.check(o, r); err != nil {
			return [16]byte{}, err
		}
		n := min(left, p.ps)
		if p.slots[r.Page] < n {
			return [16]byte{}, &kv.Violation{Kind: kv.KindUnwrittenRead, Page: r.Page, Msg: "unwritten slots"}
		}
		pages = append(pages, p.data[r.Page])
		slots = append(slots, n)
		left -= n
	}
	return digestOf(pages, slots, p.pageBytes/p.ps), nil
}

func (p *memPool) freePage(pg uint32) {
	clear(p.data[pg]) // I7 scrub
	p.state[pg], p.owner[pg], p.slots[pg] = kv.Free, kv.Owner{}, 0
	p.free = append(p.free, pg)
}

func (p *memPool) Release(o kv.Owner, refs []kv.PageRef) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for _, r := range refs {
		err := p.check(o, r)
		if err == nil && (p.state[r.Page] == kv.Free || p.state[r.Page] == kv.Quarantined) {
			err = &kv.Violation{Kind: kv.KindDoubleRelease, Page: r.Page, Msg: "double release"}
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		p.freePage(r.Page)
	}
	return first
}

func (p *memPool) Quarantine(o kv.Owner, refs []kv.PageRef, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range refs {
		if p.check(o, r) == nil && p.state[r.Page] != kv.Free {
			p.state[r.Page], p.until[r.Page] = kv.Quarantined, until
		}
	}
}

func (p *memPool) DrainAck(o kv.Owner, refs []kv.PageRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range refs {
		if p.check(o, r) == nil && p.state[r.Page] == kv.Quarantined {
			p.freePage(r.Page)
		}
	}
}

func (p *memPool) Pages() int { return len(p.data) }

func (p *memPool) Expire(now time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pg := range p.data {
		if p.state[pg] == kv.Quarantined && !now.Before(p.until[pg]) {
			p.freePage(uint32(pg))
			n++
		}
	}
	return n
}

func (p *memPool) CheckDrained() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) != len(p.data) {
		var busy []string
		for pg, s := range p.state {
			if s != kv.Free {
				busy = append(busy, fmt.Sprintf("%d:%d", pg, s))
			}
		}
		return fmt.Errorf("pool not drained: %d of %d free, busy %v", len(p.free), len(p.data), busy)
	}
	for pg, d := range p.data {
		for _, b := range d {
			if b != 0 {
				return errors.New("free page " + fmt.Sprint(pg) + " not scrubbed")
			}
		}
	}
	return nil
}

// seqSource is a prefilled sequence held by the test: pages of
// [slot][bytesPerSlot] filled with a pattern unique to the sequence.
type seqSource struct {
	pages  [][]byte
	slots  []int
	bps    int
	digest []byte // nil = compute
}

func newSeqSource(tokens, pageSize, bytesPerSlot int, seed byte) *seqSource {
	s := &seqSource{bps: bytesPerSlot}
	for left := tokens; left > 0; left -= pageSize {
		n := min(left, pageSize)
		d := make([]byte, pageSize*bytesPerSlot)
		for i := 0; i < n*bytesPerSlot; i++ {
			d[i] = seed + byte(i*7+len(s.pages)*13) | 1 // never zero: a scrubbed page differs
		}
		s.pages = append(s.pages, d)
		s.slots = append(s.slots, n)
	}
	return s
}

func (s *seqSource) Page(b int) ([]byte, int, error) { return s.pages[b], s.slots[b], nil }
func (s *seqSource) Digest() ([]byte, error) {
	if s.digest != nil {
		return s.digest, nil
	}
	d := digestOf(s.pages, s.slots, s.bps)
	return d[:], nil
}
