// Command testsummary reads `go test -json` on stdin and prints what a
// person wants from a suite run: each package's result line, the whole
// output of every failed test, and at the end one line counting the skipped
// tests, each listed with its reason, then the tests that took longest
// (top-level tests over slowAfter, slowest first: where the suite's
// minutes go). scripts/test.sh pipes the suite through it.
//
// Under CI (CI=true) a skipped test fails the run: a skip there means the
// suite did not check what it claims to. Skips whose reason starts with
// "opt-in:" (long measurements switched on by an environment variable, such
// as SLUICE_SIM_BUG_RATES) are listed but never fail it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is the part of test2json's TestEvent this command reads.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's pass and fail
}

type skip struct{ pkg, test, reason string }

// timed is a top-level test that ran at least slowAfter.
type timed struct {
	pkg, test string
	secs      float64
}

// slowAfter is how long a top-level test runs before it is listed among
// the slowest.
const slowAfter = 30

func main() {
	skips, slow, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	code := report(os.Stdout, skips, os.Getenv("CI") == "true")
	reportSlow(os.Stdout, slow)
	os.Exit(code)
}

// summarize copies package lines and failed tests' output to w and returns
// the skipped tests in the order they ended, and the top-level tests that
// ran at least slowAfter.
func summarize(r io.Reader, w io.Writer) ([]skip, []timed, error) {
	type key struct{ pkg, test string }
	out := map[key][]string{}
	var skips []skip
	var slow []timed
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go vet or build output): show it as is.
			fmt.Fprintln(w, string(line))
			continue
		}
		k := key{e.Package, e.Test}
		if (e.Action == "pass" || e.Action == "fail") && e.Test != "" && !strings.Contains(e.Test, "/") && e.Elapsed >= slowAfter {
			slow = append(slow, timed{e.Package, e.Test, e.Elapsed})
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "output" && e.Test == "":
			// Package lines ("ok  pkg 1.2s", "FAIL", panics outside tests).
			if !strings.HasPrefix(e.Output, "=== ") && e.Output != "PASS\n" {
				fmt.Fprint(w, e.Output)
			}
		case e.Action == "output":
			out[k] = append(out[k], e.Output)
		case e.Action == "fail" && e.Test != "":
			fmt.Fprint(w, strings.Join(out[k], ""))
			delete(out, k)
		case e.Action == "fail":
			// A package that failed outside any one test (timeout, panic):
			// show the tests that were still running.
			for kk, lines := range out {
				if kk.pkg == e.Package {
					fmt.Fprint(w, strings.Join(lines, ""))
					delete(out, kk)
				}
			}
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skip{e.Package, e.Test, reason(out[k])})
			delete(out, k)
		case e.Action == "pass" && e.Test != "":
			delete(out, k)
		}
	}
	return skips, slow, sc.Err()
}

// reportSlow lists the slow tests, slowest first.
func reportSlow(w io.Writer, slow []timed) {
	sort.SliceStable(slow, func(i, j int) bool { return slow[i].secs > slow[j].secs })
	fmt.Fprintf(w, "== slowest: %d tests took %d s or more\n", len(slow), slowAfter)
	for _, s := range slow {
		fmt.Fprintf(w, "   %6.1fs %s %s\n", s.secs, s.pkg, s.test)
	}
}

// reason is the last line a skipped test logged before "--- SKIP" (its
// t.Skip message), without the file:line prefix.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "=== ") {
			continue
		}
		if _, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(l[:strings.Index(l, ": ")], ".go:") {
			return msg
		}
		return l
	}
	return "(no reason given)"
}

// report prints the summary line and the list, and returns the exit code.
func report(w io.Writer, skips []skip, ci bool) int {
	sort.SliceStable(skips, func(i, j int) bool { return skips[i].pkg < skips[j].pkg })
	var counted, optIn []skip
	for _, s := range skips {
		if strings.HasPrefix(s.reason, "opt-in:") {
			optIn = append(optIn, s)
		} else {
			counted = append(counted, s)
		}
	}
	fmt.Fprintf(w, "== skipped: %d tests", len(counted))
	if len(optIn) > 0 {
		fmt.Fprintf(w, " (and %d opt-in long runs not switched on)", len(optIn))
	}
	fmt.Fprintln(w)
	for _, s := range append(counted, optIn...) {
		fmt.Fprintf(w, "   %s %s: %s\n", s.pkg, s.test, s.reason)
	}
	if ci && len(counted) > 0 {
		fmt.Fprintf(w, "FAIL: %d tests skipped under CI; every test must run there\n", len(counted))
		return 1
	}
	return 0
}
