package model

import (
	"math"

	"sluice/internal/kernels"
)

// Gating is how a mixture-of-experts router turns its logits into expert
// probabilities (llama.cpp's llama_expert_gating_func_type; GGUF
// <arch>.expert_gating_func holds the number).
type Gating int

const (
	// GateSoftmax: softmax over all experts (qwen3moe; GGUF value 1).
	GateSoftmax Gating = 1
	// GateSigmoid: an independent sigmoid per expert (glm4moe, DeepSeek-V3;
	// GGUF value 2).
	GateSigmoid Gating = 2
)

func (g Gating) String() string {
	switch g {
	case GateSoftmax:
		return "softmax"
	case GateSigmoid:
		return "sigmoid"
	}
	return "unknown"
}

// moeFFN is one layer's mixture-of-experts feed-forward block, computed as
// llama.cpp's build_moe_ffn computes it:
//
//	probs    = gating(router · x)                      over all n_expert
//	choose   = probs + bias                            (bias: glm4moe's exp_probs_b; selection only)
//	groups   : keep the groupsUsed groups whose two best choose-scores sum highest, mask the rest
//	top      = the nUsed experts of highest choose, in descending order (ties: lower expert id)
//	w_r      = probs[top_r]; if normW: w_r /= max(Σ w, 2^-14); if scale ∉ {0, 1}: w_r *= scale
//	y        = Σ_r  w_r · down_e(silu(gate_e x) ⊙ up_e x),   e = top_r, summed in rank order
//
// The sum runs in rank order (r = 0, 1, ...), one rounded product and one
// rounded add per term, as llama.cpp's chain of ggml_add over the expert
// views does. A token's experts, their outputs and this order depend on
// the token's own row alone, never on its batch mates or the thread count
// (batch invariance).
type moeFFN struct {
	router         kernels.Matrix // nExpert rows of n_embd (ffn_gate_inp, F32 in llama.cpp's files)
	bias           []float32      // exp_probs_b, or nil
	gate, up, down []kernels.Matrix
	nExpert, nUsed int
	gating         Gating
	normW          bool
	scale          float32 // expert_weights_scale; 0 or 1: none
	groups, gUsed  int     // expert groups (0 or 1: none) and how many a token may use
	// shared is the always-on shared expert (glm4moe), or nil.
	shared *denseFFN
}

// moeScratch is one runner's scratch for moeFFN.forward.
type moeScratch struct {
	logits  []float32 // token rows of nExpert router logits
	sel     []int32   // token rows of nUsed chosen experts, in rank order
	w       []float32 // their weights
	slot    []int32   // token rows of nUsed: each choice's row in the gathered buffers
	count   []int     // tokens per expert
	start   []int     // each expert's first gathered row
	xg      []float32 // gathered inputs, expert by expert, tokens ascending
	g, u, y []float32
	sg, su  []float32 // shared expert
	choose  []float32
	gsc     []float32
	gs      []kernels.Group
	groups  kernels.Groups
}

// forward computes out (r.n rows of n_embd) from the normed rows xn.
func (f *moeFFN) forward(r *Runner, xn, out []float32) {
	s, par, total := &r.moe, r.par, r.n
	E := f.router.Cols
	NE, K := f.nExpert, f.nUsed
	EF := f.gate[0].Rows
	s.logits = grow(s.logits, total*NE)
	kernels.MatMul(par, s.logits, &f.router, xn, total)
	if cap(s.sel) < total*K {
		s.sel = make([]int32, total*K)
		s.slot = make([]int32, total*K)
	}
	s.sel, s.slot = s.sel[:total*K], s.slot[:total*K]
	s.w = grow(s.w, total*K)
	s.choose = grow(s.choose, NE)
	for t := 0; t < total; t++ {
		f.route(s, s.logits[t*NE:(t+1)*NE], s.sel[t*K:(t+1)*K], s.w[t*K:(t+1)*K])
	}

	// Group the choices by expert: expert e's rows are [start[e],
	// start[e]+count[e]), its tokens in increasing order.
	if cap(s.count) < NE {
		s.count, s.start = make([]int, NE), make([]int, NE)
	}
	s.count, s.start = s.count[:NE], s.start[:NE]
	clear(s.count)
	for _, e := range s.sel {
		s.count[e]++
	}
	n := 0
	for e := range s.count {
		s.start[e] = n
		n += s.count[e]
	}
	rows := total * K
	s.xg = grow(s.xg, rows*E)
	s.g, s.u = grow(s.g, rows*EF), grow(s.u, rows*EF)
	s.y = grow(s.y, rows*E)
	clear(s.count) // now: rows filled per expert
	for i, e := range s.sel {
		row := s.start[e] + s.count[e]
		s.count[e]++
		s.slot[i] = int32(row)
		t := i / K
		copy(s.xg[row*E:(row+1)*E], xn[t*E:(t+1)*E])
	}

	// Gate and up of every chosen expert in one parallel loop, then down.
	s.gs = s.gs[:0]
	for e := 0; e < NE; e++ {
		if c := s.count[e]; c > 0 {
			at := s.start[e]
			s.gs = append(s.gs,
				kernels.Group{Out: s.g[at*EF:], W: &f.gate[e], X: s.xg[at*E:], NTok: c},
				kernels.Group{Out: s.u[at*EF:], W: &f.up[e], X: s.xg[at*E:], NTok: c})
		}
	}
	if f.shared != nil {
		SF := f.shared.gate.Rows
		s.sg, s.su = grow(s.sg, total*SF), grow(s.su, total*SF)
		s.gs = append(s.gs,
			kernels.Group{Out: s.sg, W: &f.shared.gate, X: xn, NTok: total},
			kernels.Group{Out: s.su, W: &f.shared.up, X: xn, NTok: total})
	}
	s.groups.MatMulGroups(par, s.gs)
	r.elementwise(rows*EF, func(lo, hi int) { kernels.SiLUMul(s.g[lo:hi], s.u[lo:hi]) })
	s.gs = s.gs[:0]
	for e := 0; e < NE; e++ {
		if c := s.count[e]; c > 0 {
			at := s.start[e]
			s.gs = append(s.gs, kernels.Group{Out: s.y[at*E:], W: &f.down[e], X: s.g[at*EF:], NTok: c})
		}
	}
	var shOut []float32
	if f.shared != nil {
		SF := f.shared.gate.Rows
		r.elementwise(total*SF, func(lo, hi int) { kernels.SiLUMul(s.sg[lo:hi], s.su[lo:hi]) })
		// The shared expert's output goes to xg, free again by now.
		shOut = s.xg[:total*E]
		s.gs = append(s.gs, kernels.Group{Out: shOut, W: &f.shared.down, X: s.sg, NTok: total})
	}
	s.groups.MatMulGroups(par, s.gs)

	// out_t = Σ_r w_r · y_(t,r), in rank order; glm4moe then adds the
	// shared expert (routed + shared, as llama.cpp adds them).
	r.perToken(total, 2*K*E, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			o := out[t*E : (t+1)*E]
			for k := 0; k < K; k++ {
				w := s.w[t*K+k]
				y := s.y[int(s.slot[t*K+k])*E:][:E]
				if k == 0 {
					for i := range o {
						o[i] = float32(y[i] * w)
					}
					continue
				}
				for i := range o {
					o[i] += float32(y[i] * w)
				}
			}
			if shOut != nil {
				addInto(o, shOut[t*E:(t+1)*E])
			}
		}
	})
}

