package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"sluice/internal/cli"
)

// `sluice bench crowding-ci` pools the crowding workload's JSON reports
// (--json-out) of several runs of one build, or of two builds run in
// turn (scripts/bench-crowding-ab.sh), and prints b's TTFT ratios with
// their 95% intervals over every run's blocks, and the new build's ratio
// over the old one's with its interval, paired round by round.

// crowdBuild is one build's runs, in round order.
type crowdBuild struct {
	name string
	runs []crowdReport
}

// units are the build's block pairs over every run (groups alone,
// flooded).
func (b crowdBuild) units() []bootUnit {
	var out []bootUnit
	for _, r := range b.runs {
		out = append(out, crowdUnits(r.Blocks)...)
	}
	return out
}

// roundGroups pools a run's blocks: b's TTFTs alone, flooded.
func roundGroups(r crowdReport) (alone, flooded []float64) {
	for _, k := range r.Blocks {
		if len(k.Alone) > 0 && len(k.Flooded) > 0 {
			alone, flooded = append(alone, k.Alone...), append(flooded, k.Flooded...)
		}
	}
	return alone, flooded
}

// pairedUnits are the bootstrap's units comparing two builds: round i of
// each (the first min(len) rounds), groups old alone, old flooded, new
// alone, new flooded. Rounds run next to each other share the machine's
// load, so they are resampled together.
func pairedUnits(old, cur crowdBuild) []bootUnit {
	var out []bootUnit
	for i := range min(len(old.runs), len(cur.runs)) {
		oa, of := roundGroups(old.runs[i])
		na, nf := roundGroups(cur.runs[i])
		if len(oa) > 0 && len(of) > 0 && len(na) > 0 && len(nf) > 0 {
			out = append(out, bootUnit{oa, of, na, nf})
		}
	}
	return out
}

// crowdCIs are the intervals the command prints for one build.
type crowdCIs struct {
	Units            int
	P50, P99         ci
	AloneN, FloodedN int
	Cover            coverage
	Layouts          []string
}

func buildCIs(b crowdBuild, resamples int) crowdCIs {
	units := b.units()
	out := crowdCIs{Units: len(units),
		P50: bootstrapCI(units, quantileRatio(1, 0, 50), resamples, 1),
		P99: bootstrapCI(units, quantileRatio(1, 0, 99), resamples, 2)}
	for _, u := range units {
		out.AloneN += len(u[0])
		out.FloodedN += len(u[1])
	}
	first := true
	for _, r := range b.runs {
		for _, k := range r.Blocks {
			c := k.Cover
			if c.Requests == 0 {
				continue
			}
			if first || c.Min < out.Cover.Min {
				out.Cover.Min, first = c.Min, false
			}
			out.Cover.Requests += c.Requests
			out.Cover.Covered += c.Covered
		}
		l := r.Layout
		if l == "shared" {
			l = fmt.Sprintf("shared, %d blocks", r.BlocksPerServer)
		}
		if !slices.Contains(out.Layouts, l) {
			out.Layouts = append(out.Layouts, l)
		}
	}
	return out
}

func runCrowdingCI(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench crowding-ci", flag.ContinueOnError)
	fs.SetOutput(stderr)
	oldGlob := fs.String("old", "", "`glob` of one build's crowding JSON reports (sluice bench serve --workload crowding --json-out), sorted by name = round order")
	newGlob := fs.String("new", "", "`glob` of the other build's reports, if any: its ratios over the old build's, paired round by round (the i-th file of each)")
	bound := fs.Float64("bound", crowdBound, "the `ratio` b's TTFT flooded/alone must stay under (issue 28: 1.10)")
	resamples := fs.Int("resamples", crowdResamples, "bootstrap `resamples` per interval")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice bench crowding-ci --old GLOB [--new GLOB] [flags]

Pools crowding reports (sluice bench serve --workload crowding --json-out
FILE) of several runs and prints, per build, b's TTFT p50 and p99 flooded /
alone over every run's requests with a 95% bootstrap interval over every
run's alone/flooded block pairs and their requests, and whether the
interval resolves the bound; with --new, the new build's ratios over the
old build's with a 95% interval, resampling rounds (old and new of a round
together) and their requests. Same binary for both: the interval's width
is the noise of the measurement (an A/A run).

