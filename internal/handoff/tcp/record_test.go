package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"

	"sluice/internal/handoff"
	"sluice/internal/handoff/handofftest"
	"sluice/internal/kv"
)

// sealPair is a sending and a receiving framer under one direction's key,
// as a client and its server hold it after the handshake.
func sealPair() (tx, rx *framer) {
	c2s, s2c := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	tx = &framer{maxFrame: 1 << 20, version: maxVersion, isClient: true}
	rx = &framer{maxFrame: 1 << 20, version: maxVersion}
	tx.enableSeal(c2s, s2c)
	rx.enableSeal(c2s, s2c)
	return tx, rx
}

// noKeystreamReuse fails when a record of frame f was sealed with a
// keystream (its first 32 bytes: ciphertext XOR plaintext) that seen
// already holds, a nonce used twice under one key; it adds them to seen.
func noKeystreamReuse(t *testing.T, seen map[string]bool, f int, parts, cts [][]byte) {
	t.Helper()
	for i, p := range parts {
		ks := make([]byte, 32)
		for j := range ks {
			ks[j] = cts[i][j] ^ p[j]
		}
		if seen[string(ks)] {
			t.Fatalf("frame %d record %d reuses a keystream (a nonce under one key)", f, i)
		}
		seen[string(ks)] = true
	}
}

// records splits a sealed Write frame's body into its records' lengths
// and ciphertexts (tags included), by the wire format in frame.go.
func records(t *testing.T, frame []byte) (lens []int, cts [][]byte) {
	t.Helper()
	n := int(binary.BigEndian.Uint32(frame[8:]))
	b := frame[headerLen:]
	for got := 0; got < n; {
		l := int(binary.BigEndian.Uint32(b))
		lens, cts = append(lens, l), append(cts, b[4:4+l+tagLen])
		b, got = b[4+l+tagLen:], got+l
	}
	if len(b) != 0 {
		t.Fatalf("%d bytes after the records", len(b))
	}
	return lens, cts
}

// An encrypted Write frame is its metadata record and one record per page,
// each sealed under its own nonce: no two records of any frames share a
// keystream (GCM under a repeated nonce and key would, which gives away
// the XOR of two pages), across the key's ratchet too. The pages here are
// known to the test, so each record's keystream is its ciphertext XOR its
// plaintext.
func TestWriteRecordsNeverShareAKeystream(t *testing.T) {
	old := rekeyBytes
	rekeyBytes = 3 << 10 // a ratchet every few frames
	t.Cleanup(func() { rekeyBytes = old })
	tx, rx := sealPair()
	seen := map[string]bool{}
	page := func(k int) []byte { return bytes.Repeat([]byte{byte(k)}, 1024) }
	for f := range 8 {
		ws := []handoff.PageWrite{
			{Handoff: handofftest.ID(f), Block: 0, Slots: 4, Data: page(2 * f), Checksum: handoff.Checksum(page(2 * f))},
			{Handoff: handofftest.ID(f), Block: 1, Slots: 4, Data: page(2*f + 1), Checksum: handoff.Checksum(page(2*f + 1))},
		}
		parts, isData, err := encWrites(ws)
		if err != nil {
			t.Fatal(err)
		}
		bufs, err := tx.encode(maxVersion, tWrite, uint32(f+1), parts, isData)
		if err != nil {
			t.Fatal(err)
		}
		fb := bytes.Join(bufs, nil)
		if bytes.Contains(fb, page(2 * f)[:64]) {
			t.Fatal("page bytes in clear in an encrypted Write frame")
		}
		lens, cts := records(t, fb)
		if want := []int{len(parts[0]), 1024, 1024}; !slices.Equal(lens, want) {
			t.Fatalf("record lengths %v, want %v (metadata, then one per page)", lens, want)
		}
		noKeystreamReuse(t, seen, f, parts, cts)
		// The receiving side opens the same frame, in step.
		got, err := readOne(rx, fb)
		if err != nil {
			t.Fatalf("frame %d: %v", f, err)
		}
		if !bytes.Equal(got[0].Data, page(2*f)) || !bytes.Equal(got[1].Data, page(2*f+1)) {
			t.Fatalf("frame %d opened to other bytes", f)
		}
	}
	if tx.tx.keyNo == 0 || rx.rx.keyNo != tx.tx.keyNo {
		t.Fatalf("key ratchets: sender %d, receiver %d; want the same, > 0", tx.tx.keyNo, rx.rx.keyNo)
	}
}

