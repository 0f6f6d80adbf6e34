package engine

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kv"
	"sluice/internal/testenv"
)

// BenchmarkVerifySampleDecode is the cost of --kv-verify sample against
// hit on decode throughput, interleaved in one run: the colocated engine,
// 1 and 16 requests in flight sharing a cached 496-token system prompt (31
// sealed cached pages read by every step) plus 16 tokens of their own,
// 64 tokens generated each. Model: bench-15M-q8_0 from ../shared when
// present (SLUICE_BENCH_MODEL overrides), else the built-in model.
// Reported: tok/s of each, sample/hit over the whole run and the median of
// adjacent pairs' ratios, and the sweep's own share of forward time,
// measured in the scheduler.
func BenchmarkVerifySampleDecode(b *testing.B) {
	rt := benchRuntime(b)
	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc%d", conc), func(b *testing.B) { benchVerifySample(b, rt, conc) })
	}
}

func benchVerifySample(b *testing.B, rt Runtime, conc int) {
	const sys, own, gen = 496, 16, 64
	mk := func(v kv.Verify) *Colocated {
		e, err := NewColocated(Config{Model: rt, Context: 1024, PoolPages: 16 * 40, PageSize: 16, ChunkTokens: 64, StepTokens: 512,
			MaxConcurrency: conc, PrefixCache: true, Verify: v, Threads: 2})
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	hit, sample := mk(kv.VerifyHit), mk(kv.VerifySample)
	defer closeWithin(b, hit)
	defer closeWithin(b, sample)
	vocab := rt.Vocab()
	system := make([]int32, sys)
	for i := range system {
		system[i] = int32(3 + (i*7919)%(vocab-3))
	}
	round := 0
	run := func(e Engine) (time.Duration, int) {
		round++
		start := time.Now()
		var streams []Stream
		for i := range conc {
			p := slices.Clone(system)
			for j := range own {
				p = append(p, int32(3+(round*131+i*977+j*31)%(vocab-3)))
			}
			s, err := e.Submit(context.Background(), &Request{Tenant: "t", Prompt: p, MaxTokens: gen, IgnoreEOS: true})
			if err != nil {
				b.Fatal(err)
			}
			streams = append(streams, s)
		}
		n := 0
		for _, s := range streams {
			r := collect(b, s)
			if r.final.Err != nil || len(r.tokens) != gen {
				b.Fatalf("%v, %d tokens", r.final.Err, len(r.tokens))
			}
			n += len(r.tokens)
		}
		return time.Since(start), n
	}
	run(hit) // warm: the system prompt is cached in both from here on
	run(sample)
	b.ResetTimer()
	var tHit, tSample time.Duration
	var nHit, nSample int
	var pairs []float64 // sample/hit tok/s of adjacent runs: slow load drift cancels
	for i := 0; i < b.N; i++ {
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		var rh, rs float64
		for _, isHit := range order {
			if isHit {
				d, n := run(hit)
				tHit, nHit, rh = tHit+d, nHit+n, float64(n)/d.Seconds()
			} else {
				d, n := run(sample)
				tSample, nSample, rs = tSample+d, nSample+n, float64(n)/d.Seconds()
			}
		}
		pairs = append(pairs, rs/rh)
	}
	b.StopTimer()
	hs, ss := float64(nHit)/tHit.Seconds(), float64(nSample)/tSample.Seconds()
	b.ReportMetric(hs, "hit_tok/s")
	b.ReportMetric(ss, "sample_tok/s")
	b.ReportMetric(ss/hs, "sample/hit")
	slices.Sort(pairs)
	b.ReportMetric(pairs[len(pairs)/2], "pair_median_sample/hit")
	// The sweep's own time over the forward steps' time, measured inside
	// the same scheduler: the cost figure that machine noise cannot blur.
	b.ReportMetric(100*float64(sample.sched.verifyTime.Load())/float64(sample.sched.fwdTime.Load()), "sweep_%_of_forward")
	b.ReportMetric(float64(sample.sched.fwdTime.Load())/float64(hit.sched.fwdTime.Load()), "fwd_time_sample/hit")
	b.ReportMetric(float64(sample.sched.steps.Load())/float64(hit.sched.steps.Load()), "steps_sample/hit")
	hs2, ss2 := hit.Pool().Stats(), sample.Pool().Stats()
	if len(hs2.Violations)+len(ss2.Violations) > 0 || hs2.CacheHits != ss2.CacheHits {
		b.Fatalf("the engines differ: violations %v / %v, cache hits %d / %d", hs2.Violations, ss2.Violations, hs2.CacheHits, ss2.CacheHits)
	}
}

// benchRuntime is bench-15M-q8_0 from ../shared (or SLUICE_BENCH_MODEL)
// when present, else the built-in model.
func benchRuntime(b *testing.B) Runtime {
	path := os.Getenv("SLUICE_BENCH_MODEL")
	if path == "" {
		p, ok := testenv.Find("models/bench-15M-q8_0.gguf")
		if !ok {
			b.Log("bench-15M-q8_0 not found: the built-in model")
			return defaultRuntime(b)
		}
		path = p
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(data)
	if err != nil {
		b.Fatal(err)
	}
	rt, _, err := LoadRuntime(fmt.Sprint(path), f)
	if err != nil {
		b.Fatal(err)
	}
	return rt
}
