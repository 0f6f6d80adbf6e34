package kv

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zeebo/xxh3"
)

// refDigest is an independent statement of Pool.Digest's definition (see
// digest.go), computed from the rows an owner wrote, not from pool memory.
func refDigest(o Owner, gens []uint64, tokens int) [16]byte {
	var buf []byte
	for _, x := range []int{tokens, tg.Layers, tg.KVDim, tg.PageSize} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
	}
	for b := 0; b*tg.PageSize < tokens; b++ {
		var blk []byte
		for l := range tg.Layers {
			for _, isV := range []bool{false, true} {
				for pos := b * tg.PageSize; pos < min(tokens, (b+1)*tg.PageSize); pos++ {
					for _, f := range row(o, gens[b], l, pos, isV, tg.KVDim) {
						blk = binary.LittleEndian.AppendUint32(blk, math.Float32bits(f))
					}
				}
			}
		}
		h := xxh3.Hash128(blk).Bytes()
		buf = append(buf, h[:]...)
	}
	return xxh3.Hash128(buf).Bytes()
}

func gensOf(refs []PageRef) []uint64 {
	g := make([]uint64, len(refs))
	for i, r := range refs {
		g[i] = r.Gen
	}
	return g
}

// The handoff path end to end at the pool level: prefill's pages are copied
// into decode's reserved pages (other physical pages), and both sides
// compute the same relocation-invariant digest, equal to the reference.
func TestTransferAndDigest(t *testing.T) {
	pre := newPool(t, 8, func(c *Config) { c.Order = FIFO })
	dec := newPool(t, 8)
	other := owner("other", 9)
	if _, err := pre.Reserve(other, 3); err != nil { // shift prefill's physical pages
		t.Fatal(err)
	}
	h := owner("tenant", 7)
	const tokens = 10
	src, _ := pre.Reserve(h, PagesFor(tokens, tg.PageSize))
	fill(t, pre.View(h, src), src, 0, tokens)
	want := refDigest(h, gensOf(src), tokens)
	got, err := pre.Digest(h, src, tokens)
	if err != nil || got != want {
		t.Fatalf("prefill digest %x err %v, reference %x", got, err, want)
	}

	dst, _ := dec.Reserve(h, len(src))
	if dst[0].Page == src[0].Page {
		t.Fatal("test wants different physical pages on the two sides")
	}
	for i := range src {
		data, slots, err := pre.PageData(h, src[i])
		if err != nil {
			t.Fatal(err)
		}
		if wantSlots := min(tg.PageSize, tokens-i*tg.PageSize); slots != wantSlots {
			t.Fatalf("page %d: %d slots, want %d", i, slots, wantSlots)
		}
		if err := dec.WritePage(h, dst[i], slots, data); err != nil {
			t.Fatal(err)
		}
	}
	got, err = dec.Digest(h, dst, tokens)
	if err != nil || got != want {
		t.Fatalf("decode digest %x err %v, want %x", got, err, want)
	}
	if err := dec.Seal(h, dst); err != nil {
		t.Fatal(err)
	}
	v := dec.View(h, dst)
	for b := range dst {
		for l := range tg.Layers {
			k, val, n, err := v.Block(l, b)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				pos := b*tg.PageSize + i
				if !sameBits(k[i*4:i*4+4], row(h, src[b].Gen, l, pos, false, 4)) || !sameBits(val[i*4:i*4+4], row(h, src[b].Gen, l, pos, true, 4)) {
					t.Fatalf("block %d layer %d slot %d differs after transfer", b, l, i)
				}
			}
		}
	}
	// A second write of a page is refused: a page accepts one transfer write.
	data, slots, _ := pre.PageData(h, src[0])
	dst2, _ := dec.Reserve(h, 1)
	if err := dec.WritePage(h, dst2[0], slots, data); err != nil {
		t.Fatal(err)
	}
	err = dec.WritePage(h, dst2[0], slots, data)
	wantViolation(t, dec, err, KindDuplicateWrite, dst2[0].Page, true)

	// Digest changes with one bit of content and with the token count.
	dst3, _ := dec.Reserve(h, 1)
	fill(t, dec.View(h, dst3), dst3, 0, 3)
	d1, _ := dec.Digest(h, dst3, 3)
	d2, _ := dec.Digest(h, dst3, 2)
	base := int(dst3[0].Page) * dec.pageElems
	dec.f32[base+5] = math.Float32frombits(math.Float32bits(dec.f32[base+5]) ^ 1)
	d3, _ := dec.Digest(h, dst3, 3)
	if d1 == d2 || d1 == d3 {
		t.Fatal("digest insensitive to token count or content")
	}
}

