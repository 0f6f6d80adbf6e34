//go:build unix && !linux

package gguf

func adviseHuge([]byte) {}
