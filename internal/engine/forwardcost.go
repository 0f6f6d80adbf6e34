package engine

import (
	"fmt"
	"math"
	"time"

	"sluice/internal/kv"
)

// A forward pass's fixed cost, for the nested budget (yield.go,
// sched.Nest): a nested step is a whole forward pass, which costs more
// than its tokens (every layer's weights are read for one token as for a
// chunk, every layer's threads meet). The budget counts a pass as F +
// its tokens against the paused step's own F + T, so F must be what the
// serving model costs on the serving machine, in tokens.
//
// It is measured, not computed from the model's shapes: a shapes
// estimate (weight bytes read per pass over a token's FLOPs) gives every
// model of one weight type the same F, while on one machine
// bench-15M-q8_0 measured about twice 110M-q8_0's (model.BenchmarkForward
// FixedCost: the small model's per-layer overheads and attention weigh
// more beside its small matrices), and f32 against q8_0 depends on the
// kernels' GEMV/GEMM speeds, not on the bytes alone. So the server times
// a few passes of the model at start (MeasureForwardCost), which also
// warms its weights (a memory-mapped file's first pass reads them from
// disk, which the first request would pay otherwise).

// ForwardCost is a measured fixed cost of a forward pass.
type ForwardCost struct {
	// Tokens is F for Config.NestForward: Fit rounded up, within [1,
	// the step's token budget].
	Tokens int
	// Fit is F as measured, before rounding and bounds (+Inf: the chunk
	// was no slower than one token).
	Fit float64
	// One and Chunk are the fastest 1-token and ChunkTokens-token passes
	// of Rounds rounds.
	One, Chunk  time.Duration
	ChunkTokens int
	Rounds      int
}

// FitForwardCost is F of a pass costing c (F + n) for n tokens, through
// a 1-token pass of time one and a k-token pass of time many: c = (many
// - one) / (k - 1), F = one / c - 1. A chunk no slower than one token
// (k <= 1, or noise) is all fixed cost: +Inf.
func FitForwardCost(one, many time.Duration, k int) float64 {
	if k <= 1 || many <= one {
		return math.Inf(1)
	}
	c := float64(many-one) / float64(k-1)
	return float64(one)/c - 1
}

// ForwardCostTokens is the fit as the budget's F: rounded up (an F a
// little high only lets fewer nested passes in), at least 1 (a pass
// costs something beyond its tokens) and at most hi, the step's token
// budget: with F at least the paused step's T, one nested pass of at
// most T tokens fits in F + T however high the true F is, so a higher
// F changes nothing, and a loaded machine's inflated timing cannot
// matter beyond it.
func ForwardCostTokens(fit float64, hi int) int {
	hi = max(hi, 1)
	if math.IsNaN(fit) || fit >= float64(hi) {
		return hi
	}
	return max(int(math.Ceil(fit)), 1)
}

// Measurement rounds: at least minRounds, more while the rounds so far
// took under measureFor, at most maxRounds. The fastest of each pass
// counts (a loaded machine slows a pass, never speeds one up): on a
// machine at load 15-19 (2 cores), 9 rounds of bench-15M-q8_0 fitted F
// from 1.3 to 6.0 (a long chunk pass is the likelier to be preempted,
// which lowers F); more rounds give each pass more chances to run
// alone. A small model's 32 rounds take tens of milliseconds; a large
// one stops after measureFor.
const (
	minRounds  = 3
	maxRounds  = 32
	measureFor = time.Second
)

// MeasureForwardCost times forward passes of cfg's model on cfg.Threads
// threads: a ChunkTokens-token pass (untimed: it warms the weights),
// then rounds of a 1-token and a ChunkTokens-token pass, both at
// position 0 as a nested step's first chunk is (a prompt's first chunk;
// attention over earlier positions is a per-token cost, not a fixed
// one). Its KV is a pool of its own, a chunk's pages, released after.
func MeasureForwardCost(cfg Config) (ForwardCost, error) {
	return measureForwardCost(cfg, time.Now)
}

func measureForwardCost(cfg Config, now func() time.Time) (ForwardCost, error) {
	cfg = cfg.withDefaults()
	if cfg.Model == nil {
		return ForwardCost{}, fmt.Errorf("engine: no model to measure")
	}
	k := cfg.ChunkTokens
	pages := kv.PagesFor(k, cfg.PageSize)
	pool, err := kv.New(kv.Config{Geometry: cfg.geometry(), Pages: pages})
	if err != nil {
		return ForwardCost{}, fmt.Errorf("engine: the forward cost's KV pool: %w", err)
	}
	defer pool.Close()
	owner := kv.Owner{Tenant: "forward-cost", ID: newID()}
	table, err := pool.Reserve(owner, pages)
	if err != nil {
		return ForwardCost{}, fmt.Errorf("engine: the forward cost's KV pages: %w", err)
	}
	defer pool.Release(owner, table)
	view := pool.View(owner, table)
	fwd := cfg.Model.NewForwarder(cfg.Threads)
	if c, ok := fwd.(interface{ Close() }); ok {
		defer c.Close()
	}
	toks := make([]int32, k)
	for i := range toks {
		toks[i] = int32(1 + i*7%max(cfg.Model.Vocab()-1, 1))
	}
	pass := func(n int) (time.Duration, error) {
		t0 := now()
		res := fwd.Forward([]Step{{Tokens: toks[:n], Pos: 0, KV: view}})
		d := now().Sub(t0)
		if len(res) != 1 {
			return 0, fmt.Errorf("engine: the forward cost's pass returned %d results", len(res))
		}
		return d, res[0].Err
	}
	if _, err := pass(k); err != nil {
		return ForwardCost{}, fmt.Errorf("engine: the forward cost's first pass: %w", err)
	}
	fc := ForwardCost{ChunkTokens: k, One: time.Duration(math.MaxInt64), Chunk: time.Duration(math.MaxInt64)}
	var spent time.Duration
	for fc.Rounds < maxRounds && (fc.Rounds < minRounds || spent < measureFor) {
		one, err := pass(1)
		if err != nil {
			return ForwardCost{}, err
		}
		many, err := pass(k)
		if err != nil {
			return ForwardCost{}, err
		}
		fc.One, fc.Chunk = min(fc.One, one), min(fc.Chunk, many)
		spent += one + many
		fc.Rounds++
	}
	fc.Fit = FitForwardCost(fc.One, fc.Chunk, k)
	fc.Tokens = ForwardCostTokens(fc.Fit, cfg.StepTokens)
	return fc, nil
}
