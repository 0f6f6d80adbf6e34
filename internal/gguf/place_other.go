//go:build !linux

package gguf

import "errors"

func hugeMapped([]byte) int64 { return -1 }

func anonHugeAdvised() bool { return false }

func memoryRoom() int64 { return -1 }

func copyToAnon([]byte) ([]byte, error) {
	return nil, errors.New("anonymous huge pages are a Linux feature")
}
