// Package bench holds the drivers behind `sluice bench`: the kernel
// benchmark (prefill and decode tokens/s of one model in this process, side
// by side with llama-bench), and the serving benchmarks that start sluice
// and llama-server as processes on loopback and measure them over HTTP:
// `bench serve` (tok/s, TTFT and ITL; the interference and kv-pressure
// workloads), `bench chat` (the prefix cache on a multi-turn chat) and
// `bench cluster` (router CPU and balance over several decode workers).
// None of it is on the serving path; cmd/sluice only registers Run.
package bench
