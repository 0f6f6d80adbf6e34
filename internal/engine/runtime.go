package engine

import (
	"sluice/internal/model"
)

// Step is one sequence's share of a batched forward step: Tokens at
// positions Pos, Pos+1, ... whose K/V go through KV (which also serves the
// past K/V for attention).
type Step struct {
	Tokens []int32
	Pos    int
	KV     model.KV
	// NoLogits: the batch does not read this step's logits (a prompt
	// chunk before the prompt's last, or the last of a prompt recomputed
	// after a preemption), so the forwarder may skip them
	// (StepResult.Logits nil): the model then runs no output projection
	// for it (model.Seq.NoLogits).
	NoLogits bool
}

// StepResult is the logits of the last token of a Step, or the error that
// stopped that sequence (a KV check failure fails only its own sequence).
type StepResult struct {
	Logits []float32
	Err    error
}

// Forwarder runs one batched forward step over many sequences. A Forwarder
// holds scratch memory and is used by one scheduler goroutine at a time.
type Forwarder interface {
	Forward(steps []Step) []StepResult
}

// Runtime is the model as the workers see it: its KV shape and a factory of
// per-worker forwarders. ModelRuntime adapts the real model.
type Runtime interface {
	// Name is the model id shown to clients.
	Name() string
	// Layers and KVDim fix the KV page geometry.
	Layers() int
	KVDim() int
	// Vocab is the number of token ids.
	Vocab() int
	// Context is the model's trained context length (0 = unknown).
	Context() int
	// EOG reports whether a token ends generation.
	EOG(tok int32) bool
	// NewForwarder returns a forwarder with its own scratch; threads bounds
	// the parallelism of one step.
	NewForwarder(threads int) Forwarder
}