// readOne reads and opens one encrypted Write frame with rx and decodes it.
func readOne(rx *framer, b []byte) ([]handoff.PageWrite, error) {
	f, err := rx.readFrame(bytes.NewReader(b), nil)
	if err != nil {
		return nil, err
	}
	if f.open != nil {
		if err := f.open(); err != nil {
			return nil, err
		}
	}
	return decWritesChecked(f)
}

// A frame's records are bound to their frame and their place in it: two
// records of the same length swapped, a record of one frame put in
// another, the frame replayed, or its header (the additional data of every
// record) altered: none opens (ErrAuth).
func TestWriteRecordsAreBoundToTheirPlace(t *testing.T) {
	mk := func(tx *framer, stream uint32) []byte {
		a, b := bytes.Repeat([]byte{0xa}, 512), bytes.Repeat([]byte{0xb}, 512)
		parts, isData, _ := encWrites([]handoff.PageWrite{
			{Handoff: handofftest.ID(1), Slots: 4, Data: a, Checksum: handoff.Checksum(a)},
			{Handoff: handofftest.ID(1), Block: 1, Slots: 4, Data: b, Checksum: handoff.Checksum(b)},
		})
		bufs, err := tx.encode(maxVersion, tWrite, stream, parts, isData)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Join(bufs, nil)
	}
	cases := map[string]func(tx, rx *framer) []byte{
		"swapped": func(tx, _ *framer) []byte {
			b := mk(tx, 1)
			_, cts := records(t, b)
			p1, p2 := bytes.Clone(cts[1]), bytes.Clone(cts[2])
			copy(cts[1], p2)
			copy(cts[2], p1)
			return b
		},
		"moved": func(tx, rx *framer) []byte {
			b1 := mk(tx, 1)
			if _, err := readOne(rx, b1); err != nil {
				t.Fatal(err)
			}
			b2 := mk(tx, 2)
			_, c1 := records(t, b1)
			_, c2 := records(t, b2)
			copy(c2[1], c1[1])
			return b2
		},
		"replayed": func(tx, rx *framer) []byte {
			b := mk(tx, 1)
			if _, err := readOne(rx, bytes.Clone(b)); err != nil {
				t.Fatal(err)
			}
			return b
		},
		"header": func(tx, _ *framer) []byte {
			b := mk(tx, 1)
			b[7] ^= 1 // the stream id
			return b
		},
		"metadata": func(tx, _ *framer) []byte {
			b := mk(tx, 1)
			b[headerLen+4+10] ^= 1 // inside the metadata record
			return b
		},
		"tag": func(tx, _ *framer) []byte {
			b := mk(tx, 1)
			b[len(b)-1] ^= 1 // the last record's tag
			return b
		},
	}
	for name, build := range cases {
		tx, rx := sealPair()
		if _, err := readOne(rx, build(tx, rx)); !errors.Is(err, handoff.ErrAuth) {
			t.Errorf("%s: %v, want ErrAuth", name, err)
		}
	}
}

