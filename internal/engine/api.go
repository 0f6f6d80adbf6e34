// Package engine runs requests through prefill and decode workers, either
// disaggregated (a verified KV handoff between a prefill and a decode
// worker) or colocated (the reference path, no transfer). The router talks
// to it only through the Engine interface below.
package engine

import (
	"context"
	"fmt"
	"time"

	"sluice/internal/sample"
)

// Request is one generation request as the router hands it over: already
// authenticated (Tenant comes from the API key, never from the client's
// body) and tokenized.
type Request struct {
	// ID names the request in logs and metrics; it is not a security token.
	ID string
	// Tenant is derived by the router from the API key.
	Tenant string
	// Weight is the tenant's share in the queue's fair discipline (from
	// the key file; 0 means 1).
	Weight int
	// Prompt is the tokenized prompt, BOS included when the model wants it.
	Prompt []int32
	// MaxTokens bounds the generated tokens (>= 1).
	MaxTokens int
	// Sampling settings; the zero value is greedy.
	Sampling sample.Params
	// IgnoreEOS keeps generating past end-of-sequence tokens (benchmarks).
	IgnoreEOS bool
	// CacheScope narrows prefix-cache sharing within the tenant (the
	// client's prompt_cache_key / cache_salt): requests with different
	// scopes share nothing. It can never widen sharing to another tenant:
	// the salt is derived from Tenant first (kv.Salt.Narrow).
	CacheScope string
}

// Usage is the honest accounting of one request (I9): PromptTokens is what
// was actually prefilled (and, disaggregated, transferred and verified).
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens is how many of PromptTokens were read from the prefix
	// cache instead of computed (OpenAI's prompt_tokens_details.cached_tokens).
	CachedTokens int
}

// Event is one item of a request's output stream. Exactly one event of a
// stream is terminal: Done with a Finish reason, or Err. No event follows it
// and the channel is closed after it.
type Event struct {
	// Token is a generated token id; valid when Done is false and Err is nil.
	Token int32
	// Logprobs are Token's logprobs when the request asked for them
	// (Sampling.Logprobs), computed where the token was sampled.
	Logprobs *sample.Logprobs
	// Done marks successful completion: every token has been sent.
	Done bool
	// Finish is "stop" (end-of-sequence token) or "length" (MaxTokens).
	Finish string
	// Err ends the stream in failure; it is an *Error.
	Err error
	// Usage is set on the terminal event.
	Usage Usage
	// Sent is when the engine put the stream's first token on it (zero
	// on every other event), so the router can time the token's way from
	// the engine to the client (its first_token_deliver phase).
	Sent time.Time
	// Phases are this request's first-token phases as the engine timed
	// them (the colocated engine: queue, prefill_wait, prefill_compute),
	// on the first token's event only; nil where the engine does not
	// time them per request.
	Phases []PhaseTime
}

// Stream is a running request.
type Stream interface {
	// Events delivers tokens then exactly one terminal event, then closes.
	Events() <-chan Event
	// Cancel asks the engine to stop the request (client disconnect or a stop
	// sequence matched). It never tears a KV transfer (I10): the handoff runs
	// to its commit and decode to its first token, then the request ends and
	// its pages are released the normal way. Events ends with a terminal
	// event either way. Cancel is idempotent and safe from any goroutine.
	Cancel()
}

// Info describes what the engine serves.
type Info struct {
	// Model is the model id shown in /v1/models.
	Model string
	// Context is the effective context: the minimum of the configured context
	// and every role's KV pool capacity in tokens (I2).
	Context int
	// Vocab is the number of token ids.
	Vocab int
}

// Engine is what the router drives.
type Engine interface {
	// Submit admits a request or rejects it with an *Error before any KV page
	// is reserved (I1, I2): a rejected request never reaches reservation,
	// prefill, transfer or decode.
	Submit(ctx context.Context, r *Request) (Stream, error)
	Info() Info
	// Close stops accepting requests, drains in-flight ones and stops workers.
	Close(ctx context.Context) error
}

// Error is an engine failure with a stable machine-readable code.
type Error struct {
	// Code is stable and machine-readable, e.g. "context_length_exceeded",
	// "overloaded", "kv_integrity_violation", "handoff_failed".
	Code string
	// Status is the HTTP status the router should answer with.
	Status int
	// Message is a sentence a user can act on.
	Message string
	// Err is the underlying cause, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }
