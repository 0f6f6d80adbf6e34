package handoff

import (
	"fmt"

	"sluice/internal/kv"
	"sluice/internal/sample"
)

// Source is the prefill side's view of one prefilled sequence: its KV
// pages in logical order, read from the prefill pool (owner-checked there).
type Source interface {
	// Page returns block b's bytes in kv page layout and its written slot
	// count. The bytes may alias the prefill pool; transports copy them.
	Page(b int) (data []byte, slots int, err error)
	// Digest is the prefill pool's digest over the whole prompt's KV in
	// logical order, the same function the decode pool computes.
	Digest() ([]byte, error)
}

// SenderConfig bounds the transfer.
type SenderConfig struct {
	// MaxBatchBytes bounds the page bytes of one Write call (default 4 MiB;
	// at least one page per batch). Bounded batches bound a one-sided
	// transport's in-flight time, which the decode lease must exceed (I6).
	MaxBatchBytes int
	// Window is how many batches may await acknowledgement at once (default 2).
	Window int
	// Timing, when set, is called by Push as it sends the commit (the
	// Sender itself has no clock): what it returns rides in
	// Commit.Timing.
	Timing func() *Timing
}

// ActionKind says what a Sender wants done next.
type ActionKind uint8

const (
	// ActWait: nothing to send until an acknowledgement arrives.
	ActWait ActionKind = iota
	// ActWrite: send Batch with Decode.Write, then report Ack(Seq, err).
	ActWrite
	// ActCommit: send Commit with Decode.Commit, then report Committed(err).
	ActCommit
	// ActAbort: send Abort (and, one-sided, Drained once the writer is
	// idle); the handoff has failed on the prefill side.
	ActAbort
	// ActDone: the commit was accepted; nothing more to send.
	ActDone
	// ActFailed: the handoff is over, unsuccessfully; Err says why.
	ActFailed
)

// SenderAction is one step's output.
type SenderAction struct {
	Kind   ActionKind
	Seq    int         // ActWrite: the batch's sequence number, for Ack
	Batch  []PageWrite // ActWrite
	Commit *Commit     // ActCommit
	Abort  *Abort      // ActAbort
	Err    error       // ActAbort, ActFailed
}

// Sender is the prefill side of the handoff protocol: a pure state machine
// with no goroutines, clock or network.
//
// Ordering contract: the Commit is emitted LAST, only after every PageWrite
// of the handoff has been acknowledged as applied (Ack with a nil error).
// An acknowledgement means Decode.Write returned nil, i.e. the decode
// worker applied the batch, not merely that it was sent. Any failed
// acknowledgement makes the Sender abort and never emit the Commit. A
// streaming Sender also emits it only after Finish: never before the
// prompt's last chunk is computed and its pages applied.
type Sender struct {
	cfg     SenderConfig
	res     *Reservation
	tokens  int
	first   int32
	firstLP *sample.Logprobs
	src     Source
	next    int // next block to put in a batch
	// ready bounds the blocks that may be sent: [0, ready) are computed
	// and will not change. final: the whole prompt is computed and the
	// first token known, so the last block and then the commit may go.
	// A Sender of a prefilled prompt (NewSender) starts with both; a
	// streaming one (NewStreamingSender) is told by Prefilled and Finish.
	ready int
	final bool
	early int // blocks batched before Finish: sent while the prompt computed
	// pageBytes is a page's size, learnt from the first page read (0
	// before): how many ready blocks fill a batch.
	pageBytes int
	seq       int
	inflight  map[int]bool
	state     ActionKind // ActWait while transferring; then ActCommit, ActDone, ActAbort, ActFailed
	commitOK  bool       // the commit was handed out and awaits Committed
	err       error
}

