package model

import "sluice/internal/kernels"

// queryRows is how many query rows (tokens x the group's heads) of one
// sequence (prefill) one attention unit takes, as whole tokens: the
// block's tokens attend over the same K/V tiles, so a tile's rows of the
// KV head are read from memory once per block of queries and reused from
// L1/L2 by the others, instead of once per token. With flash tiles the
// scratch is one tile per row, so blocks can be long: bench-110M's
// attention shape (MHA, head dim 64), pp512 after 8192 positions, one
// layer, 1 thread, Zen 5 under load: 1006-1067 cpu-ms a step with 8
// tokens a block, 514-532 with 32, 437-438 with 64; at depth 0 43-44
// either way (BenchmarkAttentionPrefillDepth).
const queryRows = 64

// queryBlock is the tokens of a prefill unit for a group of group query
// heads per KV head.
func queryBlock(group int) int { return max(1, queryRows/group) }

// flashTile is the positions of one flash-attention tile: tile k holds
// positions [k*flashTile, (k+1)*flashTile) of the context, cut by
// absolute position, never by page (prefill and decode workers may use
// different page sizes and must agree bitwise), thread or batch. Each
// tile's partial softmax is computed alone and the partials are folded
// left to right (kernels.FlashMerge), so attention makes one pass over
// K and V with a score scratch of one tile per query row. 128 positions
// keep the fold (two hd-long vector steps per tile and row) under 2% of
// the tile's work at head dim 64.
const flashTile = 128

// flashSplitTiles is how many tiles one decode unit takes when a long
// context's attention is split across threads (flash-decoding): a token's
// tiles go to several units whose per-tile partials are folded after all
// of them ran, in tile order, so the bits are those of the unsplit fold.
const flashSplitTiles = 8

