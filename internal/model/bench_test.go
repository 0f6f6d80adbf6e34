package model

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sluice/internal/quant"
	"sluice/internal/synth"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/gguf"
	"sluice/internal/kernels"
	"sluice/internal/kv"
	"sluice/internal/testenv"
)

// Benchmarks report tokens/s as "tok/s"; `sluice bench` prints them next
// to llama.cpp's figures. Shapes: the real stories260K, and the synthetic
// llama2.c shapes of ../shared/reference/llama-cpp-speed.md (bench-15M-q8_0
// is a shared file; SLUICE_BENCH_MODELS may name more GGUF files, e.g. ones
// written by `sluice synth`). bench-15M-f32 and bench-110M-q8_0 are
// written with internal/synth into a temporary directory.

func benchModels(b *testing.B) map[string]*Model {
	out := map[string]*Model{}
	add := func(name, path string) {
		f, err := gguf.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		m, err := Load(f)
		if err != nil {
			b.Fatal(err)
		}
		out[name] = m
	}
	add("stories260K", testenv.Shared(b, "models/stories260K.gguf"))
	add("bench-15M-q8_0", testenv.Shared(b, "models/bench-15M-q8_0.gguf"))
	for name, p := range synthBenchModels(b) {
		add(name, p)
	}
	for _, p := range splitList(os.Getenv("SLUICE_BENCH_MODELS")) {
		add(strings.TrimSuffix(filepath.Base(p), ".gguf"), p)
	}
	return out
}

var (
	synthOnce  sync.Once
	synthDir   string
	synthPaths map[string]string
	synthErr   error
)

// synthBenchModels writes, once per test binary, the llama-cpp-speed.md
// shapes that are not shared files (bench-15M-f32, bench-110M-q8_0) with
// the Llama-2 vocabulary, as llama.cpp's files have it. SLUICE_BENCH_SYNTH=0
// skips them (writing 240 MB takes a while).
func synthBenchModels(b *testing.B) map[string]string {
	if os.Getenv("SLUICE_BENCH_SYNTH") == "0" {
		return nil
	}
	vocab := testenv.Shared(b, "vocab/ggml-vocab-llama-spm.gguf")
	synthOnce.Do(func() {
		synthDir, synthErr = os.MkdirTemp("", "sluice-model-bench-")
		if synthErr != nil {
			return
		}
		synthPaths = map[string]string{}
		for _, x := range []struct {
			preset, name string
			t            quant.Type
		}{{"bench-15M", "bench-15M-f32", quant.F32}, {"bench-110M", "bench-110M-q8_0", quant.Q8_0}} {
			spec, err := synth.PresetSpec(x.preset, x.t, vocab)
			if err != nil {
				synthErr = err
				return
			}
			var buf bytes.Buffer
			if err := synth.Write(&buf, spec); err != nil {
				synthErr = err
				return
			}
			p := filepath.Join(synthDir, x.name+".gguf")
			if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
				synthErr = err
				return
			}
			synthPaths[x.name] = p
		}
	})
	if synthErr != nil {
		b.Fatal(synthErr)
	}
	return synthPaths
}

// TestMain removes the synthetic benchmark models after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if synthDir != "" {
		os.RemoveAll(synthDir)
	}
	os.Exit(code)
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func benchView(b *testing.B, m *Model, tokens int) (*kv.Pool, kv.Owner, []kv.PageRef) {
	p, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: m.cfg.Layers, KVDim: m.cfg.KVDim(), PageSize: 16}, Pages: kv.PagesFor(tokens, 16)})
	if err != nil {
		b.Fatal(err)
	}
	o := kv.Owner{Tenant: "bench", ID: kv.ID{1}}
	refs, err := p.Reserve(o, kv.PagesFor(tokens, 16))
	if err != nil {
		b.Fatal(err)
	}
	return p, o, refs
}

