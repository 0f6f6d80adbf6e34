package handoff

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"sluice/internal/kv"
)

// A streaming Sender, driven as a chunked prefill drives it: after each
// chunk it sends exactly the blocks that chunk completed (never one still
// being computed), it emits the commit only after Finish even when every
// page was already sent, and the decode side accepts the commit over the
// whole prompt with Finish's first token.
func TestStreamingSenderSendsEachChunksPages(t *testing.T) {
	for _, c := range []struct{ prompt, chunk int }{{37, 7}, {36, 5}, {36, 4}, {9, 20}, {1, 1}} {
		t.Run(fmt.Sprintf("prompt%d-chunk%d", c.prompt, c.chunk), func(t *testing.T) {
			g := newRig(t, ReceiverConfig{}, c.prompt)
			s, err := NewStreamingSender(SenderConfig{MaxBatchBytes: 2 * tPS * tBPS, Window: 2}, g.res, c.prompt, g.src)
			if err != nil {
				t.Fatal(err)
			}
			sent := 0
			var pending []int
			// drain runs the Sender until it waits with nothing in flight,
			// applying and acknowledging every write; computed is what the
			// prefill reported, final whether it finished.
			drain := func(computed int, final bool) (committed bool) {
				for {
					a := s.Next()
					switch a.Kind {
					case ActWrite:
						for _, w := range a.Batch {
							if w.Block != sent {
								t.Fatalf("block %d sent after %d blocks", w.Block, sent)
							}
							if !final && (w.Block+1)*tPS > computed {
								t.Fatalf("block %d (slots %d..%d) sent with only %d positions computed", w.Block, w.Block*tPS, (w.Block+1)*tPS-1, computed)
							}
							sent++
						}
						if err := g.r.Write(t0, a.Batch); err != nil {
							t.Fatal(err)
						}
						pending = append(pending, a.Seq)
					case ActWait:
						if len(pending) == 0 {
							return false
						}
						s.Ack(pending[0], nil)
						pending = pending[1:]
					case ActCommit:
						if !final {
							t.Fatalf("commit emitted with %d of %d positions computed, before Finish", computed, c.prompt)
						}
						if len(pending) != 0 || sent != len(g.res.Pages) {
							t.Fatalf("commit with %d batches in flight, %d of %d blocks sent", len(pending), sent, len(g.res.Pages))
						}
						if a.Commit.FirstToken != 9 {
							t.Fatalf("commit carries first token %d, want Finish's 9", a.Commit.FirstToken)
						}
						_, err := g.r.Commit(t0, a.Commit)
						s.Committed(err)
					case ActDone:
						return true
					default:
						t.Fatalf("unexpected action %+v", a)
					}
				}
			}
			if drain(0, false) || sent != 0 {
				t.Fatalf("%d blocks sent before any chunk was computed", sent)
			}
			for fed := min(c.chunk, c.prompt); fed < c.prompt; fed = min(fed+c.chunk, c.prompt) {
				s.Prefilled(fed)
				if drain(fed, false) {
					t.Fatal("done before Finish")
				}
				if want := fed / tPS; sent != want {
					t.Fatalf("after %d positions: %d blocks sent, want %d (each completed page as soon as its chunk is done)", fed, sent, want)
				}
			}
			// Every position computed but the first token not yet sampled:
			// the pages may all go, the commit may not.
			s.Prefilled(c.prompt)
			if drain(c.prompt, false) {
				t.Fatal("done before Finish")
			}
			s.Finish(9, nil)
			if !drain(c.prompt, true) {
				t.Fatalf("not done after Finish: %v", s.Err())
			}
			if sent != len(g.res.Pages) {
				t.Fatalf("%d of %d blocks sent", sent, len(g.res.Pages))
			}
		})
	}
}

