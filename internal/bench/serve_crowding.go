package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

// The crowding-out workload (issue 28): tenant b sends --requests
// requests cycling over crowdPrompts prompts of its own (--prompt tokens,
// --gen generated), the first level of --concurrency in flight, once alone
// and once while tenant a floods unique --long-prompt prompts (--long-gen
// generated) with crowdFlood in flight. Each phase runs on a fresh server
// whose cache b warms first (each of its prompts once, unmeasured), so b's
// hit rate and TTFT compare like for like; phases alternate for --repeats
// (alone, flooded, alone, ...), every figure pooled over the repeats.
// The pool holds crowdPoolContexts contexts: a's flood alone asks for
// several times that.

const (
	crowdPrompts      = 4
	crowdFlood        = 8
	crowdPoolContexts = 4
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
		AInFlight: crowdFlood, PoolTokens: crowdPoolContexts * ctxLen, Repeats: b.repeats,
		NProc: runtime.NumCPU(), CPU: cpuModel(), LoadBefore: loadAvg()}
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
	l := serveLoad{model: b.name, prompt: b.prompt, gen: b.gen, vocab: b.vocab}
	la := serveLoad{model: b.name, prompt: b.longPrompt, gen: b.longGen, vocab: b.vocab}
	var alone, flooded []streamSample
	var wallAlone, wallFlooded time.Duration
	floodNext := 0
	for r := range b.repeats {
		for _, flood := range []bool{false, true} {
			sl, err := startSluice(ctx, b.sluiceBin, args)
			if err != nil {
				return b.fail(1, "%v", err)
			}
			name := "alone"
			if flood {
				name = "flooded"
			}
			fmt.Fprintf(b.stderr, "crowding repeat %d: b %s\n", r+1, name)
			for i := range crowdPrompts { // warm b's cache
				streamPromptKey(ctx, b.client, sl.base, "key-b", l.model, crowdPrompt(l, 'b', i), l.gen)
			}
			side := &rep.Alone
			var stopFlood func() []streamSample
			if flood {
				side = &rep.Flooded
				stopFlood = startFlood(ctx, b, sl.base, la, &floodNext)
				// Let the flood fill the pool before b measures.
				time.Sleep(500 * time.Millisecond)
			}
			// The metrics are on the admin listener (--metrics-listen).
			mbase, err := sl.metricsBase()
			if err != nil {
				sl.stop()
				return b.fail(1, "%v", err)
			}
			before, err1 := scrapeCounter(ctx, b.client, mbase, "sluice_preemptions_total")
			pBefore, err3 := scrapePhases(ctx, b.client, mbase, "b")
			got, wall := runTenant(ctx, b, sl.base, "key-b", l, bIn, b.requests)
			after, err2 := scrapeCounter(ctx, b.client, mbase, "sluice_preemptions_total")
			pAfter, err4 := scrapePhases(ctx, b.client, mbase, "b")
			if err1 == nil && err2 == nil {
				side.Preemptions += after - before
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
			if flood {
				for _, s := range stopFlood() {
					switch {
					case s.status != 0 && s.status != 200:
						side.FloodNon200++
					case s.err != nil:
						if ctx.Err() == nil && s.status == 200 {
							side.FloodErrors++
						}
					default:
						side.FloodOK++
					}
				}
				flooded, wallFlooded = append(flooded, got...), wallFlooded+wall
			} else {
				alone, wallAlone = append(alone, got...), wallAlone+wall
			}
			sl.stop()
			if ctx.Err() != nil {
				return b.fail(1, "the benchmark ran out of time (--timeout)")
			}
		}
	}
	rep.Alone.Stats, rep.Alone.HitRate = summarize(alone, wallAlone), hitRate(alone)
	rep.Flooded.Stats, rep.Flooded.HitRate = summarize(flooded, wallFlooded), hitRate(flooded)
	if wallFlooded > 0 {
		rep.Flooded.FloodTokS = float64(rep.Flooded.FloodOK*(b.longPrompt+b.longGen)) / wallFlooded.Seconds()
	}
	rep.TTFTP50x = ratio(rep.Flooded.Stats.TTFTP50, rep.Alone.Stats.TTFTP50)
	rep.TTFTP99x = ratio(rep.Flooded.Stats.TTFTP99, rep.Alone.Stats.TTFTP99)
	rep.HitRateDrop = rep.Alone.HitRate - rep.Flooded.HitRate
	rep.LoadAfter = loadAvg()
	if code := b.report(rep, func() { printCrowding(b.stdout, rep) }); code != 0 {
		return code
	}
	if rep.Alone.Stats.OK != rep.Alone.Stats.Requests || rep.Flooded.Stats.OK != rep.Flooded.Stats.Requests {
		return 1 // b must never be refused or fail
	}
	return 0
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

// startFlood keeps crowdFlood of tenant a's unique prompts in flight until
// the returned stop is called; stop cancels what is in flight and returns
// the samples of the requests that ended.
func startFlood(ctx context.Context, b *benchServe, base string, l serveLoad, next *int) func() []streamSample {
	fctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var out []streamSample
	var wg sync.WaitGroup
	var seq atomic.Int64
	seq.Store(int64(*next))
	for range crowdFlood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fctx.Err() == nil {
				i := int(seq.Add(1))
				s := streamPromptKey(fctx, b.client, base, "key-a", l.model, crowdPrompt(l, 'a', i), l.gen)
				if fctx.Err() != nil {
					return // cut by stop: neither a success nor a failure
				}
				mu.Lock()
				out = append(out, s)
				mu.Unlock()
				if s.status == 429 {
					time.Sleep(10 * time.Millisecond) // its queue share is full
				}
			}
		}()
	}
	return func() []streamSample {
		cancel()
		wg.Wait()
		*next = int(seq.Load()) + 1
		return out
	}
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
	fmt.Fprintf(w, "model %s, sluice %s, %d threads, pool %d tokens, %d repeats (alone and flooded alternating, fresh server each)\n",
		rep.Model, topo, rep.Threads, rep.PoolTokens, rep.Repeats)
	fmt.Fprintf(w, "b: %d requests per phase over %d prompts of %d tokens, %d generated, %d in flight; a: unique %d-token prompts, %d generated, %d in flight\n",
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
	printPhases(w, rep)
	for _, r := range []crowdSide{rep.Alone, rep.Flooded} {
		if r.Stats.FirstError != "" {
			fmt.Fprintf(w, "first error of b: %s\n", r.Stats.FirstError)
		}
	}
}

