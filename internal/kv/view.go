package kv

import (
	"fmt"

	"sluice/internal/kernels"
	"sluice/internal/quant"
)

// View is one sequence's paged, owner-checking window on the pool: the
// forward pass's only access to KV (it implements sluice/internal/model.KV).
// Every Put and Block checks that the page behind the block still carries
// the generation the page table recorded and is in service (I3); the owner
// is checked under the pool lock the first time the view touches an entry,
// after which the generation carries it: generations are pool-wide unique,
// so an unchanged generation is the same allocation, hence the same owner.
// Block returns only written slots (I4).
//
// A View belongs to one sequence and is not safe for concurrent use.
type View struct {
	p     *Pool
	owner Owner
	table []PageRef
	ok    []bool // entry checked against owner under the lock
	// tid is the owner's interned tenant, set under the lock by the first
	// slow check (0 until then, which no page carries): every Put and Block
	// compares it with the page's, so a page of another tenant, cached or
	// not, is refused at read time, not only when the entry was checked.
	tid uint32
}

// View makes a view of o's sequence over table (copied). Nothing is checked
// here; every call through the view is.
func (p *Pool) View(o Owner, table []PageRef) *View {
	return &View{p: p, owner: o, table: append([]PageRef(nil), table...), ok: make([]bool, len(table))}
}

// PageSize is the number of token positions per block.
func (v *View) PageSize() int { return v.p.geo.PageSize }

// Owner is the view's owner.
func (v *View) Owner() Owner { return v.owner }

// Table is a copy of the view's page table.
func (v *View) Table() []PageRef { return append([]PageRef(nil), v.table...) }

// Capacity is the number of positions the table can hold.
func (v *View) Capacity() int { return len(v.table) * v.p.geo.PageSize }

// Grow reserves n more pages for the sequence (Pool.Extend).
func (v *View) Grow(n int) error {
	t, err := v.p.Extend(v.owner, v.table, n)
	if err != nil {
		return err
	}
	v.table = t
	v.ok = append(v.ok, make([]bool, len(t)-len(v.ok))...)
	return nil
}

// Ensure grows the table, if needed, to hold tokens positions.
func (v *View) Ensure(tokens int) error {
	need := PagesFor(tokens, v.p.geo.PageSize) - len(v.table)
	if need <= 0 {
		return nil
	}
	return v.Grow(need)
}

// Put stores the K and V rows of position pos in layer. Within a page and a
// layer, positions are written in order: pos may rewrite a written slot
// (not a sealed one) or append the next one, never leave a gap.
func (v *View) Put(layer, pos int, k, val []float32) error {
	p := v.p
	g := &p.geo
	if uint(layer) >= uint(g.Layers) || pos < 0 || len(k) != g.KVDim || len(val) != g.KVDim {
		return p.badArg("put of layer %d position %d with rows of %d and %d floats; the model has %d layers of %d floats",
			layer, pos, len(k), len(val), g.Layers, g.KVDim)
	}
	blk := pos / g.PageSize
	if blk >= len(v.table) {
		return p.badArg("position %d is past the reservation of %d tokens", pos, v.Capacity())
	}
	ref := v.table[blk]
	if int(ref.Page) >= len(p.pages) {
		return p.badArg("page %d is outside the pool of %d pages", ref.Page, len(p.pages))
	}
	slot := pos - blk*g.PageSize
	m := &p.pages[ref.Page]
	t := m.tag.Load()
	st := tagState(t)
	if p.checks.Load() {
		// I3 fast path: one atomic load and compares; anything unusual
		// goes to the locked slow path, which classifies it.
		if !v.ok[blk] || tagGen(t) != ref.Gen || (st != Reserved && st != Filling && st != Sealed) ||
			slot < int(m.sealed.Load()) || !v.sameTenant(m.tenant.Load()) {
			if err := v.slow(blk, opWrite, slot); err != nil {
				return err
			}
			t = m.tag.Load()
			st = tagState(t)
		}
	}
	w := &p.written[int(ref.Page)*g.Layers+layer]
	n := int(w.Load())
	// I4: the written count is a prefix; a gap would make it claim slots
	// nobody wrote.
	if slot > n && !p.noExtent {
		return p.violate(KindBadRange, ref.Page, true, "put of slot %d in layer %d of page %d leaves a gap after %d written slots", slot, layer, ref.Page, n)
	}
	if m.summed.Load() {
		// The bytes change: a hash recorded for them no longer holds, so a
		// digest or seal re-reads the page (sum.go).
		m.summed.Store(false)
	}
	ru := g.rowUnits()
	base := int(ref.Page)*p.pageElems + layer*2*g.PageSize*ru + slot*ru
	vb := base + g.PageSize*ru
	switch g.Type {
	case F32:
		copy(p.f32[base:base+ru], k)
		copy(p.f32[vb:vb+ru], val)
	case F16:
		kernels.FP32ToFP16Row(p.f16[base:base+ru], k)
		kernels.FP32ToFP16Row(p.f16[vb:vb+ru], val)
	case Q8_0:
		// As llama.cpp's CPU backend quantizes a row it copies into a
		// q8_0 cache (ggml_cpy -> quantize_row_q8_0), so the same K/V
		// land in the same bits.
		quant.QuantizeRowQ8_0(k, p.mem[base:base+ru])
		quant.QuantizeRowQ8_0(val, p.mem[vb:vb+ru])
	}
	if slot >= n {
		w.Store(int32(slot + 1))
	}
	if st == Reserved {
		// Fails harmlessly if the lock holder changed the state meanwhile
		// (a quarantine must win over this transition).
		p.closeGen(ref.Page) // written: no one-sided write may follow (shm.go)
		m.tag.CompareAndSwap(t, mkTag(tagGen(t), Filling))
	}
	return nil
}

