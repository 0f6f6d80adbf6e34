// Package sampletest holds reference statements of what package sample
// computes, written from first principles and sharing no code with it, so
// that sample's tests and the engine's (which check logprobs end to end
// against the model's logits) compare against one independent oracle.
package sampletest

import (
	"math"
	"slices"
)

// LogSoftmax is log_softmax of logits, in float64, shifted by the maximum
// so that no exponent overflows.
func LogSoftmax(logits []float32) []float64 {
	m := math.Inf(-1)
	for _, v := range logits {
		m = math.Max(m, float64(v))
	}
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v) - m)
	}
	out := make([]float64, len(logits))
	for i, v := range logits {
		out[i] = float64(v) - m - math.Log(z)
	}
	return out
}

// Ranked lists the ids 0..len(lp)-1 from the most to the least likely,
// ties in id order: the order top logprobs are reported in.
func Ranked(lp []float64) []int32 {
	order := make([]int32, len(lp))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int {
		switch {
		case lp[a] > lp[b]:
			return -1
		case lp[a] < lp[b]:
			return 1
		}
		return 0
	})
	return order
}
