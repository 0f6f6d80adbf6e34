package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// The crowding-out workload (issue 28): tenant b sends blocks of
// --requests requests cycling over crowdPrompts prompts of its own
// (--prompt tokens, --gen generated), the first level of --concurrency in
// flight, alone and while tenant a floods unique --long-prompt prompts
// (--long-gen generated) with crowdFlood in flight. Every server is warmed
// first (crowdRun.start). With --blocks 0 each phase runs on a fresh
// server, one alone/flooded pair per repeat; with --blocks N each repeat
// runs N pairs on one server (crowdRun.shared). Figures are pooled over
// every block; the ratios' intervals resample the pairs and their requests
// (stats.go). The pool holds crowdPoolContexts contexts: a's flood alone
// asks for several times that.

const (
	crowdPrompts      = 4
	crowdFlood        = 8
	crowdPoolContexts = 4
	// crowdBound is issue 28's bound: b's TTFT flooded within 10% of b
	// alone.
	crowdBound = 1.10
	// crowdResamples: bootstrap resamples per interval (its ends move by
	// about 0.01x between seeds at 2000).
	crowdResamples = 2000
	// crowdWarmFlood: how long a's flood warms a fresh server.
	crowdWarmFlood = time.Second
)

type crowdSide struct {
	Stats sideStats `json:"b"`
	// HitRate is b's cached prompt tokens over its prompt tokens.
	HitRate float64 `json:"b_hit_rate"`
	// FloodOK and FloodNon200 count a's requests that finished during the
	// phase, by outcome (429s are a's queue share at work).
	FloodOK     int `json:"a_ok"`
	FloodNon200 int `json:"a_non_200"`
	FloodErrors int `json:"a_errors"`
	// Preemptions during b's measured run.
	Preemptions int64 `json:"preemptions"`
	// FloodTokS is a's prompt and generated tokens of the requests that
	// finished during the phase, over b's measured time: what the flood
	// still gets while b is protected.
	FloodTokS float64 `json:"a_tok_s"`
	// Phases are b's first-token phases over its measured runs (the
	// server's sluice_first_token_phase_seconds for tenant b), by
	// "role/phase": where b's TTFT went.
	Phases map[string]phaseSum `json:"b_first_token_phases,omitempty"`
	// All and Slowest are where the TTFT of b's requests went by the
	// server's request log lines (first_token_ms), every OK request's
	// and the slowest 5%'s at the client (crowdSlowest).
	All     *firstTimes `json:"b_first_token_ms,omitempty"`
	Slowest *firstTimes `json:"b_slowest_5pct_first_token_ms,omitempty"`
}

// firstTimes are requests' mean first_token_ms by phase, with their mean
// TTFT at the client (client_ttft) and what the server's figures leave
// of it (outside: client_ttft - ttft - first_token_write: the client, the
// network and the HTTP server before the handler's start).
type firstTimes struct {
	Requests int                `json:"requests"`
	Logged   int                `json:"logged"`
	MeanMS   map[string]float64 `json:"mean_ms"`
}

// crowdSlowest are the first_token_ms means of the OK samples, of the
// slowest frac of them by TTFT when frac < 1; nil without any logged.
func crowdSlowest(ss []streamSample, frac float64) *firstTimes {
	type st struct {
		ttft  float64
		first map[string]float64
	}
	var ok []st
	for _, s := range ss {
		if d, has := s.ttft(); has && s.err == nil {
			ok = append(ok, st{float64(d.Microseconds()) / 1000, s.first})
		}
	}
	slices.SortFunc(ok, func(a, b st) int {
		switch {
		case a.ttft > b.ttft:
			return -1
		case a.ttft < b.ttft:
			return 1
		}
		return 0
	})
	n := len(ok)
	if frac < 1 {
		n = int(math.Ceil(frac * float64(len(ok))))
	}
	ft := &firstTimes{Requests: n, MeanMS: map[string]float64{}}
	for _, s := range ok[:n] {
		if s.first == nil {
			continue
		}
		ft.Logged++
		ft.MeanMS["client_ttft"] += s.ttft
		ft.MeanMS["outside"] += s.ttft - s.first["ttft"] - s.first["first_token_write"]
		for k, v := range s.first {
			ft.MeanMS[k] += v
		}
	}
	if ft.Logged == 0 {
		return nil
	}
	for k := range ft.MeanMS {
		ft.MeanMS[k] /= float64(ft.Logged)
	}
	return ft
}

// phaseSum is one phase's requests and seconds.
type phaseSum struct {
	Count float64 `json:"count"`
	Sum   float64 `json:"sum_s"`
}

// meanMS is the mean in milliseconds (0 without requests).
func (p phaseSum) meanMS() float64 {
	if p.Count == 0 {
		return 0
	}
	return 1000 * p.Sum / p.Count
}

