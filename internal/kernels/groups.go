package kernels

import (
	"fmt"
	"sort"
	"unsafe"
)

// Group is one product of a MatMulGroups call: Out receives W times the
// NTok rows of X, laid out as MatMul lays it out.
type Group struct {
	Out  []float32
	W    *Matrix
	X    []float32
	NTok int
}

// Groups is a MatMulGroups call's scratch, kept by the caller so that a
// step of many layers reuses it. The zero value is ready; not safe for
// concurrent use.
type Groups struct {
	jobs []mmJob
	end  []int // job i owns row tiles [end[i-1], end[i])
	acts []actBuf
	own  []bool
}

// MatMulGroups computes MatMul(par, g.Out, g.W, g.X, g.NTok) for every
// group, all in one parallel loop over the groups' concatenated row tiles.
// It is the mixture-of-experts product (ggml's mul_mat_id): the caller
// gathers the tokens routed to each expert into that expert's X, so each
// expert's weights are streamed once per step however many tokens chose
// it, and in a decode step the threads split the routed experts' rows
// between them in one pool wake. Rows are the unit of work, exactly as in
// MatMul, so every element has the canonical reduction order of its type
// and the results are bitwise those of separate MatMul calls: a token's
// expert outputs do not depend on which other tokens chose the same
// expert, nor on the thread count (batch invariance, DESIGN.md
// "Determinism"). Groups with the same X (the same slice and token count)
// and weights of one type and width share their converted activations.
// g.NTok may be 0 (an expert no token chose): it is skipped.
func (s *Groups) MatMulGroups(par *Parallel, gs []Group) {
	s.jobs, s.end, s.acts, s.own = s.jobs[:0], s.end[:0], s.acts[:0], s.own[:0]
	tiles, macs := 0, 0
	single := true
	for i := range gs {
		g := &gs[i]
		w := g.W
		if g.NTok <= 0 || w.Rows == 0 {
			s.acts, s.own = append(s.acts, actBuf{}), append(s.own, false)
			continue
		}
		if len(g.Out) < g.NTok*w.Rows || len(g.X) < g.NTok*w.Cols {
			panic(fmt.Sprintf("kernels.MatMulGroups: %dx%d matrix, %d tokens: out has %d, x has %d elements", w.Rows, w.Cols, g.NTok, len(g.Out), len(g.X)))
		}
		if err := w.Check(); err != nil {
			panic(err.Error())
		}
		k := kernelFor(w.Type)
		act, own := actBuf{}, true
		for e := 0; e < i; e++ {
			p := &gs[e]
			if s.own[e] && p.NTok == g.NTok && kernelFor(p.W.Type) == k && p.W.Cols == w.Cols && unsafe.SliceData(p.X) == unsafe.SliceData(g.X) {
				act, own = s.acts[e], false
				break
			}
		}
		if own {
			act = k.prepare(g.X[:g.NTok*w.Cols], g.NTok, w.Cols)
		}
		s.acts, s.own = append(s.acts, act), append(s.own, own)
		// Large groups (a long prefill's popular expert) run in token
		// chunks as MatMul runs them; each chunk is a job of its own.
		chunk := tokenChunk(act, g.NTok, w.Cols)
		for t0 := 0; t0 < g.NTok; t0 += chunk {
			n := min(chunk, g.NTok-t0)
			s.jobs = append(s.jobs, mmJob{k: k, out: g.Out[t0*w.Rows:], w: w, act: act.tokens(t0, n, g.NTok, w.Cols), nTok: n, rowBytes: rowBytesOf(w)})
			tiles += ceilDiv(w.Rows, rowTile)
			s.end = append(s.end, tiles)
			macs += w.Rows * w.Cols * n
			single = single && n == 1
		}
	}
	if len(s.jobs) > 0 {
		if macs < minParallelMACs || par.Threads() == 1 {
			s.runTiles(0, tiles)
		} else {
			// Prefill tiles are each worth a claim; decode's one-token
			// tiles go in few long chunks (tileGrain's reasoning: the
			// matvec streams rows ahead within one call).
			grain := 1
			if single || macs/tiles < minTileClaim {
				grain = ceilDiv(tiles, min(tiles, chunksPerThread*par.Threads()))
			}
			par.ForGrain(tiles, grain, s.runTiles)
		}
	}
	for i := range s.acts {
		if s.own[i] {
			s.acts[i].release()
		}
		s.acts[i] = actBuf{}
	}
	for i := range s.jobs {
		s.jobs[i] = mmJob{} // drop references to the caller's buffers
	}
}

// runTiles computes the concatenated row tiles [lo, hi), each job's share
// in one call.
func (s *Groups) runTiles(lo, hi int) {
	i := sort.SearchInts(s.end, lo+1)
	for start := 0; i < len(s.jobs); i++ {
		if i > 0 {
			start = s.end[i-1]
		}
		if start >= hi {
			return
		}
		if a, b := max(lo, start), min(hi, s.end[i]); a < b {
			s.jobs[i].runTiles(a-start, b-start)
		}
	}
}