Flags:
`)
		fs.PrintDefaults()
	}
	if code, ok := cli.ParseFlags(fs, args, stdout); !ok {
		return code
	}
	fail := func(code int, f string, a ...any) int {
		fmt.Fprintf(stderr, "sluice bench crowding-ci: "+f+"\n", a...)
		return code
	}
	if *oldGlob == "" || fs.NArg() > 0 {
		return fail(2, "give the reports with --old GLOB (and --new GLOB), nothing else")
	}
	if *resamples < 100 || *resamples > 1_000_000 || !(*bound > 0) {
		return fail(2, "--resamples must be 100 to 1000000 and --bound positive")
	}
	var builds []crowdBuild
	for _, g := range []struct{ name, glob string }{{"old", *oldGlob}, {"new", *newGlob}} {
		if g.glob == "" {
			continue
		}
		b, err := loadCrowdBuild(g.name, g.glob)
		if err != nil {
			return fail(1, "%v", err)
		}
		builds = append(builds, b)
	}
	for _, b := range builds {
		c := buildCIs(b, *resamples)
		if c.Units == 0 {
			return fail(1, "--%s: no report has an alone and a flooded block with b's TTFTs (reports from builds before the blocks were recorded?)", b.name)
		}
		fmt.Fprintf(stdout, "%s: %d runs (%v), %d alone/flooded block pairs, b's requests %d alone / %d flooded\n",
			b.name, len(b.runs), c.Layouts, c.Units, c.AloneN, c.FloodedN)
		fmt.Fprintf(stdout, "%s: b TTFT p50 flooded/alone %s, bound %.2fx: %s\n", b.name, fmtCI(c.P50), *bound, verdict(c.P50, *bound))
		fmt.Fprintf(stdout, "%s: b TTFT p99 flooded/alone %s, bound %.2fx: %s\n", b.name, fmtCI(c.P99), *bound, verdict(c.P99, *bound))
		fmt.Fprintf(stdout, "%s: b's flooded requests with a's requests in flight from sending to first token: %d/%d (fewest of a's in flight: %d)\n",
			b.name, c.Cover.Covered, c.Cover.Requests, c.Cover.Min)
		var ha, hf float64
		for _, r := range b.runs {
			ha, hf = ha+r.Alone.HitRate/float64(len(b.runs)), hf+r.Flooded.HitRate/float64(len(b.runs))
		}
		fmt.Fprintf(stdout, "%s: b hit rate flooded %.3f, alone %.3f (means over the runs)\n", b.name, hf, ha)
		fmt.Fprint(stdout, fewNote(c.Units, b.name+" block pairs"))
	}
	if len(builds) == 2 {
		units := pairedUnits(builds[0], builds[1])
		if len(units) == 0 {
			return fail(1, "no round has b's TTFTs alone and flooded in both builds")
		}
		p50 := bootstrapCI(units, ratioOfRatios(50), *resamples, 3)
		p99 := bootstrapCI(units, ratioOfRatios(99), *resamples, 4)
		fmt.Fprintf(stdout, "new/old: b TTFT p50 flooded/alone ratio %s: %s\n", fmtCI(p50), compareVerdict(p50))
		fmt.Fprintf(stdout, "new/old: b TTFT p99 flooded/alone ratio %s: %s\n", fmtCI(p99), compareVerdict(p99))
		fmt.Fprintf(stdout, "(95%% intervals, bootstrap with %d resamples: per build over its block pairs and their requests; new/old over %d rounds, old and new of a round together, and their requests)\n",
			*resamples, len(units))
		fmt.Fprint(stdout, fewNote(len(units), "rounds for new/old"))
	}
	return 0
}

// loadCrowdBuild reads the reports glob matches, sorted by name.
func loadCrowdBuild(name, glob string) (crowdBuild, error) {
	files, err := filepath.Glob(glob)
	if err != nil {
		return crowdBuild{}, fmt.Errorf("--%s %q: %v", name, glob, err)
	}
	if len(files) == 0 {
		return crowdBuild{}, fmt.Errorf("--%s %q matches no file", name, glob)
	}
	slices.Sort(files)
	b := crowdBuild{name: name}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return crowdBuild{}, err
		}
		var r crowdReport
		if err := json.Unmarshal(raw, &r); err != nil {
			return crowdBuild{}, fmt.Errorf("%s: not a crowding report: %v", f, err)
		}
		b.runs = append(b.runs, r)
	}
	return b, nil
}
