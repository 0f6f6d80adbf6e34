package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/sample"
)

// FuzzFrameDecode feeds arbitrary bytes to the frame reader and every
// message decoder, as a peer past the handshake could. Nothing may panic or
// allocate beyond the frame; a bad frame is a protocol error, a bad body
// inside a good frame a bad message.
func FuzzFrameDecode(f *testing.F) {
	fr := framer{maxFrame: 1 << 16}
	add := func(typ byte, payload []byte) {
		bufs, _ := fr.encode(maxVersion, typ, 1, [][]byte{payload})
		f.Add(bytes.Join(bufs, nil))
	}
	id := kv.ID{1, 2, 3}
	add(tReserve, mustEnc(encReserve(&handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 9, MaxTokens: 3})))
	var e enc
	encReservation(&e, &handoff.Reservation{Handoff: id, Pages: []kv.PageRef{{Page: 3, Gen: 9}}, PageSize: 16, ExpectTokens: 9})
	add(tReservation, e.b)
	// The decode-side prefix cache's fields (protocol 6).
	add(tReserve, mustEnc(encReserve(&handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 3, MaxTokens: 3, Tokens: []int32{4, 5, 6}, CacheScope: "prompt_cache_key:1:k;"})))
	e = enc{}
	encReservation(&e, &handoff.Reservation{Handoff: id, Pages: []kv.PageRef{{Page: 3, Gen: 9}, {Page: 4, Gen: 1}}, PageSize: 16, ExpectTokens: 20, PrefixTokens: 16})
	add(tReservation, e.b)
	wparts, wdata, _ := encWrites([]handoff.PageWrite{{Handoff: id, Block: 1, Page: kv.PageRef{Page: 4, Gen: 2}, Slots: 3, Data: []byte{1, 2, 3}, Checksum: 7}})
	{
		bufs, _ := fr.encode(maxVersion, tWrite, 1, wparts, wdata)
		f.Add(bytes.Join(bufs, nil))
	}
	add(tCommit, mustEnc(encCommit(&handoff.Commit{Handoff: id, Tokens: 9, Digest: []byte{1, 2}, FirstToken: 5})))
	add(tAbort, mustEnc(encAbort(&handoff.Abort{Handoff: id, Reason: "x"})))
	add(tDrained, encID(id))
	add(tStreamOpen, mustEnc(encStreamOpen(id, handoff.StreamParams{IgnoreEOS: true})))
	add(tStreamOpen, mustEnc(encStreamOpen(id, handoff.StreamParams{Sampling: fullSampling(), Prompt: []int32{1, 2}})))
	add(tToken, mustEnc(encToken(handoff.Token{ID: 3, Done: true, Finish: "stop", Err: handoff.ErrAborted})))
	add(tToken, mustEnc(encToken(handoff.Token{ID: 3, Logprobs: fullLogprobs()})))
	add(tCommit, mustEnc(encCommit(&handoff.Commit{Handoff: id, Tokens: 9, Digest: []byte{1}, FirstToken: 5, FirstLogprobs: fullLogprobs()})))
	// The first token's timing (protocol 16).
	add(tCommit, mustEnc(encCommit(&handoff.Commit{Handoff: id, Tokens: 9, Digest: []byte{1}, FirstToken: 5, Timing: fullTiming()})))
	add(tToken, mustEnc(encToken(handoff.Token{ID: 3, Logprobs: fullLogprobs(), Timing: fullTiming()})))
	add(tPrefill, mustEnc(encPrefill(&handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1}, Sampling: fullSampling()})))
	add(tPrefill, mustEnc(encPrefill(&handoff.PrefillRequest{Handoff: id, Tenant: "a", Tokens: []int32{1, 2}, Reservation: &handoff.Reservation{Pages: []kv.PageRef{{}}}, Decode: "10.0.0.7:9002"})))
	add(tPrefillRes, mustEnc(encPrefillRes(&handoff.PrefillResult{FirstToken: 1, Tokens: 2})))
	add(tLoadRes, mustEnc(encLoad(&handoff.Load{FreePages: 3, TotalPages: 8, Running: 2, CachedPages: 4})))
	add(tError, encError(handoff.ErrCoverage))
	f.Add([]byte{maxVersion, 12, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})

	f.Fuzz(func(t *testing.T, b []byte) {
		rd := framer{maxFrame: 1 << 16, version: maxVersion}
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
			case tReservation:
				var res *handoff.Reservation
				res, derr = decReservation(p)
				if derr == nil && res.CheckPrefix() != nil {
					t.Fatalf("reservation with decode prefix %d (page size %d, %d tokens, %d pages) accepted", res.PrefixTokens, res.PageSize, res.ExpectTokens, len(res.Pages))
				}
			case tReserve:
				var rs *handoff.Reserve
				rs, derr = decReserve(p)
				if derr == nil && (len(rs.Tokens) != 0 && len(rs.Tokens) != rs.PromptTokens || len(rs.CacheScope) > handoff.MaxCacheScope) {
					t.Fatalf("reserve with %d ids for %d tokens, scope %d bytes accepted", len(rs.Tokens), rs.PromptTokens, len(rs.CacheScope))
				}
			case tWrite:
				var ws []handoff.PageWrite
				ws, derr = decWritesChecked(fm)
				if derr == nil {
					// Re-encoding a decoded batch gives the same bytes.
					parts, _, _ := encWrites(ws)
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
				var sid kv.ID
				var sp handoff.StreamParams
				sid, sp, derr = decStreamOpen(p)
				if derr == nil && !bytes.Equal(mustEnc(encStreamOpen(sid, sp)), p) {
					t.Fatal("stream open does not round-trip")
				}
			case tToken:
				var tok handoff.Token
				tok, derr = decToken(p)
				if derr == nil && tok.Logprobs != nil && len(tok.Logprobs.Top) > sample.MaxTopLogprobs {
					t.Fatal("more top logprobs than the bound")
				}
			case tPrefill:
				_, derr = decPrefill(p)
			case tPrefillRes:
				_, derr = decPrefillRes(p)
			case tLoadRes:
				var l *handoff.Load
				l, derr = decLoad(p)
				if derr == nil && (l.FreePages > l.TotalPages || l.CachedPages > l.TotalPages || !bytes.Equal(mustEnc(encLoad(l)), p)) {
					t.Fatalf("load report %+v accepted from %x", l, p)
				}
			case tError:
				if e := decError(p); e == nil {
					t.Fatal("an error frame decoded to no error")
				}
			}
			// Inside a frame that read whole, a body that does not decode
			// is a bad message (answered on its call); only a Write
			// frame's own framing (count, lengths, checksum) is a protocol error.
			if derr != nil && !errors.Is(derr, handoff.ErrBadMessage) && !(fm.typ == tWrite && errors.Is(derr, handoff.ErrProtocol)) {
				t.Fatalf("decode error %v is neither a bad message nor a write frame's framing error", derr)
			}
		}
	})
}