// attendTokens is flash attention for the un.nt tokens un.t, un.t+1, ...
// of one sequence (one token when un.nt <= 1) and the un.nh KV heads from
// un.kh (one when un.nh <= 1; several only for one token), with slot w's
// scratch: tile by tile, the scores of all the unit's query rows (tokens
// x heads x the group's heads, packed) against the tile's K rows (one
// fused call per page piece and KV head), each row's tile softmax
// (kernels.FlashTile), the numerators' sum of the tile's V rows (one fused
// call per page piece and KV head for the tokens that see the whole tile,
// one per token on the diagonal), and the fold into the running partial.
// Every score is the canonical dot and every output element adds the same
// value rows in position order within its tile, and the tiles are fixed
// by position: the result is bitwise the same whatever the block, the
// heads taken together, the page size, the kernel path, the batch or the
// thread count (batch invariance). The block's earlier tokens also get
// scores for positions of its later tokens in the diagonal tile; those
// are never read.
//
// With un.split set (a decode unit of a split token, flash-decoding),
// only the tiles [un.tl0, un.tl1) run, and their partials go to the
// runner's part buffers at un.part+k for attention's fold.
func (r *Runner) attendTokens(un unit, w int) {
	c := r.m.cfg
	Q, KD, hd := c.QDim(), c.KVDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	a := &r.acts[un.a]
	nt, nh := max(1, int(un.nt)), max(1, int(un.nh))
	if nt > 1 && nh > 1 {
		panic("model: an attention unit of several tokens and several KV heads")
	}
	first := a.pos + int(un.t) + 1 // positions the block's first token sees
	last := first + nt - 1         // and its last
	kh0 := int(un.kh)
	gw := group * hd // one KV head's query rows
	tw := nh * group // one token's rows
	M := nt * tw     // rows of the unit: row (i*nh+h)*group+g
	t0 := a.off + int(un.t)
	const T = flashTile
	buf := grow(r.wide[w], 3*M*hd+2*M)
	r.wide[w] = buf
	qp, o, oj := buf[:M*hd], buf[M*hd:2*M*hd], buf[2*M*hd:3*M*hd]
	ms, mj := buf[3*M*hd:3*M*hd+M], buf[3*M*hd+M:3*M*hd+2*M]
	sums := growF64(r.sums[w], 2*M)
	r.sums[w] = sums
	ls, lj := sums[:M], sums[M:]
	for i := 0; i < nt; i++ {
		copy(qp[i*tw*hd:(i+1)*tw*hd], r.q[(t0+i)*Q+kh0*gw:][:tw*hd])
	}
	spans := r.spans[a.span:]
	scores := grow(r.scores[w], M*T)
	r.scores[w] = scores
	// A sliding layer's unit is one token (nt == 1): it sees [lo, first).
	lo := r.windowStart(first)
	kf, k1 := r.tileRange(first, last)
	k0 := kf
	if un.split {
		k0, k1 = int(un.tl0), int(un.tl1)
	}
	// A unit of every KV head reads each page's K and V rows whole: it
	// asks for the next rows while it computes (pages lie anywhere in the
	// pool, so the hardware prefetchers lose the stream at each page).
	lim := min(k1*T, last)
	prefetch := func(j int, v bool, part, parts int) {
		if nh != c.KVHeads || j >= lim {
			return
		}
		off := j % a.ps
		s, n := &spans[j/a.ps-a.blk0], min(a.ps-off, lim-j)*KD
		// The piece's lines in parts slices, one before each KV head's
		// call: a burst of hundreds of prefetches stalls the core once the
		// miss buffers are full; spread, they overlap the arithmetic.
		cut := func(m int) (int, int) { return m * part / parts, m * (part + 1) / parts }
		switch rb := q8Row(KD); {
		case a.q8 && v:
			lo, hi := cut(n / KD * rb)
			kernels.Prefetch(s.v8[off*rb:][lo:hi])
		case a.q8:
			lo, hi := cut(n / KD * rb)
			kernels.Prefetch(s.k8[off*rb:][lo:hi])
		case a.f16 && v:
			lo, hi := cut(n)
			kernels.Prefetch(s.v16[off*KD:][lo:hi])
		case a.f16:
			lo, hi := cut(n)
			kernels.Prefetch(s.k16[off*KD:][lo:hi])
		case v:
			lo, hi := cut(n)
			kernels.Prefetch(s.v[off*KD:][lo:hi])
		default:
			lo, hi := cut(n)
			kernels.Prefetch(s.k[off*KD:][lo:hi])
		}
	}
	for k := k0; k < k1; k++ {
		j0 := max(k*T, lo)
		j1 := min(k*T+T, last)    // the positions of the tile any token sees
		i0 := max(0, j0+1-first)  // the first token that sees position j0
		full := max(i0, j1-first) // tokens from here see all of [j0, j1)
		// Page pieces outside, KV heads inside: a page's K (then V) rows
		// of every head the unit takes are read together.
		for j := j0; j < j1; {
			bi, off := j/a.ps-a.blk0, j%a.ps
			cnt := min(a.ps-off, j1-j)
			for h := 0; h < nh; h++ {
				prefetch(j+cnt, false, h, nh)
				prefetch(j, true, h, nh)
				m0 := (i0*nh + h) * group
				s, koff, kd := &spans[bi], (kh0+h)*hd+off*KD, KD
				if a.q8 {
					s, koff, kd = r.q8Piece(w, s, false, (kh0+h)*hd, off, cnt, hd, KD)
				}
				pageDot(scores[m0*T+j-j0:], T, qp[m0*hd:], (nt-i0)*group, hd, s, koff, kd, cnt, a.f16)
			}
			j += cnt
		}
		for m := i0 * tw; m < M; m++ {
			n := min(j1, first+m/tw) - j0
			mj[m], lj[m] = kernels.FlashTile(scores[m*T:m*T+n], r.m.attnScale)
		}
		clear(oj[i0*tw*hd:])
		for j := j0; j < j1; {
			bi, off := j/a.ps-a.blk0, j%a.ps
			cnt := min(a.ps-off, j1-j)
			for h := 0; h < nh; h++ {
				prefetch(j+T, false, h, nh) // the next tile's K rows
				s, col, kd := &spans[bi], (kh0+h)*hd+off*KD, KD
				if a.q8 {
					// Dequantized once for every token of the unit.
					s, col, kd = r.q8Piece(w, s, true, (kh0+h)*hd, off, cnt, hd, KD)
				}
				for i := i0; i < full; i++ {
					if seen := first + i - j; seen > 0 {
						m0 := (i*nh + h) * group
						pageAxpy(oj[m0*hd:], scores[m0*T+j-j0:], T, group, hd, s, col, kd, min(cnt, seen), a.f16)
					}
				}
				if full < nt {
					m0 := (full*nh + h) * group
					pageAxpy(oj[m0*hd:], scores[m0*T+j-j0:], T, (nt-full)*group, hd, s, col, kd, cnt, a.f16)
				}
			}
			j += cnt
		}
		if un.split {
			p := (int(un.part) + k - kf) * tw
			copy(r.partO[p*hd:(p+tw)*hd], oj[:tw*hd])
			copy(r.partM[p:p+tw], mj[:tw])
			copy(r.partL[p:p+tw], lj[:tw])
			continue
		}
		for m := i0 * tw; m < M; m++ {
			if k == kf { // every token sees the first tile's first position
				copy(o[m*hd:(m+1)*hd], oj[m*hd:(m+1)*hd])
				ms[m], ls[m] = mj[m], lj[m]
				continue
			}
			kernels.FlashMerge(o[m*hd:(m+1)*hd], &ms[m], &ls[m], oj[m*hd:(m+1)*hd], mj[m], lj[m])
		}
	}
	if un.split {
		return
	}
	for m := 0; m < M; m++ {
		kernels.Scale(o[m*hd:(m+1)*hd], float32(1/ls[m]))
	}
	for i := 0; i < nt; i++ {
		copy(r.att[(t0+i)*Q+kh0*gw:][:tw*hd], o[i*tw*hd:(i+1)*tw*hd])
	}
}

