package model

import "sluice/internal/kernels"

// expBlocksAVX512 applies expf to whole 16-element blocks of x from the
// start, stopping before the first block with a lane outside [-87, 88] or
// NaN; it returns the number of elements done.
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
