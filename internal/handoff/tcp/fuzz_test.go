package tcp

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
)

// FuzzFrameDecode feeds arbitrary bytes to the frame reader and every
// message decoder, as a peer past the handshake could. Nothing may panic,
// allocate beyond the frame, or fail with anything but a protocol error.
func FuzzFrameDecode(f *testing.F) {
	fr := framer{maxFrame: 1 << 16}
	add := func(typ byte, payload []byte) {
		bufs, _ := fr.encode(1, typ, 1, [][]byte{payload})
		f.Add(bytes.Join(bufs, nil))
	}
	id := kv.ID{1, 2, 3}
	add(tReserve, encReserve(&handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 9, MaxTokens: 3}))
	var e enc
	encReservation(&e, &handoff.Reservation{Handoff: id, Pages: []kv.PageRef{{Page: 3, Gen: 9}}, PageSize: 16, ExpectTokens: 9})
	add(tReservation, e.b)
	wparts, wdata := encWrites([]handoff.PageWrite{{Handoff: id, Block: 1, Page: kv.PageRef{Page: 4, Gen: 2}, Slots: 3, Data: []byte{1, 2, 3}, Checksum: 7}})
	{
		bufs, _ := fr.encode(1, tWrite, 1, wparts, wdata)
		f.Add(bytes.Join(bufs, nil))
	}
	add(tCommit, encCommit(&handoff.Commit{Handoff: id, Tokens: 9, Digest: []byte{1, 2}, FirstToken: 5}))
	add(tAbort, encAbort(&handoff.Abort{Handoff: id, Reason: "x"}))
	add(tDrained, encID(id))
	add(tStreamOpen, encStreamOpen(id, handoff.StreamParams{IgnoreEOS: true}))
	add(tToken, encToken(handoff.Token{ID: 3, Done: true, Finish: "stop", Err: handoff.ErrAborted}))
	add(tPrefill, encPrefill(&handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1, 2}, Reservation: &handoff.Reservation{Pages: []kv.PageRef{{}}}}))
	add(tPrefillRes, encPrefillRes(&handoff.PrefillResult{FirstToken: 1, Tokens: 2}))
	add(tError, encError(handoff.ErrCoverage))
	f.Add([]byte{1, 12, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, b []byte) {
		rd := framer{maxFrame: 1 << 16, version: 1}
		r := bytes.NewReader(b)
		for {
			fm, err := rd.readFrame(r, nil)
			if err != nil {
				if err != io.EOF && !errors.Is(err, handoff.ErrProtocol) {
					t.Fatalf("frame error %v is not a protocol error", err)
				}
				return
			}
			var derr error
			p := fm.payload
			switch fm.typ {
			case tReserve:
				_, derr = decReserve(p)
			case tReservation:
				_, derr = decReservation(p)
			case tWrite:
				var ws []handoff.PageWrite
				ws, derr = decWritesChecked(fm)
				if derr == nil {
					// Re-encoding a decoded batch gives the same bytes.
					parts, _ := encWrites(ws)
					if !bytes.Equal(bytes.Join(parts, nil), p) {
						t.Fatal("write batch does not round-trip")
					}
				}
			case tCommit:
				_, derr = decCommit(p)
			case tAbort:
				_, derr = decAbort(p)
			case tDrained, tCancel:
				_, derr = decID(p)
			case tStreamOpen:
				_, _, derr = decStreamOpen(p)
			case tToken:
				_, derr = decToken(p)
			case tPrefill:
				_, derr = decPrefill(p)
			case tPrefillRes:
				_, derr = decPrefillRes(p)
			case tError:
				if e := decError(p); e == nil {
					t.Fatal("an error frame decoded to no error")
				}
			}
			if derr != nil && !errors.Is(derr, handoff.ErrProtocol) {
				t.Fatalf("decode error %v is not a protocol error", derr)
			}
		}
	})
}