// FuzzStreamedWrites feeds arbitrary Write frame bodies to the streaming
// reader (readWrites), as a peer past the handshake could. The CRC is made
// to match whatever metadata prefix the input has, so the fuzzer gets past
// it. Nothing may panic or allocate beyond the frame; a failure is a
// protocol error; each write handed on carries exactly its bytes of the
// frame, in order, and only writes of one handoff are ever handed on.
func FuzzStreamedWrites(f *testing.F) {
	id := kv.ID{9}
	parts, _, _ := encWrites([]handoff.PageWrite{
		{Handoff: id, Block: 0, Page: kv.PageRef{Page: 1, Gen: 2}, Slots: 3, Data: []byte{1, 2, 3, 4}, Checksum: 7},
		{Handoff: id, Block: 1, Page: kv.PageRef{Page: 2, Gen: 3}, Slots: 1, Placed: true},
		{Handoff: id, Block: 2, Page: kv.PageRef{Page: 3, Gen: 4}, Slots: 2, Data: []byte{5, 6}},
	})
	f.Add(bytes.Join(parts, nil), false)
	f.Add([]byte{0, 0, 0, 0}, true)
	f.Add([]byte{0, 0, 0, 9, 1}, false)
	f.Fuzz(func(t *testing.T, body []byte, refuse bool) {
		fr := &frame{typ: tWrite, stream: 1}
		copy(fr.hdr12[:], []byte{maxVersion, tWrite, 0, 0, 0, 0, 0, 1})
		binary.BigEndian.PutUint32(fr.hdr12[8:], uint32(len(body)))
		if len(body) >= 4 {
			if _, meta, err := writeCount(body, len(body)); err == nil {
				fr.crc = crc32.Update(crc32.Update(0, castagnoli, fr.hdr12[:]), castagnoli, body[:meta])
			}
		}
		var got []byte
		var ids []kv.ID
		calls := 0
		apply := func(ws []handoff.PageWrite) error {
			calls++
			for _, w := range ws {
				got = append(got, w.Data...)
				ids = append(ids, w.Handoff)
			}
			if refuse && calls == 2 {
				return handoff.ErrChecksum.With("refused")
			}
			return nil
		}
		var page []byte
		werr, err := readWrites(bytes.NewReader(body), fr, len(body), &page, apply)
		whole := &frame{typ: tWrite, stream: 1, payload: body, hdr12: fr.hdr12, crc: fr.crc}
		_, wholeErr := decWritesChecked(whole)
		if err != nil {
			if !errors.Is(err, handoff.ErrProtocol) {
				t.Fatalf("error %v is not a protocol error", err)
			}
			if !errors.Is(wholeErr, handoff.ErrProtocol) {
				t.Fatalf("the streamed reader closes the connection (%v) where the whole-frame decoder does not (%v)", err, wholeErr)
			}
			return
		}
		if errors.Is(werr, handoff.ErrBadMessage) {
			// A record that does not decode inside intact framing: the
			// call is refused, nothing of it applied, the connection stays.
			if calls != 0 {
				t.Fatal("writes of a frame with an undecodable record were applied")
			}
			if !errors.Is(wholeErr, handoff.ErrBadMessage) {
				t.Fatalf("streamed reader says bad message, whole-frame decoder %v", wholeErr)
			}
			return
		}
		if refuse && calls >= 2 && !errors.Is(werr, handoff.ErrChecksum) {
			t.Fatalf("a refusal was lost: %v", werr)
		}
		if werr == nil {
			// Everything was applied: the applied bytes are the frame's
			// data section, in order.
			whole := &frame{typ: tWrite, stream: 1, payload: body, hdr12: fr.hdr12, crc: fr.crc}
			ws, derr := decWritesChecked(whole)
			if derr != nil {
				t.Fatalf("streamed what the whole-frame decoder refuses: %v", derr)
			}
			var want []byte
			for _, w := range ws {
				want = append(want, w.Data...)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("applied bytes differ from the frame's page data")
			}
		}
		for _, x := range ids {
			if x != ids[0] {
				t.Fatal("writes of two handoffs were applied from one frame")
			}
		}
		if cap(page) > len(body) {
			t.Fatalf("page buffer of %d bytes for a %d-byte frame", cap(page), len(body))
		}
	})
}

// mustEnc is an encoder's output for a message the test knows it can carry.
func mustEnc(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
