package kv

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// tq is tg's shape with Q8_0 rows two blocks wide.
var tq = Geometry{Layers: 2, KVDim: 64, PageSize: 4, Type: Q8_0}

func newPoolQ8(t testing.TB, pages int, mut ...func(*Config)) *Pool {
	return newPool(t, pages, append([]func(*Config){func(c *Config) { c.Geometry = tq }}, mut...)...)
}

// refQ8 is ggml's block_q8_0 of a row as llama.cpp's x86 CPU backend
// writes a q8_0 cache, restated here from ggml-cpu's quantize_row_q8_0
// (not the pool's code): per 32 elements, amax = max |x|, the scale
// amax/127 stored as binary16, each x times 127/amax (in float32) rounded
// half to even.
func refQ8(x []float32) []byte {
	var out []byte
	for b := 0; b < len(x); b += 32 {
		var amax float32
		for _, v := range x[b : b+32] {
			amax = float32(math.Max(float64(amax), math.Abs(float64(v))))
		}
		out = binary.LittleEndian.AppendUint16(out, f16bits(amax/127))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for _, v := range x[b : b+32] {
			p := float32(v * id)
			out = append(out, byte(int8(math.RoundToEven(float64(p)))))
		}
	}
	return out
}

// f16bits rounds a float32 to binary16 bits, nearest even, for the normal
// range the test rows stay in: math/big-free restatement of IEEE rounding.
func f16bits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	if f == 0 {
		return sign
	}
	if exp <= 0 || exp >= 31 {
		panic("f16bits: outside the test's normal range")
	}
	h := uint32(exp)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && h&1 == 1) {
		h++
	}
	return sign | uint16(h)
}