type crowdReport struct {
	Model       string    `json:"model"`
	Threads     int       `json:"threads_total"`
	Colocated   bool      `json:"colocated"`
	BPrompt     int       `json:"b_prompt_tokens"`
	BGen        int       `json:"b_generated_tokens"`
	BDistinct   int       `json:"b_distinct_prompts"`
	BInFlight   int       `json:"b_in_flight"`
	BRequests   int       `json:"b_requests_per_phase"`
	APrompt     int       `json:"a_prompt_tokens"`
	AGen        int       `json:"a_generated_tokens"`
	AInFlight   int       `json:"a_in_flight"`
	PoolTokens  int       `json:"pool_tokens"`
	Repeats     int       `json:"repeats"`
	NProc       int       `json:"nproc"`
	CPU         string    `json:"cpu_model"`
	LoadBefore  string    `json:"loadavg_before"`
	LoadAfter   string    `json:"loadavg_after"`
	Args        []string  `json:"sluice_args"`
	Alone       crowdSide `json:"alone"`
	Flooded     crowdSide `json:"flooded"`
	TTFTP50x    float64   `json:"ttft_p50_flooded_over_alone"`
	TTFTP99x    float64   `json:"ttft_p99_flooded_over_alone"`
	HitRateDrop float64   `json:"hit_rate_alone_minus_flooded"`
	// Layout is "fresh" (a fresh server per phase) or "shared" (one
	// server per repeat, BlocksPerServer alone/flooded block pairs).
	Layout          string `json:"layout"`
	BlocksPerServer int    `json:"blocks_per_server,omitempty"`
	// Blocks are b's TTFTs per block pair, in the order measured: the
	// bootstrap's units (crowding-ci pools them over runs).
	Blocks []crowdBlock `json:"blocks"`
	// The ratios' 95% intervals (bootstrapCI over Blocks) and whether
	// each resolves "at most Bound".
	Bound      float64  `json:"bound"`
	Resamples  int      `json:"resamples"`
	TTFTP50CI  ci       `json:"ttft_p50_ratio_ci95"`
	TTFTP99CI  ci       `json:"ttft_p99_ratio_ci95"`
	P50Verdict string   `json:"ttft_p50_verdict"`
	P99Verdict string   `json:"ttft_p99_verdict"`
	HitVerdict string   `json:"hit_rate_verdict"`
	Coverage   coverage `json:"b_flooded_coverage"`
}

// crowdBlock is one alone block of b's requests and the flooded block
// measured next to it.
type crowdBlock struct {
	Alone   []float64 `json:"alone_ttft_ms"`
	Flooded []float64 `json:"flooded_ttft_ms"`
	// Cover: did a flood during each of b's flooded requests.
	Cover coverage `json:"flooded_coverage"`
}

func (k *crowdBlock) add(r blockResult) {
	if r.flooded {
		k.Flooded, k.Cover = r.ttft, r.cover
	} else {
		k.Alone = r.ttft
	}
}

// crowdUnits are the bootstrap's units of blocks: groups alone, flooded.
func crowdUnits(blocks []crowdBlock) []bootUnit {
	var out []bootUnit
	for _, k := range blocks {
		if len(k.Alone) > 0 && len(k.Flooded) > 0 {
			out = append(out, bootUnit{k.Alone, k.Flooded})
		}
	}
	return out
}

// summarizeBlocks computes the intervals, verdicts and coverage from
// rep.Blocks.
func (rep *crowdReport) summarizeBlocks() {
	units := crowdUnits(rep.Blocks)
	rep.TTFTP50CI = bootstrapCI(units, quantileRatio(1, 0, 50), rep.Resamples, 1)
	rep.TTFTP99CI = bootstrapCI(units, quantileRatio(1, 0, 99), rep.Resamples, 2)
	rep.P50Verdict, rep.P99Verdict = verdict(rep.TTFTP50CI, rep.Bound), verdict(rep.TTFTP99CI, rep.Bound)
	// The hit rate is a count (b's cached over prompt tokens), the same
	// in every run so far: no interval. Within 10% of alone means at
	// least 0.90x of it.
	rep.HitVerdict = "met"
	if rep.Flooded.HitRate < (2-rep.Bound)*rep.Alone.HitRate {
		rep.HitVerdict = "not met"
	}
	rep.Coverage = coverage{}
	for _, k := range rep.Blocks {
		c := k.Cover
		if c.Requests == 0 {
			continue
		}
		if rep.Coverage.Requests == 0 || c.Min < rep.Coverage.Min {
			rep.Coverage.Min = c.Min
		}
		rep.Coverage.Requests += c.Requests
		rep.Coverage.Covered += c.Covered
	}
}

// crowdPrompt is b's i-th prompt (of crowdPrompts) or a's unique i-th.
func crowdPrompt(l serveLoad, tenant byte, i int) []int {
	seed := i
	if tenant == 'a' {
		seed = 1_000_000 + i
	}
	return l.promptTokens(seed)
}

