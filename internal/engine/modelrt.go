package engine

import (
	"fmt"
	"sync"

	"sluice/internal/gguf"
	"sluice/internal/grammar"
	"sluice/internal/kernels"
	"sluice/internal/model"
	"sluice/internal/tokenizer"
)

// ModelRuntime adapts a loaded model to the workers.
type ModelRuntime struct {
	name string
	m    *model.Model
	eog  func(int32) bool
	// fp is the model file's fingerprint (I13), hashed on first use so
	// only roles that compare it pay for reading the whole file.
	fp func() model.Fingerprint
	// vocab is the tokens' bytes for constrained output (nil: none).
	vocab func() *grammar.Vocab
}

var _ Runtime = (*ModelRuntime)(nil)

// NewModelRuntime wraps m; eog says which tokens end generation (the
// tokenizer's IsEOG); name is shown to clients.
func NewModelRuntime(name string, m *model.Model, eog func(int32) bool) *ModelRuntime {
	if eog == nil {
		eog = func(int32) bool { return false }
	}
	return &ModelRuntime{name: name, m: m, eog: eog}
}

// LoadRuntime opens a GGUF file and returns its runtime and tokenizer. The
// file stays mapped for the life of the process (weights alias it).
func LoadRuntime(name string, f *gguf.File) (*ModelRuntime, *tokenizer.Tokenizer, error) {
	m, err := model.Load(f)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: loading model: %w", err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		return nil, nil, fmt.Errorf("engine: loading tokenizer: %w", err)
	}
	rt := NewModelRuntime(name, m, tok.IsEOG)
	rt.fp = sync.OnceValue(func() model.Fingerprint { return model.FingerprintOf(name, f) })
	rt.vocab = sync.OnceValue(func() *grammar.Vocab { return TokenizerVocab(tok) })
	return rt, tok, nil
}

// Fingerprint is the model file's fingerprint (I13); zero for a model not
// loaded from a file.
func (r *ModelRuntime) Fingerprint() model.Fingerprint {
	if r.fp == nil {
		return model.Fingerprint{}
	}
	return r.fp()
}

// GrammarVocab is the vocabulary for constrained output (VocabRuntime);
// nil for a model loaded without a tokenizer.
func (r *ModelRuntime) GrammarVocab() *grammar.Vocab {
	if r.vocab == nil {
		return nil
	}
	return r.vocab()
}

// WithVocab is the same runtime constraining output with tok's
// vocabulary (a model built in memory, as the simulator's).
func (r *ModelRuntime) WithVocab(tok *tokenizer.Tokenizer) *ModelRuntime {
	c := *r
	c.vocab = sync.OnceValue(func() *grammar.Vocab { return TokenizerVocab(tok) })
	return &c
}

// TokenizerVocab is tok's vocabulary as the grammar sees it: each token's
// bytes, except control tokens (never part of constrained text), and its
// end-of-generation tokens.
func TokenizerVocab(tok *tokenizer.Tokenizer) *grammar.Vocab {
	pieces := make([]string, tok.Size())
	for i := range pieces {
		id := int32(i)
		if !tok.IsControl(id) {
			pieces[i] = tok.TokenText(id)
		}
	}
	return grammar.NewVocab(pieces, tok.IsEOG)
}

// Model is the wrapped model.
func (r *ModelRuntime) Model() *model.Model { return r.m }

func (r *ModelRuntime) Name() string       { return r.name }
func (r *ModelRuntime) Layers() int        { return r.m.Config().Layers }
func (r *ModelRuntime) KVDim() int         { return r.m.Config().KVDim() }
func (r *ModelRuntime) Vocab() int         { return r.m.Config().Vocab }
func (r *ModelRuntime) Context() int       { return r.m.Config().Context }
func (r *ModelRuntime) EOG(tok int32) bool { return r.eog(tok) }

// NewForwarder returns a runner with its own scratch and thread pool.
func (r *ModelRuntime) NewForwarder(threads int) Forwarder {
	par := kernels.NewParallel(threads)
	return &modelForwarder{m: r.m, run: r.m.NewRunner(par), par: par}
}

type modelForwarder struct {
	m    *model.Model
	run  *model.Runner
	par  *kernels.Parallel
	seqs []model.Seq
	// nested is the runner for steps run while one of this forwarder's
	// steps is paused (Nested), made on first use; shared: this is a
	// nested forwarder, whose thread pool is its parent's.
	nested *modelForwarder
	shared bool
}

func (f *modelForwarder) Forward(steps []Step) []StepResult { return f.ForwardBetween(steps, nil) }

// ForwardBetween implements YieldForwarder.
func (f *modelForwarder) ForwardBetween(steps []Step, between func(layer int)) []StepResult {
	// The paused step's seqs stay in f.seqs while a nested step runs on
	// another forwarder (its own seqs).
	f.seqs = f.seqs[:0]
	for _, s := range steps {
		f.seqs = append(f.seqs, model.Seq{Tokens: s.Tokens, Pos: s.Pos, KV: s.KV, NoLogits: s.NoLogits})
	}
	res := f.run.ForwardBetween(f.seqs, between)
	out := make([]StepResult, len(res))
	for i, r := range res {
		out[i] = StepResult{Logits: r.Logits, Err: r.Err}
	}
	return out
}

// Nested implements YieldForwarder: a runner of its own (its scratch
// holds the nested step's rows while the paused step keeps its own) on
// the same thread pool, which the paused step does not use between
// layers.
func (f *modelForwarder) Nested() Forwarder {
	if f.nested == nil {
		f.nested = &modelForwarder{m: f.m, run: f.m.NewRunner(f.par), par: f.par, shared: true}
	}
	return f.nested
}

// Close stops the forwarder's thread pool (a nested forwarder's is its
// parent's).
func (f *modelForwarder) Close() {
	if !f.shared {
		f.par.Close()
	}
}

// WithName is the same runtime shown to clients under another name (the
// served model name); everything else, the model itself included, is
// shared.
func (r *ModelRuntime) WithName(name string) *ModelRuntime {
	c := *r
	c.name = name
	return &c
}
