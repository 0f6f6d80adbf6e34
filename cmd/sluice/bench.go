package main

import (
	"os"

	"sluice/internal/bench"
)

func init() {
	register(command{
		name:    "bench",
		summary: "measure prefill and decode tokens/s, side by side with llama-bench (--llama-bench); `bench serve`: serving tok/s, TTFT, ITL against llama-server",
		run:     func(args []string) int { return bench.Run(args, os.Stdout, os.Stderr) },
	})
}
