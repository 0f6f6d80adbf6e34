//go:build !amd64

package kernels

func spinPause() {}
