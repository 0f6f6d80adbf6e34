package kernels

import (
	"encoding/binary"
	"math/rand"
	"testing"
)

// ReadXOR must read every 8-byte word of the buffer on every path (a read
// kernel that skipped some would overstate the bandwidth).
func TestReadXORAllWords(t *testing.T) {
	defer SetPath(CurrentPath())
	rng := rand.New(rand.NewSource(7))
	buf := make([]byte, 3*4096+256+8*5+3)
	rng.Read(buf)
	for _, p := range Paths() {
		SetPath(p)
		for _, n := range []int{0, 7, 8, 255, 256, 257, 512 + 24, 4096, len(buf)} {
			var want uint64
			for i := 0; i+8 <= n; i += 8 {
				want ^= binary.LittleEndian.Uint64(buf[i:])
			}
			if got := ReadXOR(buf[:n]); got != want {
				t.Errorf("%v n=%d: %#x, want %#x", p, n, got, want)
			}
		}
	}
}

// Flipping one bit of any 8-byte word of a written buffer must change
// ReadXOR's result by exactly that bit, on every path and at lengths that
// split the buffer's quarters off 64-byte steps: a reader that skipped any
// word (half the buffer, a quarter, the last step of a stream) would read
// less than it is credited with and overstate the bandwidth.
func TestReadXORReadsEveryWord(t *testing.T) {
	defer SetPath(CurrentPath())
	for _, p := range Paths() {
		SetPath(p)
		checkReadsEveryWord(t, p.String(), ReadXOR, 8)
	}
}

// checkReadsEveryWord flips one bit of each word of buffers of a few
// lengths that are multiples of align and checks that read's result
// changes by exactly that bit.
func checkReadsEveryWord(t *testing.T, name string, read func([]byte) uint64, align int) {
	t.Helper()
	rng := rand.New(rand.NewSource(11))
	buf := make([]byte, 4*1024+256+8*3+5)
	rng.Read(buf)
	for _, n := range []int{256, 1024 + 256, len(buf)} {
		b := buf[:n/align*align]
		base := read(b)
		for w := 0; w+8 <= len(b); w += 8 {
			bit := uint(w/8) % 64
			b[w+int(bit/8)] ^= 1 << (bit % 8)
			got := read(b)
			b[w+int(bit/8)] ^= 1 << (bit % 8)
			if got^base != 1<<bit {
				t.Fatalf("%s n=%d: flipping bit %d of the word at %d changed the result by %#x", name, len(b), bit, w, got^base)
			}
		}
	}
}
