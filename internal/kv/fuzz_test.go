package kv

import (
	"testing"
	"time"
)

// FuzzPoolOps drives the pool with operations decoded from arbitrary bytes,
// including page refs and page images as a hostile transfer peer would send
// them (forged page numbers and generations, short or long images, any
// slot count). The pool must never panic, its bookkeeping must stay
// consistent after every operation (conservation), a refused transfer
// write must not change page memory, and once everything is released and
// leases expire the pool must be full again.
func FuzzPoolOps(f *testing.F) {
	f.Add([]byte{0, 2, 1, 0, 0, 3, 0, 1, 7, 2, 0})
	f.Add([]byte{0, 1, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 9, 4, 0, 0, 1})
	f.Add([]byte{0, 3, 5, 0, 6, 1, 7, 8, 0, 9})
	f.Fuzz(func(t *testing.T, in []byte) {
		p := newPool(t, 6)
		owners := []Owner{owner("a", 1), owner("b", 2), owner("a", 3)}
		held := map[int][]PageRef{} // owner index -> refs it was given
		var seen []PageRef
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := in[0]
			in = in[1:]
			return int(b)
		}
		ref := func() PageRef {
			if len(seen) > 0 && next()%2 == 0 {
				return seen[next()%len(seen)]
			}
			return PageRef{Page: uint32(next() % 8), Gen: uint64(next() % 12)}
		}
		now := time.Unix(0, 0)
		for len(in) > 0 {
			oi := next() % len(owners)
			o := owners[oi]
			switch next() % 10 {
			case 0:
				refs, err := p.Reserve(o, next()%4)
				if err == nil {
					held[oi] = append(held[oi], refs...)
					seen = append(seen, refs...)
				}
			case 1:
				r := ref()
				p.Release(o, []PageRef{r})
			case 2:
				r := ref()
				size := tg.PageBytes()
				if next()%5 == 0 {
					size = next() * 3
				}
				img := make([]byte, size)
				for i := range img {
					img[i] = byte(i*7 + 1)
				}
				before := append([]float32(nil), p.f32...)
				slots := next() % 6
				var err error
				if next()%2 == 0 {
					err = p.WritePage(o, r, slots, img)
				} else {
					_, err = p.WritePageSum(o, r, slots, img)
				}
				if err != nil && !sameBits(before, p.f32) {
					t.Fatalf("a refused page write changed memory: %v", err)
				}
			case 3:
				if next()%2 == 0 {
					p.MarkWritten(o, ref(), next()%6)
				} else {
					p.MarkWrittenSum(o, ref(), next()%6)
				}
			case 4:
				d, n, err := p.PageData(o, ref())
				if next()%2 == 0 {
					d, n, _, err = p.PageDataSum(o, ref())
				}
				if err == nil && (len(d) != tg.PageBytes() || n < 0 || n > tg.PageSize) {
					t.Fatalf("PageData returned %d bytes, %d slots", len(d), n)
				}
			case 5:
				p.Seal(o, []PageRef{ref()})
			case 6:
				p.Quarantine(o, []PageRef{ref()}, now.Add(time.Duration(next())*time.Second))
			case 7:
				p.DrainAck(o, []PageRef{ref()})
			case 8:
				now = now.Add(time.Duration(next()) * time.Second)
				p.Expire(now)
			case 9:
				v := p.View(o, []PageRef{ref(), ref()})
				r := make([]float32, tg.KVDim)
				v.Put(next()%3, next()%9, r, r)
				if k, val, n, err := v.Block(next()%3, next()%3); err == nil && (len(k) != n*tg.KVDim || len(val) != n*tg.KVDim || n < 1 || n > tg.PageSize) {
					t.Fatalf("Block returned %d rows with %d/%d floats", n, len(k), len(val))
				}
			}
			if err := p.audit(); err != nil {
				t.Fatal(err)
			}
			// A recorded page hash stands in for the page's bytes in Digest
			// and Seal (sum.go): it must equal a fresh hash of them after
			// any sequence of pool operations.
			for pg := range p.pages {
				m := &p.pages[pg]
				if m.summed.Load() && m.sum != p.pageDigest(uint32(pg), m.sumSlots) {
					t.Fatalf("page %d: recorded hash of %d slots no longer matches its bytes", pg, m.sumSlots)
				}
			}
		}
		for oi, refs := range held {
			p.Release(owners[oi], refs)
			p.DrainAck(owners[oi], refs)
		}
		p.Expire(now.Add(1000 * time.Hour))
		p.Expire(now.Add(2000 * time.Hour))
		if err := p.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	})
}
