package engine

import (
	"context"
	"fmt"
	"slices"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

// colocatedSeq is a sequence whose prompt is computed in the batch (the
// first cached tokens read from the prefix cache) and which may be
// preempted: it keeps all its tokens, and its KV is rebuilt from them on
// resume.
func colocatedSeq(owner kv.Owner, table []kv.PageRef, prompt []int32, cached, maxTokens int, ignoreEOS bool, samp *sample.Sampler) *seq {
	q := promptSeq(owner, table, prompt, cached, samp)
	q.maxTokens, q.ignoreEOS, q.all = maxTokens, ignoreEOS, slices.Clone(prompt)
	return q
}

// DrivenBatch is the colocated engine's continuous-batching core for a
// deterministic driver (internal/sim): the same batch (chunked prefill
// within the step budget, growth page by page, preemption of the latest
// arrival during its prompt, its decode or its rebuild, resume oldest
// first) with no goroutine. The driver reserves the pages (as
// Colocated.reserve does), adds the sequence, and calls Step after its
// wake, one step's time later on its clock.
type DrivenBatch struct{ s *scheduler }

// NewDrivenBatch builds a driven batch over pool.
func NewDrivenBatch(cfg Config, pool PagePool, wake func()) (*DrivenBatch, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("colocated"); err != nil {
		return nil, err
	}
	if pool == nil || wake == nil {
		return nil, fmt.Errorf("engine: a driven batch needs a pool and a wake function")
	}
	return &DrivenBatch{s: newDrivenScheduler(cfg, pool, wake)}, nil
}

// DrivenItem is one item a driven sequence emits: a token, or the end
// (Done with Finish "length", "stop" or "cancelled"; or Err). The end
// carries the counts: prompt and completion tokens (usage, I9) and the
// positions recomputed after preemptions.
type DrivenItem struct {
	Token                          int32
	Done                           bool
	Finish                         string
	Err                            error
	Prompt, Completion, Recomputed int
}

// Add joins a colocated sequence whose table holds at least its prompt's
// pages (the first cached tokens of which came from the prefix cache).
// emit must not block; preempted, when set, learns the phase each
// preemption of the sequence struck ("prompt", "decode", "rebuild"); the
// returned cancel takes effect between steps.
func (b *DrivenBatch) Add(owner kv.Owner, table []kv.PageRef, prompt []int32, cached, maxTokens int, ignoreEOS bool, sp sample.Params, emit func(DrivenItem), preempted func(phase string)) (cancel func()) {
	samp, err := b.s.cfg.formats.sampler(context.Background(), owner.Tenant, sp, prompt)
	if err != nil {
		emit(DrivenItem{Done: true, Err: err})
		return func() {}
	}
	q := colocatedSeq(owner, table, prompt, cached, maxTokens, ignoreEOS, samp)
	q.onPreempt = preempted
	return drive(b.s, q, emit)
}

// Step runs one turn (joiners, cancels, resumes, one forward step); it
// reports whether sequences remain in the batch.
func (b *DrivenBatch) Step() bool { return b.s.turn() }

// Stats are the batch's counters (running, preempted, preemptions).
func (b *DrivenBatch) Stats() SchedStats { return b.s.stats() }

// Close ends every sequence with a shutdown error.
func (b *DrivenBatch) Close() { b.s.stop() }

// DrivenPrefill is the prefill worker's batch (PrefillWorker's
// scheduler) for a deterministic driver (internal/sim): prompt-only
// sequences, chunked within the step budget by the tenants' step shares,
// and the pause points at which a step carrying prompt chunks yields to
// prompts that arrived during it (yield.go: the nested step within the
// paused step's budget, sched.Shares.YieldWithin). The driver reserves
// the prompt's pages (as PrefillWorker.admit does), adds the sequence,
// and calls Step after its wake. Its clock is the driver's: a step is
// one call, so the driver says what arrived by each pause point (pause,
// called at every pause point before the step looks for arrivals, Adds
// the prompts that arrived by then in its time).
type DrivenPrefill struct{ s *scheduler }

// NewDrivenPrefill builds a driven prefill batch over pool. wake is
// called (synchronously) whenever a sequence joins or a cancel is
// recorded; pause at each pause point of a step that carries prompt
// chunks.
func NewDrivenPrefill(cfg Config, pool PagePool, wake, pause func()) (*DrivenPrefill, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate("prefill"); err != nil {
		return nil, err
	}
	if pool == nil || wake == nil || pause == nil {
		return nil, fmt.Errorf("engine: a driven prefill needs a pool, a wake and a pause function")
	}
	s := newDrivenScheduler(cfg, pool, wake)
	// As newScheduler wires them for the server's loop: the joiners are
	// the arrivals a pause point takes in; the driver adds them first.
	s.arrivals = func() []*seq {
		pause()
		return s.takeJoining()
	}
	s.arrivalMark = s.lastArrival.Load
	return &DrivenPrefill{s: s}, nil
}

// Add joins a prompt as the prefill worker's Prefill does: its table
// holds all of the prompt's pages (the first cached tokens of which came
// from the prefix cache), its first token is drawn as draw offset of the
// request's random stream (prefillSampler). emit receives the first token
// and then the end (Finish "length"; "cancelled"; or Err). The pages are
// the driver's however the prompt ends (handed over, as a streaming
// handoff's are: seq.holdPages): the batch never releases them. started,
// when set, learns how the prompt's first chunk started (a StartHow:
// StartNested at a pause point of another tenant's step); chunked, when
// set, the positions computed for good after each chunk but the last (a
// streaming handoff sends the pages they fill, handoff.Sender.Prefilled).
// Neither may block. The returned cancel takes effect at the next step
// boundary.
func (b *DrivenPrefill) Add(owner kv.Owner, table []kv.PageRef, prompt []int32, cached int, sp sample.Params, offset int, emit func(DrivenItem), started func(how string), chunked func(fed int)) (cancel func()) {
	samp, err := prefillSampler(context.Background(), b.s.cfg.formats, owner.Tenant, sp, prompt, offset)
	if err != nil {
		emit(DrivenItem{Done: true, Err: err})
		return func() {}
	}
	q := &seq{
		owner:        owner,
		table:        table,
		prompt:       prompt[cached:],
		fed:          cached,
		promptTokens: len(prompt),
		cachedTokens: cached,
		maxTokens:    1,
		ignoreEOS:    true,
		samp:         samp,
		started:      started,
		chunked:      chunked,
		handover:     func([]kv.PageRef) {},
		holdPages:    true,
	}
	return drive(b.s, q, emit)
}

// Step runs one turn (joiners, cancels, one forward step that may pause
// for nested steps); it reports whether prompts remain in the batch.
func (b *DrivenPrefill) Step() bool { return b.s.turn() }

// Stats are the batch's counters (NestedSteps: steps run at pause points).
func (b *DrivenPrefill) Stats() SchedStats { return b.s.stats() }

// Close ends every prompt with a shutdown error.
func (b *DrivenPrefill) Close() { b.s.stop() }

// drive adds q to the driven scheduler s, its outcomes reaching emit as
// DrivenItems, and returns its cancel (seen at s's next turn).
func drive(s *scheduler, q *seq, emit func(DrivenItem)) (cancel func()) {
	q.emit = func(o outcome) {
		it := DrivenItem{Token: o.token, Done: o.done, Finish: o.finish, Prompt: o.prompt, Completion: o.completion, Recomputed: o.recomputed}
		if o.err != nil {
			it.Err = o.err
		}
		emit(it)
	}
	s.add(q)
	return func() {
		q.cancel.Store(true)
		s.poke()
	}
}
