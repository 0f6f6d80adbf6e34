//go:build !amd64

package kernels

import "unsafe"

func prefetchLines(p unsafe.Pointer, n int) {}