// crowdPhases are the first-token phases the crowding report shows, in
// the order a request goes through them (engine/phases.go).
var crowdPhases = []struct{ key, what string }{
	{"router/queue", "router queue and decode reservation"},
	{"router/handoff", "reservation to first token, of which:"},
	{"prefill/prefill_queue", "  prefill worker: waiting for prefill pages"},
	{"prefill/prefill_wait", "  prefill worker: waiting for a step to run the prompt"},
	{"prefill/prefill_compute", "  prefill worker: the prompt's steps"},
	{"prefill/prefill_push", "  prefill worker: last chunk to the accepted commit"},
	{"colocated/queue", "queue and KV pages"},
	{"colocated/prefill_wait", "waiting for a step to run the prompt"},
	{"colocated/prefill_compute", "the prompt's steps to the first token"},
}

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
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t\n", p.what, a.meanMS(), f.meanMS())
	}
	rest := func(s crowdSide) float64 {
		r := s.Phases["router/handoff"].meanMS()
		for _, k := range []string{"prefill/prefill_queue", "prefill/prefill_wait", "prefill/prefill_compute", "prefill/prefill_push"} {
			r -= s.Phases[k].meanMS()
		}
		return r
	}
	if _, ok := rep.Alone.Phases["prefill/prefill_queue"]; ok {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t\n", "  the rest (the router's calls, decode's stream and first token)", rest(rep.Alone), rest(rep.Flooded))
	}
	tw.Flush()
	printStarts(w, rep)
}

// printStarts prints b's wait for a step split by how its prompts'
// first chunks started (the phases prefill_wait/<how>: nested at a pause
// point of a's step, or at a step boundary and why not earlier):
// requests and mean ms, alone and while a floods.
func printStarts(w io.Writer, rep crowdReport) {
	var keys []string
	for _, s := range []crowdSide{rep.Alone, rep.Flooded} {
		for k := range s.Phases {
			if strings.Contains(k, "prefill_wait/") && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	fmt.Fprintln(w, "b's wait for a step by how its first chunk started (prefill_wait/<how>), requests and mean ms:")
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
