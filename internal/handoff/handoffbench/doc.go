// Package handoffbench holds the handoff throughput benchmarks, which
// compare every transport with a raw copy measured in the same run.
package handoffbench
