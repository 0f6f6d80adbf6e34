package model

import (
	"fmt"

	"sluice/internal/kernels"
)

// The building blocks architectures are assembled from. Each works on the
// step's token rows in the Runner (r.n rows; r.x the residual stream, r.xn
// a normed copy, r.o a block's output) and computes every row alone or in
// a fixed reduction order, so no block can make a token's bits depend on
// its batch mates (batch invariance, DESIGN.md).

// block is one layer of an architecture: it reads and updates the
// residual stream r.x of the step's rows. Layer l's K/V go only through
// attention.forward (the checked view).
type block interface {
	forward(r *Runner, l int)
}

// ffn is a feed-forward block: out (r.n rows of n_embd) from the normed
// rows in (r.n rows of n_embd). denseFFN is the dense one; a
// mixture-of-experts FFN plugs in here.
type ffn interface {
	forward(r *Runner, in, out []float32)
}

// attention is a self-attention block: Q/K/V projections (optional
// biases), optional per-head RMSNorm of Q and K before RoPE, RoPE, the
// paged attention over the sequence's checked KV view, and the output
// projection.
type attention struct {
	wq, wk, wv, wo kernels.Matrix
	bq, bk, bv     []float32 // nil: no biases
	qNorm, kNorm   []float32 // head_dim each, or nil (qwen3, gemma3)
	rope           int       // index into Model.ropes
	// qScale multiplies the queries after RoPE (gemma3's
	// query_pre_attn_scalar), 0 for none.
	qScale float32
	// window is the sliding window in positions, 0 for a global layer.
	window int
}

// forward runs the attention of layer l over r.xn and leaves its output
// projection in r.o. The step's K/V are written through each sequence's
// view first and the whole context is then read back through it:
// attention never sees K/V that did not go through the owner-checked
// pages (I3, I4).
func (at *attention) forward(r *Runner, l int) {
	m, c, n := r.m, &r.m.cfg, r.n
	Q, KD := c.QDim(), c.KVDim()
	// One pool wake for Q, K and V: alone each is too small in a
	// decode step to keep two cores busy.
	kernels.MatMulMany(r.par, r.xn, n,
		kernels.Product{Out: r.q, W: &at.wq}, kernels.Product{Out: r.k, W: &at.wk}, kernels.Product{Out: r.v, W: &at.wv})
	if at.bq != nil {
		addBias(r.q, at.bq, n)
		addBias(r.k, at.bk, n)
		addBias(r.v, at.bv, n)
	}
	// Token t's angles are in row t of its variant's table, whichever
	// sequence it belongs to.
	half := c.RopeDim / 2
	rc, rs := r.rcos[at.rope], r.rsin[at.rope]
	r.perToken(n, 2*(Q+KD), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			q, k := r.q[t*Q:(t+1)*Q], r.k[t*KD:(t+1)*KD]
			if at.qNorm != nil {
				rmsNorm(q, q, at.qNorm, c.Heads, c.RMSEps)
				rmsNorm(k, k, at.kNorm, c.KVHeads, c.RMSEps)
			}
			cs, sn := rc[t*half:(t+1)*half], rs[t*half:(t+1)*half]
			m.rope(q, c.Heads, cs, sn)
			m.rope(k, c.KVHeads, cs, sn)
			if at.qScale != 0 {
				kernels.Scale(q, at.qScale)
			}
		}
	})
	for i := range r.acts {
		a := &r.acts[i]
		if a.dead {
			continue
		}
		for j := 0; j < a.n; j++ {
			t := a.off + j
			if err := a.kv.Put(l, a.pos+j, r.k[t*KD:(t+1)*KD], r.v[t*KD:(t+1)*KD]); err != nil {
				a.dead = true
				r.res[a.idx].Err = &Error{Code: CodeKV, Msg: fmt.Sprintf("writing K/V of position %d in layer %d", a.pos+j, l), Err: err}
				break
			}
		}
	}
	r.window = at.window
	r.attention(l)
	kernels.MatMul(r.par, r.o, &at.wo, r.att, n)
}

// activation is a gated FFN's nonlinearity.
type activation int

const (
	actSiLU    activation = iota // SwiGLU: silu(gate) * up (llama, qwen)
	actGELUTan                   // GeGLU: gelu_tanh(gate) * up (gemma)
)

// denseFFN is down(act(gate(x)) * up(x)).
type denseFFN struct {
	gate, up, down kernels.Matrix
	act            activation
}

func (f *denseFFN) forward(r *Runner, in, out []float32) {
	n, F := r.n, f.gate.Rows
	r.g, r.u = grow(r.g, n*F), grow(r.u, n*F)
	kernels.MatMulMany(r.par, in, n, kernels.Product{Out: r.g, W: &f.gate}, kernels.Product{Out: r.u, W: &f.up})
	switch f.act {
	case actGELUTan:
		r.elementwise(n*F, func(lo, hi int) { kernels.GELUMul(r.g[lo:hi], r.u[lo:hi]) })
	default:
		r.elementwise(n*F, func(lo, hi int) { kernels.SiLUMul(r.g[lo:hi], r.u[lo:hi]) })
	}
	kernels.MatMul(r.par, out, &f.down, r.g, n)
}

// norm writes RMSNorm(src) * w into dst for every row of the step (dst
// may be src).
func (r *Runner) norm(dst, src, w []float32) {
	E := len(w)
	r.perToken(r.n, E, func(lo, hi int) {
		rmsNorm(dst[lo*E:hi*E], src[lo*E:hi*E], w, hi-lo, r.m.cfg.RMSEps)
	})
}

// addNorm adds the block output r.o into the residual stream r.x and
// writes RMSNorm(r.x) * w into r.xn: the residual add and the next norm of
// a row need only that row, so one pass does both.
func (r *Runner) addNorm(w []float32) {
	E := len(w)
	r.perToken(r.n, 2*E, func(lo, hi int) {
		addInto(r.x[lo*E:hi*E], r.o[lo*E:hi*E])
		rmsNorm(r.xn[lo*E:hi*E], r.x[lo*E:hi*E], w, hi-lo, r.m.cfg.RMSEps)
	})
}

// addResidual adds the block output r.o into the residual stream r.x.
func (r *Runner) addResidual() {
	r.elementwise(r.n*r.m.cfg.Embd, func(lo, hi int) { addInto(r.x[lo:hi], r.o[lo:hi]) })
}