// F16 reports whether the view's pages hold binary16 rows (Block16 serves
// them) rather than float32 rows (Block).
func (v *View) F16() bool { return v.p.geo.Type == F16 }

// Block returns the K and V rows of block blk written in layer: n rows of
// KVDim each, aliasing the pool until the sequence's next Put or release.
// A block with no written slot in this layer is an unwritten read (I4).
// Only an F32 pool's views serve float32 rows; an F16 view refuses
// (Block16), as does a Q8_0 one (BlockQ8).
func (v *View) Block(layer, blk int) (k, val []float32, n int, err error) {
	if v.p.geo.Type != F32 {
		return nil, nil, 0, v.p.badArg("float32 read of a pool of %v pages", v.p.geo.Type)
	}
	kb, vb, n, err := v.block(layer, blk)
	if err != nil {
		return nil, nil, 0, err
	}
	f := v.p.f32
	return f[kb : kb+n*v.p.geo.KVDim : kb+n*v.p.geo.KVDim], f[vb : vb+n*v.p.geo.KVDim : vb+n*v.p.geo.KVDim], n, nil
}

// Block16 is Block for an F16 pool: the rows as binary16 bit patterns. An
// F32 view refuses.
func (v *View) Block16(layer, blk int) (k, val []uint16, n int, err error) {
	if v.p.geo.Type != F16 {
		return nil, nil, 0, v.p.badArg("binary16 read of a pool of %v pages", v.p.geo.Type)
	}
	kb, vb, n, err := v.block(layer, blk)
	if err != nil {
		return nil, nil, 0, err
	}
	f := v.p.f16
	return f[kb : kb+n*v.p.geo.KVDim : kb+n*v.p.geo.KVDim], f[vb : vb+n*v.p.geo.KVDim : vb+n*v.p.geo.KVDim], n, nil
}

// Q8 reports whether the view's pages hold Q8_0 rows (BlockQ8 serves
// them).
func (v *View) Q8() bool { return v.p.geo.Type == Q8_0 }

// BlockQ8 is Block for a Q8_0 pool: n rows of RowBytes bytes each, every
// row KVDim/32 blocks of a binary16 scale and 32 int8s. Other views refuse.
func (v *View) BlockQ8(layer, blk int) (k, val []byte, n int, err error) {
	if v.p.geo.Type != Q8_0 {
		return nil, nil, 0, v.p.badArg("q8_0 read of a pool of %v pages", v.p.geo.Type)
	}
	kb, vb, n, err := v.block(layer, blk)
	if err != nil {
		return nil, nil, 0, err
	}
	rb := v.p.geo.RowBytes()
	f := v.p.mem
	return f[kb : kb+n*rb : kb+n*rb], f[vb : vb+n*rb : vb+n*rb], n, nil
}

