package kv

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"slices"
	"testing"
	"time"
)

// A fill that copies the image does what WritePageSum does: same bytes in
// the page, same hash returned and recorded, same state.
func TestFillPageSumEqualsWritePageSum(t *testing.T) {
	p, q := newPool(t, 2), newPool(t, 2)
	h := owner("t", 1)
	pr, _ := p.Reserve(h, 1)
	qr, _ := q.Reserve(h, 1)
	img := image(h, pr[0].Gen, 0, tg.PageSize)
	want, err := p.WritePageSum(h, pr[0], tg.PageSize, img)
	if err != nil {
		t.Fatal(err)
	}
	got, err := q.FillPageSum(h, qr[0], tg.PageSize, tg.PageBytes(), func(dst []byte) error {
		if len(dst) != tg.PageBytes() {
			t.Fatalf("fill got %d bytes, a page is %d", len(dst), tg.PageBytes())
		}
		copy(dst, img)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("fill's sum %+v, WritePageSum's %+v", got, want)
	}
	pd, pn, _ := p.PageData(h, pr[0])
	qd, qn, _ := q.PageData(h, qr[0])
	if !bytes.Equal(pd, qd) || pn != qn || pn != tg.PageSize {
		t.Fatalf("filled page holds %d slots, written page %d; bytes equal %v", qn, pn, bytes.Equal(pd, qd))
	}
	if s := q.Stats(); s.Filling != 1 {
		t.Fatalf("filled page not Filling: %+v", s)
	}
	dp, _ := p.Digest(h, pr, tg.PageSize)
	dq, err := q.Digest(h, qr, tg.PageSize)
	if err != nil || dp != dq {
		t.Fatalf("digest after fill %x (%v), after write %x", dq, err, dp)
	}
	// A page accepts one transfer write, filled or copied.
	if _, err := q.FillPageSum(h, qr[0], tg.PageSize, tg.PageBytes(), func([]byte) error { return nil }); !errors.Is(err, ErrDuplicateWrite) {
		t.Fatalf("second fill: %v, want a duplicate write", err)
	}
}

// A fill that fails (a record whose tag does not verify) after writing
// into the page leaves no byte of what it wrote, no written slot and no
// recorded hash: the page is as reserved, and its owner can still write it
// once (the handoff fails anyway; the pool does not decide that).
func TestFillFailureLeavesNoPlaintext(t *testing.T) {
	for _, sc := range []struct {
		name string
		mode ScrubMode
	}{{"zero", ScrubZero}, {"poison", ScrubPoison}, {"off", ScrubOff}} {
		t.Run(sc.name, func(t *testing.T) {
			p := newPool(t, 2, func(c *Config) { c.Scrub = sc.mode })
			h := owner("t", 1)
			refs, _ := p.Reserve(h, 1)
			before, _, _ := p.PageData(h, refs[0])
			before = bytes.Clone(before)
			img := image(h, refs[0].Gen, 0, tg.PageSize)
			bad := errors.New("record does not verify")
			_, err := p.FillPageSum(h, refs[0], tg.PageSize, tg.PageBytes(), func(dst []byte) error {
				copy(dst, img) // unverified plaintext lands, then the tag fails
				return bad
			})
			if err != bad {
				t.Fatalf("fill error %v, want fill's own", err)
			}
			after, n, err := p.PageData(h, refs[0])
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("failed fill left %d slots written", n)
			}
			want := before
			if sc.mode == ScrubOff {
				want = make([]byte, len(after)) // cleared even when releases do not scrub
			}
			if !bytes.Equal(after, want) {
				t.Fatal("failed fill left bytes of its plaintext in the page")
			}
			if s := p.Stats(); s.Reserved != 1 || s.Filling != 0 {
				t.Fatalf("failed fill changed the page's state: %+v", s)
			}
			if _, err := p.Digest(h, refs, tg.PageSize); !errors.Is(err, ErrUnwrittenRead) {
				t.Fatalf("digest over a failed fill: %v, want unwritten_read", err)
			}
		})
	}
	p := newPool(t, 2)
	h := owner("t", 1)
	refs, _ := p.Reserve(h, 1)
	p.FillPageSum(h, refs[0], tg.PageSize, tg.PageBytes(), func(dst []byte) error { dst[0] = 1; return errors.New("bad tag") })
	if m := &p.pages[refs[0].Page]; m.summed.Load() {
		t.Fatal("failed fill recorded a page hash")
	}
	img := image(h, refs[0].Gen, 0, tg.PageSize)
	if _, err := p.WritePageSum(h, refs[0], tg.PageSize, img); err != nil {
		t.Fatalf("write after a failed fill: %v", err)
	}
}

