//go:build !linux

package kv

// adviseHuge is a no-op off Linux (huge_linux.go).
func adviseHuge([]byte) {}