func runCrowding(ctx context.Context, b *benchServe) int {
	ctxLen := max(b.longPrompt+b.longGen, b.prompt+b.gen) + 1
	if ctxLen > b.ctxLen {
		return b.fail(2, "--long-prompt + --long-gen = %d exceed the model's context of %d", ctxLen-1, b.ctxLen)
	}
	bIn := b.levels[0]
	rep := crowdReport{Model: b.name, Threads: b.threads, Colocated: b.colocated, BPrompt: b.prompt, BGen: b.gen,
		BDistinct: crowdPrompts, BInFlight: bIn, BRequests: b.requests, APrompt: b.longPrompt, AGen: b.longGen,
		AInFlight: crowdFlood, PoolTokens: crowdPoolContexts * ctxLen, Repeats: b.repeats, Layout: "fresh",
		Bound: crowdBound, Resamples: crowdResamples,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg()}
	if b.blocks > 0 {
		rep.Layout, rep.BlocksPerServer = "shared", b.blocks
	}
	dir, err := os.MkdirTemp("", "sluice-crowding-")
	if err != nil {
		return b.fail(1, "%v", err)
	}
	defer os.RemoveAll(dir)
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("key-a a\nkey-b b\n"), 0o600); err != nil {
		return b.fail(1, "%v", err)
	}
	// --metrics-listen: with --api-keys the admin listener defaults to
	// 127.0.0.1:9090, which another process on the machine may hold.
	// --metrics-tenant-labels: b's first-token phases apart from a's.
	args := append(b.sluiceArgs(b.colocated, ctxLen, rep.PoolTokens, 64), "--api-keys", keys, "--metrics-listen", "127.0.0.1:0",
		"--metrics-tenant-labels", "--max-queue", strconv.Itoa(4*(crowdFlood+bIn)))
	rep.Args = args
	cr := &crowdRun{b: b, rep: &rep, args: args, bIn: bIn,
		l:  serveLoad{model: b.name, prompt: b.prompt, gen: b.gen, vocab: b.vocab},
		la: serveLoad{model: b.name, prompt: b.longPrompt, gen: b.longGen, vocab: b.vocab}}
	for r := range b.repeats {
		var err error
		if b.blocks == 0 {
			err = cr.fresh(ctx, r)
		} else {
			err = cr.shared(ctx, r)
		}
		if err != nil {
			return b.fail(1, "%v", err)
		}
		if ctx.Err() != nil {
			return b.fail(1, "the benchmark ran out of time (--timeout)")
		}
	}
	rep.Alone.Stats, rep.Alone.HitRate = summarize(cr.alone, cr.wallAlone), hitRate(cr.alone)
	rep.Flooded.Stats, rep.Flooded.HitRate = summarize(cr.flooded, cr.wallFlooded), hitRate(cr.flooded)
	if cr.wallFlooded > 0 {
		rep.Flooded.FloodTokS = float64(cr.floodDone*(b.longPrompt+b.longGen)) / cr.wallFlooded.Seconds()
	}
	rep.Alone.All, rep.Alone.Slowest = crowdSlowest(cr.alone, 1), crowdSlowest(cr.alone, 0.05)
	rep.Flooded.All, rep.Flooded.Slowest = crowdSlowest(cr.flooded, 1), crowdSlowest(cr.flooded, 0.05)
	rep.TTFTP50x = ratio(rep.Flooded.Stats.TTFTP50, rep.Alone.Stats.TTFTP50)
	rep.TTFTP99x = ratio(rep.Flooded.Stats.TTFTP99, rep.Alone.Stats.TTFTP99)
	rep.HitRateDrop = rep.Alone.HitRate - rep.Flooded.HitRate
	rep.summarizeBlocks()
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printCrowding(b.stdout, rep) }); code != 0 {
		return code
	}
	if rep.Alone.Stats.OK != rep.Alone.Stats.Requests || rep.Flooded.Stats.OK != rep.Flooded.Stats.Requests {
		return 1 // b must never be refused or fail
	}
	return 0
}

// crowdRun is one crowding benchmark's state while it runs.
type crowdRun struct {
	b         *benchServe
	rep       *crowdReport
	args      []string
	bIn       int
	l, la     serveLoad // b's requests, a's
	floodNext int       // a's next unique prompt
	// b's samples per side over every block, and b's measured time.
	alone, flooded         []streamSample
	wallAlone, wallFlooded time.Duration
	// floodDone counts a's requests that ended (200, whole stream) while
	// b measured a flooded block.
	floodDone int
}

// fresh runs one repeat of the fresh layout: b alone on a fresh server,
// then b while a floods on another fresh server, each after warming b's
// cache: one block pair.
func (cr *crowdRun) fresh(ctx context.Context, r int) error {
	var blk crowdBlock
	for _, flooded := range []bool{false, true} {
		fmt.Fprintf(cr.b.stderr, "crowding repeat %d: b %s\n", r+1, phaseName(flooded))
		sl, mbase, err := cr.start(ctx)
		if err != nil {
			return err
		}
		var f *flood
		if flooded {
			f = cr.startFlood(ctx, sl.base)
		}
		blk.add(cr.measure(ctx, sl, mbase, f))
		if f != nil {
			f.stop(cr.rep)
		}
		sl.stop()
		if ctx.Err() != nil {
			return nil
		}
	}
	cr.rep.Blocks = append(cr.rep.Blocks, blk)
	return nil
}

