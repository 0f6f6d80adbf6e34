package kernels

import "unsafe"

// Prefetch asks the CPU to bring the cache lines of x into the cache
// ahead of use (PREFETCHT1 per line on amd64; nothing elsewhere). It
// changes no value. Flash-decoding reads each page's K and V rows once,
// whole, in page order through pages that lie anywhere in the pool: the
// next page's rows are requested while the current one is computed.
//
// Into L2 (T1), not L1 (T0): a page piece is hundreds of lines asked for
// at once, more than L1 can have in flight, and the L2 takes more. Decode
// after 8192 positions (BenchmarkAttentionPrefillDepth, bench-110M
// attention, F16, 1 thread, Zen 5 under load), interleaved x3: 3.26-3.37
// cpu-ms a step with T1 (T2 the same) against 3.76-4.18 with T0, 3.72-4.12
// with NTA and 4.35-4.51 with no prefetch; prefill at that depth
// unchanged (389-418 against 402-404 cpu-ms for 512 tokens).
func Prefetch[T float32 | uint16 | byte](x []T) {
	if len(x) == 0 {
		return
	}
	prefetchLines(unsafe.Pointer(&x[0]), len(x)*int(unsafe.Sizeof(x[0])))
}
