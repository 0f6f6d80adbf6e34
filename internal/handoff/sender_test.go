package handoff

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"sluice/internal/kv"
)

func newSenderRig(t *testing.T, prompt int, cfg SenderConfig) (*rig, *Sender) {
	t.Helper()
	g := newRig(t, ReceiverConfig{}, prompt)
	s, err := NewSender(cfg, g.res, prompt, 42, g.src)
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

// The commit is emitted only after every batch is acknowledged, batches
// respect MaxBatchBytes, and every block is sent exactly once in order.
func TestSenderOrdering(t *testing.T) {
	pageBytes := tPS * tBPS
	g, s := newSenderRig(t, 37, SenderConfig{MaxBatchBytes: 3 * pageBytes, Window: 2}) // 10 pages
	var pending []int
	var blocks []int
	commits := 0
	for step := 0; step < 100; step++ {
		a := s.Next()
		switch a.Kind {
		case ActWrite:
			if n := len(a.Batch) * pageBytes; n > 3*pageBytes || len(a.Batch) == 0 {
				t.Fatalf("batch of %d bytes exceeds 3 pages", n)
			}
			if len(pending) == 2 {
				t.Fatal("a third batch was emitted with a window of 2")
			}
			for _, w := range a.Batch {
				blocks = append(blocks, w.Block)
			}
			if err := g.r.Write(t0, a.Batch); err != nil {
				t.Fatal(err)
			}
			pending = append(pending, a.Seq)
		case ActWait:
			if len(pending) == 0 {
				t.Fatal("Wait with nothing in flight")
			}
			// Acknowledge out of order: the newest first.
			s.Ack(pending[len(pending)-1], nil)
			pending = pending[:len(pending)-1]
		case ActCommit:
			if len(pending) != 0 {
				t.Fatalf("commit emitted with %d batches unacknowledged", len(pending))
			}
			commits++
			_, err := g.r.Commit(t0, a.Commit)
			s.Committed(err)
		case ActDone:
			if commits != 1 {
				t.Fatalf("%d commits", commits)
			}
			for i, b := range blocks {
				if b != i {
					t.Fatalf("blocks sent %v, want 0..9 once each", blocks)
				}
			}
			if len(blocks) != 10 {
				t.Fatalf("blocks sent %v", blocks)
			}
			return
		default:
			t.Fatalf("unexpected action %+v", a)
		}
	}
	t.Fatal("sender did not finish")
}

// A failed acknowledgement: abort, no commit, ever.
func TestSenderFailedAckNeverCommits(t *testing.T) {
	_, s := newSenderRig(t, 16, SenderConfig{MaxBatchBytes: 1, Window: 1})
	a := s.Next()
	if a.Kind != ActWrite || len(a.Batch) != 1 {
		t.Fatalf("first action %+v, want a one-page batch (a page bigger than the limit still goes alone)", a)
	}
	s.Ack(a.Seq, ErrBadWrite)
	a = s.Next()
	if a.Kind != ActAbort || !errors.Is(a.Err, ErrBadWrite) {
		t.Fatalf("after a failed ack: %+v, want abort", a)
	}
	for i := 0; i < 5; i++ {
		if a := s.Next(); a.Kind != ActFailed {
			t.Fatalf("after abort: %+v, want failed forever", a)
		}
	}
}

func TestSenderRefusesMismatch(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 10)
	// The incident: a one-token placeholder prompt against a 10-token reservation.
	if _, err := NewSender(SenderConfig{}, g.res, 1, 0, newSeqSource(1, tPS, tBPS, 1)); !errors.Is(err, ErrCountMismatch) {
		t.Fatalf("placeholder prompt: %v", err)
	}
	res := *g.res
	res.Pages = res.Pages[:1]
	if _, err := NewSender(SenderConfig{}, &res, 10, 0, g.src); !errors.Is(err, ErrCoverage) {
		t.Fatalf("short page list: %v", err)
	}
}

// recDecode records calls and can fail the nth Write.
type recDecode struct {
	*Server
	mu        sync.Mutex
	failWrite int
	writes    int
	calls     []string
}

func (d *recDecode) Write(ctx context.Context, ws []PageWrite) error {
	d.mu.Lock()
	d.writes++
	n := d.writes
	d.calls = append(d.calls, "write")
	d.mu.Unlock()
	if n == d.failWrite {
		return ErrTransport.With("injected")
	}
	return d.Server.Write(ctx, ws)
}

func (d *recDecode) Commit(ctx context.Context, c *Commit) error {
	d.mu.Lock()
	d.calls = append(d.calls, "commit")
	d.mu.Unlock()
	return d.Server.Commit(ctx, c)
}

func (d *recDecode) Abort(ctx context.Context, a *Abort) error {
	d.mu.Lock()
	d.calls = append(d.calls, "abort")
	d.mu.Unlock()
	return d.Server.Abort(ctx, a)
}

func (d *recDecode) Drained(ctx context.Context, id kv.ID) error {
	d.mu.Lock()
	d.calls = append(d.calls, "drained")
	d.mu.Unlock()
	return d.Server.Drained(ctx, id)
}

func TestPushEndToEnd(t *testing.T) {
	for _, fail := range []int{0, 1, 3} {
		g := newRig(t, ReceiverConfig{OneSided: true, Lease: time.Hour}, 37)
		d := &recDecode{Server: NewServer(g.r, func() time.Time { return t0 }, nil), failWrite: fail}
		s, err := NewSender(SenderConfig{MaxBatchBytes: 2 * tPS * tBPS, Window: 3}, g.res, 37, 7, g.src)
		if err != nil {
			t.Fatal(err)
		}
		err = Push(context.Background(), s, d)
		last := d.calls[len(d.calls)-1]
		if fail == 0 {
			if err != nil || last != "commit" {
				t.Fatalf("honest push: %v, calls %v", err, d.calls)
			}
			continue
		}
		if !errors.Is(err, ErrTransport) {
			t.Fatalf("push with write %d failing: %v", fail, err)
		}
		for _, c := range d.calls {
			if c == "commit" {
				t.Fatalf("commit sent after a failed write: %v", d.calls)
			}
		}
		if d.calls[len(d.calls)-2] != "abort" || last != "drained" {
			t.Fatalf("calls %v, want ... abort, drained", d.calls)
		}
		// One-sided receiver: abort quarantined, the drain ack freed (I6).
		if err := g.pool.CheckDrained(); err != nil {
			t.Fatal(err)
		}
	}
}

// A cancelled context aborts the push: no commit, abort and drain sent.
func TestPushContextCancelled(t *testing.T) {
	g := newRig(t, ReceiverConfig{}, 37)
	d := &recDecode{Server: NewServer(g.r, func() time.Time { return t0 }, nil)}
	s, _ := NewSender(SenderConfig{MaxBatchBytes: tPS * tBPS}, g.res, 37, 1, g.src)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Push(ctx, s, d); !errors.Is(err, context.Canceled) {
		t.Fatalf("push with a cancelled context: %v", err)
	}
	for _, c := range d.calls {
		if c == "commit" {
			t.Fatal("commit sent after cancellation")
		}
	}
	if err := g.pool.CheckDrained(); err != nil {
		t.Fatal(err)
	}
}