// shared runs one repeat of the shared layout: one fresh server, b's
// cache warmed, then --blocks pairs of an alone and a flooded block,
// the order alternating pair by pair (alone, flooded, flooded, alone,
// alone, ...) so that a drift of the machine's load over the run falls on
// both sides alike and a's flood starts and stops every other block.
// Before an alone block the flood is stopped and the server's requests
// in flight have ended.
func (cr *crowdRun) shared(ctx context.Context, r int) error {
	sl, mbase, err := cr.start(ctx)
	if err != nil {
		return err
	}
	defer sl.stop()
	var f *flood
	defer func() {
		if f != nil {
			f.stop(cr.rep)
		}
	}()
	for k := range cr.b.blocks {
		order := []bool{false, true}
		if k%2 == 1 {
			order = []bool{true, false}
		}
		var blk crowdBlock
		for _, flooded := range order {
			fmt.Fprintf(cr.b.stderr, "crowding repeat %d block %d: b %s\n", r+1, k+1, phaseName(flooded))
			if flooded && f == nil {
				f = cr.startFlood(ctx, sl.base)
			}
			if !flooded && f != nil {
				f.stop(cr.rep)
				f = nil
				if err := waitIdle(ctx, cr.b.client, mbase); err != nil {
					return err
				}
			}
			blk.add(cr.measure(ctx, sl, mbase, f))
			if ctx.Err() != nil {
				return nil
			}
		}
		cr.rep.Blocks = append(cr.rep.Blocks, blk)
	}
	return nil
}

func phaseName(flood bool) string {
	if flood {
		return "flooded"
	}
	return "alone"
}

// start starts a server and warms it, unmeasured: a's flood for
// crowdWarmFlood (every KV page and code path the measurement uses, once),
// then, the server idle, b's prompts each once (its cache) and once more
// with b's requests in flight. Without the flood a fresh server's first
// measured requests of b took 3-8x b's median TTFT (46-87 ms against
// 9-11, five runs at load 15): the alone side's tail, not b's, and only
// on the side measured first. It returns the server and its admin
// listener's base URL.
func (cr *crowdRun) start(ctx context.Context) (*server, string, error) {
	sl, err := startSluice(ctx, cr.b.sluiceBin, cr.args)
	if err != nil {
		return nil, "", err
	}
	// The metrics are on the admin listener (--metrics-listen).
	mbase, err := sl.metricsBase()
	if err != nil {
		sl.stop()
		return nil, "", err
	}
	f := startFlood(ctx, cr.b, sl.base, cr.la, &cr.floodNext)
	time.Sleep(crowdWarmFlood)
	f.stop(&crowdReport{}) // not counted: warming
	if err := waitIdle(ctx, cr.b.client, mbase); err != nil {
		sl.stop()
		return nil, "", err
	}
	for i := range crowdPrompts {
		streamPromptKey(ctx, cr.b.client, sl.base, "key-b", cr.l.model, crowdPrompt(cr.l, 'b', i), cr.l.gen)
	}
	runTenant(ctx, cr.b, sl.base, "key-b", cr.l, cr.bIn, crowdPrompts)
	return sl, mbase, nil
}

// startFlood starts a's flood and lets it fill the pool before b
// measures.
func (cr *crowdRun) startFlood(ctx context.Context, base string) *flood {
	f := startFlood(ctx, cr.b, base, cr.la, &cr.floodNext)
	f.waitSteady(ctx, time.Now())
	return f
}

// waitSteady waits until the flood is past its first wave: crowdFlood of
// a's requests started at once, 8 prompts to prefill together, a heavier
// load than the flood's steady one. Measured before this wait (a fixed
// 0.5 s), a flooded block right after the flood started had b's TTFT
// median 15% higher in its first half than in its second, and its
// flooded/alone p50 ratio 6% above that of a flooded block continuing the
// flood (20 blocks each, load 13-18). It waits for crowdFlood of a's
// requests started since t0 to end whole, at least 0.5 s and at most 20 s.
func (f *flood) waitSteady(ctx context.Context, t0 time.Time) {
	time.Sleep(500 * time.Millisecond)
	for ctx.Err() == nil && time.Since(t0) < 20*time.Second && f.doneWithin(t0, time.Now()) < crowdFlood {
		time.Sleep(20 * time.Millisecond)
	}
}

// blockResult is one measured block of b's requests.
type blockResult struct {
	flooded bool
	got     []streamSample
	// ttft is b's OK requests' TTFTs, ms, in the order sent.
	ttft []float64
	// cover: with a flooding, how many of a's requests were in flight
	// during each of b's (crowdCoverage).
	cover coverage
}