// NewSender checks that the prefilled sequence fits the reservation exactly
// before anything is sent: a mismatch is the incident (one page sent for an
// N-page reservation) and is refused at the source.
func NewSender(cfg SenderConfig, res *Reservation, tokens int, firstToken int32, src Source) (*Sender, error) {
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 4 << 20
	}
	if cfg.Window <= 0 {
		cfg.Window = 2
	}
	if res == nil || res.PageSize <= 0 {
		return nil, ErrState.With("no reservation")
	}
	if tokens != res.ExpectTokens {
		return nil, ErrCountMismatch.With("prefilled %d tokens, decode reserved %d", tokens, res.ExpectTokens)
	}
	if want := kv.PagesFor(tokens, res.PageSize); want != len(res.Pages) {
		return nil, ErrCoverage.With("%d tokens need %d pages, reservation has %d", tokens, want, len(res.Pages))
	}
	if err := res.CheckPrefix(); err != nil {
		return nil, err
	}
	// The blocks decode already holds are never sent (a write there is
	// refused as sealed_write); the commit's digest still covers them.
	return &Sender{cfg: cfg, res: res, tokens: tokens, first: firstToken, src: src, inflight: map[int]bool{},
		next: res.PrefixBlocks(), ready: len(res.Pages), final: true}, nil
}

// NewStreamingSender is a Sender for a prompt that is still being
// prefilled (chunked prefill): it sends nothing until Prefilled says which
// blocks are computed, sends each such block as soon as it may (bounded
// batches, Window as usual), and emits the commit only after Finish, once
// every block, the last included, was acknowledged as applied. The commit
// and its digest cover the whole prompt exactly as NewSender's do, so the
// decode side cannot tell the two apart and verifies the same way (I5).
func NewStreamingSender(cfg SenderConfig, res *Reservation, tokens int, src Source) (*Sender, error) {
	s, err := NewSender(cfg, res, tokens, 0, src)
	if err != nil {
		return nil, err
	}
	s.ready, s.final = s.next, false
	return s, nil
}

// Prefilled reports that the prompt's first n positions are computed and
// will never be written again: every block they fill whole may be sent.
// A block they fill only in part waits (its later slots are still to be
// computed); the last block goes with Finish.
func (s *Sender) Prefilled(n int) {
	if s.final {
		return
	}
	if b := min(n/s.res.PageSize, len(s.res.Pages)); b > s.ready {
		s.ready = b
	}
}

// Finish reports that the whole prompt is prefilled and its first token
// sampled: the remaining blocks may go, then the commit carrying first.
func (s *Sender) Finish(first int32, lp *sample.Logprobs) {
	if s.final {
		return
	}
	s.first, s.firstLP = first, lp
	s.ready, s.final = len(s.res.Pages), true
}

// Skipped is the number of prompt blocks not sent because the decode
// worker holds them (Reservation.PrefixTokens).
func (s *Sender) Skipped() int { return s.res.PrefixBlocks() }

// SetFirstLogprobs attaches the first token's logprobs to the commit (the
// request asked for logprobs; decode sends them with the token).
func (s *Sender) SetFirstLogprobs(lp *sample.Logprobs) { s.firstLP = lp }

// Next returns the next action. Call it until it returns ActWait, ActDone or ActFailed.
func (s *Sender) Next() SenderAction {
	switch s.state {
	case ActAbort:
		s.state = ActFailed
		return SenderAction{Kind: ActAbort, Abort: &Abort{Handoff: s.res.Handoff, Reason: s.err.Error()}, Err: s.err}
	case ActFailed:
		return SenderAction{Kind: ActFailed, Err: s.err}
	case ActDone:
		return SenderAction{Kind: ActDone}
	case ActCommit:
		return SenderAction{Kind: ActWait} // commit handed out, awaiting Committed
	}
	if s.next < s.ready && len(s.inflight) < s.cfg.Window && s.sendNow() {
		return s.batch()
	}
	if s.final && s.next == len(s.res.Pages) && len(s.inflight) == 0 {
		// The whole prompt computed and every write acknowledged as
		// applied: only now may the commit go.
		d, err := s.src.Digest()
		if err != nil {
			return s.failNow(fmt.Errorf("digest: %w", err))
		}
		s.state = ActCommit
		return SenderAction{Kind: ActCommit, Commit: &Commit{Handoff: s.res.Handoff, Tokens: s.tokens,
			Digest: append([]byte(nil), d...), FirstToken: s.first, FirstLogprobs: s.firstLP}}
	}
	return SenderAction{Kind: ActWait}
}

