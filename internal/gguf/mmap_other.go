//go:build !unix

package gguf

import (
	"io"
	"os"
)

// mapFile reads the whole file where mmap is not available.
func mapFile(f *os.File, size int) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(f, b)
	return b, err
}

func unmapFile(b []byte) error { return nil }

func adviseRandom([]byte) func() { return func() {} }