// measure runs one block of b's requests (a flooding when f is not nil)
// and adds its samples, preemptions and phases to its side.
func (cr *crowdRun) measure(ctx context.Context, sl *server, mbase string, f *flood) blockResult {
	base := sl.base
	side := &cr.rep.Alone
	if f != nil {
		side = &cr.rep.Flooded
	}
	before, err1 := scrapeCounter(ctx, cr.b.client, mbase, "sluice_preemptions_total")
	pBefore, err3 := scrapePhases(ctx, cr.b.client, mbase, "b")
	t0 := time.Now()
	// The block's first bIn requests are sent at once to a server that was
	// idle for a moment (the scrapes): they took 1.3-1.8x the block's
	// median TTFT in every kind of block (alone or flooded, after the
	// warm-up, an alone or a flooded block; 80 blocks, load 13-18), an
	// artifact of the blocks, not of a's flood. They run unmeasured (the
	// phases, scraped around the whole block, include them).
	got, wall := runTenant(ctx, cr.b, base, "key-b", cr.l, cr.bIn, cr.bIn+cr.b.requests)
	got = got[min(cr.bIn, len(got)):]
	after, err2 := scrapeCounter(ctx, cr.b.client, mbase, "sluice_preemptions_total")
	pAfter, err4 := scrapePhases(ctx, cr.b.client, mbase, "b")
	if err1 == nil && err2 == nil {
		side.Preemptions += after - before
	}
	// The server logs a request after its last byte: by now (the
	// scrapes) it has logged the block's.
	for i := range got {
		got[i].first = sl.firstTiming(got[i].id)
	}
	if err3 == nil && err4 == nil {
		if side.Phases == nil {
			side.Phases = map[string]phaseSum{}
		}
		for k, a := range pAfter {
			p := side.Phases[k]
			p.Count += a.Count - pBefore[k].Count
			p.Sum += a.Sum - pBefore[k].Sum
			side.Phases[k] = p
		}
	}
	res := blockResult{flooded: f != nil, got: got, ttft: okTTFTs(got)}
	if f != nil {
		// a's requests in flight so far; those still running are open
		// intervals to now.
		res.cover = crowdCoverage(got, f.intervals(time.Now()))
		cr.floodDone += f.doneWithin(t0, t0.Add(wall))
		cr.flooded, cr.wallFlooded = append(cr.flooded, got...), cr.wallFlooded+wall
	} else {
		cr.alone, cr.wallAlone = append(cr.alone, got...), cr.wallAlone+wall
	}
	return res
}

// okTTFTs are the TTFTs (ms) of the OK samples, in order.
func okTTFTs(ss []streamSample) []float64 {
	var out []float64
	for _, s := range ss {
		if s.status == http.StatusOK && s.err == nil {
			if d, ok := s.ttft(); ok {
				out = append(out, ms(d))
			}
		}
	}
	return out
}

// waitIdle waits until the server serves no request (a's cut streams
// have ended at the router), then a little more for the engine to let go
// of their pages: the next alone block starts without a's work.
func waitIdle(ctx context.Context, client *http.Client, mbase string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := scrapeCounter(ctx, client, mbase, "sluice_requests_in_flight")
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server still served %d requests 30 s after a's flood stopped", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	return nil
}

// runTenant sends n requests of tenant key cycling over b's prompts, c in
// flight.
func runTenant(ctx context.Context, b *benchServe, base, key string, l serveLoad, c, n int) ([]streamSample, time.Duration) {
	out := make([]streamSample, n)
	next := make(chan int)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range min(c, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = streamPromptKey(ctx, b.client, base, key, l.model, crowdPrompt(l, 'b', i%crowdPrompts), l.gen)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, time.Since(t0)
}

// flood is tenant a's flood: crowdFlood of a's unique prompts in flight
// until stop.
type flood struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    atomic.Int64
	next   *int
	mu     sync.Mutex
	ended  []floodReq        // a's requests that ended, any outcome
	active map[int]time.Time // a's requests in flight by number: their start
}

// floodReq is one of a's requests that ended and when.
type floodReq struct {
	s   streamSample
	end time.Time
}

// startFlood keeps crowdFlood of tenant a's unique prompts in flight
// until stop is called.
func startFlood(ctx context.Context, b *benchServe, base string, l serveLoad, next *int) *flood {
	fctx, cancel := context.WithCancel(ctx)
	f := &flood{cancel: cancel, next: next, active: map[int]time.Time{}}
	f.seq.Store(int64(*next))
	for range crowdFlood {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for fctx.Err() == nil {
				i := int(f.seq.Add(1))
				f.mu.Lock()
				f.active[i] = time.Now()
				f.mu.Unlock()
				s := streamPromptKey(fctx, b.client, base, "key-a", l.model, crowdPrompt(l, 'a', i), l.gen)
				end := time.Now()
				f.mu.Lock()
				delete(f.active, i)
				if fctx.Err() == nil { // a request cut by stop is neither a success nor a failure
					f.ended = append(f.ended, floodReq{s, end})
				}
				f.mu.Unlock()
				if s.status == http.StatusTooManyRequests {
					time.Sleep(10 * time.Millisecond) // its queue share is full
				}
			}
		}()
	}
	return f
}

// stop cancels a's requests in flight, waits for them and counts those
// that ended by outcome into rep's flooded side.
func (f *flood) stop(rep *crowdReport) {
	f.cancel()
	f.wg.Wait()
	*f.next = int(f.seq.Load()) + 1
	side := &rep.Flooded
	for _, r := range f.ended {
		switch s := r.s; {
		case s.status != 0 && s.status != http.StatusOK:
			side.FloodNon200++
		case s.err != nil:
			side.FloodErrors++
		default:
			side.FloodOK++
		}
	}
}