// A page write carries its own extent; bytes past it never enter the pool.
func TestWritePageCopiesOnlyValidSlots(t *testing.T) {
	p := newPool(t, 1)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	data := make([]byte, tg.PageBytes())
	for i := range data {
		data[i] = 0x41
	}
	if err := p.WritePage(a, refs[0], 1, data); err != nil {
		t.Fatal(err)
	}
	row := tg.KVDim
	for half := range 2 * tg.Layers {
		seg := pageFloats(p, refs[0].Page)[half*tg.PageSize*row : (half+1)*tg.PageSize*row]
		for i, f := range seg {
			if (i < row) != (f != 0) {
				t.Fatalf("half %d float %d = %v: only slot 0 should be copied", half, i, f)
			}
		}
	}
	if err := p.WritePage(a, refs[0], 1, data[:10]); !errors.Is(err, ErrBadRange) {
		t.Fatalf("short page image: %v", err)
	}
}

// A prefill writer that outlived an abort: its write names the old
// generation of a page that now belongs to someone else. Dropped, counted,
// and the new owner's page is neither changed nor taken from it.
func TestLateWriteDropped(t *testing.T) {
	p := newPool(t, 1)
	h1, h2 := owner("a", 1), owner("b", 2)
	r1, _ := p.Reserve(h1, 1)
	p.Release(h1, r1) // abort
	r2, _ := p.Reserve(h2, 1)
	fill(t, p.View(h2, r2), r2, 0, 2)
	before := append([]float32(nil), p.f32...)
	data := make([]byte, tg.PageBytes())
	for i := range data {
		data[i] = 0x55
	}
	err := p.WritePage(h1, r1[0], 4, data)
	if !errors.Is(err, ErrLateWrite) {
		t.Fatalf("late write: %v", err)
	}
	s := p.Stats()
	if s.LateWrites != 1 || s.Violations[KindLateWrite] != 1 || s.Quarantined != 0 {
		t.Fatalf("stats after a late write: %+v", s)
	}
	if !sameBits(before, p.f32) {
		t.Fatal("late write reached memory")
	}
	if _, _, n, err := p.View(h2, r2).Block(1, 0); err != nil || n != 2 {
		t.Fatalf("new owner disturbed: n=%d err=%v", n, err)
	}
}

// I6: pages a one-sided transfer may still write stay out of the free list
// until the transport acknowledges the drain, or the lease passes.
func TestQuarantineDrainAndLease(t *testing.T) {
	p := newPool(t, 2)
	h, other := owner("a", 1), owner("b", 2)
	refs, _ := p.Reserve(h, 2)
	t0 := time.Unix(5000, 0)
	p.Quarantine(h, refs, t0.Add(5*time.Second))
	if _, err := p.Reserve(other, 1); !errors.Is(err, ErrNoCapacity) {
		t.Fatalf("a quarantined page was handed out: %v", err)
	}
	// The in-flight write lands: counted late, page stays fenced.
	if err := p.WritePage(h, refs[0], 1, make([]byte, tg.PageBytes())); !errors.Is(err, ErrLateWrite) {
		t.Fatalf("write into a fenced page: %v", err)
	}
	if err := p.Release(h, refs[:1]); !errors.Is(err, ErrDoubleRelease) {
		t.Fatalf("release of a page given to quarantine: %v", err)
	}
	p.DrainAck(other, refs) // not the owner: ignored
	if p.Stats().Quarantined != 2 {
		t.Fatal("a foreign drain ack freed pages")
	}
	p.DrainAck(h, refs[:1])
	if p.Stats().Quarantined != 1 || p.FreePages() != 1 {
		t.Fatalf("drain ack: %+v", p.Stats())
	}
	if n := p.Expire(t0.Add(4 * time.Second)); n != 0 {
		t.Fatalf("expired %d before the lease", n)
	}
	if n := p.Expire(t0.Add(5 * time.Second)); n != 1 {
		t.Fatalf("expired %d at the lease, want 1", n)
	}
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Scrubbed != 2 {
		t.Fatalf("quarantined pages left unscrubbed: %d", s.Scrubbed)
	}
}