// A Write frame whose records are each sealed correctly, by a holder of
// the session key, but do not follow the layout (a page split over two
// records, a record too many, more records than the frame can hold
// writes, an empty one) is refused as a protocol error, the connection
// closes, and no page byte reaches the pool.
func TestMisframedWriteRecordsRefused(t *testing.T) {
	cases := map[string]func(meta, page []byte) [][]byte{
		"split page":   func(meta, page []byte) [][]byte { return [][]byte{meta, page[:32], page[32:]} },
		"extra record": func(meta, page []byte) [][]byte { return [][]byte{meta, page, {1}} },
		"one byte each": func(meta, page []byte) [][]byte {
			var ps [][]byte
			for _, b := range append(bytes.Clone(meta), page...) {
				ps = append(ps, []byte{b})
			}
			return ps
		},
		"metadata split": func(meta, page []byte) [][]byte { return [][]byte{meta[:4], meta[4:], page} },
		// Two pages' bytes in records of one byte less and one more: the
		// count and the total agree with the metadata, the places do not.
		"shifted": func(meta, page []byte) [][]byte {
			two := append(bytes.Clone(page), page...)
			return [][]byte{meta, two[:len(page)-1], two[len(page)-1:]}
		},
	}
	for name, parts := range cases {
		t.Run(name, func(t *testing.T) {
			r := handofftest.New(t, handofftest.Options{})
			addr, _ := serve(t, Config{Secret: secret, Encrypt: true}, r.Server, nil)
			cl := dial(t, addr, Config{Secret: secret, Encrypt: true})
			id := handofftest.ID(1)
			res, err := cl.Reserve(context.Background(), &handoff.Reserve{Handoff: id, Tenant: "acme", PromptTokens: 8})
			if err != nil {
				t.Fatal(err)
			}
			page := bytes.Repeat([]byte{0x5a}, r.Geo.PageBytes())
			ws := []handoff.PageWrite{{Handoff: id, Page: res.Pages[0], Slots: 4, Data: page, Checksum: handoff.Checksum(page)}}
			if name == "shifted" {
				ws = append(ws, handoff.PageWrite{Handoff: id, Block: 1, Page: res.Pages[1], Slots: 4, Data: page, Checksum: handoff.Checksum(page)})
			}
			enc, _, err := encWrites(ws)
			if err != nil {
				t.Fatal(err)
			}
			c, nc := rawAuthed(t, addr, true)
			bufs, err := c.fr.encode(maxVersion, tWrite, 1, parts(enc[0], page))
			if err != nil {
				t.Fatal(err)
			}
			nc.Write(bytes.Join(bufs, nil))
			f, err := c.fr.readFrame(nc, nil)
			if err != nil || f.typ != tError || !errors.Is(decError(f.payload), handoff.ErrProtocol) {
				t.Fatalf("misframed write records: %v %+v", err, f)
			}
			// Records beyond what the frame's length can hold writes are
			// refused as they arrive, before they are buffered.
			if msg := decError(f.payload).Error(); name == "one byte each" && !strings.Contains(msg, "left") {
				t.Fatalf("one-byte records refused only after reading them all: %s", msg)
			}
			requireClosed(t, nc)
			if _, n, err := r.Decode.PageData(kv.Owner{Tenant: "acme", ID: id}, res.Pages[0]); err != nil || n != 0 {
				t.Fatalf("a misframed frame wrote %d slots (%v)", n, err)
			}
		})
	}
}

