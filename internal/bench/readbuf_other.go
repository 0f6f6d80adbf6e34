//go:build !linux

package bench

func hugeAlloc(n int) (buf []byte, free func(), ok bool) { return nil, nil, false }