// windowStart is the first position a token that sees positions up to
// end-1 attends to: 0, or with a sliding window end-window (llama.cpp
// masks p0 when p1-p0 >= n_swa).
func (r *Runner) windowStart(end int) int {
	if r.window > 0 {
		return max(0, end-r.window)
	}
	return 0
}

// tileRange is the tiles [lo, hi) a block of tokens that see positions up
// to first-1 .. last-1 attends over (one token when first == last).
func (r *Runner) tileRange(first, last int) (lo, hi int) {
	return r.windowStart(first) / flashTile, (last + flashTile - 1) / flashTile
}

// foldSplit folds the per-tile partials of a split decode token (units of
// flashSplitTiles tiles each, run by any threads in any order) left to
// right, exactly as attendTokens folds an unsplit token's tiles, and
// writes its attention output.
func (r *Runner) foldSplit(sp splitTok) {
	c := r.m.cfg
	Q, hd := c.QDim(), c.HeadDim
	group := c.Heads / c.KVHeads
	a := &r.acts[sp.a]
	tw := int(sp.nh) * group
	t := a.off + int(sp.t)
	y := r.att[t*Q+int(sp.kh)*hd*group:][:tw*hd]
	p0 := int(sp.part) * tw
	copy(y, r.partO[p0*hd:(p0+tw)*hd])
	for g := 0; g < tw; g++ {
		m, l := r.partM[p0+g], r.partL[p0+g]
		yg := y[g*hd : (g+1)*hd]
		for k := 1; k < int(sp.tiles); k++ {
			p := (int(sp.part)+k)*tw + g
			kernels.FlashMerge(yg, &m, &l, r.partO[p*hd:(p+1)*hd], r.partM[p], r.partL[p])
		}
		kernels.Scale(yg, float32(1/l))
	}
}

// splitTok is one decode token whose tiles were split across units, for
// its nh KV heads from kh: its partials are at part, part+1, ... (tiles
// of them), nh x group rows each.
type splitTok struct {
	a, t, kh, nh int32
	part, tiles  int32
}

func growF64(b []float64, n int) []float64 {
	if cap(b) < n {
		return make([]float64, n, n+n/4)
	}
	return b[:n]
}
