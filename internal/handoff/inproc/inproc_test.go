package inproc_test

import (
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/handoff/inproc"
)

func TestHonest(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	d := inproc.Decode(r.Server)
	for i, n := range []int{1, 4, 5, 37} {
		handofftest.Honest(t, r, d, i, n, handoff.SenderConfig{MaxBatchBytes: 3 * r.Geo.PageBytes()})
	}
	r.CheckDrained(t)
}

func TestAbortEveryPhase(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	handofftest.AbortEveryPhase(t, r, inproc.Decode(r.Server))
}

func TestForeignWrite(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	handofftest.ForeignWrite(t, r, inproc.Decode(r.Server))
}

// Writes are copied: the sender may reuse its buffer as soon as Write returns.
func TestNoAliasing(t *testing.T) {
	buf := []byte{1, 2, 3}
	var got []byte
	d := inproc.Decode(writeSpy(func(ws []handoff.PageWrite) { got = ws[0].Data }))
	_ = d.Write(t.Context(), []handoff.PageWrite{{Data: buf}})
	buf[0] = 9
	if got[0] != 1 {
		t.Fatal("the receiver's write aliases the sender's buffer")
	}
}