// sendNow says whether the ready blocks should go now. While the prompt
// computes, a batch that is not full goes only when none is in flight:
// chunks are often a page or two, and one round trip per chunk would cost
// more than it hides; the pages that complete meanwhile join the next
// batch. Full batches, and everything after Finish, go at once (Window).
func (s *Sender) sendNow() bool {
	return s.final || len(s.inflight) == 0 || s.pageBytes > 0 && (s.ready-s.next)*s.pageBytes >= s.cfg.MaxBatchBytes
}

func (s *Sender) batch() SenderAction {
	var ws []PageWrite
	bytes := 0
	summer, _ := s.src.(PageSummer)
	for s.next < s.ready {
		// Pages are all one size: stop before reading (and hashing) a page
		// that will not fit, rather than after.
		if len(ws) > 0 && bytes+bytes/len(ws) > s.cfg.MaxBatchBytes {
			break
		}
		var data []byte
		var slots int
		var sum uint32
		var summed bool
		var err error
		if summer != nil {
			data, slots, sum, summed, err = summer.PageSum(s.next)
		} else {
			data, slots, err = s.src.Page(s.next)
		}
		if err != nil {
			return s.failNow(fmt.Errorf("block %d: %w", s.next, err))
		}
		if !summed {
			sum = Checksum(data)
		}
		if want := s.wantSlots(); slots != want {
			return s.failNow(ErrCountMismatch.With("block %d has %d slots, want %d", s.next, slots, want))
		}
		if len(ws) > 0 && bytes+len(data) > s.cfg.MaxBatchBytes {
			break
		}
		s.pageBytes = len(data)
		ws = append(ws, PageWrite{Handoff: s.res.Handoff, Block: s.next, Page: s.res.Pages[s.next],
			Slots: slots, Data: data, Checksum: sum})
		bytes += len(data)
		s.next++
		if !s.final {
			s.early++
		}
	}
	s.seq++
	s.inflight[s.seq] = true
	return SenderAction{Kind: ActWrite, Seq: s.seq, Batch: ws}
}

// wantSlots is the slot count block s.next must carry.
func (s *Sender) wantSlots() int {
	if s.next == len(s.res.Pages)-1 {
		return s.tokens - s.next*s.res.PageSize
	}
	return s.res.PageSize
}

func (s *Sender) failNow(err error) SenderAction {
	s.err = err
	s.state = ActAbort
	return s.Next()
}

// Ack reports the outcome of batch seq: nil means Decode.Write returned nil.
func (s *Sender) Ack(seq int, err error) {
	if !s.inflight[seq] {
		return
	}
	delete(s.inflight, seq)
	if err != nil && s.state == ActWait {
		s.err = err
		s.state = ActAbort
	}
}

// Committed reports the outcome of the commit: nil means Decode.Commit
// returned nil, i.e. the decode worker verified and accepted the handoff.
func (s *Sender) Committed(err error) {
	if s.state != ActCommit {
		return
	}
	if err != nil {
		s.err = err
		s.state = ActAbort
		return
	}
	s.state = ActDone
}

// Fail aborts the handoff from outside (context cancelled, shutdown).
func (s *Sender) Fail(err error) {
	if s.state == ActWait || s.state == ActCommit {
		s.err = err
		s.state = ActAbort
	}
}

// Streamed is the blocks sent before Finish, while the prompt was still
// being prefilled: the part of the transfer a streaming handoff hid.
func (s *Sender) Streamed() int { return s.early }

// Err is why the handoff failed, nil otherwise.
func (s *Sender) Err() error { return s.err }
