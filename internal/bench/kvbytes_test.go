package bench

import (
	"testing"

	"sluice/internal/kv"
	"sluice/internal/model"
)

// TestDecodeKVBytes: the K/V bytes a decode step reads, against figures
// worked out by hand.
func TestDecodeKVBytes(t *testing.T) {
	// bench-110M: 12 layers, 12 KV heads of 64. One position is a K and a
	// V row of 768 F16 values in each layer: 12*2*1536 = 36,864 bytes.
	// tg32 at depth 16384 attends over 16385..16416 positions, 16400.5 on
	// average.
	b110 := model.Config{Layers: 12, KVHeads: 12, HeadDim: 64}
	if got, want := decodeKVBytes(b110, kv.F16, 16384, 32), uint64(36864*16400.5); got != want {
		t.Errorf("bench-110M tg32@d16384 F16: %d bytes, want %d", got, want)
	}
	// Q8_0 rows: 768 values are 24 blocks of 34 bytes.
	if got, want := decodeKVBytes(b110, kv.Q8_0, 0, 1), uint64(12*2*24*34); got != want {
		t.Errorf("Q8_0 one position: %d bytes, want %d", got, want)
	}
	// gemma3-like: 6 layers, pattern 3 (layers 0,1,3,4 sliding over 4
	// positions, 2 and 5 global), one KV head of 256. At depth 100 a
	// sliding layer reads 4 positions, a global one 101 (gen 1).
	g := model.Config{Layers: 6, KVHeads: 1, HeadDim: 256, SlidingWindow: 4, SlidingPattern: 3}
	if got, want := decodeKVBytes(g, kv.F16, 100, 1), uint64(2*512*(4*4+2*101)); got != want {
		t.Errorf("sliding: %d bytes, want %d", got, want)
	}
	if decodeKVBytes(b110, kv.F16, 100, 0) != 0 {
		t.Error("no decode test, no bytes")
	}
}
