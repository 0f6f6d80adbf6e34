package handoff

import (
	"context"
	"errors"
	"sync"

	"sluice/internal/sample"
)

// Push drives a Sender against a decode worker: it sends the write batches
// (up to Window at once), waits for each acknowledgement, then sends the
// commit last. It returns nil only after the decode worker accepted the
// commit. On failure it aborts the handoff on the decode side and, because
// every Write call of this Push has returned by then (nothing of ours is in
// flight), sends the drain acknowledgement (I6).
func Push(ctx context.Context, s *Sender, d Decode) error {
	return PushStreaming(ctx, s, d, nil)
}

// Progress is a prompt's prefill as a streaming Push sees it: the prefill
// scheduler reports each chunk (Prefilled) and the end (Finish or Fail)
// from its own goroutine; Push hands them to its Sender between actions.
// No method blocks, so the scheduler never waits for the network.
type Progress struct {
	mu      sync.Mutex
	n       int
	ended   bool
	first   int32
	firstLP *sample.Logprobs
	err     error
	wake    chan struct{}
}

// NewProgress returns a Progress with nothing prefilled.
func NewProgress() *Progress { return &Progress{wake: make(chan struct{}, 1)} }

// Prefilled reports the prompt's first n positions computed for good.
func (p *Progress) Prefilled(n int) {
	p.mu.Lock()
	if !p.ended && n > p.n {
		p.n = n
	}
	p.mu.Unlock()
	p.poke()
}

// Finish reports the whole prompt prefilled and its first token.
func (p *Progress) Finish(first int32, lp *sample.Logprobs) {
	p.mu.Lock()
	if !p.ended {
		p.ended, p.first, p.firstLP = true, first, lp
	}
	p.mu.Unlock()
	p.poke()
}

// Fail reports that the prefill failed: Push aborts the handoff (after
// every write in flight returned, as on any failure) and returns err.
func (p *Progress) Fail(err error) {
	p.mu.Lock()
	if !p.ended {
		p.ended, p.err = true, err
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Progress) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// apply moves what was reported into s.
func (p *Progress) apply(s *Sender) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.Prefilled(p.n)
	switch {
	case p.err != nil:
		s.Fail(p.err)
	case p.ended:
		s.Finish(p.first, p.firstLP)
	}
}

// PushStreaming is Push for a Sender made by NewStreamingSender while the
// prompt is still being prefilled: pages go as p reports them computed,
// the commit after p.Finish. With p nil it is Push.
func PushStreaming(ctx context.Context, s *Sender, d Decode, p *Progress) error {
	type ack struct {
		seq int
		err error
	}
	acks := make(chan ack, 64)
	inflight := 0
	var wake chan struct{} // nil: never ready (Push)
	if p != nil {
		wake = p.wake
	}
	if r, ok := d.(Registrar); ok {
		if err := r.Register(s.Reservation()); err != nil {
			s.Fail(err)
		}
	}
	for {
		if ctx.Err() != nil {
			s.Fail(ctx.Err())
		}
		if p != nil {
			p.apply(s)
		}
		a := s.Next()
		switch a.Kind {
		case ActWrite:
			inflight++
			go func(seq int, b []PageWrite) {
				acks <- ack{seq, d.Write(ctx, b)}
			}(a.Seq, a.Batch)
		case ActWait:
			select {
			case r := <-acks:
				inflight--
				s.Ack(r.seq, r.err)
			case <-wake:
			case <-ctx.Done():
			}
		case ActCommit:
			if s.cfg.Timing != nil {
				a.Commit.Timing = s.cfg.Timing()
			}
			s.Committed(d.Commit(ctx, a.Commit))
		case ActAbort:
			// Every Write goroutine must return before the drain
			// acknowledgement: it is a promise that none is in flight.
			for ; inflight > 0; inflight-- {
				<-acks
			}
			actx := context.WithoutCancel(ctx)
			_ = d.Abort(actx, a.Abort)
			_ = d.Drained(actx, a.Abort.Handoff)
		case ActDone:
			return nil
		case ActFailed:
			if a.Err == nil {
				return errors.New("handoff: failed")
			}
			return a.Err
		}
	}
}
