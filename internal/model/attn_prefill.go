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
// scratch. All the block's query rows (tokens x the group's heads, packed
// into the slot's scratch) go through one fused call per page, so a
// page's K and V rows are read (and F16 widened, in registers) once per
// block. It only regroups attendUnit's arithmetic: every score is the
// same canonical dot, every softmax row the same, and each output element
// adds the same value rows in the same position order, so the results are
// bitwise attendUnit's whatever the block (batch invariance). The block's
// earlier tokens also get scores for the positions of its later tokens in
// the diagonal page; those are never read (softmax and values stop at
// each token's own position).
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
	M, gw := nt*group, group*hd // rows of the block; one token's rows
	t0 := a.off + int(un.t)
	buf := grow(r.wide[w], 2*M*hd)
	r.wide[w] = buf
	qp, yp := buf[:M*hd], buf[M*hd:2*M*hd]
	for i := 0; i < nt; i++ {
		copy(qp[i*gw:(i+1)*gw], r.q[(t0+i)*Q+koff*group:][:gw])
	}
	spans := r.spans[a.span:]
	// Score row of row m = i*group+g (token i, head g): scores[m*last:][:first+i].
	scores := grow(r.scores[w], M*last)
	r.scores[w] = scores
	for j, bi := 0, 0; j < last; j, bi = j+a.ps, bi+1 {
		i0 := max(0, j+1-first) // the first token that sees position j
		pageDot(scores[i0*group*last+j:], last, qp[i0*gw:], (nt-i0)*group, hd, &spans[bi], koff, KD, min(a.ps, last-j), a.f16)
	}
	for m := 0; m < M; m++ {
		kernels.ScaleSoftmax(scores[m*last:][:first+m/group], r.m.attnScale)
	}
	clear(yp)
	for j, bi := 0, 0; j < last; j, bi = j+a.ps, bi+1 {
		cnt := min(a.ps, last-j)
		i0 := max(0, j+1-first)
		full := max(i0, j+cnt-first) // tokens from here see all cnt positions
		for i := i0; i < full; i++ {
			pageAxpy(yp[i*gw:], scores[i*group*last+j:], last, group, hd, &spans[bi], koff, KD, first+i-j, a.f16)
		}
		if full < nt {
			pageAxpy(yp[full*gw:], scores[full*group*last+j:], last, (nt-full)*group, hd, &spans[bi], koff, KD, cnt, a.f16)
		}
	}
	for i := 0; i < nt; i++ {
		copy(r.att[(t0+i)*Q+koff*group:][:gw], yp[i*gw:(i+1)*gw])
	}
}
