package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestQ4KPackAsmGuardPage: q4KPackAVX2 reads nothing past the last row's
// last super-block (the weights end at an inaccessible page).
func TestQ4KPackAsmGuardPage(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this CPU")
	}
	r := rand.New(rand.NewPCG(2, 8))
	for _, R := range []int{8, 16} {
		for _, nsb := range []int{1, 3} {
			rb := 144 * nsb
			src := q4KPackTestRows(r, R, rb, nsb)
			w := guarded(t, len(src))
			copy(w, src)
			want := make([]byte, 200*R*nsb)
			q4KPack(want, w, R, rb, nsb)
			got := make([]byte, len(want))
			q4KPackAVX2(&got[0], &w[0], R, rb, nsb)
			if string(got) != string(want) {
				t.Fatalf("R=%d nsb=%d: packed bytes differ from the Go packer's", R, nsb)
			}
		}
	}
}
