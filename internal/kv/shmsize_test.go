package kv

import (
	"math/bits"
	"testing"
)

// A shared pool file's header is written by another process (any peer
// that maps the file can change it). A page count chosen so that the file
// size arithmetic wraps around 2^64 back to the real file's size must not
// pass for that file: the generation words would be a slice of 2^61 words
// over 64 bytes of memory, and every bound derived from its length a lie.
func TestSharedHeaderPagesCannotWrapTheSize(t *testing.T) {
	g := Geometry{Layers: 2, KVDim: 4, PageSize: 4, Type: F32}
	const real = 8
	size := SharedFileBytes(g, real)
	// (PageBytes+8) = 2^k * odd: adding 2^(64-k) pages adds a multiple of
	// 2^64 bytes, which int64 arithmetic cannot see.
	k := bits.TrailingZeros64(uint64(g.PageBytes() + 8))
	forged := real + 1<<(64-k)
	if n := SharedFileBytes(g, forged); n == size {
		t.Errorf("SharedFileBytes(%d pages) = %d, the size of a file of %d pages", forged, n, real)
	}
	mem := make([]byte, size)
	gens, err := SharedGensOf(mem, SharedHeader{Incarnation: 1, Geometry: g, Pages: forged})
	if err == nil {
		t.Fatalf("generation words of %d pages accepted over a %d-byte file (%d words)", forged, size, len(gens))
	}
	if _, err := SharedGensOf(mem, SharedHeader{Incarnation: 1, Geometry: g, Pages: real}); err != nil {
		t.Fatal(err)
	}
}
