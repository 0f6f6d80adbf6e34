// Command kvq8ref writes testdata/reference/kvq8.json: llama.cpp's prompt
// ids, greedy ids and top-2 log-probabilities per step for the synthetic
// files of synth.KVQ8References (written first; the test regenerates them
// and checks their SHA-256), once with a q8_0 KV cache (-ctk q8_0 -ctv
// q8_0) and once with f16, both with flash attention on (llama.cpp needs
// it for a quantized V cache), so the test can compare sluice's Q8_0
// pages with llama.cpp's and each engine's q8_0 with its own f16.
//
//	go run ./scripts/kvq8ref -server "$(../shared/tools/llama.cpp/select llama-server)"
//
// Settings: llama-server on loopback, 1 thread, one slot, no prompt
// cache, temperature 0 (greedy), n_probs 2, 32 tokens after a prompt of
// about 600 tokens (the cache's rounding matters with depth).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"sluice/internal/synth"
	"sluice/scripts/llamaref"
)

// Prompts: a short one, and a long one that puts ~600 positions in the
// cache before the first generated token.
var prompts = []string{
	"Once upon a time",
	strings.Repeat("In the beginning the Universe was created. This has made a lot of people very angry and been widely regarded as a bad move. "+
		"Many were increasingly of the opinion that they'd all made a big mistake in coming down from the trees in the first place. ", 6),
}

const nPredict = 32

type refModel struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	Bytes  int    `json:"bytes"`
	// Cases by llama.cpp KV cache type: "q8_0" and "f16".
	Cases map[string][]llamaref.Case `json:"cases"`
}

func main() {
	server := flag.String("server", "", "llama-server binary (../shared/tools/llama.cpp/select llama-server)")
	out := flag.String("out", "testdata/reference/kvq8.json", "output JSON")
	port := flag.Int("port", 0, "loopback port for llama-server (0: one it picks)")
	flag.Parse()
	if *server == "" {
		fmt.Fprintln(os.Stderr, "kvq8ref: -server is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "kvq8ref")
	llamaref.Check(err)
	defer os.RemoveAll(dir)
	var models []refModel
	for _, r := range synth.KVQ8References() {
		f := llamaref.WriteFile(dir, r)
		m := refModel{Name: r.Name, SHA256: f.SHA256, Bytes: f.Bytes, Cases: map[string][]llamaref.Case{}}
		for _, typ := range []string{"q8_0", "f16"} {
			m.Cases[typ] = llamaref.Run(*server, f.Path, *port, prompts, nPredict, "-ctk", typ, "-ctv", typ, "-fa", "on")
		}
		models = append(models, m)
		fmt.Fprintf(os.Stderr, "%s: done\n", r.Name)
	}
	doc := map[string]any{
		"producer": "scripts/kvq8ref: llama.cpp llama-server (../shared/tools/llama.cpp), 1 thread, -fa on, -ctk/-ctv q8_0 and f16, greedy, n_probs 2",
		"models":   models,
	}
	llamaref.WriteJSON(*out, doc)
}
