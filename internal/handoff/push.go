package handoff

import (
	"context"
	"errors"
)

// Push drives a Sender against a decode worker: it sends the write batches
// (up to Window at once), waits for each acknowledgement, then sends the
// commit last. It returns nil only after the decode worker accepted the
// commit. On failure it aborts the handoff on the decode side and, because
// every Write call of this Push has returned by then (nothing of ours is in
// flight), sends the drain acknowledgement (I6).
func Push(ctx context.Context, s *Sender, d Decode) error {
	type ack struct {
		seq int
		err error
	}
	acks := make(chan ack, 64)
	inflight := 0
	if r, ok := d.(Registrar); ok {
		if err := r.Register(s.Reservation()); err != nil {
			s.Fail(err)
		}
	}
	for {
		if ctx.Err() != nil {
			s.Fail(ctx.Err())
		}
		a := s.Next()
		switch a.Kind {
		case ActWrite:
			inflight++
			go func(seq int, b []PageWrite) {
				acks <- ack{seq, d.Write(ctx, b)}
			}(a.Seq, a.Batch)
		case ActWait:
			r := <-acks
			inflight--
			s.Ack(r.seq, r.err)
		case ActCommit:
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