func TestCheckDrainedReports(t *testing.T) {
	p := newPool(t, 3)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 2)
	err := p.CheckDrained()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeNotDrained {
		t.Fatalf("CheckDrained with 2 reserved pages: %v", err)
	}
	p.Release(a, refs)
	if err := p.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// Extend grows a decoding sequence only if its table is still its own.
func TestExtendAndViewGrowth(t *testing.T) {
	p := newPool(t, 4)
	a, b := owner("a", 1), owner("b", 2)
	refs, _ := p.Reserve(a, 1)
	v := p.View(a, refs)
	fill(t, v, refs, 0, 4)
	if err := v.Ensure(9); err != nil {
		t.Fatal(err)
	}
	if v.Capacity() != 12 || len(v.Table()) != 3 {
		t.Fatalf("capacity %d", v.Capacity())
	}
	tbl := v.Table()
	fill(t, v, tbl, 4, 9)
	if _, err := p.Extend(b, tbl, 1); !errors.Is(err, ErrForeignOwner) {
		t.Fatalf("extend of a foreign table: %v", err)
	}
	if p.FreePages() != 1 {
		t.Fatal("failed extend took pages")
	}
}

// The shm transport: a peer maps the same file and writes a page where
// SharedOffset says; MarkWritten records the extent; the view reads it.
func TestSharedFileMarkWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.shm")
	if err := os.WriteFile(path, []byte("left over by a previous process"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newPool(t, 3, func(c *Config) { c.SharedFile = path })
	for i, b := range p.mem {
		if b != 0 {
			t.Fatalf("byte %d of a fresh shared pool is %#x: old file content survived", i, b)
		}
	}
	h := owner("a", 1)
	refs, _ := p.Reserve(h, 1)

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	peer, err := syscall.Mmap(int(f.Fd()), 0, SharedHeaderBytes+3*tg.PageBytes(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(peer)
	off := int(p.SharedOffset(refs[0]))
	// layer 1, V half, slot 0: offset ((1*2)+1) * PageSize*KVDim floats
	at := off + (3*tg.PageSize*tg.KVDim)*4
	binary.LittleEndian.PutUint32(peer[at:], math.Float32bits(2.5))
	if err := p.MarkWritten(h, refs[0], 1); err != nil {
		t.Fatal(err)
	}
	_, val, n, err := p.View(h, refs).Block(1, 0)
	if err != nil || n != 1 || val[0] != 2.5 {
		t.Fatalf("read of a one-sided write: n=%d err=%v v=%v", n, err, val)
	}

	// A one-sided write that names a re-allocated page already landed in
	// someone else's memory: quarantine it, count it late.
	p.Release(h, refs)
	r2, _ := p.Reserve(owner("b", 2), 1)
	err = p.MarkWritten(h, refs[0], 1)
	wantViolation(t, p, err, KindStaleGeneration, r2[0].Page, true)
	if p.Stats().LateWrites != 1 {
		t.Fatal("late one-sided write not counted")
	}
}

// --kv-verify=always: a sealed page whose bytes changed after the seal is
// refused on its next first touch.
func TestVerifySealedPage(t *testing.T) {
	p := newPool(t, 2, func(c *Config) { c.Verify = VerifyAlways })
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	fill(t, p.View(a, refs), refs, 0, 3)
	if err := p.Seal(a, refs); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := p.View(a, refs).Block(0, 0); err != nil {
		t.Fatalf("intact sealed page: %v", err)
	}
	pageFloats(p, refs[0].Page)[1] += 1 // corruption behind the pool's back
	_, _, _, err := p.View(a, refs).Block(0, 0)
	wantViolation(t, p, err, KindDigestMismatch, refs[0].Page, true)
}
