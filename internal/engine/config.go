package engine

import (
	"fmt"
	"time"

	"sluice/internal/kv"
	"sluice/internal/sched"
)

// Config configures one worker (prefill, decode) or a colocated engine.
// The zero values of the optional fields pick the defaults noted.
type Config struct {
	// Model is the runtime every worker of this engine runs.
	Model Runtime
	// Context is the configured context length in tokens; 0 means the
	// model's own. The effective context is the minimum of this and the
	// pool capacity of every role (I2).
	Context int
	// PoolPages is the number of KV pages of this role's pool.
	PoolPages int
	// PageSize is token slots per page (default 16).
	PageSize int
	// KVType is the element type of the pool's K and V rows (--kv-type;
	// zero: kv.F16, llama.cpp's default). Every role of a deployment must
	// use the same: the handoff refuses a peer of another type.
	KVType kv.Type
	// Scrub is what released pages are overwritten with (I7).
	Scrub kv.ScrubMode
	// Order is the free-list discipline; tests use LIFO to force reuse.
	Order kv.Order
	// Lease bounds how long pages that a one-sided transport may still
	// write stay quarantined after an abort (I6). Default 2s.
	Lease time.Duration
	// SharedFile backs the decode pool with a MAP_SHARED file (shm transport).
	SharedFile string
	// Threads per forward step (default 1).
	Threads int
	// BurstThreads, when above Threads and with Idle set, are the threads
	// of a step taken while Idle reports true: in one process the two
	// roles share the cores, and a role whose neighbour has nothing to
	// compute borrows its threads (prefill of a lone request, decode while
	// no prompt runs). The kernels give bitwise the same results on any
	// thread count (batch invariance), so this changes speed only.
	BurstThreads int
	Idle         func() bool
	// ChunkTokens bounds prompt tokens per sequence per step (chunked
	// prefill; default DefaultChunkTokens, at most MaxChunkTokens): a long
	// prompt runs as several chunks, each step also advancing every
	// decoding sequence by one token, so decode's inter-token latency stays
	// bounded while long prompts arrive.
	ChunkTokens int
	// StepTokens bounds the tokens of one step, every sequence together
	// (vLLM's max_num_batched_tokens; default DefaultStepTokens, at least
	// ChunkTokens, at most MaxStepTokens). Decoding sequences come first,
	// one token each, counted against the budget (each always runs, even
	// when they alone exceed it); prompt chunks, oldest arrival first,
	// take what is left.
	StepTokens int
	// SharedStepTokens bounds the prompt tokens of one step while the
	// batch is shared: another tenant than the step's has been in it
	// within the last sharedRecent steps (sched.Shares.Short). A prompt
	// that arrives waits for the step in progress, so this is what a
	// co-tenant's prompt waits behind while another tenant floods.
	// Default (0) ChunkTokens, half of it in the colocated engine
	// (colocatedSharedStep); 1 to StepTokens (StepTokens: shared steps
	// are as long as any, the tenants' parts still apply).
	SharedStepTokens int
	// NestForward is a forward pass's fixed cost in prompt tokens, for
	// the nested budget and its charges (yield.go, sched.Nest): a paused
	// step of T tokens spends at most NestForward + T on nested passes,
	// each costing NestForward plus its tokens. The servers measure it
	// at start (MeasureForwardCost, --nest-forward-cost). 0: a quarter
	// of ChunkTokens (deterministic, for tests and callers that do not
	// measure); 1 to StepTokens otherwise.
	NestForward int
	// BatchBytes bounds the page bytes of one transfer batch (default 1 MiB).
	BatchBytes int
	// HandoffAfterPrefill makes the prefill worker send a prompt's pages
	// only once the whole prompt is prefilled, as before the streaming
	// handoff (for comparisons). By default each chunk's completed pages
	// go to decode while the next chunk computes, so a long prompt's
	// transfer hides under its compute; the commit comes last either way.
	HandoffAfterPrefill bool
	// CommitAside bounds how long the prefill worker's scheduler, once a
	// streamed prompt ended while another tenant's prompt waits in its
	// batch, waits for that prompt's handoff (the last pages and the
	// commit) before computing further (aside.go): per step of the
	// batch (its nested passes included), 0 for DefaultCommitAside
	// (off), negative never. The wait is charged to no tenant's step
	// service (docs/isolation.md): charge it before turning it on for
	// tenants that do not trust each other.
	CommitAside time.Duration
	// HandoffTimeout bounds how long a decode reservation may wait for its
	// commit and its stream without progress before it is aborted
	// (default 2 minutes): a router or prefill worker that died must not
	// hold pages forever. Each applied page write is progress: a long
	// prompt streams its pages while it prefills, so its prefill may take
	// longer than the timeout as long as pages keep coming.
	HandoffTimeout time.Duration
	// QueueTimeout bounds how long a request waits in the engine's queue
	// (and a prompt for room in the prefill pool) before it is refused
	// with 503 queue_timeout (default 30s).
	QueueTimeout time.Duration
	// MaxQueue bounds requests waiting for their turn and for KV pages
	// (default 256); an arrival beyond it is refused with 429.
	MaxQueue int
	// MaxConcurrency bounds requests holding KV pages at once; more wait
	// in the queue (default 64).
	MaxConcurrency int
	// NoWatermark admits while any page is free (no free-page watermark,
	// see watermarkOK): preemption tests use it to force preemptions
	// through pools that would otherwise admit fewer at once.
	NoWatermark bool
	// PrefixCache reuses the full prompt pages of earlier requests of the
	// same tenant (kv prefix cache, I11): a hit skips computing them.
	PrefixCache bool
	// CacheSecret keys the tenants' cache salts (kv.TenantSalt): the
	// deployment's secret. Empty: a random secret for this process.
	CacheSecret []byte
	// PublicPrefix is the operator's declared public prefix
	// (--shared-prefix-file): the full pages of a prompt that starts with
	// it are cached in a public scope every tenant reads. Empty: no page
	// is ever shared across tenants.
	PublicPrefix []int32
	// CacheWeight is a tenant's weight in the prefix cache's per-tenant
	// shares (kv.Config.CacheWeight); nil: every tenant weighs 1.
	CacheWeight func(tenant string) int
	// Verify says when sealed KV pages are re-hashed against their seal
	// digest (--kv-verify; zero: kv.VerifyHit); under kv.VerifySample every
	// scheduler step re-hashes VerifyPages of them (0: kv's default).
	Verify      kv.Verify
	VerifyPages int
	// VerifyShare bounds the sweep's time to this fraction of the time
	// spent in forward steps (0: DefaultVerifyShare; 1 or more: a sweep
	// every step, for tests that count steps).
	VerifyShare float64
	// GrammarUnits, when set, bounds each step's constrained-decoding
	// work by this many grammar work units instead of by time
	// (GrammarShare of the forward pass): deterministic, for tests.
	GrammarUnits int
	// GrammarMaskBytes bounds the token masks this worker's compiled
	// grammars cache, all tenants' together (--grammar-mask-cache; <= 0:
	// grammar.DefaultMaskBytes).
	GrammarMaskBytes int64
	// ModelFingerprint names the weights in cache keys (I13). Empty: the
	// model's name and shape.
	ModelFingerprint []byte

	// nestOnce: a paused step runs at most one nested step (the
	// colocated engine, yield.go), its budget otherwise as sched.Nest.
	nestOnce bool

	// formats compiles constrained requests' grammars (set by withDefaults,
	// shared by the copies of one worker's Config).
	formats *formats

	// Unsafe switches safeguards off. TEST AND DEMO HOOK ONLY: the incident
	// demo and the benchmarks use it to show each safeguard alone and to
	// measure what the checks cost. Never set it in a server.
	Unsafe Unsafe
}