// intervals are a's requests that were in flight at the server so far:
// those that ended with a 200 (admitted), start to end, and those still
// in flight, start to now.
func (f *flood) intervals(now time.Time) []interval {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []interval
	for _, r := range f.ended {
		if r.s.status == http.StatusOK {
			out = append(out, interval{r.s.start, r.end})
		}
	}
	for _, t := range f.active {
		out = append(out, interval{t, now})
	}
	return out
}

// doneWithin counts a's requests that ended whole (a 200 and a clean
// stream) between t0 and t1.
func (f *flood) doneWithin(t0, t1 time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.ended {
		if r.s.status == http.StatusOK && r.s.err == nil && !r.end.Before(t0) && !r.end.After(t1) {
			n++
		}
	}
	return n
}

type interval struct{ start, end time.Time }

// coverage says whether b's flooded requests really ran while a flooded.
type coverage struct {
	// Requests counts b's OK requests; Covered those during which (from
	// sending to the first token) at least one of a's requests was in
	// flight; Min is the fewest of a's requests in flight during any one
	// (0 without requests).
	Requests int `json:"requests"`
	Covered  int `json:"with_a_in_flight"`
	Min      int `json:"a_in_flight_min"`
}

// crowdCoverage counts, for each of b's OK requests, a's requests in
// flight at some moment between b's sending it and its first token.
func crowdCoverage(b []streamSample, a []interval) coverage {
	var c coverage
	for _, s := range b {
		first, ok := s.ttft()
		if s.status != http.StatusOK || s.err != nil || !ok {
			continue
		}
		t0, t1 := s.start, s.start.Add(first)
		n := 0
		for _, iv := range a {
			if iv.start.Before(t1) && iv.end.After(t0) {
				n++
			}
		}
		if c.Requests == 0 || n < c.Min {
			c.Min = n
		}
		c.Requests++
		if n > 0 {
			c.Covered++
		}
	}
	return c
}

func hitRate(ss []streamSample) float64 {
	var p, c int
	for _, s := range ss {
		if s.err == nil && s.prompt > 0 && s.cached >= 0 {
			p += s.prompt
			c += s.cached
		}
	}
	if p == 0 {
		return 0
	}
	return float64(c) / float64(p)
}

func printCrowding(w io.Writer, rep crowdReport) {
	topo := "disaggregated"
	if rep.Colocated {
		topo = "colocated"
	}
	layout := "alone and flooded alternating, fresh server each"
	if rep.Layout == "shared" {
		layout = fmt.Sprintf("one server each, %d alone/flooded block pairs, the order alternating", rep.BlocksPerServer)
	}
	fmt.Fprintf(w, "model %s, sluice %s, %d threads, pool %d tokens, %d repeats (%s)\n",
		rep.Model, topo, rep.Threads, rep.PoolTokens, rep.Repeats, layout)
	fmt.Fprintf(w, "b: %d requests per block over %d prompts of %d tokens, %d generated, %d in flight; a: unique %d-token prompts, %d generated, %d in flight\n",
		rep.BRequests, rep.BDistinct, rep.BPrompt, rep.BGen, rep.BInFlight, rep.APrompt, rep.AGen, rep.AInFlight)
	fmt.Fprintf(w, "nproc %d, cpu %s, loadavg before %s, after %s\n", rep.NProc, rep.CPU, rep.LoadBefore, rep.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "b\tok\thit rate\tTTFT p50 ms\tTTFT p99 ms\tITL p50 ms\tpreemptions\ta ok\ta 429/5xx\ta errors\ta tok/s\t\n")
	for _, r := range []struct {
		name string
		s    crowdSide
	}{{"alone", rep.Alone}, {"a flooding", rep.Flooded}} {
		fmt.Fprintf(tw, "%s\t%d/%d\t%.3f\t%.1f\t%.1f\t%.2f\t%d\t%d\t%d\t%d\t%.0f\t\n", r.name, r.s.Stats.OK, r.s.Stats.Requests, r.s.HitRate,
			r.s.Stats.TTFTP50, r.s.Stats.TTFTP99, r.s.Stats.ITLP50, r.s.Preemptions, r.s.FloodOK, r.s.FloodNon200, r.s.FloodErrors, r.s.FloodTokS)
	}
	tw.Flush()
	fmt.Fprintf(w, "flooded / alone: TTFT p50 %.2fx, p99 %.2fx; hit rate %.3f -> %.3f\n", rep.TTFTP50x, rep.TTFTP99x, rep.Alone.HitRate, rep.Flooded.HitRate)
	printCrowdCI(w, rep)
	printPhases(w, rep)
	for _, r := range []crowdSide{rep.Alone, rep.Flooded} {
		if r.Stats.FirstError != "" {
			fmt.Fprintf(w, "first error of b: %s\n", r.Stats.FirstError)
		}
	}
}

