package handoff

import (
	"context"

	"sluice/internal/kv"
)

// Decode is the decode worker's side of the handoff, as the router and the
// prefill worker see it. Every transport (in-process, TCP, shm) carries it
// unchanged, and each method's doc says exactly what a return means.
//
// Any error that is ErrTransport means the outcome is UNKNOWN: the call may
// or may not have been applied. The caller must then Abort the handoff; it
// must never assume "not applied" (the incident's transport could not tell).
type Decode interface {
	// Reserve returns a Reservation only after the decode worker has reserved
	// every page (all or nothing, owner-stamped, fresh generations). An error
	// means nothing is reserved, except ErrTransport (unknown: abort).
	Reserve(ctx context.Context, r *Reserve) (*Reservation, error)

	// Write returns nil only after every write in the batch has been checked
	// (reservation, owner, generation, page state, token range, checksum)
	// and APPLIED to the decode pool. A non-nil error means the handoff has
	// failed closed on the decode side (its pages are quarantined) or, with
	// ErrTransport, that the outcome is unknown. All writes of one call
	// belong to one handoff.
	Write(ctx context.Context, w []PageWrite) error

	// Commit returns nil only after the decode worker verified the handoff
	// (count, coverage, digest, I5) and accepted it: its tokens will be
	// decoded. Any error means the handoff is not accepted and has failed
	// closed on the decode side.
	Commit(ctx context.Context, c *Commit) error

	// Abort ends the handoff at any phase. It returns after the decode
	// worker has taken its pages out of use: released, or quarantined until
	// Drained or the lease expiry when a one-sided writer may still be
	// writing (I6). Aborting an unknown or finished handoff is not an error.
	Abort(ctx context.Context, a *Abort) error

	// Drained is the writer's drain acknowledgement (I6): the caller
	// promises that no write of its own to this handoff's pages is in flight
	// and that it will issue none. Quarantined pages of the handoff may then
	// be scrubbed and freed before their lease expires.
	Drained(ctx context.Context, id kv.ID) error

	// Stream returns the handoff's token stream. It may be opened at any
	// time after Reserve; tokens flow only after the commit is accepted
	// (the first is the commit's FirstToken). If the handoff fails or is
	// aborted before that, the stream ends with that error.
	Stream(ctx context.Context, id kv.ID, p StreamParams) (TokenStream, error)

	// Cancel reports a client disconnect. It never tears a transfer (I10):
	// before the commit it is recorded and takes effect once the commit is
	// accepted; after it decoding stops between steps. The stream then ends
	// with Done and Finish "cancelled". Returns once recorded.
	Cancel(ctx context.Context, id kv.ID) error
}

// TokenStream is a decode token stream.
type TokenStream interface {
	// Recv blocks for the next item. After the terminal item (Done or Err),
	// Recv returns io.EOF. A ctx of the Stream call ending makes Recv return
	// its error.
	Recv() (Token, error)
	// Close releases the stream; it does not cancel decoding (use Cancel).
	Close() error
}

// Load is a worker's load report, answered at once from its counters
// (router -> worker, polled with the health probe; internal/cluster scores
// pairs with it).
type Load struct {
	// FreePages and TotalPages are the worker's KV pool; free pages
	// include idle prefix-cache pages (a reservation may evict them).
	FreePages, TotalPages int
	// Running is the sequences the worker is decoding (or prefilling) now.
	Running int
	// CachedPages are the pool's prefix-cache pages (idle or read), at
	// most TotalPages: how much of the pool holds prefixes, not which.
	CachedPages int
	// Context is the longest prompt plus generation, in tokens, the
	// worker admits (its effective context, I2; 0: not reported). A
	// router vets every role with it: its own context is at most the
	// smallest of its workers'.
	Context int
}

// Loader is a worker (or a transport to one) that reports its load.
type Loader interface {
	Load(ctx context.Context) (*Load, error)
}

// Prefill is the prefill worker's side, as the router sees it.
type Prefill interface {
	// Prefill runs the prompt, writes its KV into the reservation in bounded
	// batches and sends the commit last. It returns a result only after the
	// decode worker ACCEPTED the commit (Decode.Commit returned nil). An
	// error means the handoff did not commit; the prefill worker has already
	// aborted it on the decode side where it could, but the router must
	// Abort too (an abort of an ended handoff is harmless).
	//
	// ctx ending is the router giving the prompt up (its request was
	// cancelled, its reservation revoked): the worker stops the prompt at
	// its next step boundary, aborts the handoff and frees its pages, and
	// the call returns that outcome. A transport carries the cancel to a
	// remote worker and still waits for its answer, so a returned call
	// means the worker is done with the prompt.
	Prefill(ctx context.Context, r *PrefillRequest) (*PrefillResult, error)
}