// Every check of WritePage comes before fill: a page the writer may not
// write is never handed to it.
func TestFillCheckedFirst(t *testing.T) {
	p := newPool(t, 4)
	h, other := owner("t", 1), owner("u", 2)
	refs, _ := p.Reserve(h, 2)
	calls := 0
	fill := func(dst []byte) error { calls++; return nil }
	cases := []struct {
		name  string
		o     Owner
		ref   PageRef
		slots int
		size  int
		kind  error
	}{
		{"foreign", other, refs[0], tg.PageSize, tg.PageBytes(), ErrForeignOwner},
		{"late", h, PageRef{Page: refs[1].Page, Gen: refs[1].Gen + 7}, tg.PageSize, tg.PageBytes(), ErrLateWrite},
		{"range", h, PageRef{Page: 99, Gen: 1}, tg.PageSize, tg.PageBytes(), ErrBadRange},
		{"partial", h, refs[1], tg.PageSize - 1, tg.PageBytes(), ErrBadRange},
		{"size", h, refs[1], tg.PageSize, tg.PageBytes() - 4, ErrBadRange},
	}
	for _, c := range cases {
		if _, err := p.FillPageSum(c.o, c.ref, c.slots, c.size, fill); !errors.Is(err, c.kind) {
			t.Fatalf("%s: %v, want %v", c.name, err, c.kind)
		}
	}
	if calls != 0 {
		t.Fatalf("fill ran %d times for writes the pool refused", calls)
	}
}

// BenchmarkApplySealedPage: what applying one encrypted 256 KiB page costs
// the decode side, and how long it holds the pool lock (the whole call of
// WritePageSum or FillPageSum runs under it), over a 64 MiB pool, so the
// destination pages are cold as in a long handoff. "write" is the old
// path: AES-GCM open into a buffer (no lock), then WritePageSum (copy and
// hash under the lock); "fill" opens straight into the page under the
// lock (FillPageSum) and hashes it. Rounds alternate; each figure is the
// median over every page applied (a preemption on a shared machine hits
// a few pages, not the median).
func BenchmarkApplySealedPage(b *testing.B) {
	g := Geometry{Layers: 8, KVDim: 256, PageSize: 16, Type: F32} // 256 KiB, as handoffbench
	const pages = 256
	p, err := New(Config{Geometry: g, Pages: pages})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	blk, _ := aes.NewCipher(make([]byte, 32))
	gcm, _ := cipher.NewGCM(blk)
	nonce := make([]byte, gcm.NonceSize())
	pt := make([]byte, g.PageBytes())
	for i := range pt {
		pt[i] = byte(i*7 + 1)
	}
	ct := gcm.Seal(nil, nonce, pt, nil)
	buf := make([]byte, g.PageBytes())
	o := owner("t", 1)
	// [path][total, held]: per-page times
	var ts [2][2][]time.Duration
	round := func(f int) {
		refs, err := p.Reserve(o, pages)
		if err != nil {
			b.Fatal(err)
		}
		for _, ref := range refs {
			t0 := time.Now()
			var held time.Duration
			if f == 1 {
				_, err = p.FillPageSum(o, ref, g.PageSize, g.PageBytes(), func(dst []byte) error {
					_, err := gcm.Open(dst[:0], nonce, ct, nil)
					return err
				})
				held = time.Since(t0)
			} else {
				if _, err = gcm.Open(buf[:0], nonce, ct, nil); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				_, err = p.WritePageSum(o, ref, g.PageSize, buf)
				held = time.Since(t1)
			}
			ts[f][0], ts[f][1] = append(ts[f][0], time.Since(t0)), append(ts[f][1], held)
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Release(o, refs); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := range max(b.N, 4) {
		round(i % 2)
	}
	b.StopTimer()
	med := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / 1e3
	}
	w, wh, f, fh := med(ts[0][0]), med(ts[0][1]), med(ts[1][0]), med(ts[1][1])
	b.ReportMetric(w, "write-us/page")
	b.ReportMetric(wh, "write-held-us")
	b.ReportMetric(f, "fill-us/page")
	b.ReportMetric(fh, "fill-held-us")
	b.ReportMetric(f/w, "fill/write")
	b.ReportMetric(0, "ns/op")
}
