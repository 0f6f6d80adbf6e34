package kv

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/zeebo/xxh3"
)

// image builds a page image of the test geometry holding o's rows for
// block b (positions b*PageSize..) in its first slots slots; the rest of
// the image is junk a sender did not own.
func image(o Owner, gen uint64, b, slots int) []byte {
	g := tg
	img := make([]byte, g.PageBytes())
	for i := range img {
		img[i] = 0xEE
	}
	for l := range g.Layers {
		for h, isV := range []bool{false, true} {
			for s := range slots {
				off := ((l*2+h)*g.PageSize + s) * g.KVDim * 4
				for j, f := range row(o, gen, l, b*g.PageSize+s, isV, g.KVDim) {
					binary.LittleEndian.PutUint32(img[off+4*j:], math.Float32bits(f))
				}
			}
		}
	}
	return img
}

// The one pass a page gets yields both hashes: the block hash Digest
// combines (its definition, written out in refDigest) and, for a full page,
// XXH3-64 of the image, which is what handoff.Checksum truncates. The
// second is an identity of XXH3 (the 64-bit hash is the low half of the
// 128-bit one past 240 bytes); if a library update broke it, this fails.
func TestPageSumImageIsXXH3_64(t *testing.T) {
	p := newPool(t, 4)
	h := owner("t", 1)
	refs, _ := p.Reserve(h, 2)
	full := image(h, refs[0].Gen, 0, tg.PageSize)
	s, err := p.WritePageSum(h, refs[0], tg.PageSize, full)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ImageOK || s.Image != xxh3.Hash(full) {
		t.Fatalf("full page: image sum %x ok=%v, XXH3-64 of the image is %x", s.Image, s.ImageOK, xxh3.Hash(full))
	}
	if s.Block != xxh3.Hash128(full).Bytes() {
		t.Fatal("full page: block hash is not XXH3-128 of the image")
	}
	part := image(h, refs[1].Gen, 1, 3)
	s, err = p.WritePageSum(h, refs[1], 3, part)
	if err != nil {
		t.Fatal(err)
	}
	if s.ImageOK {
		t.Fatal("partial page claims an image hash: the pool does not hold the sender's image past its slots")
	}
	// The digest over both recorded hashes equals the independent reference.
	want := refDigest(h, gensOf(refs), tg.PageSize+3)
	if got, err := p.Digest(h, refs, tg.PageSize+3); err != nil || got != want {
		t.Fatalf("digest from recorded sums %x err %v, reference %x", got, err, want)
	}

	// A page of at most 240 bytes never claims the identity.
	small := Geometry{Layers: 1, KVDim: 2, PageSize: 4, Type: F32} // 64 bytes
	q, err := New(Config{Geometry: small, Pages: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	r, _ := q.Reserve(h, 1)
	s, err = q.WritePageSum(h, r[0], 4, make([]byte, small.PageBytes()))
	if err != nil || s.ImageOK {
		t.Fatalf("64-byte page: ImageOK=%v err=%v", s.ImageOK, err)
	}
}

// A recorded hash is used only while it describes the bytes: a Put that
// rewrites a transferred slot, and a release and re-allocation, drop it,
// and Digest reads the page afresh (the reference is computed from the
// rows, never from the pool).
func TestRecordedSumDroppedWhenBytesChange(t *testing.T) {
	p := newPool(t, 2)
	h := owner("t", 1)
	refs, _ := p.Reserve(h, 1)
	if _, err := p.WritePageSum(h, refs[0], tg.PageSize, image(h, refs[0].Gen, 0, tg.PageSize)); err != nil {
		t.Fatal(err)
	}
	// Rewrite slot 2 of layer 1 with another owner's rows.
	x := owner("x", 9)
	k, v := row(x, 1, 1, 2, false, tg.KVDim), row(x, 1, 1, 2, true, tg.KVDim)
	if err := p.View(h, refs).Put(1, 2, k, v); err != nil {
		t.Fatal(err)
	}
	var blk []byte
	for l := range tg.Layers {
		for _, isV := range []bool{false, true} {
			for pos := range tg.PageSize {
				r := row(h, refs[0].Gen, l, pos, isV, tg.KVDim)
				if l == 1 && pos == 2 {
					r = k
					if isV {
						r = v
					}
				}
				for _, f := range r {
					blk = binary.LittleEndian.AppendUint32(blk, math.Float32bits(f))
				}
			}
		}
	}
	var hdr []byte
	for _, n := range []int{tg.PageSize, tg.Layers, tg.KVDim, tg.PageSize} {
		hdr = binary.LittleEndian.AppendUint64(hdr, uint64(n))
	}
	bh := xxh3.Hash128(blk).Bytes()
	want := xxh3.Hash128(append(hdr, bh[:]...)).Bytes()
	if got, _ := p.Digest(h, refs, tg.PageSize); got != want {
		t.Fatal("digest after a Put still uses the hash recorded before it")
	}

	// Released (scrubbed) and re-allocated: the new owner's Put-written
	// rows are what the digest covers.
	if err := p.Release(h, refs); err != nil {
		t.Fatal(err)
	}
	h2 := owner("u", 2)
	r2, _ := p.Reserve(h2, 1)
	if r2[0].Page != refs[0].Page {
		t.Fatal("LIFO pool did not reuse the page")
	}
	fill(t, p.View(h2, r2), r2, 0, tg.PageSize)
	if got, _ := p.Digest(h2, r2, tg.PageSize); got != refDigest(h2, gensOf(r2), tg.PageSize) {
		t.Fatal("digest of a re-allocated page uses its previous allocation's hash")
	}
}

// The sending side: PageDataSum hashes what it returns, and the sequence
// digest built from those recorded hashes equals the reference.
func TestPageDataSumFeedsDigest(t *testing.T) {
	p := newPool(t, 4)
	h := owner("t", 1)
	const tokens = 2*4 + 1
	refs, _ := p.Reserve(h, PagesFor(tokens, tg.PageSize))
	fill(t, p.View(h, refs), refs, 0, tokens)
	for i, ref := range refs {
		data, n, s, err := p.PageDataSum(h, ref)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(tg.PageSize, tokens-i*tg.PageSize); n != want {
			t.Fatalf("page %d: %d slots, want %d", i, n, want)
		}
		if s.ImageOK != (n == tg.PageSize) || (s.ImageOK && s.Image != xxh3.Hash(data)) {
			t.Fatalf("page %d: image sum %x ok=%v", i, s.Image, s.ImageOK)
		}
	}
	if got, err := p.Digest(h, refs, tokens); err != nil || got != refDigest(h, gensOf(refs), tokens) {
		t.Fatalf("digest %x err %v", got, err)
	}
	// Seal records the same block hashes.
	if err := p.Seal(h, refs); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if p.digests[ref.Page] != p.pageDigest(ref.Page, p.minWrittenLocked(ref.Page)) {
			t.Fatalf("seal digest of page %d differs from a fresh hash", ref.Page)
		}
	}
}

// A digest over enough pages without recorded hashes (a one-sided
// handoff's commit) reads them on several goroutines; the result is the
// definition's, computed here from the images, with recorded and fresh
// pages mixed and a short last page.
func TestParallelDigest(t *testing.T) {
	g := Geometry{Layers: 4, KVDim: 256, PageSize: 16, Type: F32} // 128 KiB pages
	const pages = 3 * parallelDigestBytes / (4 * 256 * 2 * 4 * 16)
	p, err := New(Config{Geometry: g, Pages: pages})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := owner("t", 1)
	refs, _ := p.Reserve(h, pages)
	tokens := pages*g.PageSize - 5
	var buf []byte
	for _, x := range []int{tokens, g.Layers, g.KVDim, g.PageSize} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
	}
	img := make([]byte, g.PageBytes())
	for b, ref := range refs {
		for i := range img {
			img[i] = byte(i*13 + b*101 + i>>11)
		}
		slots := min(g.PageSize, tokens-b*g.PageSize)
		var err error
		if b%5 == 0 {
			_, err = p.WritePageSum(h, ref, slots, img) // recorded
		} else {
			err = p.WritePage(h, ref, slots, img)
		}
		if err != nil {
			t.Fatal(err)
		}
		var blk []byte
		run := slots * g.KVDim * 4
		for half := range 2 * g.Layers {
			off := half * g.PageSize * g.KVDim * 4
			blk = append(blk, img[off:off+run]...)
		}
		bh := xxh3.Hash128(blk).Bytes()
		buf = append(buf, bh[:]...)
	}
	if got, err := p.Digest(h, refs, tokens); err != nil || got != xxh3.Hash128(buf).Bytes() {
		t.Fatalf("parallel digest %x (%v) differs from the definition", got, err)
	}
}
