package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"sluice/internal/quant"
)

// TestQ8TileColumnChunksBitwise: the plain AVX2 Q8_0 tile in column chunks
// (the accumulators stored after each chunk's sweep over the token pairs
// and reloaded for the next) gives every output bitwise what Generic gives
// for its token alone, for chunks of 2-6 blocks (odd and even block
// counts, a short last chunk, a last chunk of one block) and the default
// chunk past its threshold, in both sign forms, 1..17 tokens, 1 and 2
// threads.
func TestQ8TileColumnChunksBitwise(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2")
	}
	par := NewParallel(2)
	defer par.Close()
	oldChunk := q8ChunkBlocks
	defer func() { q8ChunkBlocks = oldChunk }()
	const maxTok = 17
	for _, c := range []struct{ chunk, nb int }{
		{2, 5}, {2, 8}, {4, 9}, {4, 14}, {6, 17}, {6, 19}, {64, 100}, {64, 176},
	} {
		cols, rows := 32*c.nb, 21
		t.Run(fmt.Sprintf("chunk%d/%dx%d", c.chunk, rows, cols), func(t *testing.T) {
			m, _ := makeMatrix(t, quant.Q8_0, rows, cols, uint64(cols))
			x := randVec(rand.New(rand.NewPCG(uint64(cols), 9)), maxTok*cols, 1)
			old := CurrentPath()
			defer SetPath(old)
			ref := genericAlone(m, x, maxTok)
			SetPath(AVX2)
			q8ChunkBlocks = c.chunk
			forVariants(AVX2, func(v string) {
				for _, p := range []*Parallel{nil, par} {
					for nTok := 1; nTok <= maxTok; nTok++ {
						out := make([]float32, nTok*rows)
						MatMul(p, out, m, x, nTok)
						for k := range out {
							if math.Float32bits(out[k]) != math.Float32bits(ref[k]) {
								t.Fatalf("%s threads=%d nTok=%d token %d row %d: %v != generic alone %v", v, p.Threads(), nTok, k/rows, k%rows, out[k], ref[k])
							}
						}
					}
				}
			})
		})
	}
}
