package sample

import (
	"context"
	"math/rand/v2"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/tokenizer"
)

// benchGrammarSchema is scripts/bench-grammar.sh's schema: twelve strings
// of exactly 24 characters.
const benchGrammarSchema = `{"type":"object","additionalProperties":false,"required":["items"],"properties":{"items":{"type":"array","minItems":12,"maxItems":12,"items":{"type":"string","minLength":24,"maxLength":24}}}}`

func qwen2Vocab(t testing.TB) *grammar.Vocab {
	tok, err := tokenizer.Load("../../testdata/vocab/ggml-vocab-qwen2.gguf")
	if err != nil {
		t.Fatal(err)
	}
	pieces := make([]string, tok.Size())
	for i := range pieces {
		if !tok.IsControl(int32(i)) {
			pieces[i] = tok.TokenText(int32(i))
		}
	}
	return grammar.NewVocab(pieces, tok.IsEOG)
}

// BenchmarkConstrainedDraw is the per-token sampling cost of bench-grammar's
// qwen2vocab row without the model: temperature-1 draws over Qwen2's
// 151,646-token vocabulary from flat random logits (an untrained model's;
// nearly every draw is refused by the grammar and redrawn over its mask),
// free and constrained by the bench schema, with the grammar's mask cache
// warm (the bench's steady state). ns/op is one token; the constrained
// overhead is constrained - free, to be compared with a forward pass.
func BenchmarkConstrainedDraw(b *testing.B) {
	v := qwen2Vocab(b)
	g, err := grammar.CompileSchema([]byte(benchGrammarSchema))
	if err != nil {
		b.Fatal(err)
	}
	c := grammar.Bind(g, v)
	rng := rand.New(rand.NewPCG(1, 2))
	logits := make([][]float32, 8)
	for i := range logits {
		logits[i] = make([]float32, v.Size())
		for j := range logits[i] {
			logits[i][j] = float32(rng.NormFloat64())
		}
	}
	// Warm the mask cache along a few outputs.
	warm := func(seed uint64) {
		s := New(Params{Temperature: 1, Seed: seed})
		s.Constrain(c.NewMatcher())
		for k := 0; ; k++ {
			if _, err := s.Sample(logits[k%len(logits)]); err != nil {
				b.Fatal(err)
			}
			if s.m.Ended() || k > 400 || s.m.CanEnd() {
				return
			}
		}
	}
	for seed := range uint64(4) {
		warm(seed)
	}
	for _, constrained := range []bool{false, true} {
		name := "free"
		if constrained {
			name = "json_schema"
		}
		b.Run(name, func(b *testing.B) {
			var s *Sampler
			seed := uint64(100)
			k := 0
			fresh := func() {
				s = New(Params{Temperature: 1, Seed: seed})
				seed++
				if constrained {
					s.Constrain(c.NewMatcher())
				}
			}
			fresh()
			cpu0 := cpuTime()
			pprof.Do(context.Background(), pprof.Labels("bench", name), func(context.Context) {
				for b.Loop() {
					if _, err := s.Sample(logits[k%len(logits)]); err != nil {
						b.Fatal(err)
					}
					k++
					if constrained && (s.m.CanEnd() || s.m.Ended()) {
						b.StopTimer()
						fresh()
						b.StartTimer()
					}
				}
			})
			// CPU time, not wall time: on a loaded machine the wall
			// clock counts other processes' turns.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
