package shm

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// I3 on the one-sided writer: a write naming a page outside its own
// handoff's reservation is refused with ErrBadWrite before any byte is
// placed (the simulator's foreign-placement case: once the bytes are in
// decode memory nothing on the decode side can take them back).
func TestForeignPlacementRefusedBeforeAnyByte(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, control(t, r, "inproc"))
	ctx := context.Background()
	victim, thief := handofftest.ID(1), handofftest.ID(2)
	vsrc := r.Sequence(t, victim, "globex", 8, 1)
	vres, err := w.Reserve(ctx, &handoff.Reserve{Handoff: victim, Tenant: "globex", PromptTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	tres, err := w.Reserve(ctx, &handoff.Reserve{Handoff: thief, Tenant: "acme", PromptTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	// The victim's first page is written honestly.
	vd, vn, _ := vsrc.Page(0)
	if err := w.Write(ctx, []handoff.PageWrite{{Handoff: victim, Block: 0, Page: vres.Pages[0], Slots: vn,
		Data: vd, Checksum: handoff.Checksum(vd)}}); err != nil {
		t.Fatal(err)
	}
	vo := kv.Owner{Tenant: "globex", ID: victim}
	before, _, err := r.Decode.PageData(vo, vres.Pages[0])
	if err != nil {
		t.Fatal(err)
	}
	before = append([]byte(nil), before...)
	bad := bytes.Repeat([]byte{0x5A}, r.Geo.PageBytes())
	for _, c := range []struct {
		name string
		pw   handoff.PageWrite
	}{
		{"another handoff's page", handoff.PageWrite{Handoff: thief, Block: 0, Page: vres.Pages[0]}},
		{"own block, other page", handoff.PageWrite{Handoff: thief, Block: 1, Page: tres.Pages[0]}},
		{"stale generation", handoff.PageWrite{Handoff: thief, Block: 0, Page: kv.PageRef{Page: tres.Pages[0].Page, Gen: tres.Pages[0].Gen - 1}}},
		{"block past the reservation", handoff.PageWrite{Handoff: thief, Block: 2, Page: vres.Pages[1]}},
		{"never registered", handoff.PageWrite{Handoff: handofftest.ID(3), Block: 0, Page: vres.Pages[1]}},
	} {
		pw := c.pw
		pw.Slots, pw.Data, pw.Checksum = 4, bad, handoff.Checksum(bad)
		// An honest page first in the same batch: the refusal is whole.
		honest := handoff.PageWrite{Handoff: thief, Block: 0, Page: tres.Pages[0], Slots: 4, Data: bad, Checksum: handoff.Checksum(bad)}
		lands, err := w.Post([]handoff.PageWrite{honest, pw})
		if !errors.Is(err, handoff.ErrBadWrite) || lands != nil {
			t.Fatalf("%s: %d placements, %v; want ErrBadWrite and none", c.name, len(lands), err)
		}
		for _, land := range lands {
			if land != nil {
				land() // what a fence-less writer would place
			}
		}
		after, _, err := r.Decode.PageData(vo, vres.Pages[0])
		if err != nil || !bytes.Equal(after, before) {
			t.Fatalf("%s: the victim's page changed (%v)", c.name, err)
		}
	}
	// Through Write the refusal also fails the thief's handoff closed on
	// the decode side (Decode.Write's contract).
	pw := handoff.PageWrite{Handoff: thief, Block: 0, Page: vres.Pages[0], Slots: 4, Data: bad, Checksum: handoff.Checksum(bad)}
	if err := w.Write(ctx, []handoff.PageWrite{pw}); !errors.Is(err, handoff.ErrBadWrite) {
		t.Fatalf("write into another handoff's page: %v, want ErrBadWrite", err)
	}
	if after, _, _ := r.Decode.PageData(vo, vres.Pages[0]); !bytes.Equal(after, before) {
		t.Fatal("the victim's page changed")
	}
	if r.Server.Stats().Aborted == 0 {
		t.Fatal("the refused writer's handoff was not ended on the decode side")
	}
	_ = w.Abort(ctx, &handoff.Abort{Handoff: victim, Reason: "done"})
	_ = w.Drained(ctx, victim)
	_ = w.Drained(ctx, thief)
	r.ReleaseSource(t, vsrc)
	r.CheckDrained(t)
}

// notices is a decode side that accepts every notice: these tests watch
// the memory, not the protocol.
type notices struct{ handoff.Decode }

func (notices) Write(context.Context, []handoff.PageWrite) error { return nil }
func (notices) Abort(context.Context, *handoff.Abort) error      { return nil }
func (notices) Drained(context.Context, kv.ID) error             { return nil }
func (notices) Commit(context.Context, *handoff.Commit) error    { return nil }
func (notices) Cancel(context.Context, kv.ID) error              { return nil }
func (n notices) Reserve(context.Context, *handoff.Reserve) (*handoff.Reservation, error) {
	return nil, handoff.ErrRefused
}

// A decode worker restarted on the same shared path (restart-same-file):
// the writer maps the new incarnation when a reservation names it, writes
// for the crashed incarnation's reservations land in ITS memory (never the
// new pool's), and a reservation naming an incarnation the file does not
// hold is refused (I6 across restarts).
func TestRestartedDecodeIncarnation(t *testing.T) {
	geo := kv.Geometry{Layers: 2, KVDim: 8, PageSize: 4}
	path := filepath.Join(t.TempDir(), "kv.shm")
	newPool := func() (*kv.Pool, *handoff.Receiver) {
		p, err := kv.New(kv.Config{Geometry: geo, Pages: 4, SharedFile: path, Order: kv.LIFO})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p, handoff.NewReceiver(handoff.ReceiverConfig{PageSize: 4, OneSided: true, Lease: time.Second}, p)
	}
	t0 := time.Unix(1000, 0)
	oldPool, oldRecv := newPool()
	w, err := Open(path, geo, notices{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	oldRes, err := oldRecv.Reserve(t0, &handoff.Reserve{Handoff: kv.ID{1}, Tenant: "acme", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if oldRes.Incarnation == 0 || oldRes.Incarnation != oldPool.Incarnation() {
		t.Fatalf("reservation names incarnation %x, pool is %x", oldRes.Incarnation, oldPool.Incarnation())
	}
	if err := w.Register(oldRes); err != nil {
		t.Fatal(err)
	}
	// A write of the old incarnation is posted; then decode crashes and
	// restarts on the same path, and the write lands.
	stale := bytes.Repeat([]byte{0xA5}, geo.PageBytes())
	lands, err := w.Post([]handoff.PageWrite{{Handoff: kv.ID{1}, Block: 0, Page: oldRes.Pages[0], Slots: 4, Data: stale}})
	if err != nil || len(lands) != 1 {
		t.Fatalf("post: %d, %v", len(lands), err)
	}
	oldPool.Close()
	p, recv := newPool()
	res, err := recv.Reserve(t0, &handoff.Reserve{Handoff: kv.ID{2}, Tenant: "globex", PromptTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Incarnation == oldRes.Incarnation {
		t.Fatal("the restarted pool kept the crashed one's incarnation")
	}
	lands[0]() // the posted write lands after the restart
	o := kv.Owner{Tenant: "globex", ID: kv.ID{2}}
	if img, _, err := p.PageData(o, res.Pages[0]); err != nil || !bytes.Equal(img, make([]byte, geo.PageBytes())) {
		t.Fatalf("the crashed incarnation's write reached the restarted pool's page %d (%v)", res.Pages[0].Page, err)
	}
	// The new incarnation's reservation: the writer maps the new file.
	if err := w.Register(res); err != nil {
		t.Fatal(err)
	}
	good := bytes.Repeat([]byte{0x3C}, geo.PageBytes())
	if err := w.Write(context.Background(), []handoff.PageWrite{{Handoff: kv.ID{2}, Block: 0, Page: res.Pages[0], Slots: 4,
		Data: good, Checksum: handoff.Checksum(good)}}); err != nil {
		t.Fatal(err)
	}
	if img, _, _ := p.PageData(o, res.Pages[0]); !bytes.Equal(img, good) {
		t.Fatal("a write for the restarted pool did not reach it")
	}
	// A reservation of an incarnation the file does not hold is refused.
	forged := *res
	forged.Handoff, forged.Incarnation = kv.ID{3}, res.Incarnation^1
	if err := w.Register(&forged); !errors.Is(err, handoff.ErrBadWrite) {
		t.Fatalf("reservation of another incarnation: %v, want ErrBadWrite", err)
	}
}
