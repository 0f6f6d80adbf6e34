package kernels

import (
	"encoding/binary"
	"unsafe"
)

// ReadXOR returns the XOR of b's 64-bit little-endian words (a tail of
// fewer than 8 bytes is ignored). It reads b once, front to back, as fast
// as this CPU can (on the SIMD paths: 256 bytes per step with software
// prefetch), which is what benchmarks need to measure memory read
// bandwidth: a bound for kernels that stream weights, unlike a dot product
// whose arithmetic or lack of prefetch may be the limit.
func ReadXOR(b []byte) uint64 {
	var x uint64
	n := 0
	if CurrentPath() != Generic && len(b) >= 256 {
		n = len(b) &^ 255
		x = readXORAsm(unsafe.Pointer(&b[0]), n)
	}
	for ; n+8 <= len(b); n += 8 {
		x ^= binary.LittleEndian.Uint64(b[n:])
	}
	return x
}
