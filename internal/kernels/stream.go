package kernels

import (
	"encoding/binary"
	"unsafe"
)

// ReadXOR returns the XOR of b's 64-bit little-endian words (a tail of
// fewer than 8 bytes is ignored). It reads every byte of b once, as fast
// as this CPU can (on the SIMD paths: its quarters side by side, 64 bytes
// of each a step with the widest loads the CPU has and software prefetch;
// the fastest of the readers tried, see stream_amd64.s), which is what
// benchmarks need to measure memory read bandwidth: a bound for kernels
// that stream weights, unlike a dot product whose arithmetic or lack of
// prefetch may be the limit. A reader slower than the machine's best
// would flatter the fraction of it that decode reaches.
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
