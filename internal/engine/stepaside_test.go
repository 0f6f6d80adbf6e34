package engine

import (
	"context"
	"maps"
	"slices"
	"testing"
)

// Colocated, a tenant's short prompt that joins at a step boundary
// beside another tenant's prompt chunk (the tenants close enough in
// service that Plan would run both) runs in a step aside: that step
// carries the short prompt alone with the decode tokens, so its first
// token comes after its own tokens, and the other chunks run in the next
// step. A step aside follows only a step that took no extra pass, never
// pauses, and its pass's fixed cost is charged to the whole prompts'
// tenant. A tenant alone never steps aside, and every output is bitwise
// as alone.
func TestColocatedStepsAsideForWholePrompt(t *testing.T) {
	ps := map[string][]int32{"a": prompt(3, 60), "b0": prompt(4, 4), "b1": prompt(5, 4), "b2": prompt(6, 4), "c": prompt(8, 2)}
	alone := map[string][]string{}
	for name, p := range ps {
		r := newYieldRig(t, 64)
		r.s.cfg.stepAside = true
		r.add(name, "x", p, 4)
		r.drain()
		if n := r.s.asides.Load(); n != 0 {
			t.Fatalf("%s alone stepped aside %d times", name, n)
		}
		alone[name] = r.out[name]
	}
	r := newYieldRig(t, 128)
	r.s.cfg.stepAside = true
	r.add("a", "a", ps["a"], 4)
	r.s.turn() // step 1: a's chunk
	// b just under a, as a tenant long in the batch: Plan runs both
	// tenants' chunks in one step, b's first.
	r.s.shares.Charge("b", 1, int(r.s.shares.Served("a"))-12)
	// A prompt arriving during a step aside waits for its boundary: a
	// step aside never pauses (it is itself the extra pass).
	r.probe.onPause = func(step, point int) {
		if step == 2 && point == 0 {
			r.add("c", "c", ps["c"], 4)
		}
	}
	aside := map[int]bool{}
	firstAt := map[string]int{}
	for step := 2; step <= 8; step++ {
		switch step {
		case 2:
			r.add("b0", "b", ps["b0"], 4)
		case 3:
			r.add("b1", "b", ps["b1"], 4)
		case 6:
			r.add("b2", "b", ps["b2"], 4)
		}
		n, served := r.s.asides.Load(), r.s.shares.Served("b")
		r.s.turn()
		aside[step] = r.s.asides.Load() != n
		if step == 2 {
			// b0's 4 tokens and the pass's fixed cost, a quarter chunk.
			if got, want := r.s.shares.Served("b")-served, int64(4+r.cfg.nestForward()); got != want {
				t.Errorf("b charged %d for its step aside, want %d", got, want)
			}
		}
		for _, name := range []string{"b0", "b1", "b2", "c"} {
			if _, ok := firstAt[name]; !ok && len(r.out[name]) > 0 {
				firstAt[name] = step
			}
		}
	}
	t.Logf("asides %v, first tokens %v, tokens per step %v", aside, firstAt, r.probe.tokens)
	if len(r.probe.nested) != 0 {
		t.Errorf("nested steps %v, want none (a step aside paused)", r.probe.nested)
	}
	// b0 steps aside at step 2; c, which arrived during it, is new to
	// the batch (far under a: Plan runs it alone) and starts at step 3,
	// which may not step aside (step 2 was the extra pass); b1, waiting
	// since step 3, steps aside at step 4 and b2 at step 6, each after a
	// step without an extra pass. A step aside carries the whole prompt
	// and the decode tokens only (a's chunk is 16).
	if want := map[string]int{"b0": 2, "c": 3, "b1": 4, "b2": 6}; !maps.Equal(firstAt, want) {
		t.Errorf("first tokens at steps %v, want %v", firstAt, want)
	}
	for step := 2; step <= 8; step++ {
		want := map[int]int{2: 4, 4: 4 + 2, 6: 4 + 2}[step]
		if aside[step] != (want > 0) || want > 0 && r.probe.tokens[step] != want {
			t.Errorf("step %d: aside %v, %d tokens; want aside only at 2, 4 and 6 with 4, 4+2 and 4+2 tokens", step, aside[step], r.probe.tokens[step])
		}
	}
	r.probe.onPause = nil
	r.drain()
	for n := range ps {
		if !slices.Equal(r.out[n], alone[n]) {
			t.Errorf("%s: %v, alone %v", n, r.out[n], alone[n])
		}
	}
	c, err := NewColocated(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if !c.sched.cfg.stepAside {
		t.Error("the colocated engine's scheduler does not step aside")
	}
}

// A step in which a nested pass ran took its extra pass: the short
// prompt that joins at its boundary rides in the next shared step
// instead of stepping aside (a step of a's followed by two extra passes
// would cost a twice), and steps aside one step later.
func TestColocatedNoStepAsideAfterNested(t *testing.T) {
	r := newYieldRig(t, 128)
	r.s.cfg.stepAside = true
	r.add("a", "a", prompt(3, 60), 4)
	r.s.turn() // step 1: a's chunk
	r.s.shares.Charge("b", 1, int(r.s.shares.Served("a"))-4)
	r.probe.onPause = func(step, point int) {
		if step == 2 && point == 0 {
			r.add("b0", "b", prompt(4, 4), 4)
		}
	}
	r.s.turn() // step 2: a's chunk, b0 nested in it
	r.probe.onPause = nil
	if want := []string{"2/0: [4@0]"}; !slices.Equal(r.probe.nested, want) {
		t.Fatalf("nested steps %v, want %v", r.probe.nested, want)
	}
	r.add("b1", "b", prompt(5, 4), 4)
	r.s.turn() // step 3: shared, b1 in it
	if n := r.s.asides.Load(); n != 0 || len(r.out["b1"]) != 1 || r.probe.tokens[3] <= 4+1 {
		t.Errorf("after a nested pass: %d steps aside, step 3 ran %d tokens, b1 emitted %v; want a shared step with b1's first token", n, r.probe.tokens[3], r.out["b1"])
	}
	r.drain()
}

// A step aside is not followed by another: b1, joining right after b0's
// step aside, rides in the shared step. And only a prompt not yet begun
// is whole: a's last chunk beside b's partial one is a shared step, not a
// step aside (a flood's every prompt would step aside at its end).
func TestColocatedNoStepAsideAfterAsideOrForLastChunk(t *testing.T) {
	t.Run("after aside", func(t *testing.T) {
		r := newYieldRig(t, 128)
		r.s.cfg.stepAside = true
		r.add("a", "a", prompt(3, 60), 4)
		r.s.turn()
		r.s.shares.Charge("b", 1, int(r.s.shares.Served("a"))-12)
		r.add("b0", "b", prompt(4, 4), 4)
		r.s.turn() // step 2: aside
		r.add("b1", "b", prompt(5, 4), 4)
		r.s.turn() // step 3: shared
		if n := r.s.asides.Load(); n != 1 || len(r.out["b1"]) != 1 || r.probe.tokens[3] != 4+12+1 {
			t.Errorf("%d steps aside, step 3 ran %d tokens, b1 emitted %v; want 1 aside and b1's first token in a shared step of 4+12+1", n, r.probe.tokens[3], r.out["b1"])
		}
		r.drain()
	})
	t.Run("last chunk", func(t *testing.T) {
		r := newYieldRig(t, 128)
		r.s.cfg.stepAside = true
		r.add("a", "a", prompt(3, 20), 4)
		r.s.turn() // step 1: a's first 16
		r.s.shares.Charge("b", 1, int(r.s.shares.Served("a"))+4)
		r.add("b", "b", prompt(4, 40), 4)
		r.s.turn() // step 2: b's chunk and a's last 4
		if n := r.s.asides.Load(); n != 0 || len(r.out["a"]) != 1 || r.probe.tokens[2] != 16 {
			t.Errorf("%d steps aside, step 2 ran %d tokens, a emitted %v; want a shared step of 16 with a's first token", n, r.probe.tokens[2], r.out["a"])
		}
		r.drain()
	})
}
