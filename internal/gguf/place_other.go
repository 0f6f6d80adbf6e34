//go:build !linux

package gguf

import "errors"

func hugeMapped([]byte) int64 { return -1 }

func anonHugeAdvised() bool { return false }

// MemoryRoom is -1 (not known) where /proc/meminfo is not read.
func MemoryRoom() int64 { return -1 }

func copyToAnon([]byte) ([]byte, error) {
	return nil, errors.New("anonymous huge pages are a Linux feature")
}