// Unsafe lists the safeguards that can be switched off one by one. The
// zero value keeps every safeguard on.
type Unsafe struct {
	NoAdmission   bool // skip the context-length admission check (I1/I2)
	NoCountCheck  bool // commit: skip token count and page coverage (I5)
	NoDigest      bool // commit: skip the digest comparison (I5)
	NoOwnerCheck  bool // pool: skip owner/generation tags (I3)
	NoExtentCheck bool // pool: let attention read unwritten slots (I4)
	NoScrub       bool // pool: do not scrub released pages (I7)
	// TenantBlindCache keys the prefix cache without the tenant (no salt)
	// and lets the pool serve cached pages to any tenant (I11 off): the
	// shared cache of the CVEs, for the auditor's must-fail test.
	TenantBlindCache bool
}

func (c Config) withDefaults() Config {
	if c.PageSize <= 0 {
		c.PageSize = 16
	}
	if c.Threads <= 0 {
		c.Threads = 1
	}
	if c.ChunkTokens == 0 {
		c.ChunkTokens = DefaultChunkTokens
	}
	if c.StepTokens == 0 {
		// An explicit chunk above the default budget keeps whole chunks.
		c.StepTokens = max(DefaultStepTokens, c.ChunkTokens)
	}
	if c.SharedStepTokens == 0 {
		c.SharedStepTokens = min(c.ChunkTokens, c.StepTokens)
	}
	if c.BatchBytes <= 0 {
		c.BatchBytes = 1 << 20
	}
	if c.CommitAside == 0 {
		c.CommitAside = DefaultCommitAside
	}
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = 64
	}
	if c.HandoffTimeout <= 0 {
		c.HandoffTimeout = 2 * time.Minute
	}
	if c.QueueTimeout <= 0 {
		c.QueueTimeout = 30 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Second
	}
	if c.formats == nil {
		c.formats = newFormats(c.Model, c.GrammarMaskBytes)
	}
	if c.Unsafe.NoScrub {
		c.Scrub = kv.ScrubOff
	}
	return c
}

