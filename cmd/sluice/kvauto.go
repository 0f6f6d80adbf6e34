package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"

	"sluice/internal/gguf"
	"sluice/internal/preflight"
	"sluice/internal/router/node"
)

// kvAuto is --kv-memory's default value.
const kvAuto = "auto"

// kvMemoryUsage is --kv-memory's help in every command.
var kvMemoryUsage = fmt.Sprintf("KV pool size per role in bytes (units KiB, MiB, GiB, KB, MB, GB), or auto: %.0f%% of the memory available at start (MemAvailable, lowered to the container's cgroup v2 memory.max - memory.current) after the weights, split equally between the roles' pools of this process, each capped at --max-concurrency sequences of the full context (all a pool can use). The start-up log prints each pool's tokens, the context and the concurrency at full context; with --context auto a pool too small for the model's context lowers it (WARN), an explicit --context larger than the pool refuses to start (I2). Ignored when --kv-pool-tokens is set", preflight.AutoKVFraction*100)

// sizeAutoKV sizes the pools when --kv-memory is auto (and
// --kv-pool-tokens is not given): pools is how many KV pools this process
// builds. Unless GOMEMLIMIT is set, it also gives the Go runtime a soft
// memory limit of the pools plus half the memory left beside them: the
// pools are one live allocation on the Go heap, and with the default
// GOGC the heap may otherwise grow by as much again in garbage before a
// collection.
func (o *roleOpts) sizeAutoKV(log *slog.Logger, m *node.Model, p node.Pools, pools int) node.Pools {
	if o.kvMemory != kvAuto || p.PoolTokens > 0 {
		return p
	}
	p = m.AutoPools(p, pools, o.maxConc, gguf.MemoryRoom())
	a := p.Auto
	if log != nil {
		log.Info(a.String(), "kv_memory_per_pool", a.PerPool, "pools", a.Pools, "memory_available", a.Room, "weights_mapped", a.Weights)
	}
	if a.Room > 0 && os.Getenv("GOMEMLIMIT") == "" {
		limit := a.PerPool*int64(a.Pools) + max(a.Room-a.Weights-a.PerPool*int64(a.Pools), 0)/2
		debug.SetMemoryLimit(limit)
		if log != nil {
			log.Debug("Go soft memory limit set for the auto-sized KV pools (GOMEMLIMIT overrides)", "bytes", limit)
		}
	}
	return p
}

// capForShm lowers an auto-sized pool to half the space free where the
// shm transport's sparse pool file lives (room; -1 unknown, no cap).
func capForShm(perPool, room int64) (int64, bool) {
	if room >= 0 && perPool > room/2 {
		return room / 2, true
	}
	return perPool, false
}

// logKVBanner is the start-up line vLLM users look for: each pool's
// tokens, the context, and how many sequences of the full context fit;
// with the page type and its tokens per GiB, what --kv-type changes.
func logKVBanner(log *slog.Logger, rep preflight.Report) {
	if !rep.OK {
		return
	}
	for _, r := range rep.Roles {
		log.Info(fmt.Sprintf("KV cache: %d tokens, context %d, max concurrency %.2fx at full context", r.PoolTokens, r.EffectiveContext, r.MaxConcurrency),
			"role", r.Role, "pool_bytes", r.PoolBytes, "kv_type", r.KVType, "kv_bytes_per_token", r.KVBytesPerToken,
			"tokens_per_gib", (int64(1)<<30)/max(1, r.KVBytesPerToken), "sizing", r.Sizing)
	}
}