// FuzzSealedWriteRecords: a Write frame sealed by a holder of the session
// key (a peer past the handshake) with its payload cut into records
// anywhere. The reader either decodes exactly the writes that were sealed,
// the metadata in the first record and each page's bytes in one record of
// their own, or refuses the frame (a protocol error, or a bad message
// inside intact framing); it never panics.
func FuzzSealedWriteRecords(f *testing.F) {
	a, b := []byte{1, 2, 3}, []byte{4, 5, 6, 7}
	ws := []handoff.PageWrite{
		{Handoff: kv.ID{1}, Block: 0, Slots: 3, Data: a, Checksum: 7},
		{Handoff: kv.ID{1}, Block: 1, Slots: 3, Data: b, Checksum: 8},
		{Handoff: kv.ID{1}, Block: 2, Slots: 3, Placed: true, Checksum: 9},
	}
	parts, _, err := encWrites(ws)
	if err != nil {
		f.Fatal(err)
	}
	cuts := func(ps [][]byte) []byte {
		var c []byte
		for _, p := range ps {
			c = binary.BigEndian.AppendUint16(c, uint16(len(p)))
		}
		return c
	}
	payload := bytes.Join(parts, nil)
	f.Add(payload, cuts(parts))
	f.Add(payload, cuts([][]byte{payload}))
	f.Add(payload, []byte{0, 4, 0, 1})
	f.Fuzz(func(t *testing.T, payload, cuts []byte) {
		if len(payload) > 1<<14 {
			return
		}
		var parts [][]byte
		rest := payload
		for ; len(cuts) >= 2 && len(rest) > 0; cuts = cuts[2:] {
			n := min(int(binary.BigEndian.Uint16(cuts))+1, len(rest))
			parts, rest = append(parts, rest[:n]), rest[n:]
		}
		if len(rest) > 0 {
			parts = append(parts, rest)
		}
		tx, rx := sealPair()
		bufs, err := tx.encode(maxVersion, tWrite, 1, parts)
		if err != nil {
			return
		}
		fm, err := rx.readFrame(bytes.NewReader(bytes.Join(bufs, nil)), nil)
		if err != nil {
			if !errors.Is(err, handoff.ErrProtocol) {
				t.Fatalf("frame error %v is not a protocol error", err)
			}
			return
		}
		ws, err := decWritesChecked(fm)
		if err != nil {
			if !errors.Is(err, handoff.ErrProtocol) && !errors.Is(err, handoff.ErrBadMessage) {
				t.Fatalf("decode error %v is neither a protocol error nor a bad message", err)
			}
			return
		}
		re, _, err := encWrites(ws)
		if err != nil || !slices.EqualFunc(re, parts, bytes.Equal) {
			t.Fatalf("accepted records %d do not re-encode to what was sealed (%v)", len(parts), err)
		}
	})
}

// A big Write frame's records are sealed on two goroutines (sealFrame):
// the frame is byte for byte the one a single sealer makes in the same key
// state (each record under the nonce sealKeys took for it, whichever
// goroutine seals it), no two records share a keystream, across the key's
// ratchet too, and the receiver opens every frame in step.
func TestParallelSealedRecordsKeepTheirNonces(t *testing.T) {
	oldRekey, oldMin := rekeyBytes, parallelSealMin
	rekeyBytes = 20 << 10 // a ratchet every few frames
	t.Cleanup(func() { rekeyBytes, parallelSealMin = oldRekey, oldMin })
	par, rx := sealPair()
	one, _ := sealPair()
	seen := map[string]bool{}
	page := func(f, b int) []byte { return bytes.Repeat([]byte{byte(16*f + b + 1)}, 2048) }
	for f := range 12 {
		var ws []handoff.PageWrite
		for b := range 5 {
			ws = append(ws, handoff.PageWrite{Handoff: handofftest.ID(f), Block: b, Slots: 4, Data: page(f, b), Checksum: handoff.Checksum(page(f, b))})
		}
		parts, isData, err := encWrites(ws)
		if err != nil {
			t.Fatal(err)
		}
		parallelSealMin = 0
		pb, err := par.encode(maxVersion, tWrite, uint32(f+1), parts, isData)
		if err != nil {
			t.Fatal(err)
		}
		parallelSealMin = 1 << 62
		ob, err := one.encode(maxVersion, tWrite, uint32(f+1), parts, isData)
		if err != nil {
			t.Fatal(err)
		}
		fb := bytes.Join(pb, nil)
		if !bytes.Equal(fb, bytes.Join(ob, nil)) {
			t.Fatalf("frame %d sealed in parallel differs from the same frame sealed by one sealer", f)
		}
		_, cts := records(t, fb)
		noKeystreamReuse(t, seen, f, parts, cts)
		got, err := readOne(rx, fb)
		if err != nil {
			t.Fatalf("frame %d: %v", f, err)
		}
		for b := range ws {
			if !bytes.Equal(got[b].Data, page(f, b)) {
				t.Fatalf("frame %d page %d opened to other bytes", f, b)
			}
		}
	}
	if par.tx.keyNo == 0 || rx.rx.keyNo != par.tx.keyNo {
		t.Fatalf("key ratchets: sender %d, receiver %d; want the same, > 0", par.tx.keyNo, rx.rx.keyNo)
	}
}
