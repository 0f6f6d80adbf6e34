package engine

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The fit recovers F of any pass costing c (F + n) for n tokens, from a
// 1-token and a k-token pass, to rounding; a chunk no slower than one
// token is all fixed cost.
func TestFitForwardCost(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := rapid.IntRange(0, 200).Draw(t, "F")
		k := rapid.IntRange(2, 512).Draw(t, "k")
		c := time.Duration(rapid.IntRange(1000, 1_000_000).Draw(t, "ns per token"))
		got := FitForwardCost(c*time.Duration(f+1), c*time.Duration(f+k), k)
		if math.Abs(got-float64(f)) > 1e-6 {
			t.Fatalf("F %d, k %d, c %v: fit %v", f, k, c, got)
		}
	})
	for _, tc := range []struct {
		one, many time.Duration
		k         int
	}{{time.Millisecond, time.Millisecond, 64}, {2 * time.Millisecond, time.Millisecond, 64}, {time.Millisecond, 2 * time.Millisecond, 1}} {
		if got := FitForwardCost(tc.one, tc.many, tc.k); !math.IsInf(got, 1) {
			t.Errorf("one %v, %d tokens %v: fit %v, want +Inf", tc.one, tc.k, tc.many, got)
		}
	}
}

// The budget's F from a fit: rounded up, at least 1, at most the step's
// token budget (also for +Inf and NaN).
func TestForwardCostTokens(t *testing.T) {
	for _, tc := range []struct {
		fit  float64
		hi   int
		want int
	}{{0.2, 64, 1}, {-3, 64, 1}, {1, 64, 1}, {6.01, 64, 7}, {18.4, 256, 19}, {300, 256, 256}, {math.Inf(1), 256, 256}, {math.NaN(), 64, 64}, {5, 0, 1}} {
		if got := ForwardCostTokens(tc.fit, tc.hi); got != tc.want {
			t.Errorf("ForwardCostTokens(%v, %d) = %d, want %d", tc.fit, tc.hi, got, tc.want)
		}
	}
}

// clockRuntime's passes cost c (F + n) on a clock of the test's, and
// every pass but the second round's (passes 4 and 5, after the warm-up
// and the first round) is slowed, by different amounts (a loaded
// machine): the measurement times what its passes cost, not the model's
// compute, and only the fastest of each kind gives F.
type clockRuntime struct {
	Runtime
	now     time.Duration
	f       int
	perTok  time.Duration
	passes  int
	threads int
	tokens  []int // each pass's
}

func (r *clockRuntime) clock() time.Time { return time.Unix(0, 0).Add(r.now) }

func (r *clockRuntime) NewForwarder(threads int) Forwarder {
	r.threads = threads
	return hookForwarder(r.Runtime, threads, func(_ int, s []Step, next func([]Step) []StepResult) []StepResult {
		n := 0
		for _, st := range s {
			n += len(st.Tokens)
			if st.Pos != 0 {
				panic("the measurement's passes are at position 0")
			}
		}
		r.passes++
		r.tokens = append(r.tokens, n)
		r.now += r.perTok * time.Duration(r.f+n)
		if r.passes != 4 && r.passes != 5 {
			r.now += time.Duration(1+r.passes%5) * time.Millisecond
		}
		return next(s) // the real model's pass: a KV it can write
	})
}

func TestMeasureForwardCost(t *testing.T) {
	for _, tc := range []struct {
		f, chunk, step, want int
	}{{6, 64, 256, 6}, {26, 64, 256, 26}, {0, 16, 64, 1}, {300, 64, 256, 256}, {3, 7, 64, 3}} {
		rt := &clockRuntime{Runtime: storiesRuntime(t), f: tc.f, perTok: 10 * time.Microsecond}
		cfg := storiesConfig(rt, 4)
		cfg.ChunkTokens, cfg.StepTokens, cfg.Threads = tc.chunk, tc.step, 2
		fc, err := measureForwardCost(cfg, rt.clock)
		if err != nil {
			t.Fatal(err)
		}
		if fc.Tokens != tc.want || fc.ChunkTokens != tc.chunk || fc.Rounds < minRounds || fc.Rounds > maxRounds || rt.threads != 2 {
			t.Errorf("F %d, chunk %d: measured %+v (forwarder of %d threads), want %d tokens", tc.f, tc.chunk, fc, rt.threads, tc.want)
		}
		if want := rt.perTok * time.Duration(tc.f+1); fc.One != want {
			t.Errorf("F %d: the fastest 1-token pass %v, want %v", tc.f, fc.One, want)
		}
		if want := rt.perTok * time.Duration(tc.f+tc.chunk); fc.Chunk != want {
			t.Errorf("F %d: the fastest chunk pass %v, want %v", tc.f, fc.Chunk, want)
		}
		// The first pass warms (untimed), then 1-token and chunk passes
		// alternate.
		if len(rt.tokens) != 1+2*fc.Rounds || rt.tokens[0] != tc.chunk || rt.tokens[1] != 1 || rt.tokens[2] != tc.chunk {
			t.Errorf("F %d: passes of %v tokens", tc.f, rt.tokens)
		}
	}
}

// The measurement's rounds stop once they took measureFor (after
// minRounds): a large model's start is not held for maxRounds of
// slow chunk passes.
func TestMeasureForwardCostBoundedRounds(t *testing.T) {
	rt := &clockRuntime{Runtime: storiesRuntime(t), f: 6, perTok: measureFor / 64}
	cfg := storiesConfig(rt, 4)
	cfg.ChunkTokens = 64
	fc, err := measureForwardCost(cfg, rt.clock)
	if err != nil {
		t.Fatal(err)
	}
	if fc.Rounds != minRounds || fc.Tokens != 6 {
		t.Errorf("chunk passes of over %v: %+v, want %d rounds and F 6", measureFor, fc, minRounds)
	}
}

// The configured cost is what the nested budget counts; 0 is a quarter
// chunk; a cost outside 1..StepTokens is refused.
func TestNestForwardConfig(t *testing.T) {
	rt := storiesRuntime(t)
	cfg := storiesConfig(rt, 32)
	cfg.ChunkTokens = 64
	if f := cfg.withDefaults().nestForward(); f != 16 {
		t.Errorf("default: %d, want a quarter chunk (16)", f)
	}
	cfg.NestForward = 5
	if f := cfg.withDefaults().nestForward(); f != 5 {
		t.Errorf("NestForward 5: the budget counts %d", f)
	}
	for _, f := range []int{-1, 65} { // StepTokens 64
		cfg.NestForward = f
		if _, err := NewPrefillWorker(cfg, &countingDecode{}); err == nil {
			t.Errorf("NestForward %d accepted", f)
		}
	}
	cfg.NestForward = 64
	pw, err := NewPrefillWorker(cfg, &countingDecode{})
	if err != nil {
		t.Fatalf("NestForward 64 refused: %v", err)
	}
	if got := pw.SchedStats().NestForward; got != 64 {
		t.Errorf("the prefill worker reports %d", got)
	}
	pw.Close()
}
