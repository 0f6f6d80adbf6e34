package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"sluice/internal/testenv"
)

func TestParseLlamaSpeed(t *testing.T) {
	f, err := os.Open(testenv.Shared(t, "reference/llama-cpp-speed.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ref, err := parseLlamaSpeed(f)
	if err != nil {
		t.Fatal(err)
	}
	// Values from the file's llama-bench table.
	want := map[string]map[int]llamaFigures{
		"stories260K":     {1: {6906, 0, 5713}, 2: {12093, 0, 5330}},
		"bench-15M-q8_0":  {1: {5668, 4753, 760}, 2: {10319, 8563, 1137}},
		"bench-110M-q8_0": {2: {884, 812, 180}},
	}
	for m, byT := range want {
		for th, w := range byT {
			if got := ref[m][th]; got != w {
				t.Errorf("%s threads %d: %+v, want %+v", m, th, got, w)
			}
		}
	}
	if _, err := parseLlamaSpeed(strings.NewReader("no table here\n")); err == nil {
		t.Error("a file without the table parsed")
	}
}

func TestBenchCommandPrintsTable(t *testing.T) {
	p := testenv.Shared(t, "models/stories260K.gguf")
	var out, errb bytes.Buffer
	code := runBench([]string{"--model", p, "--threads", "1,2", "--prompt", "128", "--gen", "8", "--reps", "1"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "pp128") {
		t.Fatalf("table:\n%s", out.String())
	}
	// pp128 has a llama.cpp figure (ratio shown); tg8 has none.
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if f[0] != "stories260K" || !strings.HasSuffix(f[5], "x") || f[9] != "—" {
			t.Errorf("row %q", l)
		}
	}
}
