package engine

import (
	"math"
	"sync/atomic"

	"sluice/internal/model"
	"sluice/internal/quant"
)

// toy is a tiny deterministic "model" for fast scheduler tests: every
// token's K/V is a fixed function of (token, position, layer), and the next
// token is a function of the sum over EVERYTHING attention reads. So a
// stale, foreign or missing KV row changes the output, which is what the
// tests need to see; and toyReference computes the same sequence with no
// KV cache at all, an independent oracle.
type toy struct {
	vocab, layers, kvdim int
	eog                  int32
	steps                atomic.Int64
}

func newToy() *toy { return &toy{vocab: 61, layers: 2, kvdim: 4, eog: -1} }

func (m *toy) Name() string               { return "toy" }
func (m *toy) Layers() int                { return m.layers }
func (m *toy) KVDim() int                 { return m.kvdim }
func (m *toy) Vocab() int                 { return m.vocab }
func (m *toy) Context() int               { return 4096 }
func (m *toy) EOG(t int32) bool           { return t == m.eog }
func (m *toy) NewForwarder(int) Forwarder { return &toyFwd{m} }

// Values are multiples of 1/4 below 5, so every sum below is exact in
// float32 and the toy itself is batch-invariant.
func toyKV(tok int32, pos, layer, i int) (k, v float32) {
	k = float32((int(tok)*7+pos*3+layer*5+i*11)%17)/4 + 0.25
	v = float32((int(tok)*5+pos*7+layer*3+i*13)%19)/4 + 0.25
	return
}

func toyLogits(vocab int, total float32) []float32 {
	out := make([]float32, vocab)
	if total != total {
		for j := range out {
			out[j] = float32(math.NaN())
		}
		return out
	}
	x := int(total * 4)
	for j := range out {
		out[j] = -float32(((x+13*j)%vocab + vocab) % vocab)
	}
	return out
}

type toyFwd struct{ m *toy }

func (f *toyFwd) Forward(steps []Step) []StepResult {
	f.m.steps.Add(1)
	res := make([]StepResult, len(steps))
	for si, s := range steps {
		kr := make([]float32, f.m.kvdim)
		vr := make([]float32, f.m.kvdim)
		var err error
	put:
		for i, tok := range s.Tokens {
			for l := 0; l < f.m.layers; l++ {
				for d := range kr {
					kr[d], vr[d] = toyKV(tok, s.Pos+i, l, d)
				}
				if err = s.KV.Put(l, s.Pos+i, kr, vr); err != nil {
					break put
				}
			}
		}
		if err != nil {
			res[si].Err = err
			continue
		}
		last := s.Pos + len(s.Tokens) - 1
		ps := s.KV.PageSize()
		var total float32
	read:
		for l := 0; l < f.m.layers; l++ {
			var sl float32
			for blk := 0; blk <= last/ps; blk++ {
				k, v, n, e := toyBlock(s.KV, l, blk)
				if e != nil {
					err = e
					break read
				}
				for r := 0; r < n && blk*ps+r <= last; r++ {
					for d := 0; d < f.m.kvdim; d++ {
						sl += k[r*f.m.kvdim+d]*float32(d+1) + v[r*f.m.kvdim+d]
					}
				}
			}
			total += sl * float32(l+1)
		}
		if err != nil {
			res[si].Err = err
			continue
		}
		res[si].Logits = toyLogits(f.m.vocab, total)
	}
	return res
}

// toyReference generates n tokens greedily from prompt with no KV cache:
// the sum is recomputed from the token list each time.
func toyReference(m *toy, prompt []int32, n int, ignoreEOS bool) []int32 {
	seq := append([]int32(nil), prompt...)
	var out []int32
	for len(out) < n {
		var total float32
		for l := 0; l < m.layers; l++ {
			var sl float32
			for p, tok := range seq {
				for d := 0; d < m.kvdim; d++ {
					k, v := toyKV(tok, p, l, d)
					sl += k*float32(d+1) + v
				}
			}
			total += sl * float32(l+1)
		}
		lg := toyLogits(m.vocab, total)
		best := 0
		for j := range lg {
			if lg[j] > lg[best] {
				best = j
			}
		}
		out = append(out, int32(best))
		seq = append(seq, int32(best))
		if !ignoreEOS && int32(best) == m.eog {
			break
		}
	}
	return out
}

// toyBlock reads a block as float32 rows through Block, or through
// Block16 widened (exactly: the toy's values are multiples of 1/4 below 5)
// from an F16 view.
func toyBlock(v model.KV, l, blk int) ([]float32, []float32, int, error) {
	k16, ok := v.(model.KV16)
	if !ok || !k16.F16() {
		return v.Block(l, blk)
	}
	kh, vh, n, err := k16.Block16(l, blk)
	k, val := make([]float32, len(kh)), make([]float32, len(vh))
	for i := range kh {
		k[i], val[i] = quant.FP16ToFP32(kh[i]), quant.FP16ToFP32(vh[i])
	}
	return k, val, n, err
}
