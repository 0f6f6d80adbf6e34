package tcp

import (
	"context"
	"errors"
	"hash/crc32"
	"io"
	"time"

	"sluice/internal/handoff"
)

// next reads the connection's next request frame. A Write frame on an
// unencrypted connection is read and applied here, page by page,
// and answered (streamWrites); next then returns a nil frame. Every other
// frame is read whole and returned for dispatch.
func (sc *sconn) next() (*frame, error) {
	c := sc.conn
	// An idle connection may wait forever for a header, but once a header
	// is in, its body must arrive within ReadTimeout.
	_ = c.nc.SetReadDeadline(time.Time{})
	f, n, err := c.fr.readHeader(c.rd())
	for err == nil && f.typ == tPing {
		// A heartbeat (heartbeat.go): read (and on an encrypted
		// connection open) its empty body, then wait for the next frame.
		if n != 0 {
			return nil, protoErr("ping frame of %d bytes", n)
		}
		if err = c.fr.readBody(c.rd(), f, 0); err == nil {
			f, n, err = c.fr.readHeader(c.rd())
		}
	}
	if err != nil {
		return nil, err
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.ReadTimeout))
	if f.typ == tWrite && !c.fr.encrypted() && f.stream != 0 {
		return nil, sc.streamWrites(f, n)
	}
	// Encrypted, nothing of a frame may be used before its tag verifies
	// over all of it (I12, I15): the whole frame is read first.
	if err := c.fr.readBody(c.rd(), f, n); err != nil {
		return nil, err
	}
	return f, nil
}

// streamWrites reads the body of a Write frame of n payload bytes and
// applies it. The metadata comes first (codec.go): it is read and checked
// against the frame CRC before any page byte is read, so a frame whose
// framing is damaged is refused whole, as one read in full would be. Then
// each page is read into a buffer the size of a page and handed to
// Decode.Write at once, while it is in cache, and Decode copies and hashes
// it from there (kv.WritePageSum): one pass over a page after the socket
// read instead of a frame-sized buffer leaving the cache between the read,
// the copy and the hash.
//
// Applying a batch page by page in order is exactly what Decode.Write does
// with the whole batch: the first failure fails the handoff closed and
// nothing after it is applied; the rest of the frame is read and dropped,
// so the connection stays aligned. The call is answered once, after the
// last page: OK only if every write was applied.
//
// A returned error is a protocol error (damaged framing, a truncated
// body): the connection closes, as for any bad frame. A record that does
// not decode in an intact frame is answered on its call (bad_message).
func (sc *sconn) streamWrites(f *frame, n int) error {
	var apply func([]handoff.PageWrite) error
	if d := sc.s.decode; d != nil {
		apply = func(ws []handoff.PageWrite) error { return d.Write(sc.ctx, ws) }
	}
	werr, err := readWrites(sc.rd(), f, n, &sc.page, apply)
	if err != nil {
		return err
	}
	if werr != nil {
		return sc.send(tError, f.stream, encError(werr))
	}
	return sc.send(tOK, f.stream)
}

