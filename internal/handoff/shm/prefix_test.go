package shm

import (
	"bytes"
	"errors"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// The one-sided writer never places bytes into a block of the decode
// worker's cached prefix (Reservation.PrefixTokens): those pages are shared
// with other sequences, and once bytes land there nothing on the decode
// side can take them back. The write is refused (sealed_write) before any
// byte of its batch is placed; the blocks after the prefix are placed as
// usual. A reservation whose prefix is not whole pages inside the prompt
// is not registered at all.
func TestWriterRefusesCachedPrefixBlocks(t *testing.T) {
	r, path := rig(t)
	w := writer(t, r, path, notices{})
	id := handofftest.ID(1)
	o := kv.Owner{Tenant: "a", ID: id}
	refs, err := r.Decode.Reserve(o, 2)
	if err != nil {
		t.Fatal(err)
	}
	res := &handoff.Reservation{Handoff: id, Pages: refs, PageSize: r.Geo.PageSize, ExpectTokens: 8,
		Incarnation: r.Decode.Incarnation(), PrefixTokens: 4}
	bad := *res
	bad.Handoff, bad.PrefixTokens = handofftest.ID(2), 3
	if err := w.Register(&bad); !errors.Is(err, handoff.ErrBadMessage) {
		t.Fatalf("unaligned prefix registered: %v", err)
	}
	if err := w.Register(res); err != nil {
		t.Fatal(err)
	}
	before, _, err := r.Decode.PageData(o, refs[0])
	if err != nil {
		t.Fatal(err)
	}
	before = append([]byte(nil), before...)
	img := bytes.Repeat([]byte{0x5A}, r.Geo.PageBytes())
	pw := func(b int) handoff.PageWrite {
		return handoff.PageWrite{Handoff: id, Block: b, Page: refs[b], Slots: 4, Data: img, Checksum: handoff.Checksum(img)}
	}
	lands, err := w.Post([]handoff.PageWrite{pw(1), pw(0)})
	if !errors.Is(err, handoff.ErrSealedWrite) || lands != nil {
		t.Fatalf("a write into the cached prefix: %d placements, %v", len(lands), err)
	}
	if after, _, _ := r.Decode.PageData(o, refs[0]); !bytes.Equal(after, before) {
		t.Fatal("bytes landed in a cached block")
	}
	lands, err = w.Post([]handoff.PageWrite{pw(1)})
	if err != nil || len(lands) != 1 || lands[0] == nil {
		t.Fatalf("the block after the prefix: %v", err)
	}
	lands[0]()
	if got, _, _ := r.Decode.PageData(o, refs[1]); !bytes.Equal(got, img) {
		t.Fatal("the block after the prefix was not placed")
	}
	w.End(id)
	if err := r.Decode.Release(o, refs); err != nil {
		t.Fatal(err)
	}
	r.CheckDrained(t)
}
