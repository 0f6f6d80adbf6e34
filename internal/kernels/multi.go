package kernels

import "fmt"

// Product is one matrix of a MatMulMany call: Out receives W times the
// shared activations, laid out as MatMul lays it out.
type Product struct {
	Out []float32
	W   *Matrix
}

// maxProducts bounds a MatMulMany call (Q/K/V is the widest use).
const maxProducts = 4

// MatMulMany computes MatMul(par, p.Out, p.W, x, nTok) for every p in ps,
// all sharing one parallel loop over their concatenated rows. Each wake of
// the pool costs microseconds, and in a decode step the Q, K and V (or gate
// and up) products are each too small to pay for it alone: as one loop they
// cost one wake and keep both cores busy. Rows are still the unit of work,
// so every element has the canonical reduction order of its type and the
// results are bitwise those of separate MatMul calls (batch invariance,
// DESIGN.md "Determinism"). Activations are converted once per weight type.
func MatMulMany(par *Parallel, x []float32, nTok int, ps ...Product) {
	if len(ps) > maxProducts {
		panic(fmt.Sprintf("kernels.MatMulMany: %d products, at most %d", len(ps), maxProducts))
	}
	if nTok <= 0 || len(ps) == 0 {
		return
	}
	var mj multiJob
	macs := 0
	for i, p := range ps {
		w := p.W
		if len(p.Out) < nTok*w.Rows || len(x) < nTok*w.Cols {
			panic(fmt.Sprintf("kernels.MatMulMany: %dx%d matrix, %d tokens: out has %d, x has %d elements", w.Rows, w.Cols, nTok, len(p.Out), len(x)))
		}
		if err := w.Check(); err != nil {
			panic(err.Error())
		}
		k := kernelFor(w.Type)
		j := &mj.jobs[i]
		*j = mmJob{k: k, out: p.Out, w: w, nTok: nTok, rowBytes: rowBytesOf(w)}
		// Products of one type over the same columns read the same converted
		// activations; only the first owns (and releases) them.
		for e := 0; e < i; e++ {
			if prev := &mj.jobs[e]; prev.k == k && prev.w.Cols == w.Cols {
				j.act, mj.shared[i] = prev.act, true
				break
			}
		}
		if !mj.shared[i] {
			j.act = k.prepare(x[:nTok*w.Cols], nTok, w.Cols)
		}
		mj.end[i] = mj.tiles + ceilDiv(w.Rows, rowTile)
		mj.tiles = mj.end[i]
		mj.n++
		macs += w.Rows * w.Cols * nTok
	}
	// Tokens in chunks as MatMul takes them (tokenChunkBytes), the
	// smallest any product's activations need.
	chunk := nTok
	for i := 0; i < mj.n; i++ {
		chunk = min(chunk, tokenChunk(mj.jobs[i].act, nTok, mj.jobs[i].w.Cols))
	}
	for t0 := 0; t0 < nTok; t0 += chunk {
		n := min(chunk, nTok-t0)
		cj := mj
		for i := 0; i < cj.n; i++ {
			j := &cj.jobs[i]
			j.out, j.act, j.nTok = ps[i].Out[t0*j.w.Rows:], mj.jobs[i].act.tokens(t0, n, nTok, j.w.Cols), n
		}
		if macs/nTok*n < minParallelMACs || par.Threads() == 1 {
			cj.run(0, cj.tiles)
			continue
		}
		jp := multiJobs.Get().(*multiJob)
		fn := jp.loop
		*jp = cj
		par.ForGrain(jp.tiles, tileGrain(par, jp.tiles, ps[0].W.Cols, n), fn)
		*jp = multiJob{loop: fn} // holds no outputs, weights or activations while pooled
		multiJobs.Put(jp)
	}
	for i := 0; i < mj.n; i++ {
		if !mj.shared[i] {
			mj.jobs[i].act.release()
		}
	}
}

func rowBytesOf(w *Matrix) int {
	if w.Rows == 0 {
		return 0
	}
	return len(w.Data) / w.Rows
}

// multiJob is one MatMulMany call: its work items are the products' row
// tiles (rowTile rows, as MatMul splits) back to back, product i owning
// tiles [end[i-1], end[i]).
type multiJob struct {
	jobs   [maxProducts]mmJob
	shared [maxProducts]bool
	end    [maxProducts]int
	n      int
	tiles  int
	// loop is run bound to this job, set once (multiJobs).
	loop func(lo, hi int)
}

func (m *multiJob) run(lo, hi int) {
	start := 0
	for i := 0; i < m.n && start < hi; i++ {
		end := m.end[i]
		if a, b := max(lo, start), min(hi, end); a < b {
			m.jobs[i].runTiles(a-start, b-start)
		}
		start = end
	}
}
