package sim

import (
	"slices"

	"sluice/internal/engine"
	"sluice/internal/model"
)

// nestRuntime is the model runtime the prefill batch runs on, with its
// forwarders watched: an oracle of the pause points' contract
// (engine/yield.go), kept outside the engine. At every nested step it
// checks that
//
//   - it runs inside a step's pause point (a nested step never yields,
//     and nothing runs nested outside a paused step);
//   - it carries no sequence of the paused step (the paused step's rows
//     of later layers are not written yet: its K/V must not be read or
//     written by another pass);
//   - only a prompt's first chunk runs nested: no sequence runs in two
//     nested steps of one paused step (the rest take their turns in the
//     batch's steps);
//   - the nested steps of one paused step together cost at most the
//     step itself: each a forward pass's fixed cost F (a quarter chunk)
//     plus its tokens, within F plus the paused step's tokens (the
//     nested budget, sched.NestFor).
type nestRuntime struct {
	*engine.ModelRuntime
	p *prefill
	// forward is F, the fixed cost of a pass in prompt tokens.
	forward int
}

func (r *nestRuntime) NewForwarder(threads int) engine.Forwarder {
	return &nestFwd{r: r, in: r.ModelRuntime.NewForwarder(threads).(engine.YieldForwarder)}
}

type nestFwd struct {
	r  *nestRuntime
	in engine.YieldForwarder
	// paused is the step under way (its views), tokens its tokens, spent
	// what its nested steps cost so far.
	paused        []engine.Step
	ran           []model.KV // the sequences its nested steps carried
	tokens, spent int
	inStep        bool
	nested        *nestedFwd
}

func (f *nestFwd) Forward(steps []engine.Step) []engine.StepResult {
	return f.ForwardBetween(steps, nil)
}

func (f *nestFwd) ForwardBetween(steps []engine.Step, between func(layer int)) []engine.StepResult {
	if f.inStep {
		f.r.p.w.violate("prefill#%d: a step began inside another step's pause point (a nested step yielded)", f.r.p.gen)
	}
	f.paused, f.ran, f.tokens, f.spent, f.inStep = steps, f.ran[:0], 0, 0, true
	defer func() { f.paused, f.inStep = nil, false }()
	for _, s := range steps {
		f.tokens += len(s.Tokens)
	}
	return f.in.ForwardBetween(steps, between)
}

func (f *nestFwd) Nested() engine.Forwarder {
	if f.nested == nil {
		f.nested = &nestedFwd{f: f, in: f.in.Nested()}
	}
	return f.nested
}

func (f *nestFwd) Close() {
	if c, ok := f.in.(interface{ Close() }); ok {
		c.Close()
	}
}

// nestedFwd runs the nested steps of nestFwd's paused step.
type nestedFwd struct {
	f  *nestFwd
	in engine.Forwarder
}

// ForwardBetween is there because the engine's nested forwarder is a
// YieldForwarder too: a nested step must still never pause.
func (n *nestedFwd) ForwardBetween(steps []engine.Step, between func(layer int)) []engine.StepResult {
	if between != nil {
		n.f.r.p.w.violate("prefill#%d: a nested step can pause (it must run whole: one level only)", n.f.r.p.gen)
	}
	return n.Forward(steps)
}

// Nested is itself: a nested step never has steps of its own.
func (n *nestedFwd) Nested() engine.Forwarder { return n }

func (n *nestedFwd) Forward(steps []engine.Step) []engine.StepResult {
	f := n.f
	p, w := f.r.p, f.r.p.w
	if !f.inStep {
		w.violate("prefill#%d: a nested step ran outside a paused step", p.gen)
	}
	cost := f.r.forward
	for _, s := range steps {
		cost += len(s.Tokens)
		if slices.Contains(f.ran, s.KV) {
			w.violate("prefill#%d: a prompt ran a second chunk nested in one paused step (position %d): only its first chunk may", p.gen, s.Pos)
		}
		f.ran = append(f.ran, s.KV)
		for _, o := range f.paused {
			if s.KV == o.KV {
				w.violate("prefill#%d: a nested step carries a sequence of the step it paused (positions %d and %d of one view)", p.gen, s.Pos, o.Pos)
			}
		}
	}
	f.spent += cost
	if budget := f.r.forward + f.tokens; f.spent > budget {
		w.violate("prefill#%d: the nested steps of a paused step of %d tokens cost %d tokens (a pass %d plus its tokens), over its budget of %d", p.gen, f.tokens, f.spent, f.r.forward, budget)
	}
	return n.in.Forward(steps)
}
