package engine

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// recording wraps a Runtime and records, for every forward step, how
// many tokens each sequence of the batch ran.
type recording struct {
	Runtime
	mu    sync.Mutex
	steps [][]int
	// threads is each step's forwarder's thread count.
	threads []int
	// gate, when set, holds the second forward step until it is closed.
	gate chan struct{}
}

func (r *recording) NewForwarder(threads int) Forwarder {
	return hookForwarder(r.Runtime, threads, func(threads int, steps []Step, next func([]Step) []StepResult) []StepResult {
		sizes := make([]int, len(steps))
		for i, s := range steps {
			sizes[i] = len(s.Tokens)
		}
		r.mu.Lock()
		r.steps = append(r.steps, sizes)
		r.threads = append(r.threads, threads)
		hold := len(r.steps) == 2 && r.gate != nil
		r.mu.Unlock()
		if hold {
			<-r.gate
		}
		return next(steps)
	})
}

// The step budget and the chunk size reach the scheduler and bound every
// step: a long prompt arriving while a short request decodes runs as
// chunks of at most ChunkTokens, never more than StepTokens tokens a step
// (the decode token counts), and the decoding request advances by one token in every step
// while the long prompt is prefilled (decode is never held behind it).
// The outputs equal the toy's reference (chunking changes no token).
func TestStepBudgetInterleavesPrefillWithDecode(t *testing.T) {
	for _, c := range []struct{ chunk, step int }{{5, 5}, {4, 9}, {7, 64}} {
		rec := &recording{Runtime: newToy(), gate: make(chan struct{})}
		cfg := toyConfig(rec, 64)
		cfg.ChunkTokens, cfg.StepTokens = c.chunk, c.step
		// Two tenants share the batch: shared steps of a whole chunk (the
		// colocated default is half of one) leave the budget as the bound.
		cfg.SharedStepTokens = min(c.chunk, c.step)
		e, err := NewColocated(cfg)
		if err != nil {
			t.Fatal(err)
		}
		short := &Request{Tenant: "a", Prompt: prompt(1, 2), MaxTokens: 40, IgnoreEOS: true}
		long := &Request{Tenant: "b", Prompt: prompt(2, 60), MaxTokens: 2, IgnoreEOS: true}
		ss, err := e.Submit(context.Background(), short)
		if err != nil {
			t.Fatal(err)
		}
		// The short request is decoding (its first decode step held) when
		// the long prompt arrives: 38 more tokens, more than the long
		// prompt has chunks.
		first := <-ss.Events()
		ls, err := e.Submit(context.Background(), long)
		close(rec.gate)
		if err != nil {
			t.Fatal(err)
		}
		rs, rl := collect(t, ss), collect(t, ls)
		rs.tokens = append([]int32{first.Token}, rs.tokens...)
		closeWithin(t, e)
		if want := toyReference(rec.Runtime.(*toy), short.Prompt, 40, false); !slices.Equal(rs.tokens, want) {
			t.Fatalf("chunk %d step %d: short request %v, want %v", c.chunk, c.step, rs.tokens, want)
		}
		if want := toyReference(rec.Runtime.(*toy), long.Prompt, 2, false); !slices.Equal(rl.tokens, want) {
			t.Fatalf("chunk %d step %d: long request %v, want %v", c.chunk, c.step, rl.tokens, want)
		}
		// Every step that ran a chunk of the long prompt (the only
		// sequence of more than one token after the first step) also
		// advanced the decoding request.
		chunks := 0
		for i, st := range rec.steps {
			prompt, total := 0, 0
			for _, n := range st {
				total += n
				if n > 1 {
					prompt += n
				}
				if n > c.chunk {
					t.Fatalf("chunk %d step %d: step %d ran %d tokens of one sequence", c.chunk, c.step, i, n)
				}
			}
			if total > c.step {
				t.Fatalf("chunk %d step %d: step %d ran %d tokens", c.chunk, c.step, i, total)
			}
			if i > 0 && prompt > 0 {
				if len(st) != 2 {
					t.Fatalf("chunk %d step %d: step %d prefilled without the decoding request: %v", c.chunk, c.step, i, rec.steps)
				}
				chunks++
			}
		}
		// The decode token counts against the budget.
		per := min(c.chunk, c.step-1)
		if want := (60 + per - 1) / per; chunks != want {
			t.Fatalf("chunk %d step %d: the long prompt ran in %d steps, want %d: %v", c.chunk, c.step, chunks, want, rec.steps)
		}
	}
}

// The engine refuses a chunk or budget out of bounds with a sentence.
func TestStepBudgetBounds(t *testing.T) {
	for _, c := range []struct{ chunk, step int }{{-1, 0}, {0, -5}, {MaxChunkTokens + 1, 0}, {0, MaxStepTokens + 1}, {64, 32}} {
		cfg := toyConfig(newToy(), 64)
		cfg.ChunkTokens, cfg.StepTokens = c.chunk, c.step
		if e, err := NewColocated(cfg); err == nil {
			closeWithin(t, e)
			t.Errorf("chunk %d step %d: accepted", c.chunk, c.step)
		}
	}
	// Zero picks the defaults; a chunk above the default budget raises it.
	for _, c := range []struct{ chunk, step int }{{0, 0}, {512, 0}, {1, 1}} {
		cfg := toyConfig(newToy(), 64)
		cfg.ChunkTokens, cfg.StepTokens = c.chunk, c.step
		e, err := NewColocated(cfg)
		if err != nil {
			t.Errorf("chunk %d step %d: %v", c.chunk, c.step, err)
			continue
		}
		closeWithin(t, e)
	}
}

// BurstThreads: while Idle reports the neighbour role idle, steps run on
// the forwarder of BurstThreads threads, otherwise on Threads; the tokens
// are the reference's either way. Without Idle no second forwarder runs.
func TestBurstThreadsWhileNeighbourIdle(t *testing.T) {
	for _, c := range []struct {
		idle  func() bool
		burst int
		want  int // threads of every step
	}{
		{func() bool { return true }, 3, 3},
		{func() bool { return false }, 3, 1},
		{nil, 3, 1},
		{func() bool { return true }, 1, 1}, // not above Threads: no burst
	} {
		rec := &recording{Runtime: newToy()}
		cfg := toyConfig(rec, 64)
		cfg.Threads, cfg.BurstThreads, cfg.Idle = 1, c.burst, c.idle
		e, err := NewColocated(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &Request{Tenant: "a", Prompt: prompt(3, 30), MaxTokens: 6, IgnoreEOS: true}
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, s)
		closeWithin(t, e)
		if want := toyReference(rec.Runtime.(*toy), r.Prompt, 6, false); !slices.Equal(got.tokens, want) {
			t.Fatalf("burst %d: %v, want %v", c.burst, got.tokens, want)
		}
		if len(rec.threads) == 0 {
			t.Fatal("no step ran")
		}
		for i, n := range rec.threads {
			if n != c.want {
				t.Fatalf("burst %d, idle set %v: step %d ran on %d threads, want %d (%v)", c.burst, c.idle != nil, i, n, c.want, rec.threads)
			}
		}
	}
}
