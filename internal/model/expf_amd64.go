package model

import "sluice/internal/kernels"

// expBlocksAVX512 applies expf to whole 16-element blocks of x from the
// start, stopping before the first block with a lane above 88 or NaN; it
// returns the number of elements done.
//
//go:noescape
func expBlocksAVX512(x []float32) int

// swigluBlocksAVX512 does swiglu's g = g/(1+e^-g)*u on whole blocks from the
// start, stopping like expBlocksAVX512 (on -g); len(u) >= len(g).
//
//go:noescape
func swigluBlocksAVX512(g, u []float32) int

// useAVX512 follows the kernels' path choice, so tests that force the
// generic path exercise the Go code here too.
func useAVX512() bool { return kernels.CurrentPath() == kernels.AVX512 }

// softmaxAVX512 is softmax (forward.go) in AVX-512, bitwise equal; it
// returns false without touching x when x holds a NaN or +Inf.
//
//go:noescape
func softmaxAVX512(x []float32) bool
