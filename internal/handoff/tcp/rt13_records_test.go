package tcp

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// Red team (session 20): the decode side now opens a Write frame's page
// records in parallel, straight into their claimed pages, after an
// earlier frame of the handoff was applied. The second frame's last
// record is altered in flight, so its other records verify and are
// opened into their pages (maybe before the bad one is looked at). The
// call fails (ErrAuth, the connection closes), the handoff fails closed,
// and no byte of either frame stays in the pool: every page is scrubbed
// and back on the free list, none counts as written (I8, I15, I7).
func TestRT13AlteredRecordAmongParallelOpens(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{Pages: 16})
	addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
	cl := dial(t, addr, Config{Secret: secret, Encrypt: true})
	ctx := context.Background()
	id := handofftest.ID(9)
	ps := r.Geo.PageSize
	res, err := cl.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 6 * ps})
	if err != nil {
		t.Fatal(err)
	}
	pattern := func(b int) []byte { return bytes.Repeat([]byte{byte(0xa0 + b)}, r.Geo.PageBytes()) }
	write := func(b int) handoff.PageWrite {
		d := pattern(b)
		return handoff.PageWrite{Handoff: id, Block: b, Page: res.Pages[b], Slots: ps, Data: d, Checksum: handoff.Checksum(d)}
	}
	if err := cl.Write(ctx, []handoff.PageWrite{write(0), write(1)}); err != nil {
		t.Fatal(err)
	}
	if s := r.Decode.Stats(); s.Filling != 2 {
		t.Fatalf("the first frame's pages: %+v", s)
	}
	parts, _, err := encWrites([]handoff.PageWrite{write(2), write(3), write(4), write(5)})
	if err != nil {
		t.Fatal(err)
	}
	c, nc := rawAuthed(t, addr, true)
	bufs, _ := c.fr.encode(maxVersion, tWrite, 1, parts)
	b := bytes.Join(bufs, nil)
	b[len(b)-tagLen-5] ^= 1 // inside the last page record
	nc.Write(b)
	f, err := c.fr.readFrame(nc, nil)
	if err != nil || f.typ != tError || !errors.Is(decError(f.payload), handoff.ErrAuth) {
		t.Fatalf("altered record: %v %+v", err, f)
	}
	requireClosed(t, nc)
	if err := r.Recv.Err(id); err == nil {
		t.Fatal("the handoff survived an altered record")
	}
	if s := r.Decode.Stats(); s.Filling != 0 || s.Sealed != 0 || s.Reserved != 0 {
		t.Fatalf("pages of the failed handoff still held or written: %+v", s)
	}
	if err := r.Decode.CheckDrained(); err != nil {
		t.Fatal(err)
	}
	r.Decode.SetChecks(false) // read the pages' memory whatever their state
	o := kv.Owner{Tenant: "acme", ID: id}
	for i, ref := range res.Pages {
		mem, _, err := r.Decode.PageData(o, ref)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		for blk := range 6 {
			if bytes.Contains(mem, pattern(blk)[:32]) {
				t.Fatalf("page %d still holds block %d's bytes", i, blk)
			}
		}
	}
}