// route picks one token's experts (sel, rank order) and their weights w
// from its router logits.
func (f *moeFFN) route(s *moeScratch, logits []float32, sel []int32, w []float32) {
	NE := f.nExpert
	probs := logits // turned into probabilities in place
	switch f.gating {
	case GateSoftmax:
		// ggml's soft_max: exp(x - max) in float32, summed in float64,
		// times the float32 reciprocal of the sum.
		mx := float32(math.Inf(-1))
		for _, v := range probs {
			mx = max(mx, v)
		}
		sum := 0.0
		for i, v := range probs {
			e := float32(math.Exp(float64(v - mx)))
			probs[i] = e
			sum += float64(e)
		}
		inv := float32(1 / sum)
		for i := range probs {
			probs[i] *= inv
		}
	case GateSigmoid:
		for i, v := range probs {
			probs[i] = 1 / (1 + float32(math.Exp(float64(-v))))
		}
	}
	choose := s.choose[:NE]
	copy(choose, probs)
	if f.bias != nil {
		for i := range choose {
			choose[i] += f.bias[i]
		}
	}
	if f.groups > 1 {
		// A group's score is the sum of its two best choose-scores; all
		// but the gUsed best groups are masked out.
		per := NE / f.groups
		s.gsc = grow(s.gsc, f.groups)
		for g := 0; g < f.groups; g++ {
			a, b := float32(math.Inf(-1)), float32(math.Inf(-1))
			for _, v := range choose[g*per : (g+1)*per] {
				if v > a {
					a, b = v, a
				} else if v > b {
					b = v
				}
			}
			if per == 1 {
				b = 0
			}
			s.gsc[g] = a + b
		}
		keep := uint64(0) // groups are at most 64 (validated)
		for k := 0; k < f.gUsed; k++ {
			best := -1
			for g := 0; g < f.groups; g++ {
				if keep&(1<<g) == 0 && (best < 0 || s.gsc[g] > s.gsc[best]) {
					best = g
				}
			}
			keep |= 1 << best
		}
		for g := 0; g < f.groups; g++ {
			if keep&(1<<g) == 0 {
				for i := g * per; i < (g+1)*per; i++ {
					choose[i] = float32(math.Inf(-1))
				}
			}
		}
	}
	// Top-k by repeated selection: highest first, ties to the lower id
	// (k is small: 2 to 8 of up to a few hundred experts).
	for r := range sel {
		best := -1
		for e, v := range choose {
			if v != v { // NaN: taken
				continue
			}
			if best < 0 || v > choose[best] {
				best = e
			}
		}
		sel[r] = int32(best)
		w[r] = probs[best]
		choose[best] = float32(math.NaN()) // never > anything: out of the race
	}
	if f.normW {
		sum := 0.0
		for _, v := range w {
			sum += float64(v)
		}
		d := float32(max(sum, 6.103515625e-5))
		for i := range w {
			w[i] /= d
		}
	}
	if f.scale != 0 && f.scale != 1 {
		for i := range w {
			w[i] *= f.scale
		}
	}
}
