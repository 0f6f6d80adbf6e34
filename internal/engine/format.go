package engine

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"sluice/internal/grammar"
	"sluice/internal/sample"
)

// VocabRuntime is a Runtime that knows its tokens' bytes, so it can
// constrain output to a grammar (response_format). ModelRuntime is one.
type VocabRuntime interface {
	GrammarVocab() *grammar.Vocab
}

// formats compiles requests' output formats for one worker. Every worker
// compiles a request's format itself, from the request's schema text
// (I14): the prefill worker to draw the first token, the decode worker to
// draw the rest after replaying the tokens it is told were generated.
// Compiled grammars are cached per tenant (grammar.Cache).
type formats struct {
	rt        Runtime
	maskBytes int64
	once      sync.Once
	cache     *grammar.Cache
	// made is cache once made, for the metrics' reads.
	made atomic.Pointer[grammar.Cache]
}

func newFormats(rt Runtime, maskBytes int64) *formats {
	return &formats{rt: rt, maskBytes: maskBytes}
}

func (f *formats) get() *grammar.Cache {
	f.once.Do(func() {
		if vr, ok := f.rt.(VocabRuntime); ok {
			if v := vr.GrammarVocab(); v != nil {
				f.cache = grammar.NewCache(v, f.maskBytes)
				f.made.Store(f.cache)
			}
		}
	})
	return f.cache
}

// maskStats is the grammar cache's mask bytes and drops (zeros before
// any constrained request made the cache).
func (f *formats) maskStats() (bytes, dropped int64) {
	if f == nil {
		return 0, 0
	}
	if c := f.made.Load(); c != nil {
		return c.MaskStats()
	}
	return 0, 0
}

// lookups counts the grammar cache's lookups (zeros before any
// constrained request made the cache).
func (f *formats) lookups() grammar.Lookups {
	if f == nil {
		return grammar.Lookups{}
	}
	if c := f.made.Load(); c != nil {
		return c.Lookups()
	}
	return grammar.Lookups{}
}

// sampler is a request's sampler with the prompt it penalises and, for a
// constrained request, its grammar at the start of the output: the caller
// replays tokens generated before with Observe, and a replayed token the
// grammar refuses shows in the sampler's Err. A request whose schema the
// same tenant's concurrent request is compiling waits for that compile
// (grammar.Cache) until ctx ends: then the error is CodeCancelled.
func (f *formats) sampler(ctx context.Context, tenant string, p sample.Params, prompt []int32) (*sample.Sampler, error) {
	s := sample.New(p)
	s.SetPrompt(prompt)
	if !p.Format.Constrained() {
		return s, nil
	}
	var cache *grammar.Cache
	if f != nil {
		cache = f.get()
	}
	if cache == nil {
		return nil, errf(CodeUnsupported, http.StatusBadRequest, nil, "this model has no vocabulary to constrain output with; drop response_format and tool_choice \"required\" or a named tool")
	}
	c, _, err := cache.Get(ctx, tenant, p.Format.Kind == sample.FormatJSONObject, p.Format.Schema)
	if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
		return nil, errf(CodeCancelled, StatusClientClosed, nil, "the request ended while its response format's grammar was being compiled")
	}
	if err != nil {
		// The router compiled the same text before admitting it; a worker
		// that disagrees still answers with the compiler's code.
		code := "invalid_schema"
		var ge *grammar.Error
		if errors.As(err, &ge) {
			code = ge.Code
		}
		return nil, errf(code, http.StatusBadRequest, err, "the response format's schema is refused: %v", err)
	}
	if c.Vocab().Size() != f.rt.Vocab() {
		return nil, errf(CodeInternal, http.StatusInternalServerError, nil, "grammar vocabulary of %d tokens for a model of %d", c.Vocab().Size(), f.rt.Vocab())
	}
	m := c.NewMatcher()
	if p.Format.Think {
		// The reasoning's phase from this worker's own prompt (I14).
		s.ConstrainThinking(m, grammar.NewThink(p.Format.ThinkOpen, p.Format.ThinkClose, prompt, c.Vocab().Space))
		return s, nil
	}
	s.Constrain(m)
	return s, nil
}
