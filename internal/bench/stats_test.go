package bench

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// percentile interpolates linearly between order statistics (numpy's
// default, Python's statistics.quantiles(method="inclusive")). The
// expected values were computed with Python 3.11's statistics module
// (numpy is not installed here): statistics.quantiles(x, n=100,
// method="inclusive")[p-1], and n=4 for p25.
func TestPercentileMatchesPythonStatistics(t *testing.T) {
	x := []float64{9.84, 14.404, 12.913, 4.837, 5.256, 7.778, 7.4, 13.895, 20.479, 8.044, 4.17, 5.554, 15.3, 12.838, 6.883, 16.851, 7.678,
		11.372, 33.337, 6.56, 14.995, 16.974, 8.61, 6.044, 23.053, 21.396, 19.997, 14.171, 11.253, 19.359, 8.544, 4.889, 8.273, 7.337, 5.089,
		5.563, 18.848}
	y := []float64{3.0, 1.0, 4.0, 1.5, 9.0, 2.6}
	for _, c := range []struct {
		x    []float64
		p    float64
		want float64
	}{
		{x, 50, 9.84}, {x, 99, 29.63476}, {x, 90, 20.1898}, {x, 25, 6.883},
		// y by hand too: sorted 1, 1.5, 2.6, 3, 4, 9; p50 at 2.5 -> 2.6 + 0.5*0.4.
		{y, 50, 2.8}, {y, 99, 8.75}, {y, 10, 1.25}, {y, 0, 1}, {y, 100, 9},
		{[]float64{5}, 99, 5},
	} {
		if got := percentile(c.x, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.x, c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile of nothing = %v, want 0", got)
	}
}

// One unit, alone {1, 2} and flooded {2, 4}: every resample's median
// (and p99) of two draws lies in {1, 1.5, 2} alone and {2, 3, 4} flooded
// (p99 near them), so the ratio lies in [2/2, 4/1]; each extreme has
// probability 1/16 > 2.5%, so the 95% interval is exactly [1, 4]; the
// point is 3 / 1.5 = 2 (p50).
func TestBootstrapTwoPointCase(t *testing.T) {
	units := []bootUnit{{{1, 2}, {2, 4}}}
	c := bootstrapCI(units, quantileRatio(1, 0, 50), 4000, 1)
	if c.Point != 2 || c.Lo != 1 || c.Hi != 4 {
		t.Errorf("p50 ratio %+v, want point 2, interval [1, 4]", c)
	}
	c = bootstrapCI(units, quantileRatio(1, 0, 99), 4000, 1)
	if math.Abs(c.Point-3.98/1.99) > 1e-12 || c.Lo != 1 || c.Hi != 4 {
		t.Errorf("p99 ratio %+v, want point 2, interval [1, 4]", c)
	}
}

// Two units, one all 1s alone and 2s flooded, the other all 1s both: a
// resample draws unit A twice (ratio 2), B twice (1) or one of each
// (pooled flooded median: {1.., 2..} half and half -> 1.5; alone 1), each
// with probability at least 1/4, so the interval is [1, 2]; the point
// pools both: flooded {1, 1, 2, 2} median 1.5.
func TestBootstrapResamplesUnits(t *testing.T) {
	units := []bootUnit{{{1, 1}, {2, 2}}, {{1, 1}, {1, 1}}}
	c := bootstrapCI(units, quantileRatio(1, 0, 50), 2000, 3)
	if c.Point != 1.5 || c.Lo != 1 || c.Hi != 2 {
		t.Errorf("%+v, want point 1.5, interval [1, 2]", c)
	}
}

func TestBootstrapDeterministicAndDegenerate(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var units []bootUnit
	for range 4 {
		u := bootUnit{make([]float64, 20), make([]float64, 20)}
		for g := range u {
			for i := range u[g] {
				u[g][i] = 10 + 5*rng.Float64()
			}
		}
		units = append(units, u)
	}
	a := bootstrapCI(units, quantileRatio(1, 0, 50), 500, 42)
	b := bootstrapCI(units, quantileRatio(1, 0, 50), 500, 42)
	c := bootstrapCI(units, quantileRatio(1, 0, 50), 500, 43)
	if a != b {
		t.Errorf("same seed, different intervals: %+v, %+v", a, b)
	}
	if a == c {
		t.Errorf("another seed gave the same interval %+v", a)
	}
	if !(a.Lo < a.Point && a.Point < a.Hi) {
		t.Errorf("interval %+v does not hold its point", a)
	}
	same := []bootUnit{{{3, 3, 3}, {6, 6}}, {{3}, {6, 6, 6}}}
	if got := bootstrapCI(same, quantileRatio(1, 0, 99), 200, 1); got != (ci{2, 2, 2}) {
		t.Errorf("constant samples: %+v, want 2 [2, 2]", got)
	}
	if got := bootstrapCI(nil, quantileRatio(1, 0, 50), 200, 1); got != (ci{}) {
		t.Errorf("no units: %+v", got)
	}
}

// The statistic of two builds: (new flooded / new alone) / (old flooded /
// old alone) at the percentile, by hand.
func TestRatioOfRatios(t *testing.T) {
	g := [][]float64{{10, 20, 30}, {30, 40, 50}, {5, 10, 15}, {10, 15, 20}}
	// old: 40/20 = 2; new: 15/10 = 1.5; new/old 0.75.
	if got := ratioOfRatios(50)(g); math.Abs(got-0.75) > 1e-12 {
		t.Errorf("got %v, want 0.75", got)
	}
	if got := ratioOfRatios(50)([][]float64{{1}, {}, {1}, {1}}); got == got {
		t.Errorf("an empty group gave %v, want NaN", got)
	}
}

// The interval's coverage where the truth is known: an A/A setup (alone
// and flooded drawn from one distribution, so the true ratio of the pooled
// percentiles is 1) in which each block's side runs under its own load
// factor, as on a shared machine (factor sd 25% per side and block, far
// more than the request-sampling error of 32 requests): over 120 such
// data sets of 8 block pairs, the 95% interval must hold 1 in at least
// 85% of them (it held it in 110 and 113 of 120 at p50 and p90: a
// percentile bootstrap over 8 units is a little narrow). Resampling the
// requests but not the blocks held it in 70 and 80.
func TestBootstrapCoverageWithBlockEffects(t *testing.T) {
	rng := rand.New(rand.NewPCG(2026, 12))
	const sets, blocks, perBlock = 120, 8, 32
	for _, p := range []float64{50, 90} {
		covered := 0
		for s := range sets {
			units := make([]bootUnit, blocks)
			for k := range units {
				units[k] = bootUnit{make([]float64, perBlock), make([]float64, perBlock)}
				for g := range units[k] {
					load := math.Exp(0.25 * rng.NormFloat64())
					for i := range units[k][g] {
						units[k][g][i] = load * math.Exp(2.5+0.5*rng.NormFloat64())
					}
				}
			}
			c := bootstrapCI(units, quantileRatio(1, 0, p), 300, uint64(s))
			if c.Lo <= 1 && 1 <= c.Hi {
				covered++
			}
		}
		if covered < sets*85/100 {
			t.Errorf("p%v: the 95%% interval held the true ratio in %d of %d data sets, want >= 85%%", p, covered, sets)
		}
	}
}

func TestVerdicts(t *testing.T) {
	for _, c := range []struct {
		c    ci
		want string
	}{
		{ci{1.05, 1.01, 1.09}, "met"},
		{ci{1.05, 1.01, 1.10}, "met"},
		{ci{1.08, 1.02, 1.15}, "not resolved"},
		{ci{1.3, 1.11, 1.5}, "not met"},
		{ci{0.9, 0.8, 1.2}, "not resolved"},
	} {
		if got := verdict(c.c, 1.10); got != c.want {
			t.Errorf("verdict(%+v) = %q, want %q", c.c, got, c.want)
		}
	}
	for _, c := range []struct {
		c    ci
		want string
	}{
		{ci{0.9, 0.85, 0.99}, "new lower"},
		{ci{1.1, 1.01, 1.2}, "new higher"},
		{ci{1, 0.95, 1.05}, "no difference resolved"},
		{ci{0.95, 0.9, 1}, "no difference resolved"},
	} {
		if got := compareVerdict(c.c); got != c.want {
			t.Errorf("compareVerdict(%+v) = %q, want %q", c.c, got, c.want)
		}
	}
	if got := fmtCI(ci{1.081, 1.024, 1.149}); got != "1.08x (95% CI 1.02-1.15x)" {
		t.Errorf("fmtCI = %q", got)
	}
}

// crowdCoverage by hand: b's requests (sent at 0 ms, first token at the
// given ms) against a's requests in flight (start, end ms).
func TestCrowdCoverage(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(msec int) time.Time { return t0.Add(time.Duration(msec) * time.Millisecond) }
	b := func(start, first int) streamSample {
		return streamSample{start: at(start), chunks: []time.Time{at(first)}, status: http.StatusOK}
	}
	a := []interval{{at(0), at(100)}, {at(50), at(300)}, {at(400), at(500)}}
	bs := []streamSample{
		b(10, 20),   // a's first only
		b(60, 90),   // first and second
		b(310, 390), // none: between a's second and third
		b(300, 400), // touches both ends: none (open at the ends)
		b(450, 460), // the third
		b(280, 420), // a's second ends and third starts inside it: both
		{start: at(320), status: http.StatusTooManyRequests}, // not OK: not counted
		{start: at(330), status: http.StatusOK},              // no first token: not counted
	}
	got := crowdCoverage(bs, a)
	if want := (coverage{Requests: 6, Covered: 4, Min: 0}); got != want {
		t.Errorf("coverage %+v, want %+v", got, want)
	}
	got = crowdCoverage(append(bs[:2:2], bs[5]), a)
	if want := (coverage{Requests: 3, Covered: 3, Min: 1}); got != want {
		t.Errorf("coverage %+v, want %+v", got, want)
	}
	if got := crowdCoverage(nil, a); got != (coverage{}) {
		t.Errorf("no requests: %+v", got)
	}
}

// The report's intervals come from its blocks: pooled point equal to the
// pooled ratio, the coverage summed with the fewest kept.
func TestCrowdSummarizeBlocks(t *testing.T) {
	rep := crowdReport{Bound: 1.1, Resamples: 500, Blocks: []crowdBlock{
		{Alone: []float64{10, 10, 10}, Flooded: []float64{20, 20, 20}, Cover: coverage{3, 3, 2}},
		{Alone: []float64{10, 10}, Flooded: []float64{20, 20}, Cover: coverage{2, 1, 1}},
		{Alone: []float64{10}}, // no flooded block: not a unit, no coverage
	}}
	rep.summarizeBlocks()
	if rep.TTFTP50CI != (ci{2, 2, 2}) || rep.TTFTP99CI != (ci{2, 2, 2}) || rep.P50Verdict != "not met" || rep.P99Verdict != "not met" {
		t.Errorf("intervals %+v %+v, verdicts %q %q", rep.TTFTP50CI, rep.TTFTP99CI, rep.P50Verdict, rep.P99Verdict)
	}
	if rep.Coverage != (coverage{5, 4, 1}) {
		t.Errorf("coverage %+v, want 5 requests, 4 covered, min 1", rep.Coverage)
	}
	// The hit rate flooded must be at least 0.90x of alone's.
	for _, c := range []struct {
		alone, flooded float64
		want           string
	}{{0.938, 0.938, "met"}, {0.938, 0.85, "met"}, {0.938, 0.84, "not met"}, {0.5, 0.6, "met"}} {
		rep.Alone.HitRate, rep.Flooded.HitRate = c.alone, c.flooded
		if rep.summarizeBlocks(); rep.HitVerdict != c.want {
			t.Errorf("hit rate %.3f flooded, %.3f alone: %q, want %q", c.flooded, c.alone, rep.HitVerdict, c.want)
		}
	}
}

// waitSteady returns only once crowdFlood of a's requests started since
// t0 have ended whole: refusals (429) and failed streams do not count.
func TestFloodWaitSteady(t *testing.T) {
	f := &flood{active: map[int]time.Time{}}
	t0 := time.Now()
	add := func(s streamSample) {
		f.mu.Lock()
		f.ended = append(f.ended, floodReq{s, time.Now()})
		f.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			add(streamSample{status: http.StatusTooManyRequests})
			add(streamSample{status: http.StatusOK, err: errors.New("cut")})
		}
		for range crowdFlood {
			time.Sleep(80 * time.Millisecond)
			add(streamSample{status: http.StatusOK})
		}
	}()
	f.waitSteady(context.Background(), t0)
	f.mu.Lock()
	n := len(f.ended)
	f.mu.Unlock()
	if n < 40+crowdFlood {
		t.Errorf("waitSteady returned with %d of a's requests ended, want the %d refused or failed and %d whole", n, 40, crowdFlood)
	}
	<-done
	// Cut off by its context: it returns.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	(&flood{active: map[int]time.Time{}}).waitSteady(ctx, start)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("waitSteady ran %v past its context", d)
	}
}
