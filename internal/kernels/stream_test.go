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
