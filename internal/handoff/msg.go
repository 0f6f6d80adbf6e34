package handoff

import (
	"encoding/hex"
	"time"

	"github.com/zeebo/xxh3"

	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
)

// Reserve asks a decode worker to reserve pages for a handoff (router ->
// decode). The decode worker either refuses it or reserves
// ceil(PromptTokens/PageSize) pages, all or nothing, each stamped with
// (Tenant, Handoff) as owner and a fresh generation.
type Reserve struct {
	// Handoff is 128 random bits chosen by the router; it names the handoff
	// in every later message and is the pages' owner id (I3).
	Handoff kv.ID
	// Tenant comes from the authenticated API key, never from a client body.
	Tenant string
	// PromptTokens is the number of prompt tokens prefill will write.
	PromptTokens int
	// MaxTokens bounds the tokens decode will generate; the decode worker
	// reserves room for them too or refuses.
	MaxTokens int
	// Model is the fingerprint of the model the requester tokenized with
	// (I13). The decode worker refuses a Reserve whose fingerprint is not
	// its own with ErrModelMismatch, whatever the connection's handshake
	// said: a peer can lie there.
	Model model.Fingerprint
	// Tokens are the prompt's token ids, for the decode worker's own
	// prefix-cache lookup (empty: no lookup). When set, len(Tokens) must
	// equal PromptTokens. Decode derives the cache keys itself, salted with
	// the authenticated Tenant (kv.TenantSalt), so the ids only say which
	// of THIS tenant's entries to look for.
	Tokens []int32
	// CacheScope narrows the decode worker's prefix cache within Tenant
	// (prompt_cache_key / cache_salt), as PrefillRequest.CacheScope does
	// prefill's; it never widens it. At most MaxCacheScope bytes.
	CacheScope string
	// Weight is the tenant's weight (the router's --api-keys) in the
	// decode worker's KV quota: among the tenants holding or waiting for
	// its pages, a tenant's share is in proportion to its weight. 0
	// counts as 1; at most MaxWeight.
	Weight int
	// NoRevoke: the decode worker must not revoke this reservation before
	// its commit for the KV quota (ErrRevoked). The router sets it once
	// the request was revoked MaxRevocations times: that bounds how often
	// one request goes back to the queue this way.
	NoRevoke bool
}

// MaxWeight bounds Reserve.Weight (the router's bound on --api-keys
// weights).
const MaxWeight = 1000

// MaxRevocations is how many times a router lets one request's
// reservations be revoked (ErrRevoked) before it asks for one that is
// not (Reserve.NoRevoke).
const MaxRevocations = 2

// Reservation is the decode worker's answer to Reserve.
type Reservation struct {
	Handoff kv.ID
	// Pages are the reserved destination pages in logical block order: block
	// b of the prompt goes to Pages[b], written at exactly Pages[b].Gen.
	Pages []kv.PageRef
	// PageSize is the number of token slots per page.
	PageSize int
	// ExpectTokens is the token count the Commit must claim (== PromptTokens).
	ExpectTokens int
	// Incarnation names the decode pool's shared memory (kv.Pool.
	// Incarnation; 0 when the pool is not shared). A one-sided writer
	// places bytes only into a mapping of this incarnation, so writes meant
	// for a crashed decode worker never reach its restarted successor (I6).
	Incarnation uint64
	// Model is the decode worker's model fingerprint (I13): a prefill
	// worker writes KV into this reservation only when it is its own.
	Model model.Fingerprint
	// PrefixTokens (SGLang's decode_prefix_len) is how many leading prompt
	// tokens' KV the decode worker already holds in its prefix cache:
	// Pages[:PrefixTokens/PageSize] are shared cached pages, read-only,
	// and the prefill worker sends only the blocks after them. It is a
	// multiple of PageSize and less than ExpectTokens (the last block is
	// always sent); a write into a cached block is refused (sealed_write).
	// The commit's digest still covers the whole prompt: decode hashes its
	// cached pages with the received ones (I5).
	PrefixTokens int
}

// PrefixBlocks is the number of leading blocks the decode worker holds
// (PrefixTokens/PageSize), after CheckPrefix.
func (r *Reservation) PrefixBlocks() int {
	if r.PageSize <= 0 {
		return 0
	}
	return r.PrefixTokens / r.PageSize
}

// CheckPrefix refuses a Reservation whose PrefixTokens a sender must not
// act on: negative, not page aligned, covering the whole prompt (the last
// block always carries the prompt's last token) or more pages than listed.
// Each side checks it (decoder, prefill, Sender): a peer is not trusted
// with it.
func (r *Reservation) CheckPrefix() error {
	p := r.PrefixTokens
	switch {
	case p == 0:
		return nil
	case p < 0 || r.PageSize <= 0 || p%r.PageSize != 0:
		return ErrBadMessage.With("decode prefix of %d tokens is not a whole number of %d-token pages", p, r.PageSize)
	case p >= r.ExpectTokens:
		return ErrBadMessage.With("decode prefix of %d tokens leaves nothing of the %d-token prompt to send", p, r.ExpectTokens)
	case p/r.PageSize > len(r.Pages):
		return ErrBadMessage.With("decode prefix of %d pages, the reservation lists %d", p/r.PageSize, len(r.Pages))
	}
	return nil
}

