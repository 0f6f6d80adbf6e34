// Command moeref writes testdata/reference/moe.json: llama.cpp's prompt
// ids, greedy ids and top-2 log-probabilities per step for the small
// synthetic MoE files of synth.MoEReferences, which it writes first (the
// files are seeded: the test regenerates them and checks their SHA-256).
//
//	go run ./scripts/moeref -server "$(../shared/tools/llama.cpp/select llama-server)"
//
// Settings: llama-server on loopback, 1 thread, one slot, F32 KV cache,
// no prompt cache, temperature 0 (greedy), n_probs 2 (log-probabilities
// of the raw logits' softmax, so a top-2 margin is a logit margin).
package main

import (
	"flag"
	"fmt"
	"os"

	"sluice/internal/synth"
	"sluice/scripts/llamaref"
)

// Prompts: short ones, and one long enough (>100 tokens) that prefill
// groups many tokens per expert.
var prompts = []string{
	"Once upon a time",
	"The quick brown fox jumps over the lazy dog.",
	"def main():\n    print(\"hello\")\n",
	"In the beginning the Universe was created. This has made a lot of people very angry and been widely regarded as a bad move. " +
		"Many were increasingly of the opinion that they'd all made a big mistake in coming down from the trees in the first place.",
}

const nPredict = 32

type refModel struct {
	Name   string          `json:"name"`
	SHA256 string          `json:"sha256"`
	Bytes  int             `json:"bytes"`
	Cases  []llamaref.Case `json:"cases"`
}

func main() {
	server := flag.String("server", "", "llama-server binary (../shared/tools/llama.cpp/select llama-server)")
	out := flag.String("out", "testdata/reference/moe.json", "output JSON")
	port := flag.Int("port", 0, "loopback port for llama-server (0: one it picks)")
	flag.Parse()
	if *server == "" {
		fmt.Fprintln(os.Stderr, "moeref: -server is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "moeref")
	llamaref.Check(err)
	defer os.RemoveAll(dir)
	var models []refModel
	for _, r := range synth.MoEReferences() {
		f := llamaref.WriteFile(dir, r)
		m := refModel{Name: r.Name, SHA256: f.SHA256, Bytes: f.Bytes}
		m.Cases = llamaref.Run(*server, f.Path, *port, prompts, nPredict, "-ctk", "f32", "-ctv", "f32", "-fa", "off")
		models = append(models, m)
		fmt.Fprintf(os.Stderr, "%s: %d cases\n", r.Name, len(m.Cases))
	}
	doc := map[string]any{
		"producer": "scripts/moeref: llama.cpp llama-server (../shared/tools/llama.cpp), 1 thread, F32 KV, greedy, n_probs 2",
		"models":   models,
	}
	llamaref.WriteJSON(*out, doc)
}
