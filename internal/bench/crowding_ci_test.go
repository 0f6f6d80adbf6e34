package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeCrowdRuns writes one crowding report per round under dir as
// name-NN.json, each with the given blocks.
func writeCrowdRuns(t *testing.T, dir, name string, rounds [][]crowdBlock) {
	t.Helper()
	for i, blocks := range rounds {
		raw, err := json.Marshal(crowdReport{Layout: "shared", BlocksPerServer: len(blocks), Blocks: blocks})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%02d.json", name, i+1)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func constBlock(alone, flooded float64, n int) crowdBlock {
	k := crowdBlock{Cover: coverage{Requests: n, Covered: n, Min: 3}}
	for range n {
		k.Alone, k.Flooded = append(k.Alone, alone), append(k.Flooded, flooded)
	}
	return k
}

// Two builds by hand: old's b takes 2x as long flooded in every block,
// new's the same as alone, every sample constant: the intervals are the
// points, old's ratio is over the bound, new's under, new/old 0.5.
func TestCrowdingCIByHand(t *testing.T) {
	dir := t.TempDir()
	writeCrowdRuns(t, dir, "old", [][]crowdBlock{{constBlock(10, 20, 4), constBlock(12, 24, 4)}, {constBlock(11, 22, 3)}})
	writeCrowdRuns(t, dir, "new", [][]crowdBlock{{constBlock(10, 10, 4)}, {constBlock(9, 9, 4), constBlock(9, 9, 2)}})
	var out, errOut bytes.Buffer
	code := Run([]string{"crowding-ci", "--resamples", "200", "--old", filepath.Join(dir, "old-*.json"), "--new", filepath.Join(dir, "new-*.json")}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{
		"old: 2 runs ([shared, 2 blocks shared, 1 blocks]), 3 alone/flooded block pairs, b's requests 11 alone / 11 flooded\n",
		"old: b TTFT p50 flooded/alone 2.00x (95% CI 2.00-2.00x), bound 1.10x: not met\n",
		"new: b TTFT p99 flooded/alone 1.00x (95% CI 1.00-1.00x), bound 1.10x: met\n",
		"new: b's flooded requests with a's requests in flight from sending to first token: 10/10 (fewest of a's in flight: 3)\n",
		"over 2 rounds",
		"(only 2 rounds for new/old: a bootstrap over so few is too narrow; take these intervals as a lower bound on the noise)\n",
		"(only 3 old block pairs: ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	// Old's first round pools blocks of 10/20 and 12/24: its resampled
	// medians move, the interval is not a point, but all under 1.
	for _, p := range []string{"p50", "p99"} {
		re := regexp.MustCompile(`new/old: b TTFT ` + p + ` flooded/alone ratio 0\.50x \(95% CI 0\.[0-9]+-0\.[0-9]+x\): new lower\n`)
		if !re.MatchString(out.String()) {
			t.Errorf("no %s line %q in:\n%s", p, re, out.String())
		}
	}
	// The same runs as both builds (an A/A) whose blocks each have one
	// value per side: no difference, exactly.
	out.Reset()
	if code := Run([]string{"crowding-ci", "--resamples", "200", "--old", filepath.Join(dir, "new-*.json"), "--new", filepath.Join(dir, "new-*.json")}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if want := "new/old: b TTFT p99 flooded/alone ratio 1.00x (95% CI 1.00-1.00x): no difference resolved\n"; !strings.Contains(out.String(), want) {
		t.Errorf("no %q in:\n%s", want, out.String())
	}
	for _, bad := range [][]string{
		{"crowding-ci"},
		{"crowding-ci", "--old", filepath.Join(dir, "none-*.json")},
		{"crowding-ci", "--old", filepath.Join(dir, "old-*.json"), "extra"},
		{"crowding-ci", "--old", filepath.Join(dir, "old-*.json"), "--resamples", "5"},
	} {
		if code := Run(bad, &out, &errOut); code == 0 {
			t.Errorf("%q: exit 0", bad)
		}
	}
}

// pairedUnits pools each round's blocks per build and pairs round i of
// the old build with round i of the new one (the first min(len) rounds).
func TestPairedUnits(t *testing.T) {
	old := crowdBuild{runs: []crowdReport{
		{Blocks: []crowdBlock{{Alone: []float64{1}, Flooded: []float64{2}}, {Alone: []float64{3}, Flooded: []float64{4}}}},
		{Blocks: []crowdBlock{{Alone: []float64{5}, Flooded: []float64{6}}}},
		{Blocks: []crowdBlock{{Alone: []float64{7}, Flooded: []float64{8}}}},
	}}
	cur := crowdBuild{runs: []crowdReport{
		{Blocks: []crowdBlock{{Alone: []float64{10}, Flooded: []float64{20}}}},
		{Blocks: []crowdBlock{{Alone: []float64{30}, Flooded: []float64{40}}, {Alone: []float64{50}}}},
	}}
	got := pairedUnits(old, cur)
	want := []bootUnit{
		{{1, 3}, {2, 4}, {10}, {20}},
		{{5}, {6}, {30}, {40}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("paired units %v, want %v", got, want)
	}
}