// PageWrite carries one logical block of KV into one reserved page.
type PageWrite struct {
	Handoff kv.ID
	// Block is the logical block index: tokens [Block*PageSize, Block*PageSize+Slots).
	Block int
	// Page is the destination page and the generation it was reserved with.
	Page kv.PageRef
	// Slots is the number of token slots written (PageSize except for the last block).
	Slots int
	// Data is the page bytes in kv layout. Empty when Placed or when Open
	// is set.
	Data []byte
	// Open, when set, stands in for Data: the page's bytes arrived sealed
	// (an encrypted transport's record, still ciphertext) and Open
	// authenticates them and writes their plaintext, Size bytes, into dst
	// (len(dst) == Size). The receiver opens a full page straight into
	// the page it reserved for it (kv.Pool.FillPageSum: no copy). An error
	// (the record does not verify) means dst may hold unverified bytes:
	// the receiver scrubs them and fails the handoff closed (I8, I15).
	// Open may be called once.
	Open func(dst []byte) error
	// Size is the page image's length when Open is set.
	Size int
	// Checksum is the page checksum (see Checksum) of the page bytes,
	// computed by the writer before sending; the receiver recomputes it over
	// what it got, before the bytes are used.
	Checksum uint32
	// Placed says the bytes were already written one-sidedly into the decode
	// pool's shared mapping at kv's SharedOffset(Page) (shm transport, as an
	// RDMA write would); this message is only the notice. The receiver
	// checks the checksum over its own memory before marking the page written.
	Placed bool
}

// Len is the number of page bytes the write carries: Data's, or Size
// when they are still sealed (Open).
func (w *PageWrite) Len() int {
	if w.Open != nil {
		return w.Size
	}
	return len(w.Data)
}

// OpenData opens a sealed write's bytes (Open) into a buffer of their
// own and sets Data, for a Decode that wants the bytes rather than a
// destination. A write without Open is left as it is.
func (w *PageWrite) OpenData() error {
	if w.Open == nil {
		return nil
	}
	buf := make([]byte, w.Size)
	err := w.Open(buf)
	w.Open = nil
	if err != nil {
		return err
	}
	w.Data = buf
	return nil
}

// Commit is the last message of a handoff. The Sender emits it only after
// every PageWrite of the handoff has been acknowledged as applied.
type Commit struct {
	Handoff kv.ID
	// Tokens is the number of prompt tokens the sender wrote.
	Tokens int
	// Digest is the pool digest over all KV of the handoff in logical order.
	// Empty means missing, and a missing digest is a failure, never a pass (I5).
	Digest []byte
	// FirstToken is the token prefill sampled from the last prompt position.
	FirstToken int32
	// FirstLogprobs are FirstToken's logprobs when the request asked for
	// them (nil otherwise); decode sends them with the first token.
	FirstLogprobs *sample.Logprobs
	// Timing is the prefill worker's part of the first token's time
	// (DecodeWait zero), stamped as the commit is sent (SenderConfig.
	// Timing); nil when not measured (a resumed request's handoff).
	// Decode checks nothing against it and passes it on with the first
	// token, its own DecodeWait added.
	Timing *Timing
}

// Timing is where a request's first token spent its time on the
// workers, for the router's request log and first-token metrics: each
// duration is measured by the worker it names on its own monotonic
// clock (no timestamp crosses from one host to another), and the
// intervals follow each other on the first token's path without
// overlapping. Operator data only: it never reaches a tenant's response
// and nothing is decided on it; a peer's figures are only bounded
// (MaxTiming), and a router drops figures that do not fit in its own
// measure of the handoff.
type Timing struct {
	// PrefillQueue (prefill worker): the Prefill call's arrival to its
	// prefill pages (the response format's grammar, compiled or waited
	// for, comes first).
	PrefillQueue time.Duration
	// PrefillWait: the pages to the first step that runs a chunk of the
	// prompt.
	PrefillWait time.Duration
	// PrefillCompute: that step to the prompt's last chunk computed.
	PrefillCompute time.Duration
	// Push: the last chunk computed to the commit sent: the first
	// token's draw, the page writes the streaming push did not hide
	// (each acknowledged as applied) and the digest.
	Push time.Duration
	// DecodeWait (decode worker): the commit's arrival to the first
	// token sent on the stream: the verification (I5), the sampler and
	// its grammar, and the stream's opening if it came later.
	DecodeWait time.Duration
}

// MaxTiming bounds each of Timing's durations (the wire refuses more).
const MaxTiming = 24 * time.Hour