// A prefill that fails mid-prompt: PushStreaming aborts the handoff only
// after every write it started returned (the drain acknowledgement is a
// promise that none is in flight, I6), sends no commit, and returns the
// prefill's error; the decode side's pages all come back.
func TestPushStreamingFailMidPrompt(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 37)
	s, err := NewStreamingSender(SenderConfig{MaxBatchBytes: tPS * tBPS, Window: 2}, g.res, 37, g.src)
	if err != nil {
		t.Fatal(err)
	}
	d := &gateDecode{r: g.r, gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	p := NewProgress()
	out := make(chan error, 1)
	go func() { out <- PushStreaming(context.Background(), s, d, p) }()
	p.Prefilled(14) // blocks 0..2
	<-d.entered     // a write is in flight, held at the gate
	boom := errors.New("forward failed")
	p.Fail(boom)
	// The push must not abort, let alone acknowledge the drain, while the
	// writes are held: give it the time to do so wrongly.
	select {
	case err := <-out:
		t.Fatalf("push returned %v with a write still in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(d.gate)
	if err := <-out; !errors.Is(err, boom) {
		t.Fatalf("push returned %v, want the prefill's error", err)
	}
	if d.commits != 0 || d.aborts != 1 || d.drained != 1 {
		t.Fatalf("commits %d aborts %d drained %d, want 0 1 1", d.commits, d.aborts, d.drained)
	}
	if d.drainedWithInflight || d.abortedWithInflight {
		t.Fatal("abort or drain acknowledgement sent while a write was in flight")
	}
	if err := g.pool.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}

// gateDecode applies writes to a Receiver, each held until gate closes.
type gateDecode struct {
	r       *Receiver
	gate    chan struct{}
	entered chan struct{}

	mu                       sync.Mutex
	inflight                 int
	commits, aborts, drained int
	drainedWithInflight      bool
	abortedWithInflight      bool
}

func (d *gateDecode) Reserve(context.Context, *Reserve) (*Reservation, error) {
	return nil, errors.New("not here")
}

func (d *gateDecode) Write(ctx context.Context, w []PageWrite) error {
	d.mu.Lock()
	d.inflight++
	d.mu.Unlock()
	d.entered <- struct{}{}
	<-d.gate
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inflight--
	return d.r.Write(t0, w)
}

func (d *gateDecode) Commit(ctx context.Context, c *Commit) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.commits++
	_, err := d.r.Commit(t0, c)
	return err
}

func (d *gateDecode) Abort(ctx context.Context, a *Abort) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.aborts++
	d.abortedWithInflight = d.abortedWithInflight || d.inflight > 0
	d.r.Abort(t0, a.Handoff, a.Reason)
	return nil
}

func (d *gateDecode) Drained(ctx context.Context, id kv.ID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drained++
	if d.inflight > 0 {
		d.drainedWithInflight = true
	}
	return d.r.Drained(t0, id)
}

func (d *gateDecode) Stream(context.Context, kv.ID, StreamParams) (TokenStream, error) {
	return nil, errors.New("not here")
}

func (d *gateDecode) Cancel(context.Context, kv.ID) error { return nil }

// While the prompt computes, a batch that is not full goes only when none
// is in flight (the pages completed meanwhile join the next one); a full
// batch goes at once, within the window; after Finish everything goes.
func TestStreamingSenderCoalescesWhileInFlight(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 37) // 10 pages
	s, err := NewStreamingSender(SenderConfig{MaxBatchBytes: 3 * tPS * tBPS, Window: 2}, g.res, 37, g.src)
	if err != nil {
		t.Fatal(err)
	}
	s.Prefilled(4) // block 0
	a := s.Next()
	if a.Kind != ActWrite || len(a.Batch) != 1 {
		t.Fatalf("first chunk: %+v, want block 0 at once", a)
	}
	first := a.Seq
	s.Prefilled(12) // blocks 1, 2: less than a batch
	if a := s.Next(); a.Kind != ActWait {
		t.Fatalf("a partial batch with one in flight: %+v, want to wait", a)
	}
	s.Prefilled(16) // blocks 1..3: a full batch
	a = s.Next()
	if a.Kind != ActWrite || len(a.Batch) != 3 || a.Batch[0].Block != 1 {
		t.Fatalf("a full batch ready: %+v, want blocks 1..3", a)
	}
	second := a.Seq
	s.Prefilled(20) // block 4: partial, two in flight
	if a := s.Next(); a.Kind != ActWait {
		t.Fatalf("%+v, want to wait", a)
	}
	s.Ack(first, nil)
	if a := s.Next(); a.Kind != ActWait {
		t.Fatalf("a partial batch with one still in flight: %+v, want to wait", a)
	}
	s.Ack(second, nil)
	a = s.Next()
	if a.Kind != ActWrite || len(a.Batch) != 1 || a.Batch[0].Block != 4 {
		t.Fatalf("none in flight, a partial batch ready: %+v, want block 4", a)
	}
	s.Prefilled(28) // blocks 5, 6: partial, one in flight
	if a := s.Next(); a.Kind != ActWait {
		t.Fatalf("%+v, want to wait", a)
	}
	s.Finish(1, nil)
	a = s.Next()
	if a.Kind != ActWrite || len(a.Batch) != 3 || a.Batch[0].Block != 5 {
		t.Fatalf("after Finish: %+v, want blocks 5..7 at once", a)
	}
}
