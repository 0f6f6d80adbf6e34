package kv

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/zeebo/xxh3"

	"sluice/internal/quant"
)

// F16 pages: tg's shape with binary16 rows.
func newPool16(t testing.TB, pages int, mut ...func(*Config)) *Pool {
	return newPool(t, pages, append([]func(*Config){func(c *Config) { c.Type = F16 }}, mut...)...)
}

// row16 is row() as an F16 page stores it: each float rounded by
// quant.FP32ToFP16, the scalar statement of ggml_fp32_to_fp16.
func row16(o Owner, gen uint64, layer, pos int, isV bool) []uint16 {
	f := row(o, gen, layer, pos, isV, tg.KVDim)
	h := make([]uint16, len(f))
	for i, x := range f {
		h[i] = quant.FP32ToFP16(x)
	}
	return h
}

func sameHalves(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestF16PutRoundsAndBlock16Reads: an F16 view stores each row rounded to
// nearest even and serves exactly the written slots (I4) as binary16; a
// float32 read of F16 pages, and a binary16 read of F32 pages, is refused
// with no data.
func TestF16PutRoundsAndBlock16Reads(t *testing.T) {
	p := newPool16(t, 4)
	if p.Geometry().PageBytes() != tg.Layers*tg.KVDim*2*2*tg.PageSize {
		t.Fatalf("F16 page of %d bytes", p.Geometry().PageBytes())
	}
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 2)
	v := p.View(a, refs)
	if !v.F16() {
		t.Fatal("view of an F16 pool says F32")
	}
	fill(t, v, refs, 0, 6)
	for b := range 2 {
		for l := range tg.Layers {
			k, val, n, err := v.Block16(l, b)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(tg.PageSize, 6-b*tg.PageSize); n != want || len(k) != n*tg.KVDim || len(val) != n*tg.KVDim {
				t.Fatalf("block %d layer %d: %d slots (%d, %d halves), want %d", b, l, n, len(k), len(val), want)
			}
			for i := range n {
				pos := b*tg.PageSize + i
				d := tg.KVDim
				if !sameHalves(k[i*d:(i+1)*d], row16(a, refs[b].Gen, l, pos, false)) || !sameHalves(val[i*d:(i+1)*d], row16(a, refs[b].Gen, l, pos, true)) {
					t.Fatalf("block %d layer %d slot %d: rows not the rounded writes", b, l, i)
				}
			}
		}
	}
	if k, _, _, err := v.Block(0, 0); !errors.Is(err, ErrBadRange) || k != nil {
		t.Fatalf("float32 read of F16 pages: %v", err)
	}
	q := newPool(t, 1)
	qr, _ := q.Reserve(a, 1)
	qv := q.View(a, qr)
	fill(t, qv, qr, 0, 1)
	if k, _, _, err := qv.Block16(0, 0); !errors.Is(err, ErrBadRange) || k != nil || qv.F16() {
		t.Fatalf("binary16 read of F32 pages: %v", err)
	}
}

// refDigest16 is refDigest for F16 pages, from the rounded rows.
func refDigest16(o Owner, gens []uint64, tokens int) [16]byte {
	var buf []byte
	for _, x := range []int{tokens, tg.Layers, tg.KVDim, tg.PageSize} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
	}
	for b := 0; b*tg.PageSize < tokens; b++ {
		var blk []byte
		for l := range tg.Layers {
			for _, isV := range []bool{false, true} {
				for pos := b * tg.PageSize; pos < min(tokens, (b+1)*tg.PageSize); pos++ {
					for _, h := range row16(o, gens[b], l, pos, isV) {
						blk = binary.LittleEndian.AppendUint16(blk, h)
					}
				}
			}
		}
		h := xxh3.Hash128(blk).Bytes()
		buf = append(buf, h[:]...)
	}
	return xxh3.Hash128(buf).Bytes()
}

