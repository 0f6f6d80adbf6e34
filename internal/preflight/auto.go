package preflight

import "fmt"

// AutoKVFraction is the share of the memory the process may still take at
// start (MemAvailable, lowered to a cgroup v2 memory.max - memory.current),
// after the weights, that --kv-memory auto gives the KV pools of one
// process together. Half: the rest is for activations, the Go heap's
// garbage between collections, the OS and whatever else runs on the host
// (vLLM's --gpu-memory-utilization, 0.9, is a share of a device nothing
// else uses; a CPU host is shared).
const AutoKVFraction = 0.5

// AutoKVFallback is each pool's size when the memory available cannot be
// read (not Linux): the fixed default sluice had before auto.
const AutoKVFallback = 64 << 20

// Auto is how --kv-memory auto sized one process's pools: a pure function
// of the figures it was given (SizeAuto), kept for the log and for the
// sentences of a refusal.
type Auto struct {
	// Room is the memory the process could still take at start (-1: not
	// known, AutoKVFallback was used).
	Room int64
	// Weights is what was subtracted for the weights: a mapped file's
	// bytes, which must stay resident but still count as available page
	// cache (a private copy is already outside Room).
	Weights int64
	// Budget is AutoKVFraction of Room - Weights: every pool together.
	Budget int64
	// Pools is how many pools share Budget (equally).
	Pools int
	// Cap is the most one pool can use: max concurrency sequences at the
	// full target context (0: no cap known). A larger pool could never
	// fill.
	Cap int64
	// PerPool is each pool's size in bytes.
	PerPool int64
}

// AutoInput is what SizeAuto needs.
type AutoInput struct {
	Room, Weights int64
	Pools         int
	// BytesPerToken and PageSize give the cap's bytes; Context is the
	// target context (explicit, else the model's training context; 0:
	// unknown, no cap) and MaxConcurrency the sequences a pool serves at
	// once (0: no cap).
	BytesPerToken           int64
	PageSize                int
	Context, MaxConcurrency int
}

// SizeAuto sizes each pool for --kv-memory auto.
func SizeAuto(in AutoInput) Auto {
	a := Auto{Room: in.Room, Weights: in.Weights, Pools: max(in.Pools, 1)}
	if in.Context > 0 && in.MaxConcurrency > 0 && in.BytesPerToken > 0 && in.PageSize > 0 {
		pages := int64(ceilDiv(in.Context, in.PageSize)) * int64(in.MaxConcurrency)
		if c := pages * int64(in.PageSize) * in.BytesPerToken; c/in.BytesPerToken/int64(in.PageSize) == pages {
			a.Cap = c
		}
	}
	if in.Room < 0 {
		a.PerPool = AutoKVFallback
	} else {
		a.Budget = int64(float64(max(in.Room-max(in.Weights, 0), 0)) * AutoKVFraction)
		a.PerPool = a.Budget / int64(a.Pools)
	}
	if a.Cap > 0 && a.PerPool > a.Cap {
		a.PerPool = a.Cap
	}
	return a
}

// String says how the size was reached, in one clause.
func (a Auto) String() string {
	if a.Room < 0 {
		return fmt.Sprintf("--kv-memory auto: the memory available is not known here, so %s a pool", mib(a.PerPool))
	}
	s := fmt.Sprintf("--kv-memory auto: %.0f%% of %s available", AutoKVFraction*100, mib(a.Room))
	if a.Weights > 0 {
		s += fmt.Sprintf(" less %s of mapped weights", mib(a.Weights))
	}
	s += fmt.Sprintf(" = %s", mib(a.Budget))
	if a.Pools > 1 {
		s += fmt.Sprintf(" over %d pools", a.Pools)
	}
	s += fmt.Sprintf(": %s a pool", mib(a.PerPool))
	if a.Cap > 0 && a.PerPool == a.Cap {
		s += " (capped at max concurrency x context, all a pool can use)"
	}
	return s
}

func mib(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