// queueConfig is the admission queue of an engine built on c.
func (c Config) queueConfig() sched.Config {
	return sched.Config{MaxQueue: c.MaxQueue, QueueTimeout: c.QueueTimeout, MaxRunning: c.MaxConcurrency,
		Quantum: c.configuredContext()}
}

func (c Config) geometry() kv.Geometry {
	return kv.Geometry{Layers: c.Model.Layers(), KVDim: c.Model.KVDim(), PageSize: c.PageSize, Type: c.KVType}
}

// configuredContext is the context before pool capacity is considered.
func (c Config) configuredContext() int {
	ctx := c.Context
	if ctx <= 0 {
		ctx = c.Model.Context()
	}
	return ctx
}

// The step budget's defaults and bounds (the --prefill-chunk and
// --max-num-batched-tokens flags). The upper bounds keep one step's
// activations (a few KiB per token for the models sluice runs, tens of KiB
// for large ones) to what a worker can hold.
const (
	DefaultChunkTokens = 64
	DefaultStepTokens  = 256
	MaxChunkTokens     = 16384
	MaxStepTokens      = 65536
)

// CheckBatch refuses a chunk size or step budget outside its bounds, with
// the sentence a flag error shows.
func CheckBatch(chunk, step int) error {
	switch {
	case chunk < 1 || chunk > MaxChunkTokens:
		return fmt.Errorf("the prefill chunk must be 1 to %d tokens, not %d", MaxChunkTokens, chunk)
	case step < 1 || step > MaxStepTokens:
		return fmt.Errorf("the step budget (max batched tokens) must be 1 to %d tokens, not %d", MaxStepTokens, step)
	case step < chunk:
		return fmt.Errorf("the step budget of %d tokens is smaller than the prefill chunk of %d tokens: a chunk could never run whole; raise the budget or lower the chunk", step, chunk)
	}
	return nil
}

// validate refuses a role whose configured context does not fit its pool
// (I2): the incident's pool held 681,280 tokens behind an advertised
// context of 1,048,576 and nothing forced them to agree.
func (c Config) validate(role string) error {
	if c.Model == nil {
		return errf(CodeInvalid, 500, nil, "%s: no model configured", role)
	}
	if c.PoolPages <= 0 {
		return errf(CodeInvalid, 500, nil, "%s: the KV pool needs at least one page (PoolPages=%d)", role, c.PoolPages)
	}
	if err := CheckBatch(c.ChunkTokens, c.StepTokens); err != nil {
		return errf(CodeInvalid, 500, err, "%s: %v", role, err)
	}
	if c.SharedStepTokens < 1 || c.SharedStepTokens > c.StepTokens {
		return errf(CodeInvalid, 500, nil, "%s: the shared step's prompt tokens must be 1 to the step budget of %d, not %d", role, c.StepTokens, c.SharedStepTokens)
	}
	if c.NestForward < 0 || c.NestForward > c.StepTokens {
		return errf(CodeInvalid, 500, nil, "%s: a forward pass's fixed cost must be 1 to the step budget of %d tokens (0: a quarter chunk), not %d", role, c.StepTokens, c.NestForward)
	}
	ctx := c.configuredContext()
	capTokens := c.PoolPages * c.PageSize
	if ctx <= 0 {
		return errf(CodeInvalid, 500, nil, "%s: no context length configured and the model does not declare one", role)
	}
	if ctx > capTokens {
		return errf(CodeInvalid, 500, nil,
			"%s: configured context %d tokens exceeds the KV pool capacity %d tokens (%d pages x %d); lower the context or grow the pool (I2)",
			role, ctx, capTokens, c.PoolPages, c.PageSize)
	}
	return nil
}

func (c Config) newPool() (pagePool, error) {
	p, err := kv.New(kv.Config{
		Geometry:    c.geometry(),
		Pages:       c.PoolPages,
		Scrub:       c.Scrub,
		Order:       c.Order,
		Lease:       c.Lease,
		SharedFile:  c.SharedFile,
		Verify:      c.Verify,
		VerifyPages: c.VerifyPages,
		CacheWeight: c.CacheWeight,
		Unsafe: kv.Unsafe{NoOwnerCheck: c.Unsafe.NoOwnerCheck, NoExtentCheck: c.Unsafe.NoExtentCheck,
			CacheIgnoresTenant: c.Unsafe.TenantBlindCache},
	})
	if err != nil {
		return nil, fmt.Errorf("engine: KV pool: %w", err)
	}
	return kvPool{p}, nil
}
