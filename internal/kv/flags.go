package kv

import (
	"flag"
	"fmt"
	"time"
)

// Flags are the pool's command-line settings, the same in every role that
// holds a pool. Register them on a FlagSet, then resolve with Config once
// the model's shape is known.
type Flags struct {
	PoolTokens int
	Memory     string
	PageSize   int
	Scrub      string
	Verify     string
	Lease      time.Duration
	SharedFile string
	Type       string
}

// Register adds --kv-pool-tokens, --kv-memory, --kv-page-size, --kv-scrub,
// --kv-verify, --kv-lease, --kv-shared-file and --kv-type to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.IntVar(&f.PoolTokens, "kv-pool-tokens", 0, "KV pool size in token slots (rounded up to whole pages); or give --kv-memory")
	fs.StringVar(&f.Memory, "kv-memory", "", "KV pool size as a memory budget, e.g. 512MiB or 2GiB (whole pages that fit)")
	fs.IntVar(&f.PageSize, "kv-page-size", DefaultPageSize, "token slots per KV page")
	fs.StringVar(&f.Scrub, "kv-scrub", "zero", "what released KV pages are overwritten with: zero, poison (NaN) or off (measurement only)")
	fs.StringVar(&f.Verify, "kv-verify", "sample", "when sealed KV pages are re-hashed against their seal digest: off, hit (a cached page when a request hits it), sample (hit, plus a bounded sweep of sealed pages every step) or all (debugging)")
	fs.DurationVar(&f.Lease, "kv-lease", DefaultLease, "how long pages a one-sided transfer may still write stay quarantined without a drain acknowledgement")
	fs.StringVar(&f.Type, "kv-type", "f16", "element type of KV pages: f16 (half the bytes per token of f32, llama.cpp's default), f32, or q8_0 (34 bytes per 32 elements, 1.88x f16's tokens; llama.cpp's -ctk q8_0 -ctv q8_0)")
	fs.StringVar(&f.SharedFile, "kv-shared-file", "", "back the KV pool with this file, mapped shared (e.g. /dev/shm/sluice-kv), for the shm transport")
}

// Config resolves the flags for a model with the given layers and KV row
// width. Exactly one of --kv-pool-tokens and --kv-memory must be given; the
// resulting pool's CapacityTokens is what the role must check its context
// against (I2).
func (f *Flags) Config(layers, kvDim int) (Config, error) {
	typ, err := ParseType(f.Type)
	if err != nil {
		return Config{}, err
	}
	g := Geometry{Layers: layers, KVDim: kvDim, PageSize: f.PageSize, Type: typ}
	if g.PageSize <= 0 {
		return Config{}, badConfig("--kv-page-size must be positive, got %d", f.PageSize)
	}
	scrub, err := ParseScrub(f.Scrub)
	if err != nil {
		return Config{}, err
	}
	verify, err := ParseVerify(f.Verify)
	if err != nil {
		return Config{}, err
	}
	var pages int
	switch {
	case f.PoolTokens > 0 && f.Memory != "":
		return Config{}, badConfig("give --kv-pool-tokens or --kv-memory, not both")
	case f.PoolTokens > 0:
		pages = SizeFromTokens(g, f.PoolTokens)
	case f.Memory != "":
		b, err := ParseBytes(f.Memory)
		if err != nil {
			return Config{}, err
		}
		pages = SizeFromBytes(g, b)
		if pages == 0 {
			return Config{}, badConfig("--kv-memory %s does not hold one KV page of %d bytes (%d tokens)", f.Memory, g.PageBytes(), g.PageSize)
		}
	default:
		return Config{}, badConfig("size the KV pool with --kv-pool-tokens or --kv-memory")
	}
	if f.Lease <= 0 {
		return Config{}, badConfig("--kv-lease must be positive, got %v", f.Lease)
	}
	return Config{Geometry: g, Pages: pages, Scrub: scrub, Verify: verify, Lease: f.Lease, SharedFile: f.SharedFile}, nil
}

// Describe is a one-line summary for start-up logs.
func (c Config) Describe() string {
	return fmt.Sprintf("KV pool: %d pages x %d tokens = %d tokens, %d bytes (%d layers x %d x K,V x %v); scrub=%v",
		c.Pages, c.PageSize, c.Pages*c.PageSize, int64(c.Pages)*int64(c.PageBytes()), c.Layers, c.KVDim, c.Type, c.Scrub)
}
