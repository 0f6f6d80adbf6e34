package kernels

import "unsafe"

//go:noescape
func prefetchLines(p unsafe.Pointer, n int)
