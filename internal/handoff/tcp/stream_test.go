package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// A Write frame is applied page by page as it is read (streamWrites). The
// checks a frame read whole got must all still hold: damaged framing is
// refused before any page is applied and closes the connection; a refused
// write fails its handoff, nothing after it in the frame is applied, the
// call gets the error and the connection stays aligned for the next call.
func TestStreamedWriteFrames(t *testing.T) {
	r := handofftest.New(t, handofftest.Options{})
	addr, _ := serve(t, Config{Secret: secret, ReadTimeout: 300 * time.Millisecond}, r.Server, nil)
	ctx := context.Background()
	pb := r.Geo.PageBytes()
	reserve := func(id kv.ID, tokens int) (*handoff.Reservation, *handoff.PoolSource) {
		t.Helper()
		src := r.Sequence(t, id, "acme", tokens, 3)
		res, err := r.Server.Reserve(ctx, &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		return res, src
	}
	writes := func(id kv.ID, res *handoff.Reservation, src *handoff.PoolSource) []handoff.PageWrite {
		var ws []handoff.PageWrite
		for b := range res.Pages {
			d, n, _ := src.Page(b)
			ws = append(ws, handoff.PageWrite{Handoff: id, Block: b, Page: res.Pages[b], Slots: n,
				Data: append([]byte(nil), d...), Checksum: handoff.Checksum(d)})
		}
		return ws
	}
	encFrame := func(c *conn, stream uint32, ws []handoff.PageWrite) []byte {
		parts, isData, _ := encWrites(ws)
		bufs, err := c.fr.encode(maxVersion, tWrite, stream, parts, isData)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Join(bufs, nil)
	}
	reply := func(c *conn, nc interface{ Read([]byte) (int, error) }) (*frame, error) {
		t.Helper()
		return c.fr.readFrame(nc, nil)
	}
	written := func(res *handoff.Reservation, b int) bool {
		// Only for pages of a live handoff: a read of a released page is
		// itself a violation.
		_, n, err := r.Decode.PageData(kv.Owner{Tenant: "acme", ID: res.Handoff}, res.Pages[b])
		return err == nil && n > 0
	}

	t.Run("the third of three writes is refused: the call fails, the handoff fails closed, the connection lives", func(t *testing.T) {
		id := handofftest.ID(1)
		res, src := reserve(id, 12)
		c, nc := rawAuthed(t, addr, false)
		ws := writes(id, res, src)
		ws[2].Data[7] ^= 1 // only the page checksum can tell
		if _, err := nc.Write(encFrame(c, 1, ws)); err != nil {
			t.Fatal(err)
		}
		f, err := reply(c, nc)
		if err != nil || f.typ != tError || f.stream != 1 || !errors.Is(decError(f.payload), handoff.ErrChecksum) {
			t.Fatalf("reply %v %+v, want ErrChecksum on call 1", err, f)
		}
		if e := decError(f.payload); !strings.Contains(e.Error(), "block 2") {
			t.Fatalf("refused %v, want block 2 refused (blocks 0 and 1 are good)", e)
		}
		// The handoff failed closed: the two pages it had written were
		// released (I8), none is left filling.
		if st := r.Decode.Stats(); st.Filling != 0 {
			t.Fatalf("pages of a failed handoff still in use: %+v", st)
		}
		// Aligned: the next call on the same connection is served.
		res2, src2 := reserve(handofftest.ID(2), 4)
		if _, err := nc.Write(encFrame(c, 2, writes(handofftest.ID(2), res2, src2))); err != nil {
			t.Fatal(err)
		}
		if f, err := reply(c, nc); err != nil || f.typ != tOK || f.stream != 2 {
			t.Fatalf("next call after a refused write: %v %+v", err, f)
		}
		if !written(res2, 0) {
			t.Fatal("the next call's page was not applied")
		}
		r.Server.Abort(ctx, &handoff.Abort{Handoff: handofftest.ID(2)})
		r.ReleaseSource(t, src)
		r.ReleaseSource(t, src2)
	})

	t.Run("writes of two handoffs in one frame: refused on the call, nothing applied", func(t *testing.T) {
		a, b := handofftest.ID(3), handofftest.ID(4)
		resA, srcA := reserve(a, 4)
		resB, srcB := reserve(b, 4)
		c, nc := rawAuthed(t, addr, false)
		ws := append(writes(a, resA, srcA), writes(b, resB, srcB)...)
		nc.Write(encFrame(c, 5, ws))
		f, err := reply(c, nc)
		if err != nil || f.typ != tError || f.stream != 5 || !errors.Is(decError(f.payload), handoff.ErrProtocol) {
			t.Fatalf("reply %v %+v, want ErrProtocol on call 5", err, f)
		}
		if written(resA, 0) || written(resB, 0) {
			t.Fatal("a write of a two-handoff frame was applied")
		}
		nc.Write(encFrame(c, 6, writes(b, resB, srcB)))
		if f, err := reply(c, nc); err != nil || f.typ != tOK {
			t.Fatalf("next call: %v %+v", err, f)
		}
		r.Server.Abort(ctx, &handoff.Abort{Handoff: a})
		r.Server.Abort(ctx, &handoff.Abort{Handoff: b})
		r.ReleaseSource(t, srcA)
		r.ReleaseSource(t, srcB)
	})

	for i, tc := range []struct {
		name string
		mod  func(b []byte) []byte // the encoded frame
		want string
	}{
		// The metadata is covered by the CRC: a flipped slot count is
		// refused before a page byte is read.
		{"metadata flipped", func(b []byte) []byte {
			b[headerLen+4+16+8+4+8+7] ^= 1
			return b
		}, "checksum"},
		// The frame is shorter than its writes say: a length in the header
		// that disagrees with the metadata.
		{"frame length disagrees with the writes", func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[8:], binary.BigEndian.Uint32(b[8:])-1)
			meta := 4 + writeRecLen*int(binary.BigEndian.Uint32(b[headerLen:]))
			c := crc32.Update(crc32.Update(0, castagnoli, b[:12]), castagnoli, b[headerLen:headerLen+meta])
			binary.BigEndian.PutUint32(b[12:], c) // framing intact, lengths not
			return b[:len(b)-1]
		}, "announces"},
		{"body truncated in the second page", func(b []byte) []byte {
			return b[:len(b)-pb/2]
		}, "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := handofftest.ID(7 + i)
			res, src := reserve(id, 8)
			c, nc := rawAuthed(t, addr, false)
			nc.Write(tc.mod(encFrame(c, 1, writes(id, res, src))))
			f, err := reply(c, nc)
			if err != nil || f.typ != tError || f.stream != 0 {
				t.Fatalf("%v %+v, want a connection-level error frame", err, f)
			}
			if e := decError(f.payload); !errors.Is(e, handoff.ErrProtocol) || !strings.Contains(e.Error(), tc.want) {
				t.Fatalf("error %v, want a protocol error mentioning %q", e, tc.want)
			}
			requireClosed(t, nc)
			if tc.want != "truncated" && written(res, 0) {
				t.Fatal("a page of a frame with damaged framing was applied")
			}
			r.Server.Abort(ctx, &handoff.Abort{Handoff: id})
			r.ReleaseSource(t, src)
		})
	}
	r.CheckDrained(t)
}
