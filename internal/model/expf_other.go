//go:build !amd64

package model

func expBlocksAVX512(x []float32) int       { return 0 }
func swigluBlocksAVX512(g, u []float32) int { return 0 }
func useAVX512() bool                       { return false }

func softmaxAVX512(x []float32) bool { return false }
