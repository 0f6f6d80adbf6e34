package kernels

import "unsafe"

// Prefetch asks the CPU to bring the cache lines of x into the cache
// ahead of use (PREFETCHT0 per line on amd64; nothing elsewhere). It
// changes no value. Flash-decoding reads each page's K and V rows once,
// whole, in page order through pages that lie anywhere in the pool: the
// next page's rows are requested while the current one is computed.
func Prefetch[T float32 | uint16 | byte](x []T) {
	if len(x) == 0 {
		return
	}
	prefetchLines(unsafe.Pointer(&x[0]), len(x)*int(unsafe.Sizeof(x[0])))
}