// printCrowdCI prints the ratios' intervals and verdicts, one line each
// ("b TTFT p50 flooded/alone 1.08x (95% CI 1.02-1.15x), bound 1.10x: not
// resolved"; scripts read them), what the intervals cover, and whether
// every one of b's flooded requests ran while a's were in flight.
func printCrowdCI(w io.Writer, rep crowdReport) {
	fmt.Fprintf(w, "b TTFT p50 flooded/alone %s, bound %.2fx: %s\n", fmtCI(rep.TTFTP50CI), rep.Bound, rep.P50Verdict)
	fmt.Fprintf(w, "b TTFT p99 flooded/alone %s, bound %.2fx: %s\n", fmtCI(rep.TTFTP99CI), rep.Bound, rep.P99Verdict)
	fmt.Fprintf(w, "b hit rate flooded %.3f, alone %.3f: %.2fx, bound %.2fx of alone: %s\n", rep.Flooded.HitRate, rep.Alone.HitRate,
		ratio(rep.Flooded.HitRate, rep.Alone.HitRate), 2-rep.Bound, rep.HitVerdict)
	n := len(crowdUnits(rep.Blocks))
	what := "over the requests of the one block pair only: it leaves out the spread from run to run (more --repeats or --blocks)"
	if n > 1 {
		what = fmt.Sprintf("over %d alone/flooded block pairs and the requests within each", n)
	}
	fmt.Fprintf(w, "(95%% intervals: bootstrap %s, %d resamples; met = the whole interval at or under the bound)\n", what, rep.Resamples)
	if n > 1 {
		fmt.Fprint(w, fewNote(n, "block pairs"))
	}
	c := rep.Coverage
	fmt.Fprintf(w, "b's flooded requests with a's requests in flight from sending to first token: %d/%d (fewest of a's in flight: %d)\n", c.Covered, c.Requests, c.Min)
	if c.Covered < c.Requests {
		fmt.Fprintf(w, "warning: %d of b's flooded requests ran while none of a's was in flight: the flood did not cover them\n", c.Requests-c.Covered)
	}
}

// crowdPhases are the first-token phases the crowding report shows, in
// the order a request goes through them (engine/phases.go).
var crowdPhases = []struct{ key, what string }{
	{"router/http_read", "router: arrival to the body decoded"},
	{"router/http_prompt", "router: to the prompt's tokens"},
	{"router/http_admit", "router: to the engine's submit"},
	{"router/queue", "router queue and decode reservation"},
	{"router/handoff", "reservation to first token, of which:"},
	{"prefill/prefill_queue", "  prefill worker: waiting for prefill pages"},
	{"prefill/prefill_wait", "  prefill worker: waiting for a step to run the prompt"},
	{"prefill/prefill_compute", "  prefill worker: the prompt's steps"},
	{"prefill/prefill_push", "  prefill worker: last chunk to the accepted commit"},
	{"router/push", "  prefill worker (per request): last chunk to its commit sent"},
	{"router/decode_wait", "  decode worker (per request): the commit to the first token sent"},
	{"colocated/queue", "queue and KV pages"},
	{"colocated/prefill_wait", "waiting for a step to run the prompt"},
	{"colocated/prefill_compute", "the prompt's steps to the first token"},
	{"router/engine_other", "router: the engine's time outside its phases (calls between router and workers)"},
	{"router/first_token_deliver", "router: the engine's first token to the handler"},
	{"router/first_token_write", "router: to its text written and flushed"},
}

// colocatedPath are the phases that follow each other from a colocated
// request's arrival to its first token flushed (printPhases sums them).
var colocatedPath = []string{"router/http_read", "router/http_prompt", "router/http_admit", "colocated/queue",
	"colocated/prefill_wait", "colocated/prefill_compute", "router/engine_other", "router/first_token_deliver", "router/first_token_write"}