// BenchmarkPrefill: one 128-token prompt in one step (llama-bench pp128).
func BenchmarkPrefill(b *testing.B) {
	for name, m := range benchModels(b) {
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", name, th), func(b *testing.B) {
				par := kernels.NewParallel(th)
				defer par.Close()
				r := m.NewRunner(par)
				toks := make([]int32, 128)
				for i := range toks {
					toks[i] = int32(1 + i*7%(m.cfg.Vocab-1))
				}
				pool, o, refs := benchView(b, m, 128)
				defer pool.Close()
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					// A fresh view per pass: the reservation is rewritten from 0.
					res := r.Forward([]Seq{{Tokens: toks, KV: pool.View(o, refs)}})
					if res[0].Err != nil {
						b.Fatal(res[0].Err)
					}
				}
				reportRates(b, 128*b.N, cpu0)
			})
		}
	}
}

// BenchmarkDecode: 128 single-token steps from an empty context (llama-bench
// tg128).
func BenchmarkDecode(b *testing.B) {
	for name, m := range benchModels(b) {
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", name, th), func(b *testing.B) {
				par := kernels.NewParallel(th)
				defer par.Close()
				r := m.NewRunner(par)
				pool, o, refs := benchView(b, m, 128)
				defer pool.Close()
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					v := pool.View(o, refs)
					tok := int32(1)
					for pos := 0; pos < 128; pos++ {
						res := r.Forward([]Seq{{Tokens: []int32{tok}, Pos: pos, KV: v}})
						if res[0].Err != nil {
							b.Fatal(res[0].Err)
						}
						tok = int32(pos*31%(m.cfg.Vocab-1) + 1)
					}
				}
				reportRates(b, 128*b.N, cpu0)
			})
		}
	}
}

// cpuTime is the process's user+system CPU time. On a shared machine wall
// time measures the neighbours as much as the code; tokens per CPU-second
// ("cpu-tok/s") is the steadier figure for single-threaded runs.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportRates(b *testing.B, tokens int, cpu0 time.Duration) {
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
	if d := cpuTime() - cpu0; d > 0 {
		b.ReportMetric(float64(tokens)/d.Seconds(), "cpu-tok/s")
	}
}

// BenchmarkDecodeBatch16: 16 sequences with 100-token prompts decoding 64
// steps together, one token each per step: the serving shape of
// llama-cpp-speed.md's llama-server anchor (aggregate generated tok/s).
func BenchmarkDecodeBatch16(b *testing.B) {
	const nseq, prompt, steps = 16, 100, 64
	for name, m := range benchModels(b) {
		for _, th := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", name, th), func(b *testing.B) {
				par := kernels.NewParallel(th)
				defer par.Close()
				r := m.NewRunner(par)
				ps := 16
				per := kv.PagesFor(prompt+steps, ps)
				pool, err := kv.New(kv.Config{Geometry: kv.Geometry{Layers: m.cfg.Layers, KVDim: m.cfg.KVDim(), PageSize: ps}, Pages: nseq * per})
				if err != nil {
					b.Fatal(err)
				}
				defer pool.Close()
				views := make([]*kv.View, nseq)
				for i := range views {
					o := kv.Owner{Tenant: "bench", ID: kv.ID{byte(i)}}
					refs, err := pool.Reserve(o, per)
					if err != nil {
						b.Fatal(err)
					}
					views[i] = pool.View(o, refs)
				}
				toks := make([]int32, prompt)
				for i := range toks {
					toks[i] = int32(1 + i*13%(m.cfg.Vocab-1))
				}
				seqs := make([]Seq, nseq)
				for i := range seqs {
					seqs[i] = Seq{Tokens: toks, KV: views[i]}
				}
				for _, x := range r.Forward(seqs) {
					if x.Err != nil {
						b.Fatal(x.Err)
					}
				}
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					for s := 0; s < steps; s++ {
						for j := range seqs {
							seqs[j] = Seq{Tokens: toks[s%prompt : s%prompt+1], Pos: prompt + s, KV: views[j]}
						}
						for _, x := range r.Forward(seqs) {
							if x.Err != nil {
								b.Fatal(x.Err)
							}
						}
					}
				}
				reportRates(b, nseq*steps*b.N, cpu0)
			})
		}
	}
}