// block checks a read of block blk in layer (I3, I4) and returns the
// element offsets of its K and V rows and how many rows may be read.
func (v *View) block(layer, blk int) (kb, vb, n int, err error) {
	p := v.p
	g := &p.geo
	if uint(layer) >= uint(g.Layers) || blk < 0 || blk >= len(v.table) {
		return 0, 0, 0, p.badArg("block %d of layer %d is outside the table of %d blocks and %d layers", blk, layer, len(v.table), g.Layers)
	}
	ref := v.table[blk]
	if int(ref.Page) >= len(p.pages) {
		return 0, 0, 0, p.badArg("page %d is outside the pool of %d pages", ref.Page, len(p.pages))
	}
	m := &p.pages[ref.Page]
	if p.checks.Load() {
		t := m.tag.Load()
		if st := tagState(t); !v.ok[blk] || tagGen(t) != ref.Gen || (st != Reserved && st != Filling && st != Sealed) ||
			!v.sameTenant(m.tenant.Load()) {
			if err := v.slow(blk, opRead, 0); err != nil {
				return 0, 0, 0, err
			}
		}
	}
	if p.noExtent {
		n = g.PageSize // Unsafe.NoExtentCheck: the incident's read of every slot
	} else {
		// I4: only the slots written in this layer, never the page's rest.
		n = int(p.written[int(ref.Page)*g.Layers+layer].Load())
		if n == 0 {
			return 0, 0, 0, p.violate(KindUnwrittenRead, ref.Page, true,
				"block %d of layer %d has no written slot", blk, layer)
		}
	}
	ru := g.rowUnits()
	kb = int(ref.Page)*p.pageElems + layer*2*g.PageSize*ru
	return kb, kb + g.PageSize*ru, n, nil
}

// slow is the locked check of a table entry: owner, generation, liveness,
// seal (I3) and, for a sealed page under --kv-verify all, its digest.
func (v *View) slow(blk int, o op, slot int) error {
	p := v.p
	ref := v.table[blk]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errClosed
	}
	if vio := p.checkLocked(v.owner, ref, o); vio != nil {
		return vio
	}
	m := &p.pages[ref.Page]
	if v.tid == 0 {
		v.tid = p.internLocked(v.owner.Tenant)
	}
	if !v.sameTenant(m.tenant.Load()) && !((p.cfg.Unsafe.CacheIgnoresTenant || p.cfg.Unsafe.NoCacheTenantCheck) && p.cache.meta[ref.Page].cached) {
		// Unreachable while checkLocked holds: the page's owner (or its
		// cache entry) is of v's tenant. A second, independent check (I11).
		return p.violateLocked(KindForeignOwner, ref.Page, true, "page %d belongs to another tenant", ref.Page)
	}
	if o == opWrite && slot < int(m.sealed.Load()) {
		return p.violateLocked(KindSealedWrite, ref.Page, true, "write of slot %d of page %d, sealed up to slot %d", slot, ref.Page, m.sealed.Load())
	}
	if !v.ok[blk] && tagState(m.tag.Load()) == Sealed && p.cfg.Verify == VerifyAll && !p.sealIntactLocked(ref.Page) {
		return p.violateLocked(KindDigestMismatch, ref.Page, true, "sealed page %d no longer matches its seal digest", ref.Page)
	}
	v.ok[blk] = true
	return nil
}

// sameTenant: a page of tenant tid may be read through v: v's own tenant,
// or the operator's public cache scope (a page only InsertPublic marks).
// A public page is sealed and cached, so nobody can write it.
func (v *View) sameTenant(tid uint32) bool { return tid == v.tid || tid == PublicTenant }

func (p *Pool) violate(k Kind, pg uint32, quarantine bool, format string, args ...any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.violateLocked(k, pg, quarantine, format, args...)
}

// badArg is a caller error that names no page to quarantine: counted as
// bad_range (I8) and refused.
func (p *Pool) badArg(format string, args ...any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countLocked(KindBadRange)
	return &Violation{Kind: KindBadRange, Msg: fmt.Sprintf(format, args...)}
}