// Bounded returns t with each duration within [0, MaxTiming].
func (t Timing) Bounded() Timing {
	for _, d := range []*time.Duration{&t.PrefillQueue, &t.PrefillWait, &t.PrefillCompute, &t.Push, &t.DecodeWait} {
		*d = min(max(*d, 0), MaxTiming)
	}
	return t
}

// Abort ends a handoff early. Either side may send it, at any phase.
type Abort struct {
	Handoff kv.ID
	Reason  string
}

// StreamParams are what decode needs to generate after the commit.
type StreamParams struct {
	// Sampling settings; the zero value is greedy.
	Sampling sample.Params
	// IgnoreEOS keeps generating past end-of-sequence tokens (benchmarks).
	IgnoreEOS bool
	// Prompt is the prompt's token ids when the sampler needs them (the
	// repetition penalty counts prompt tokens, a format after thinking
	// reads where the prompt left the reasoning: Sampling.UsesPrompt), else
	// empty: decode has the prompt's KV, not its ids.
	Prompt []int32
	// Generated is what this request generated before this handoff (a
	// request resumed after a preemption; its prompt carries them too):
	// decode's sampler continues after their draws and counts them for
	// the penalties, as one sampler running the whole request would.
	Generated []int32
}

// Token is one item of a decode token stream. Exactly one item is terminal
// (Done, or Err != nil) and nothing follows it.
type Token struct {
	// ID is a generated token; valid when !Done and Err == nil. The first
	// item is the commit's FirstToken.
	ID int32
	// Logprobs are ID's logprobs when the request asked for them.
	Logprobs *sample.Logprobs
	// Done marks successful completion.
	Done bool
	// Finish is "stop" or "length" when Done, or "preempted": the decode
	// worker ran out of pages to grow the sequence, released them, and the
	// router resumes the request with a new handoff whose prompt carries
	// the tokens generated so far.
	Finish string
	// PromptTokens is the verified prompt token count (I9), set on the terminal item.
	PromptTokens int
	// CompletionTokens is set on the terminal item.
	CompletionTokens int
	// Err ends the stream in failure; it is an *Error when it came from the protocol.
	Err error
	// Timing is set on the first item only, when the commit carried the
	// prefill worker's part: the decode worker's DecodeWait added to it
	// (operator data, see Timing). Never changed once sent.
	Timing *Timing
}

// PrefillRequest asks a prefill worker to run a prompt and push its KV into
// a decode reservation (router -> prefill).
type PrefillRequest struct {
	Handoff kv.ID
	Tenant  string
	// Tokens is the whole prompt; len(Tokens) must equal Reservation.ExpectTokens.
	Tokens []int32
	// Reservation is the decode worker's answer to Reserve.
	Reservation *Reservation
	// Sampling decides the first token.
	Sampling sample.Params
	// SampleOffset: the first token is draw SampleOffset of the request's
	// random stream (a resumed request's earlier tokens used the others).
	SampleOffset int
	// Model is the router's model fingerprint (I13): the prompt was
	// tokenized for it. The prefill worker refuses a request whose
	// fingerprint, or whose Reservation's, is not its own.
	Model model.Fingerprint
	// Decode names the decode worker holding the Reservation, for a
	// prefill worker that pushes to several; it must be one of the names
	// that worker was configured with (it never dials a name it is sent).
	// Empty: the prefill worker's only decode worker. At most
	// MaxWorkerName bytes.
	Decode string
	// CacheScope narrows the prefill worker's prefix cache within Tenant
	// (the client's prompt_cache_key / cache_salt); it never widens it.
	CacheScope string
	// Weight is the tenant's weight (the router's --api-keys), as in
	// Reserve: the prefill worker's calls to decode for this prompt (its
	// page writes, its commit) take their connection's call slots in
	// proportion to it (tcp slots). 0 counts as 1; at most MaxWeight.
	Weight int
}

// MaxCacheScope bounds Reserve.CacheScope: the router's scope joins two
// client strings of at most 256 bytes each with their names and lengths.
const MaxCacheScope = 1024

// MaxWorkerName bounds PrefillRequest.Decode (a host:port).
const MaxWorkerName = 255

// PrefillResult is what prefill reports once the decode worker accepted the commit.
type PrefillResult struct {
	// FirstToken is the token sampled from the last prompt position.
	FirstToken int32
	// Tokens is the number of prompt tokens prefilled, written and committed (I9).
	Tokens int
	// CachedTokens of Tokens were read from the prefill worker's prefix
	// cache instead of computed (still covered by the digest).
	CachedTokens int
}

// Checksum is the PageWrite checksum: the low 32 bits of XXH3-64 of the
// page bytes. It catches a torn, truncated or misdirected page early, at
// the write; the commit's 128-bit digest is the strong end-to-end check
// (I5). XXH3 rather than CRC32C because it costs half as much per byte
// here and a page is hashed twice per handoff (BenchmarkHandoff*).
func Checksum(data []byte) uint32 { return uint32(xxh3.Hash(data)) }

// IDString renders a handoff id for logs and error messages.
func IDString(id kv.ID) string { return hex.EncodeToString(id[:]) }