// TestF16TransferAndDigest: TestTransferAndDigest on F16 pages: page
// images of half the F32 size move to other physical pages, both digests
// equal the reference over the rounded rows, and the decode side reads the
// rows back exactly.
func TestF16TransferAndDigest(t *testing.T) {
	pre := newPool16(t, 8, func(c *Config) { c.Order = FIFO })
	dec := newPool16(t, 8)
	pre.Reserve(owner("other", 9), 3) // shift prefill's physical pages
	h := owner("tenant", 7)
	const tokens = 10
	src, _ := pre.Reserve(h, PagesFor(tokens, tg.PageSize))
	fill(t, pre.View(h, src), src, 0, tokens)
	want := refDigest16(h, gensOf(src), tokens)
	if got, err := pre.Digest(h, src, tokens); err != nil || got != want {
		t.Fatalf("prefill digest %x err %v, reference %x", got, err, want)
	}
	dst, _ := dec.Reserve(h, len(src))
	for i := range src {
		data, slots, err := pre.PageData(h, src[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != tg.Layers*tg.KVDim*2*2*tg.PageSize {
			t.Fatalf("F16 page image of %d bytes", len(data))
		}
		if err := dec.WritePage(h, dst[i], slots, data); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := dec.Digest(h, dst, tokens); err != nil || got != want {
		t.Fatalf("decode digest %x err %v, want %x", got, err, want)
	}
	// An F32 page image is twice the size: an F16 pool refuses it whole.
	f32 := newPool(t, 1)
	fr, _ := f32.Reserve(h, 1)
	fill(t, f32.View(h, fr), fr, 0, 1)
	data, slots, _ := f32.PageData(h, fr[0])
	more, _ := dec.Reserve(h, 1)
	if err := dec.WritePage(h, more[0], slots, data); err == nil {
		t.Fatal("an F16 pool accepted an F32 page image")
	}
	v := dec.View(h, dst)
	for b := range dst {
		for l := range tg.Layers {
			k, _, n, err := v.Block16(l, b)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if !sameHalves(k[i*tg.KVDim:(i+1)*tg.KVDim], row16(h, src[b].Gen, l, b*tg.PageSize+i, false)) {
					t.Fatalf("block %d layer %d slot %d differs after the transfer", b, l, i)
				}
			}
		}
	}
}

// TestF16Scrub: a released F16 page is all zero bits, or all PoisonBits16
// (a binary16 NaN, not half of the float32 pattern) under ScrubPoison, and
// a fresh poisoned pool starts that way too (I7).
func TestF16Scrub(t *testing.T) {
	for _, c := range []struct {
		scrub ScrubMode
		want  uint16
	}{{ScrubZero, 0}, {ScrubPoison, PoisonBits16}} {
		p := newPool16(t, 2, func(cfg *Config) { cfg.Scrub = c.scrub })
		a := owner("a", 1)
		refs, _ := p.Reserve(a, 1)
		pg := int(refs[0].Page)
		e := tg.Layers * tg.KVDim * 2 * tg.PageSize
		for i, h := range p.f16[pg*e : (pg+1)*e] {
			if h != c.want {
				t.Fatalf("%v: fresh element %d = %#04x", c.scrub, i, h)
			}
		}
		fill(t, p.View(a, refs), refs, 0, tg.PageSize)
		if err := p.Release(a, refs); err != nil {
			t.Fatal(err)
		}
		for i, h := range p.f16[pg*e : (pg+1)*e] {
			if h != c.want {
				t.Fatalf("%v: element %d = %#04x after release, want %#04x", c.scrub, i, h, c.want)
			}
		}
	}
}

// TestSharedHeaderRecordsKVType: a shared pool file says which KV type its
// pages hold, so a one-sided writer of the other type is refused (its
// geometry differs); a header naming an unknown type is not a pool file.
func TestSharedHeaderRecordsKVType(t *testing.T) {
	for _, typ := range []Type{F16, F32} {
		path := filepath.Join(t.TempDir(), "kv")
		p := newPool(t, 2, func(c *Config) { c.Type, c.SharedFile = typ, path })
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		h, err := ParseSharedHeader(b[:SharedHeaderBytes])
		if err != nil || h.Geometry != p.Geometry() || h.Geometry.Type != typ {
			t.Fatalf("%v: header %+v (%v), pool %+v", typ, h, err, p.Geometry())
		}
		if int64(len(b)) != SharedFileBytes(p.Geometry(), 2) {
			t.Fatalf("%v: file of %d bytes", typ, len(b))
		}
		binary.LittleEndian.PutUint32(b[12:], 7)
		if _, err := ParseSharedHeader(b[:SharedHeaderBytes]); err == nil {
			t.Fatalf("header of KV type 7 accepted")
		}
	}
}
