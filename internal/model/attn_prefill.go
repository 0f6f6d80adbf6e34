package model

import "sluice/internal/kernels"

// queryBlock is how many consecutive tokens of one sequence (prefill) one
// attention unit takes. They attend over the same K/V pages, so a page's
// rows of the KV head are read from memory once per block of queries and
// reused from L1 by the others, instead of once per token: at pp512 on
// bench-110M q4_K (1 thread, AVX-512) attention was 32% of prefill, most
// of it streaming the same K/V rows for every token.
const queryBlock = 8

// attendTokens is attendUnit for the un.nt tokens un.t, un.t+1, ... of one
// sequence and KV head un.kh, pages in the outer loop, with slot w's
// scratch. It only reorders attendUnit's calls: every score is the same
// DotRows of the token's query and key row, every softmax row the same,
// and each output row adds the same AxpyRows in the same page order, so
// the results are bitwise attendUnit's whatever the block (batch
// invariance). An F16 view's page is widened once for the block (exact,
// as attendUnit widens it).
func (r *Runner) attendTokens(un unit, w int) {
	a := &r.acts[un.a]
	if un.nt <= 1 {
		for i := int32(0); i < max(1, un.nt); i++ {
			r.attendUnit(unit{un.a, un.t + i, un.kh, 1}, w)
		}
		return
	}
	c := r.m.cfg
	Q, KD, hd := c.QDim(), c.KVDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	nt := int(un.nt)
	first := a.pos + int(un.t) + 1 // positions the block's first token sees
	last := first + nt - 1         // and its last
	koff := int(un.kh) * hd
	spans := r.spans[a.span:]
	var wide []float32
	if a.f16 {
		wide = grow(r.wide[w], a.ps*hd)
		r.wide[w] = wide
	}
	// page returns the K (or V) rows of KV head un.kh in page bi, cnt of
	// them, and their stride.
	page := func(bi, cnt int, v bool) ([]float32, int) {
		s := &spans[bi]
		if !a.f16 {
			if v {
				return s.v[koff:], KD
			}
			return s.k[koff:], KD
		}
		src := s.k16
		if v {
			src = s.v16
		}
		kernels.WidenRows(wide[:cnt*hd], src[koff:], cnt, KD)
		return wide, hd
	}
	// Score row of (token i, head g): scores[(i*group+g)*last:][:first+i].
	scores := grow(r.scores[w], nt*group*last)
	r.scores[w] = scores
	for j, bi := 0, 0; j < last; j, bi = j+a.ps, bi+1 {
		kb, stride := page(bi, min(a.ps, last-j), false)
		for i := max(0, j+1-first); i < nt; i++ { // tokens that see position j
			cnt := min(a.ps, first+i-j)
			t := a.off + int(un.t) + i
			for g := 0; g < group; g++ {
				h := int(un.kh)*group + g
				row := scores[(i*group+g)*last:]
				kernels.DotRows(row[j:j+cnt], r.q[t*Q+h*hd:t*Q+(h+1)*hd], kb, stride)
			}
		}
	}
	for i := 0; i < nt; i++ {
		t := a.off + int(un.t) + i
		for g := 0; g < group; g++ {
			sc := scores[(i*group+g)*last:][:first+i]
			kernels.Scale(sc, r.m.attnScale)
			kernels.Softmax(sc)
			h := int(un.kh)*group + g
			clear(r.att[t*Q+h*hd : t*Q+(h+1)*hd])
		}
	}
	for j, bi := 0, 0; j < last; j, bi = j+a.ps, bi+1 {
		vb, stride := page(bi, min(a.ps, last-j), true)
		for i := max(0, j+1-first); i < nt; i++ {
			cnt := min(a.ps, first+i-j)
			t := a.off + int(un.t) + i
			for g := 0; g < group; g++ {
				h := int(un.kh)*group + g
				row := scores[(i*group+g)*last:]
				kernels.AxpyRows(r.att[t*Q+h*hd:t*Q+(h+1)*hd], row[j:j+cnt], vb, stride)
			}
		}
	}
}
