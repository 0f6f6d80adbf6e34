package kv

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks for transparent huge pages (MADV_HUGEPAGE) on the 2 MiB
// aligned interior of a fresh heap pool, before anything has touched it,
// so its pages fault in as 2 MiB pages where the kernel has them (many
// kernels default transparent_hugepage to "madvise" only). Decode at depth
// reads every position's K and V once a token from pages anywhere in the
// pool: on 4 KiB pages a 604 MB context (bench-110M at 16384 positions)
// is ~150,000 TLB misses a token. Advice only: errors are ignored, and
// the memory stays the Go heap's (a straggling view after Close still
// reads mapped memory).
func adviseHuge(b []byte) {
	const huge = 2 << 20
	if len(b) < 2*huge {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (p + huge - 1) &^ (huge - 1)
	hi := (p + uintptr(len(b))) &^ (huge - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-p:hi-p], syscall.MADV_HUGEPAGE)
}