func fillQ8(t testing.TB, v *View, refs []PageRef, from, to int) {
	t.Helper()
	for l := range tq.Layers {
		for pos := from; pos < to; pos++ {
			g := refs[pos/tq.PageSize].Gen
			if err := v.Put(l, pos, row(v.Owner(), g, l, pos, false, tq.KVDim), row(v.Owner(), g, l, pos, true, tq.KVDim)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestQ8PutQuantizesAndBlockQ8Reads: a Q8_0 page is 34 bytes per 32
// elements; Put stores each row as ggml's quantize_row_q8_0 would
// (bitwise the independent restatement above, and within half a step of
// the float row); BlockQ8 serves exactly the written slots (I4); float32
// and binary16 reads of Q8_0 pages, and Q8_0 reads of F16 pages, are
// refused with no data.
func TestQ8PutQuantizesAndBlockQ8Reads(t *testing.T) {
	p := newPoolQ8(t, 4)
	if want := tq.Layers * 2 * tq.PageSize * tq.KVDim / 32 * 34; p.Geometry().PageBytes() != want || p.Geometry().RowBytes() != 68 {
		t.Fatalf("Q8_0 page of %d bytes, want %d", p.Geometry().PageBytes(), want)
	}
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 2)
	v := p.View(a, refs)
	if !v.Q8() || v.F16() {
		t.Fatal("view of a Q8_0 pool does not say so")
	}
	const tokens = 6
	fillQ8(t, v, refs, 0, tokens)
	rb := tq.RowBytes()
	for b := range 2 {
		for l := range tq.Layers {
			k, val, n, err := v.BlockQ8(l, b)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(tq.PageSize, tokens-b*tq.PageSize); n != want || len(k) != n*rb || len(val) != n*rb {
				t.Fatalf("block %d layer %d: %d slots (%d, %d bytes), want %d", b, l, n, len(k), len(val), want)
			}
			for i := range n {
				pos := b*tq.PageSize + i
				for _, c := range []struct {
					got  []byte
					isV  bool
					name string
				}{{k[i*rb : (i+1)*rb], false, "K"}, {val[i*rb : (i+1)*rb], true, "V"}} {
					x := row(a, refs[b].Gen, l, pos, c.isV, tq.KVDim)
					if want := refQ8(x); string(c.got) != string(want) {
						t.Fatalf("block %d layer %d slot %d %s: % x, want % x", b, l, i, c.name, c.got[:8], want[:8])
					}
					for j, f := range x {
						blk := c.got[j/32*34:]
						d := float64(f16val(binary.LittleEndian.Uint16(blk)))
						if q := float64(int8(blk[2+j%32])) * d; math.Abs(q-float64(f)) > d/2*1.01+1e-30 {
							t.Fatalf("element %d: %v stored as %v (scale %v)", j, f, q, d)
						}
					}
				}
			}
		}
	}
	if k, _, _, err := v.Block(0, 0); !errors.Is(err, ErrBadRange) || k != nil {
		t.Fatalf("float32 read of Q8_0 pages: %v", err)
	}
	if k, _, _, err := v.Block16(0, 0); !errors.Is(err, ErrBadRange) || k != nil {
		t.Fatalf("binary16 read of Q8_0 pages: %v", err)
	}
	h := newPool16(t, 1)
	hr, _ := h.Reserve(a, 1)
	hv := h.View(a, hr)
	fill(t, hv, hr, 0, 1)
	if k, _, _, err := hv.BlockQ8(0, 0); !errors.Is(err, ErrBadRange) || k != nil || hv.Q8() {
		t.Fatalf("q8_0 read of F16 pages: %v", err)
	}
}

// TestQ8RowRounding pins the quantizer on hand-computed rows: ties round
// to even (x*127/amax = 2.5 -> 2, 3.5 -> 4, -2.5 -> -2), the element of
// largest magnitude maps to +-127, the multiplier is 127/amax as on x86
// (block 1: amax 0x4025c290, x 0x3cfa9909 gives x*(127/amax) =
// 1.4999999 -> 1, where the portable 1/d would give 1.5 -> 2), and an
// all-zero row has scale 0.
func TestQ8RowRounding(t *testing.T) {
	p := newPoolQ8(t, 1)
	a := owner("a", 1)
	refs, _ := p.Reserve(a, 1)
	v := p.View(a, refs)
	k := make([]float32, tq.KVDim)
	k[0], k[1], k[2], k[3] = 127, 2.5, 3.5, -2.5 // block 0: amax 127, id 1
	k[31] = -127
	k[32], k[33] = math.Float32frombits(0x4025c290), math.Float32frombits(0x3cfa9909)
	zero := make([]float32, tq.KVDim)
	for l := range tq.Layers {
		if err := v.Put(l, 0, k, k); err != nil {
			t.Fatal(err)
		}
		if err := v.Put(l, 1, zero, zero); err != nil {
			t.Fatal(err)
		}
	}
	kb, _, _, err := v.BlockQ8(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := binary.LittleEndian.Uint16(kb); d != 0x3c00 { // 1.0
		t.Fatalf("scale %#04x, want 0x3c00", d)
	}
	if got := []int8{int8(kb[2]), int8(kb[3]), int8(kb[4]), int8(kb[5]), int8(kb[33]), int8(kb[36]), int8(kb[37])}; got[0] != 127 || got[1] != 2 || got[2] != 4 || got[3] != -2 || got[4] != -127 || got[5] != 127 || got[6] != 1 {
		t.Fatalf("quants %v, want [127 2 4 -2 -127 127 1]", got)
	}
	for i, b := range kb[68:136] {
		if b != 0 {
			t.Fatalf("zero row byte %d = %#x", i, b)
		}
	}
}

// f16val widens binary16 bits (normal and zero values) for the test.
func f16val(h uint16) float32 {
	e := int(h>>10) & 31
	m := float64(h & 0x3ff)
	var v float64
	switch e {
	case 0:
		v = m / 1024 * math.Pow(2, -14)
	case 31:
		return float32(math.NaN())
	default:
		v = (1 + m/1024) * math.Pow(2, float64(e-15))
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return float32(v)
}

// TestQ8TransferAndDigest: Q8_0 page images move to other physical pages
// with the digest unchanged and the bytes read back exactly; a pool of
// another type refuses the image whole (its size differs).
func TestQ8TransferAndDigest(t *testing.T) {
	pre := newPoolQ8(t, 8, func(c *Config) { c.Order = FIFO })
	dec := newPoolQ8(t, 8)
	pre.Reserve(owner("other", 9), 3)
	h := owner("tenant", 7)
	const tokens = 10
	src, _ := pre.Reserve(h, PagesFor(tokens, tq.PageSize))
	fillQ8(t, pre.View(h, src), src, 0, tokens)
	want, err := pre.Digest(h, src, tokens)
	if err != nil {
		t.Fatal(err)
	}
	dst, _ := dec.Reserve(h, len(src))
	for i := range src {
		data, slots, err := pre.PageData(h, src[i])
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != tq.PageBytes() {
			t.Fatalf("Q8_0 page image of %d bytes", len(data))
		}
		if err := dec.WritePage(h, dst[i], slots, data); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := dec.Digest(h, dst, tokens); err != nil || got != want {
		t.Fatalf("decode digest %x err %v, want %x", got, err, want)
	}
	pv, dv := pre.View(h, src), dec.View(h, dst)
	for b := range dst {
		for l := range tq.Layers {
			k0, v0, n0, _ := pv.BlockQ8(l, b)
			k1, v1, n1, err := dv.BlockQ8(l, b)
			if err != nil || n0 != n1 || string(k0) != string(k1) || string(v0) != string(v1) {
				t.Fatalf("block %d layer %d differs after the transfer (%v)", b, l, err)
			}
		}
	}
	// An F16 page of the same shape is 128/68 the size: refused whole.
	f16 := newPool(t, 1, func(c *Config) { c.Geometry = tq; c.Type = F16 })
	fr, _ := f16.Reserve(h, 1)
	data, slots, _ := f16.PageData(h, fr[0])
	more, _ := dec.Reserve(h, 1)
	if err := dec.WritePage(h, more[0], slots, data); err == nil {
		t.Fatal("a Q8_0 pool accepted an F16 page image")
	}
}

// TestQ8Scrub: a released Q8_0 page is zero bits (every scale 0), or
// every 16-bit word PoisonBits16 under ScrubPoison, so every block's
// scale is a NaN and every element reads as NaN (I7); fresh pools too.
func TestQ8Scrub(t *testing.T) {
	for _, c := range []struct {
		scrub ScrubMode
		want  uint16
	}{{ScrubZero, 0}, {ScrubPoison, PoisonBits16}} {
		p := newPoolQ8(t, 2, func(cfg *Config) { cfg.Scrub = c.scrub })
		a := owner("a", 1)
		refs, _ := p.Reserve(a, 1)
		pb := p.pageBytes
		pg := int(refs[0].Page)
		check := func(when string) {
			page := p.mem[pg*pb : (pg+1)*pb]
			for i := 0; i < len(page); i += 2 {
				if w := binary.LittleEndian.Uint16(page[i:]); w != c.want {
					t.Fatalf("%v %s: word at byte %d = %#04x, want %#04x", c.scrub, when, i, w, c.want)
				}
			}
			for i := 0; i < len(page); i += 34 {
				d := f16val(binary.LittleEndian.Uint16(page[i:]))
				if c.scrub == ScrubPoison && !math.IsNaN(float64(d)) || c.scrub == ScrubZero && d != 0 {
					t.Fatalf("%v %s: block at %d has scale %v", c.scrub, when, i, d)
				}
			}
		}
		check("fresh")
		fillQ8(t, p.View(a, refs), refs, 0, tq.PageSize)
		if err := p.Release(a, refs); err != nil {
			t.Fatal(err)
		}
		check("after release")
	}
}

// TestQ8Refusals: a KV dim that is not whole blocks is refused at New
// with a sentence naming the fix; the shared file's header records Q8_0.
func TestQ8Refusals(t *testing.T) {
	_, err := New(Config{Geometry: Geometry{Layers: 1, KVDim: 48, PageSize: 4, Type: Q8_0}, Pages: 1})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeBadConfig {
		t.Fatalf("KV dim 48 in Q8_0: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kv")
	p := newPoolQ8(t, 2, func(c *Config) { c.SharedFile = path })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hd, err := ParseSharedHeader(b[:SharedHeaderBytes])
	if err != nil || hd.Geometry != p.Geometry() || hd.Geometry.Type != Q8_0 {
		t.Fatalf("header %+v (%v), pool %+v", hd, err, p.Geometry())
	}
}
