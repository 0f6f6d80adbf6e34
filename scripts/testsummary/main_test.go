package main

import (
	"strings"
	"testing"
)

// A stream as `go test -json` writes it (shapes copied from its output):
// one pass, one skip with a reason, one opt-in skip, one failure.
const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- PASS: TestA (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":31.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:12: SKIPPED: test data models/x.gguf not found\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"--- SKIP: TestB (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestB"}
{"Action":"run","Package":"p","Test":"TestC"}
{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:3: opt-in: set X=1\n"}
{"Action":"skip","Package":"p","Test":"TestC"}
{"Action":"run","Package":"p","Test":"TestD"}
{"Action":"output","Package":"p","Test":"TestD","Output":"    d_test.go:9: got 2, want 3\n"}
{"Action":"output","Package":"p","Test":"TestD","Output":"--- FAIL: TestD (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestD/sub","Elapsed":40}
{"Action":"fail","Package":"p","Test":"TestD","Elapsed":45.25}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	skips, slow, err := summarize(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatal(err)
	}
	var sl strings.Builder
	reportSlow(&sl, slow)
	// Top-level tests over 30 s, slowest first, failed or not; no
	// subtests (their time is inside their parent's).
	if want := "== slowest: 2 tests took 30 s or more\n     45.2s p TestD\n     31.5s p TestA\n"; sl.String() != want {
		t.Errorf("slowest:\n%s\nwant:\n%s", sl.String(), want)
	}
	if !strings.Contains(out.String(), "d_test.go:9: got 2, want 3") || !strings.Contains(out.String(), "FAIL\tp\t0.01s") {
		t.Errorf("failed test's output or package line missing:\n%s", out.String())
	}
	if strings.Contains(out.String(), "TestA") {
		t.Errorf("a passing test's output was printed:\n%s", out.String())
	}
	var rep strings.Builder
	if code := report(&rep, skips, false); code != 0 {
		t.Errorf("outside CI a skip must not fail the run (code %d)", code)
	}
	want := "== skipped: 1 tests (and 1 opt-in long runs not switched on)\n" +
		"   p TestB: SKIPPED: test data models/x.gguf not found\n" +
		"   p TestC: opt-in: set X=1\n"
	if rep.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", rep.String(), want)
	}
	rep.Reset()
	if code := report(&rep, skips, true); code != 1 {
		t.Errorf("under CI a skip must fail the run (code %d)\n%s", code, rep.String())
	}
	rep.Reset()
	if code := report(&rep, skips[1:], true); code != 0 {
		t.Errorf("under CI an opt-in skip alone must not fail the run (code %d)", code)
	}
}
