package model

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/kernels"
	"sluice/internal/quant"
)

// roundedKV is an F32 memKV whose rows are stored as a Q8_0 page would
// hold them, dequantized here from the bytes (scale times int8, in
// float64 and narrowed: exact), independently of kernels.DequantQ8Rows.
type roundedKV struct{ *memKV }

func (m roundedKV) Put(layer, pos int, k, v []float32) error {
	return m.memKV.Put(layer, pos, q8RoundTrip(k), q8RoundTrip(v))
}

func q8RoundTrip(x []float32) []float32 {
	b := make([]byte, len(x)/32*34)
	quant.QuantizeRowQ8_0(x, b)
	out := make([]float32, len(x))
	for i := range out {
		blk := b[i/32*34:]
		d := quant.FP16ToFP32(binary.LittleEndian.Uint16(blk))
		out[i] = float32(float64(int8(blk[2+i%32])) * float64(d))
	}
	return out
}

// TestQ8AttentionReadsTheRows: attention over Q8_0 pages gives, bit for
// bit and on every path, the logits of attention over F32 pages holding
// the same rows dequantized: each page piece is cut at the right row,
// block and head, for heads narrower than a block (hd 16: two heads a
// block), of one block (hd 32) and of two (hd 64), over page sizes that
// cut tiles mid-page, prefill in chunks and decode (split and not).
func TestQ8AttentionReadsTheRows(t *testing.T) {
	prev := kernels.CurrentPath()
	defer kernels.SetPath(prev)
	for _, sh := range []testShape{
		deepShapeQ8, // hd 16, 2 KV heads
		{arch: "llama", vocab: 16, embd: 64, layers: 2, heads: 2, kvHeads: 2, ff: 16, wtype: quant.F32},  // hd 32
		{arch: "llama", vocab: 16, embd: 128, layers: 1, heads: 4, kvHeads: 2, ff: 16, wtype: quant.F32}, // hd 32, group 2
		{arch: "llama", vocab: 16, embd: 128, layers: 1, heads: 2, kvHeads: 1, ff: 16, wtype: quant.F32}, // hd 64
	} {
		src := newMemModel(sh, 5)
		src.meta["llama.context_length"] = 4096
		m := mustBuild(src)
		kvd := m.cfg.KVDim()
		toks := randTokens(rand.New(rand.NewPCG(6, 6)), 12, sh.vocab)
		const depth = 700
		for _, p := range kernels.Paths() {
			if err := kernels.SetPath(p); err != nil {
				t.Fatal(err)
			}
			for _, ps := range []int{16, 5} {
				run := func(kv KV, splitMin int) []float32 {
					r := m.NewRunner(kernels.NewParallel(2))
					r.splitMin = splitMin
					var out []float32
					for pos, n := 0, 7; pos < len(toks); pos, n = pos+n, 1 {
						res := r.Forward([]Seq{{Tokens: toks[pos : pos+n], Pos: depth + pos, KV: kv, AllLogits: true}})
						if res[0].Err != nil {
							t.Fatal(res[0].Err)
						}
						out = append(out, res[0].Logits...)
					}
					return out
				}
				for _, splitMin := range []int{0, 1} {
					q := fillDeep(newMemKVQ8(ps, sh.layers, kvd), depth)
					f := roundedKV{newMemKV(ps, sh.layers, kvd)}
					fillDeepInto(f, sh.layers, kvd, depth)
					got, want := run(q, splitMin), run(f, splitMin)
					if !bitsEqual(got, want) {
						t.Fatalf("%+v %v page size %d split %d: Q8_0 logits differ from F32 over the dequantized rows at %d (%v vs %v)",
							sh, p, ps, splitMin, firstDiff(got, want), got[firstDiff(got, want)], want[firstDiff(got, want)])
					}
					for _, x := range got {
						if math.IsNaN(float64(x)) {
							t.Fatal("NaN logit")
						}
					}
				}
			}
		}
	}
}

// fillDeepInto is fillDeep through any KV (the same seeded rows).
func fillDeepInto(kv KV, layers, kvd, depth int) {
	r := rand.New(rand.NewPCG(uint64(depth), 77))
	k, v := make([]float32, kvd), make([]float32, kvd)
	for l := 0; l < layers; l++ {
		for p := 0; p < depth; p++ {
			for i := range k {
				k[i], v[i] = float32(r.NormFloat64()*2), float32(r.NormFloat64())
			}
			if err := kv.Put(l, p, k, v); err != nil {
				panic(err)
			}
		}
	}
}