// readWrites reads a Write frame's body of n bytes from r and hands its
// writes to apply in order: each write that carries page bytes alone, right
// after its bytes are read into *page (reused, grown as needed), and runs of
// writes without bytes together. apply nil means this server does not serve
// decode. It returns the service error to answer the call with (werr: the
// first refusal; nothing after it is applied, the rest of the frame is still
// read) or a protocol error (err: the connection must close).
func readWrites(r io.Reader, f *frame, n int, page *[]byte, apply func([]handoff.PageWrite) error) (werr, err error) {
	var head [4]byte
	if n < len(head) {
		return nil, protoErr("message truncated")
	}
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, truncated("truncated frame", err)
	}
	count, meta, err := writeCount(head[:], n)
	if err != nil {
		return nil, err
	}
	recs := make([]byte, meta-len(head)) // bounded by the frame limit
	if _, err := io.ReadFull(r, recs); err != nil {
		return nil, truncated("truncated frame", err)
	}
	c := crc32.Update(0, castagnoli, f.hdr12[:])
	c = crc32.Update(c, castagnoli, head[:])
	c = crc32.Update(c, castagnoli, recs)
	if c != f.crc {
		return nil, protoErr("frame checksum %08x, header says %08x", c, f.crc)
	}
	ws, lens, derr := decWriteRecords(count, recs)
	total := int64(meta)
	for _, l := range lens {
		total += int64(l)
	}
	if total != int64(n) {
		return nil, protoErr("write frame of %d bytes announces %d", n, total)
	}

	// Service-level refusals, and records that do not decode inside intact
	// framing (a bad message), are answered on the call; the pages are
	// still read off the wire, so the connection stays aligned.
	werr = derr
	if werr == nil && apply == nil {
		werr = handoff.ErrState.With("this worker does not serve the decode side")
	}
	for i := range ws {
		if werr == nil && ws[i].Handoff != ws[0].Handoff {
			werr = handoff.ErrProtocol.With("one Write call carries writes of two handoffs")
		}
	}
	pending := 0 // writes without data (one-sided notices), applied together
	flush := func(end int) {
		if werr == nil && end > pending {
			werr = apply(ws[pending:end])
		}
		pending = end
	}
	for i := range ws {
		if lens[i] == 0 {
			continue
		}
		flush(i)
		if cap(*page) < lens[i] {
			*page = make([]byte, lens[i])
		}
		buf := (*page)[:lens[i]]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, truncated("truncated frame", err)
		}
		if werr == nil {
			// Decode.Write has applied (copied) the page when it returns;
			// the buffer is reused for the next one.
			ws[i].Data = buf
			werr = apply(ws[i : i+1])
			ws[i].Data = nil
		}
		pending = i + 1
	}
	flush(len(ws))
	return werr, nil
}

// sealedWrites applies an encrypted Write frame whose records the reader
// left sealed (framer.deferOpen). The metadata record is opened first and
// decoded; each page record is opened by the decode side straight into
// the page it reserved (handoff.PageWrite.Open, kv.Pool.FillPageSum): no
// frame-sized plaintext, no copy. Nothing of a record is used before its
// tag verifies (I15): a page opened in place is marked written only after
// its tag verified, and scrubbed when it did not. Whatever the call did,
// every record it did not open is opened afterwards, so a frame with a
// record that does not verify closes the connection (ErrAuth), as a frame
// opened whole does; the handoff it wrote to has failed by then (I8).
//
// The frame's writes are handed on in one call: the decode side checks
// them and claims their pages under its locks, then opens the records
// into the pages without any lock, on every core but one (the decode
// step's: handoff.Writes.Open, handoff.OpenParallelism, kv.Pool.ClaimFill), so neither another handoff's calls nor this
// handoff's next frame wait for the cipher, and a frame's pages are
// opened at once instead of one after the other.
func (sc *sconn) sealedWrites(ctx context.Context, f *frame, d handoff.Decode, ok func(error) error) error {
	sw := f.sw
	f.sw, f.open = nil, nil
	ws, werr := sw.writes()
	if errors.Is(werr, handoff.ErrProtocol) || errors.Is(werr, handoff.ErrAuth) {
		return werr // the framing itself is damaged, or the metadata forged
	}
	for i := range ws {
		if werr == nil && ws[i].Handoff != ws[0].Handoff {
			werr = handoff.ErrProtocol.With("one Write call carries writes of two handoffs")
		}
	}
	if werr == nil {
		werr = d.Write(ctx, ws)
	}
	if err := sw.rest(); err != nil {
		return err
	}
	if f.pooled {
		// Every record is opened and the decode side is done with the
		// pages' records: nothing aliases the payload any more.
		putBuf(f.payload)
	}
	return ok(werr)
}
