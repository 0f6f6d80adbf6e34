package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFlashMergeMatchesDefinition: on every path the fold of a tile's
// partial into the running one is exactly its definition written out
// here (each product rounded, then the sum; weights flushed to 0 below
// attnFlush; the sum in float64), for lengths 1..80 and maxes equal,
// near, far apart (past the flush) and in either order.
func TestFlashMergeMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	w := func(d float32) float32 {
		if d < -50 {
			return 0
		}
		return expf(d)
	}
	for n := 1; n <= 80; n++ {
		for _, dm := range []float32{0, 0.3, -0.3, 7, -7, 49.9, -49.9, 60, -60} {
			o0, oj := randVec(r, n, 2), randVec(r, n, 2)
			m0 := float32(r.NormFloat64() * 4)
			mj := m0 + dm
			l0, lj := 1+r.Float64()*30, 1+r.Float64()*30
			mn := max(m0, mj)
			a, b := w(m0-mn), w(mj-mn)
			want := make([]float32, n)
			for i := range want {
				want[i] = float32(o0[i]*a) + float32(oj[i]*b)
			}
			wantL := l0*float64(a) + lj*float64(b)
			withPath(t, func(p Path) {
				o := append(append([]float32(nil), o0...), 42)
				m, l := m0, l0
				FlashMerge(o[:n], &m, &l, oj, mj, lj)
				for i := range want {
					if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v n=%d dm=%v: o[%d] = %v, want %v", p, n, dm, i, o[i], want[i])
					}
				}
				if m != mn || l != wantL || o[n] != 42 {
					t.Fatalf("%v n=%d dm=%v: m, l = %v, %v, want %v, %v (or wrote past o)", p, n, dm, m, l, mn, wantL)
				}
			})
		}
	}
}

// TestPrefetchChangesNothing: prefetching any slice (empty, one element,
// unaligned starts, across lines) leaves every value as it was.
func TestPrefetchChangesNothing(t *testing.T) {
	f := randVec(rand.New(rand.NewPCG(5, 6)), 300, 1)
	h := make([]uint16, 300)
	for i := range h {
		h[i] = uint16(i * 77)
	}
	f0, h0 := append([]float32(nil), f...), append([]uint16(nil), h...)
	for lo := 0; lo < 40; lo++ {
		for _, n := range []int{0, 1, 15, 16, 17, 100, 260} {
			Prefetch(f[lo : lo+n])
			Prefetch(h[lo : lo+n])
		}
	}
	for i := range f {
		if math.Float32bits(f[i]) != math.Float32bits(f0[i]) || h[i] != h0[i] {
			t.Fatalf("element %d changed", i)
		}
	}
}
