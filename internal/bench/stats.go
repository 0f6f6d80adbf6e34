package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Confidence intervals for the crowding benchmark's ratios (issue 28's
// bound is b's TTFT within 10% of b alone, about the size of the run to
// run noise, so a ratio alone cannot say whether the bound is met).
//
// The samples come in units: a unit is what was measured side by side
// under the same conditions (one alone block and the flooded block next
// to it; or, comparing two builds, one round of each), each holding one
// group of samples per side (b's TTFTs alone, flooded, ...). Requests of
// one unit are not independent of each other (the machine's load, the
// server's state), so resampling requests alone would understate the
// spread between runs; the bootstrap here resamples at both levels
// (units with replacement, then each chosen unit's samples with
// replacement), which keeps both sources of variance (it errs on the wide
// side: the within-unit spread is counted twice, once in the units'
// differences). With one unit only the requests are resampled: the
// interval then says nothing about run-to-run spread, and the report says
// so.

// ci is a statistic and its bootstrap interval.
type ci struct {
	Point float64 `json:"point"`
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
}

// ciLevel is the interval's coverage (two-sided, percentile method).
const ciLevel = 0.95

// fewUnits: with fewer units than this, the reports warn that the
// interval is too narrow. A percentile bootstrap over k units sees at
// most the k units' spread (it holds the truth in about 92-94% of data
// sets at 8, TestBootstrapCoverageWithBlockEffects; at 2 or 3 only a
// handful of distinct resamples exist).
const fewUnits = 6

// fewNote is the warning for an interval over n < fewUnits units ("").
func fewNote(n int, what string) string {
	if n >= fewUnits {
		return ""
	}
	return fmt.Sprintf("(only %d %s: a bootstrap over so few is too narrow; take these intervals as a lower bound on the noise)\n", n, what)
}

// bootUnit is one resampling unit: its samples per group, every unit
// with the same number of groups.
type bootUnit [][]float64

// bootstrapCI is stat over the pooled groups of every unit, and its
// 95% percentile interval over resamples: each resample draws len(units)
// units with replacement and, from each drawn unit, each group's samples
// with replacement (as many as the group has), pools every group across
// the drawn units and computes stat on the pools. A resample whose stat
// is not a number (an empty group) is skipped. Deterministic for a seed.
func bootstrapCI(units []bootUnit, stat func(groups [][]float64) float64, resamples int, seed uint64) ci {
	if len(units) == 0 {
		return ci{}
	}
	ng := len(units[0])
	pool := make([][]float64, ng)
	for _, u := range units {
		for g := range ng {
			pool[g] = append(pool[g], u[g]...)
		}
	}
	out := ci{Point: stat(pool)}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	stats := make([]float64, 0, resamples)
	for range resamples {
		for g := range pool {
			pool[g] = pool[g][:0]
		}
		for range units {
			u := units[rng.IntN(len(units))]
			for g, xs := range u {
				for range xs {
					pool[g] = append(pool[g], xs[rng.IntN(len(xs))])
				}
			}
		}
		if v := stat(pool); v == v { // not NaN
			stats = append(stats, v)
		}
	}
	if len(stats) == 0 {
		return out
	}
	tail := (1 - ciLevel) / 2 * 100
	out.Lo, out.Hi = percentile(stats, tail), percentile(stats, 100-tail)
	return out
}

// quantileRatio is the stat "percentile p of group num over percentile p
// of group den" (NaN when either group is empty or the denominator is 0).
func quantileRatio(num, den int, p float64) func([][]float64) float64 {
	return func(g [][]float64) float64 {
		if len(g[num]) == 0 || len(g[den]) == 0 {
			return math.NaN()
		}
		d := percentile(g[den], p)
		if d == 0 {
			return math.NaN()
		}
		return percentile(g[num], p) / d
	}
}

// ratioOfRatios is (q(g[3]) / q(g[2])) / (q(g[1]) / q(g[0])) at
// percentile p: a build's flooded/alone ratio (groups 2, 3) over
// another's (groups 0, 1).
func ratioOfRatios(p float64) func([][]float64) float64 {
	old, cur := quantileRatio(1, 0, p), quantileRatio(3, 2, p)
	return func(g [][]float64) float64 {
		o := old(g)
		if o != o || o == 0 {
			return math.NaN()
		}
		return cur(g) / o
	}
}

// verdict says whether an interval for a ratio resolves the bound "at
// most bound": met when the whole interval is at or below it, not met
// when the whole interval is above it, else not resolved.
func verdict(c ci, bound float64) string {
	switch {
	case c.Hi <= bound:
		return "met"
	case c.Lo > bound:
		return "not met"
	default:
		return "not resolved"
	}
}

// compareVerdict says what an interval for new/old says: lower or higher
// when the whole interval is on one side of 1, else no difference
// resolved.
func compareVerdict(c ci) string {
	switch {
	case c.Hi < 1:
		return "new lower"
	case c.Lo > 1:
		return "new higher"
	default:
		return "no difference resolved"
	}
}

// fmtCI is "1.08x (95% CI 1.02-1.15x)".
func fmtCI(c ci) string {
	return fmt.Sprintf("%.2fx (95%% CI %.2f-%.2fx)", c.Point, c.Lo, c.Hi)
}