// printPhases prints where b's TTFT went, mean ms per request alone and
// while a floods, and the rest of the handoff the prefill worker does not
// see (the decode stream, the commit's check, the first token's emit).
func printPhases(w io.Writer, rep crowdReport) {
	if len(rep.Alone.Phases) == 0 && len(rep.Flooded.Phases) == 0 {
		return
	}
	fmt.Fprintln(w, "b's time to first token by phase, mean ms per request (sluice_first_token_phase_seconds):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  phase\talone\ta flooding\t\n")
	for _, p := range crowdPhases {
		a, okA := rep.Alone.Phases[p.key]
		f, okF := rep.Flooded.Phases[p.key]
		if !okA && !okF {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t\n", p.what, a.meanMS(), f.meanMS())
	}
	rest := func(s crowdSide) float64 {
		r := s.Phases["router/handoff"].meanMS()
		for _, k := range []string{"prefill/prefill_queue", "prefill/prefill_wait", "prefill/prefill_compute", "prefill/prefill_push"} {
			r -= s.Phases[k].meanMS()
		}
		return r
	}
	if _, ok := rep.Alone.Phases["prefill/prefill_queue"]; ok {
		// By difference, as every build's server allows (make
		// bench-crowding-ab reads this line; router/engine_other above
		// is the per-request split's rest).
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t\n", "  the rest (the router's calls, decode's stream and first token)", rest(rep.Alone), rest(rep.Flooded))
	}
	if _, ok := rep.Alone.Phases["router/first_token_write"]; ok && rep.Colocated {
		sum := func(s crowdSide) float64 {
			var t float64
			for _, k := range colocatedPath {
				t += s.Phases[k].meanMS()
			}
			return t
		}
		fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t\n", "sum: arrival to the first token flushed", sum(rep.Alone), sum(rep.Flooded))
	}
	tw.Flush()
	printStarts(w, rep)
	printSlowest(w, rep)
}

// firstRows are the rows of printSlowest: first_token_ms's keys in a
// request's order (the engine's own split indented under "engine").
var firstRows = []struct{ key, what string }{
	{"client_ttft", "TTFT at the client"},
	{"http_read", "router: arrival to the body decoded"},
	{"http_prompt", "router: to the prompt's tokens"},
	{"http_admit", "router: to the engine's submit"},
	{"engine", "engine: submit to the first token, of which:"},
	{"queue", "  queue and KV pages (disaggregated: the decode reservation)"},
	{"handoff", "  reservation to first token (the workers sent no split)"},
	{"prefill_queue", "  prefill worker: the call to its prefill pages"},
	{"prefill_wait", "  waiting for a step to run the prompt"},
	{"prefill_compute", "  the prompt's steps (colocated: to the first token)"},
	{"push", "  prefill worker: last chunk to its commit sent"},
	{"decode_wait", "  decode worker: the commit to the first token sent"},
	{"engine_other", "  outside the engine's phases (disaggregated: calls between router and workers)"},
	{"first_token_deliver", "router: the engine's first token to the handler"},
	{"first_token_write", "router: to its text written and flushed"},
	{"outside", "outside the handler (client, network, HTTP server)"},
}

// printSlowest prints where b's TTFT went by the server's request log
// lines, mean ms over every OK request and over the slowest 5% at the
// client, alone and while a floods.
func printSlowest(w io.Writer, rep crowdReport) {
	cols := []*firstTimes{rep.Alone.All, rep.Flooded.All, rep.Alone.Slowest, rep.Flooded.Slowest}
	if slices.Contains(cols, nil) {
		return
	}
	fmt.Fprintf(w, "b's time to first token by its request log lines (first_token_ms), mean ms; every request (%d, %d logged alone; %d, %d flooded) and the slowest 5%% at the client (%d, %d; %d, %d):\n",
		cols[0].Requests, cols[0].Logged, cols[1].Requests, cols[1].Logged, cols[2].Requests, cols[2].Logged, cols[3].Requests, cols[3].Logged)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  phase\talone\ta flooding\tslowest 5% alone\ta flooding\t\n")
	for _, r := range firstRows {
		if _, ok := cols[0].MeanMS[r.key]; !ok {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.what, cols[0].MeanMS[r.key], cols[1].MeanMS[r.key], cols[2].MeanMS[r.key], cols[3].MeanMS[r.key])
	}
	tw.Flush()
}

// printStarts prints b's wait for a step and b's steps to the first
// token split by how its prompts' first chunks started (the phases
// prefill_wait/<how> and prefill_compute/<how>: nested at a pause point
// of a's step, or at a step boundary and why not earlier): requests and
// mean ms, alone and while a floods, one table each (servers older than
// the compute split print the wait's only).
func printStarts(w io.Writer, rep crowdReport) {
	printSplit(w, rep, "prefill_wait/", "b's wait for a step by how its first chunk started (prefill_wait/<how>), requests and mean ms:")
	printSplit(w, rep, "prefill_compute/", "b's steps to the first token by how its first chunk started (prefill_compute/<how>), requests and mean ms:")
}

// printSplit prints the phases whose name holds split as a table under
// title (nothing when there are none).
func printSplit(w io.Writer, rep crowdReport, split, title string) {
	var keys []string
	for _, s := range []crowdSide{rep.Alone, rep.Flooded} {
		for k := range s.Phases {
			if strings.Contains(k, split) && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "  how\talone\t\ta flooding\t\t\n")
	for _, k := range keys {
		a, f := rep.Alone.Phases[k], rep.Flooded.Phases[k]
		fmt.Fprintf(tw, "  %s\t%.0f\t%.1f\t%.0f\t%.1f\t\n", k, a.Count, a.meanMS(), f.Count, f.meanMS())
	}
	tw.Flush()
}

// scrapePhases reads the first-token phase histograms of tenant from a
// server's /metrics: count and sum by "role/phase".
func scrapePhases(ctx context.Context, client *http.Client, base, tenant string) (map[string]phaseSum, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	out := map[string]phaseSum{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		rest, ok := strings.CutPrefix(l, "sluice_first_token_phase_seconds_")
		if !ok {
			continue
		}
		kind, labels, ok := strings.Cut(rest, "{")
		if !ok || (kind != "sum" && kind != "count") {
			continue
		}
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok {
			continue
		}
		lv := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			lv[k] = strings.Trim(v, `"`)
		}
		if lv["tenant"] != tenant {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		k := lv["role"] + "/" + lv["phase"]
		p := out[k]
		if kind == "sum" {
			p.Sum = v
		} else {
			p.Count = v
		}
		out[k] = p
	}
	return out, sc.Err()
}
