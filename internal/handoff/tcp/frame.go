package tcp

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sync"

	"sluice/internal/handoff"
)

// Wire format of one frame (all integers big-endian):
//
//	0  version  u8    negotiated protocol version (handshake frames: helloVersion)
//	1  type     u8    frame type, see the constants
//	2  flags    u16   must be 0
//	4  stream   u32   call id; 0 = connection-level
//	8  length   u32   payload bytes, <= the receiver's MaxFrame
//	12 crc      u32   CRC32C over bytes 0..11 and the payload, except that in
//	                  Write frames the page-data segments are left out: each
//	                  carries its own checksum (PageWrite.Checksum), which the
//	                  Receiver verifies before the bytes are used. Hashing
//	                  them twice would halve the transport's throughput for
//	                  no extra protection; lengths and all metadata stay
//	                  covered, so framing can never be misread. A Write
//	                  payload puts all metadata before the page data
//	                  (codec.go), so its CRC is checked before any page
//	                  byte is read (stream.go).
//	16 payload
//	   tag      16 B  only after the handshake on an encrypted connection
//	                  (seal.go): the payload is AES-256-GCM ciphertext under
//	                  the direction's session key, the header its additional
//	                  data, and this its tag. The crc field is then 0: a CRC
//	                  of the plaintext in clear would leak 32 bits of it, and
//	                  the tag is the stronger check.
//
// An encrypted Write frame (version 11) is sealed in records instead of
// whole, so neither side makes a pass over the page bytes that the plain
// path does not (seal.go, "Records"): after the header come
//
//	len      u32   the record's plaintext length, >= 1, in clear
//	record   len B ciphertext, then its 16-byte tag; additional data:
//	               the frame header and this len
//
// repeated: the first record is the metadata prefix (count and records,
// codec.go), then one record per write that carries page data, exactly its
// bytes, in record order. The lengths add up to the header's length, which
// still counts plaintext payload bytes (so MaxFrame means the same thing
// encrypted or not); the body on the wire is 20 bytes longer per record.
//
// A frame failing any check (truncated, oversized, unknown type or
// version, bad checksum or MAC) is a protocol error: the reader reports it,
// the peer is told when possible, and the connection is closed, since
// nothing after a bad frame can be trusted to be aligned. A frame that
// passes every check but whose body does not decode (a field out of range,
// a truncated or overlong message) is a different thing: the framing held,
// so only that call is answered, with bad_message, and the connection that
// every tenant's calls share stays up.
const headerLen = 16

// Versions this build speaks. Negotiation picks the highest common one.
// Version 2 added model fingerprints (Hello, HelloAck, Reserve,
// Reservation, Prefill; I13) and sampling settings, prompt ids and
// logprobs (StreamOpen, Prefill, Commit, Token): a version-1 build would
// misread those frames, so the two refuse each other at the handshake
// (ErrVersion). Version 3 added a resumed request's earlier tokens
// (StreamOpen Generated, Prefill SampleOffset; preemption). Version 4
// added the prefix cache's fields (Prefill CacheScope, PrefillResult
// CachedTokens). Version 5 added the cluster's fields (Prefill Decode,
// the name of the decode worker to push to; the Load request and reply).
// Version 6 added the decode-side prefix cache (Reserve Tokens and
// CacheScope, Reservation PrefixTokens, Load CachedPages). Version 7
// added each role's KV page type to Hello and HelloAck (kv_type_mismatch).
// Version 8 added the ephemeral X25519 keys to Hello and HelloAck and
// replaced the per-frame MAC with per-frame encryption (seal.go, I15): a
// version-7 peer is refused at the handshake (ErrVersion). Version 9
// added the worker's context to the Load reply (the router vets prefill
// workers' context as it does decode workers', I2). Version 10 added the
// heartbeat frame (Ping, heartbeat.go). Version 11 seals an encrypted
// Write frame in records (one for the metadata, one per page) instead of
// whole: a version-10 peer would fail to open it, so the two refuse each
// other at the handshake. Version 12 added the tenant's weight and the
// no-revoke flag to Reserve (the decode worker's KV quota).
// A close frame (StreamClose) on a Prefill call's id stops that call (the
// router gave the prompt up): no frame's layout changed, and a worker
// built before ignores it (the prompt then runs on until decode refuses
// its next write), so the version stayed. Version 13 added the close
// frame's acknowledgement (CloseAck): the worker answers a close frame on
// a live Prefill call at once, from its reader, so the router tells a
// worker that stopped reading (no acknowledgement: the connection is
// closed) from one whose step runs long (acknowledged: the connection
// stays; Client.roundTripCancel). A version-12 router would take the
// acknowledgement for the call's reply, so the two refuse each other.
// Version 14 added each end's call bound to Hello and HelloAck (a client
// keeps to the smaller; a version-13 end assumes 64), refusing version 13.
// Version 15 added the tenant's weight to PrefillRequest (the prefill
// worker's calls to decode take call slots by it), refusing version 14.
// Version 16 added the first token's Timing to Commit and Token (the
// workers' parts of its time, for the router's log and metrics),
// refusing version 15.
// Bump maxVersion whenever a frame's layout changes.
const (
	minVersion = 16
	maxVersion = 16
	// helloVersion is the version field of the handshake frames (Hello,
	// HelloAck, Auth, AuthOK and an Error before them). It stays 1 in
	// every build, so any two builds can read each other's Hello and the
	// refusal that answers it.
	helloVersion = 1
)

// Frame types.
const (
	tHello       = 1
	tHelloAck    = 2
	tAuth        = 3
	tAuthOK      = 4
	tReserve     = 10
	tReservation = 11
	tWrite       = 12
	tCommit      = 13
	tAbort       = 14
	tDrained     = 15
	tCancel      = 16
	tStreamOpen  = 17
	tToken       = 18
	tStreamClose = 19
	tPrefill     = 20
	tPrefillRes  = 21
	tLoad        = 22
	tLoadRes     = 23
	// tPing = 24: heartbeat.go
	// tCloseAck: the server read a close frame on a live Prefill call
	// and is stopping it (empty; version 13).
	tCloseAck = 25
	tOK       = 30
	tError    = 31
)

func knownType(t byte) bool {
	switch t {
	case tHello, tHelloAck, tAuth, tAuthOK, tReserve, tReservation, tWrite, tCommit, tAbort,
		tDrained, tCancel, tStreamOpen, tToken, tStreamClose, tPrefill, tPrefillRes, tLoad, tLoadRes, tOK, tError, tPing, tCloseAck:
		return true
	}
	return false
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type frame struct {
	version byte
	typ     byte
	stream  uint32
	payload []byte
	// Write frames: the CRC is checked by decWritesChecked, which knows
	// where the page-data segments are.
	hdr12  [12]byte
	crc    uint32
	pooled bool // payload came from bufPool; return it with putBuf
	// sealed: the payload was decrypted and its tag verified (an
	// encrypted connection); the header carries no CRC to check.
	sealed bool
	// open, when set, decrypts and verifies the payload (a Write frame
	// whose opening was deferred to its call's goroutine, framer.deferOpen);
	// the payload is ciphertext until it returns nil.
	open func() error
	// recs: an encrypted Write frame's records (the wire format above),
	// each its plaintext once open returned nil; payload is then only the
	// buffer they live in (for putBuf).
	recs [][]byte
	// sw: an encrypted Write frame whose opening was deferred, for a call
	// that opens its page records straight into the pool
	// (sealedWrite.writes); nil once open ran.
	sw *sealedWrite
}

// bufPool recycles the large payload buffers of Write frames: allocating
// (and zeroing) megabytes per batch cost a tenth of the throughput.
var bufPool sync.Pool

func getBuf(n int) ([]byte, bool) {
	if n < 64<<10 {
		return make([]byte, n), false
	}
	if b, ok := bufPool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n], true
	}
	return make([]byte, n), true
}

func putBuf(b []byte) { bufPool.Put(&b) }

func protoErr(format string, args ...any) error {
	return handoff.ErrProtocol.With(format, args...)
}

// errCutShort marks a frame whose connection failed in the middle of it:
// a read of its header or body that ended (EOF, reset, timeout, closed)
// after the frame began. The peer sent nothing malformed; the link broke.
// A server still answers it as a protocol error (its framing is lost), but
// a client's calls and streams fail with ErrTransport (Client.fail), as for
// a connection lost between frames: a decode worker killed while a frame
// was half out (its kernel resets the connection and drops the rest) is
// a transport failure, after which a stream migrates and a Reserve's
// outcome is unknown, not a peer's protocol violation.
var errCutShort = errors.New("the connection ended in the middle of a frame")

// truncated is the error of a frame's read that failed after the frame
// began: a protocol error that errors.Is errCutShort.
func truncated(what string, err error) error {
	return fmt.Errorf("%w (%w)", protoErr("%s: %v", what, err), errCutShort)
}

// framer reads and writes frames on one connection direction pair. The
// sealing state (seal.go) is set after the handshake.
type framer struct {
	maxFrame  int  // largest payload this side accepts
	peerFrame int  // largest payload the peer accepts (0: unknown, use maxFrame)
	version   byte // 0 until negotiated: then every frame must carry it
	tx, rx    *dirKey
	isClient  bool
	hdr       [headerLen]byte
	// deferOpen: Write frames are opened by their call's goroutine
	// (frame.open), not by the reader (the server's connections).
	deferOpen bool
}

// encrypted reports whether frames are sealed (after the handshake).
func (f *framer) encrypted() bool { return f.tx != nil }

// enableSeal switches on frame encryption with the two directions' keys.
func (f *framer) enableSeal(c2s, s2c []byte) {
	if f.isClient {
		f.tx, f.rx = newDirKey(c2s, 'C'), newDirKey(s2c, 'S')
	} else {
		f.tx, f.rx = newDirKey(s2c, 'S'), newDirKey(c2s, 'C')
	}
}

// sealKey is the nonce and key one record is sealed or opened under.
type sealKey struct {
	nonce [12]byte
	aead  cipher.AEAD
}

// sealKeys takes from the sending direction the nonces (and keys) of a
// frame of type typ with payload parts of n bytes: one for the whole
// payload, or for a Write frame one per non-empty part (its records). The
// caller holds whatever orders frames on the wire (conn.smu); sealFrame
// may then run anywhere.
func (f *framer) sealKeys(typ byte, parts [][]byte, n int) []sealKey {
	if typ != tWrite {
		nonce, aead := f.tx.next(n)
		return []sealKey{{nonce, aead}}
	}
	ks := make([]sealKey, 0, len(parts))
	for _, p := range parts {
		if len(p) > 0 {
			nonce, aead := f.tx.next(len(p))
			ks = append(ks, sealKey{nonce, aead})
		}
	}
	return ks
}

// sealFrame returns one buffer holding the header hdr and the sealed
// payload (parts, n bytes) under ks (sealKeys). A frame other than Write
// is copied in and sealed in place (these are small); a Write frame's
// records are sealed straight from its parts, the pool's pages, into the
// buffer, so page bytes are read once, by the cipher. The buffer comes
// from getBuf (conn.sendSealed returns it once written).
func sealFrame(hdr []byte, typ byte, parts [][]byte, n int, ks []sealKey) []byte {
	if typ != tWrite {
		buf, _ := getBuf(headerLen + n + tagLen)
		buf = append(buf[:0], hdr...)
		for _, p := range parts {
			buf = append(buf, p...)
		}
		return ks[0].aead.Seal(buf[:headerLen], ks[0].nonce[:], buf[headerLen:], hdr)
	}
	buf, _ := getBuf(headerLen + n + len(ks)*recordOverhead)
	buf = buf[:headerLen+n+len(ks)*recordOverhead]
	copy(buf, hdr)
	// Each record's place in the frame is known before any is sealed, so
	// the records can be sealed in any order, on any goroutine: record k
	// is always sealed under ks[k], the nonce sealKeys took for it.
	type rec struct {
		p   []byte
		off int
	}
	recs := make([]rec, 0, len(ks))
	off := headerLen
	for _, p := range parts {
		if len(p) > 0 {
			recs = append(recs, rec{p, off})
			off += recordOverhead + len(p)
		}
	}
	seal := func(k int) {
		r := recs[k]
		var ad [headerLen + 4]byte
		copy(ad[:], hdr)
		binary.BigEndian.PutUint32(ad[headerLen:], uint32(len(r.p)))
		copy(buf[r.off:], ad[headerLen:])
		dst := buf[r.off+4 : r.off+4 : r.off+4+len(r.p)+tagLen]
		ks[k].aead.Seal(dst, ks[k].nonce[:], r.p, ad[:])
	}
	if n < parallelSealMin || len(recs) < 3 {
		for k := range recs {
			seal(k)
		}
		return buf
	}
	// A big frame: its records are sealed on two goroutines (the second
	// takes the second half of the page records), so the cipher runs on
	// two cores while the connection writes the frame before it.
	half := 1 + (len(recs)-1)/2
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := half; k < len(recs); k++ {
			seal(k)
		}
	}()
	for k := range half {
		seal(k)
	}
	<-done
	return buf
}

// parallelSealMin is the Write frame payload from which its records are
// sealed on two goroutines (sealFrame). A variable so a test can lower it.
var parallelSealMin = 512 << 10

// recordOverhead is what sealing in records adds per record: its length
// and its tag.
const recordOverhead = 4 + tagLen

func errNoOpen() error {
	return handoff.ErrAuth.With("frame does not decrypt under the session key (altered, replayed or injected)")
}

// header builds a frame header (the CRC left zero) after checking the
// payload of n bytes against the peer's limit.
func (f *framer) header(version, typ byte, stream uint32, n int) ([]byte, error) {
	limit := f.maxFrame
	if f.peerFrame > 0 {
		limit = f.peerFrame
	}
	if n > limit {
		// Refused before a byte is sent: the connection stays usable.
		return nil, protoErr("frame of %d bytes exceeds the peer's limit of %d; lower the batch size", n, limit)
	}
	hdr := make([]byte, headerLen)
	hdr[0], hdr[1] = version, typ
	binary.BigEndian.PutUint32(hdr[4:], stream)
	binary.BigEndian.PutUint32(hdr[8:], uint32(n))
	return hdr, nil
}

// encode fills the header and returns the buffers to write: header and
// payload parts (not copied), or, on an encrypted connection, one buffer
// holding header, ciphertext and tag.
// data marks the parts that are page data (left out of the CRC); nil = none.
func (f *framer) encode(version, typ byte, stream uint32, parts [][]byte, data ...[]bool) (net [][]byte, err error) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	hdr, err := f.header(version, typ, stream, n)
	if err != nil {
		return nil, err
	}
	if f.encrypted() {
		return [][]byte{sealFrame(hdr, typ, parts, n, f.sealKeys(typ, parts, n))}, nil
	}
	c := crc32.Update(0, castagnoli, hdr[:12])
	for i, p := range parts {
		if len(data) > 0 && data[0][i] {
			continue
		}
		c = crc32.Update(c, castagnoli, p)
	}
	binary.BigEndian.PutUint32(hdr[12:], c)
	out := make([][]byte, 0, len(parts)+1)
	out = append(out, hdr)
	out = append(out, parts...)
	return out, nil
}

// readFrame reads one frame, checking everything the header promises.
// onHeader runs once the header is in (to arm the body read deadline).
func (f *framer) readFrame(r io.Reader, onHeader func()) (*frame, error) {
	fr, n, err := f.readHeader(r)
	for err == nil && fr.typ == tPing && f.version != 0 {
		// A heartbeat (heartbeat.go): its life sign is the read itself.
		if n != 0 {
			return nil, protoErr("ping frame of %d bytes", n)
		}
		if err = f.readBody(r, fr, 0); err == nil {
			fr, n, err = f.readHeader(r)
		}
	}
	if err != nil {
		return nil, err
	}
	if onHeader != nil {
		onHeader()
	}
	if err := f.readBody(r, fr, n); err != nil {
		return nil, err
	}
	return fr, nil
}

// readHeader reads and checks a frame header and returns the frame with
// its payload length; the body is still on the wire.
func (f *framer) readHeader(r io.Reader) (*frame, int, error) {
	hdr := f.hdr[:]
	if _, err := io.ReadFull(r, hdr); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, 0, truncated("truncated frame header", err)
		}
		return nil, 0, err
	}
	v, typ := hdr[0], hdr[1]
	if f.version != 0 && v != f.version {
		return nil, 0, protoErr("frame version %d, negotiated %d", v, f.version)
	}
	if f.version == 0 && v != helloVersion {
		return nil, 0, protoErr("handshake frame version %d, want %d", v, helloVersion)
	}
	if !knownType(typ) {
		return nil, 0, protoErr("unknown frame type %d", typ)
	}
	if flags := binary.BigEndian.Uint16(hdr[2:]); flags != 0 {
		return nil, 0, protoErr("unknown frame flags %#x", flags)
	}
	n := binary.BigEndian.Uint32(hdr[8:])
	if int64(n) > int64(f.maxFrame) {
		return nil, 0, protoErr("frame of %d bytes exceeds the limit of %d", n, f.maxFrame)
	}
	fr := &frame{version: v, typ: typ, stream: binary.BigEndian.Uint32(hdr[4:]), crc: binary.BigEndian.Uint32(hdr[12:])}
	copy(fr.hdr12[:], hdr[:12])
	return fr, int(n), nil
}

// readBody reads the n payload bytes of fr (and, encrypted, its tag) and
// checks them; an encrypted payload is decrypted in place.
func (f *framer) readBody(r io.Reader, fr *frame, n int) error {
	if f.encrypted() {
		return f.readSealed(r, fr, n)
	}
	var buf []byte
	if fr.typ == tWrite {
		buf, fr.pooled = getBuf(n)
	} else {
		buf = make([]byte, n)
	}
	fr.payload = buf
	if _, err := io.ReadFull(r, buf); err != nil {
		return truncated("truncated frame", err)
	}
	if fr.typ != tWrite {
		c := crc32.Update(0, castagnoli, fr.hdr12[:])
		c = crc32.Update(c, castagnoli, buf)
		if c != fr.crc {
			return protoErr("frame checksum %08x, header says %08x", c, fr.crc)
		}
	}
	return nil
}

// readSealed reads an encrypted frame's ciphertext and tag and opens it
// with the header as additional data: nothing of a frame is used before
// its tag verifies over all of it (I12, I15). A Write frame is read in
// records (readSealedWrite).
func (f *framer) readSealed(r io.Reader, fr *frame, n int) error {
	if fr.crc != 0 {
		return protoErr("encrypted frame with a checksum field of %08x", fr.crc)
	}
	if fr.typ == tWrite {
		return f.readSealedWrite(r, fr, n)
	}
	buf := make([]byte, n+tagLen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return truncated("truncated frame", err)
	}
	nonce, aead := f.rx.next(n)
	pt, err := aead.Open(buf[:0], nonce[:], buf, f.hdr[:])
	if err != nil {
		return errNoOpen()
	}
	fr.payload, fr.sealed = pt, true
	return nil
}

// readSealedWrite reads the records of an encrypted Write frame of n
// plaintext bytes (the wire format above) into one buffer and takes their
// nonces, in read order. They are opened by fr.open: on the call's
// goroutine when the framer defers it (so the reader goes on to the next
// frame while this one decrypts), else at once. Nothing of a record is
// used before its tag verifies (I15): the call decodes the frame only
// once every record opened.
func (f *framer) readSealedWrite(r io.Reader, fr *frame, n int) error {
	if n < 4 {
		return protoErr("write frame of %d bytes", n)
	}
	// A frame carries at most one record per write plus the metadata's,
	// and the metadata of c writes takes 4 + c*writeRecLen bytes: a bound
	// on what a peer can make this side buffer beyond the frame limit.
	maxRecs := 1 + (n-4)/writeRecLen
	buf, _ := getBuf(n + min(maxRecs, 64)*tagLen)
	buf = buf[:0]
	var offs, lens []int
	for left := n; left > 0; {
		var lb [4]byte
		if _, err := io.ReadFull(r, lb[:]); err != nil {
			return truncated("truncated frame", err)
		}
		l := binary.BigEndian.Uint32(lb[:])
		if l == 0 || int64(l) > int64(left) || len(lens) == maxRecs {
			return protoErr("write frame record %d of %d bytes with %d of %d left", len(lens), l, left, n)
		}
		off := len(buf)
		buf = slices.Grow(buf, int(l)+tagLen)[:off+int(l)+tagLen]
		if _, err := io.ReadFull(r, buf[off:]); err != nil {
			return truncated("truncated frame", err)
		}
		offs, lens = append(offs, off), append(lens, int(l))
		left -= int(l)
	}
	ks := make([]sealKey, len(lens))
	for i, l := range lens {
		ks[i].nonce, ks[i].aead = f.rx.next(l)
	}
	fr.payload, fr.pooled = buf, cap(buf) >= 64<<10
	sw := &sealedWrite{buf: buf, offs: offs, lens: lens, ks: ks, hdr: f.hdr, opened: make([]bool, len(lens))}
	fr.open = func() error {
		recs := make([][]byte, len(lens))
		for i := range lens {
			pt, err := sw.open(i, nil)
			if err != nil {
				return err
			}
			recs[i] = pt
		}
		fr.recs, fr.sealed, fr.open, fr.sw = recs, true, nil, nil
		return nil
	}
	if !f.deferOpen {
		return fr.open()
	}
	fr.sw = sw
	return nil
}

// sealedWrite is an encrypted Write frame's records as read, still
// ciphertext, with the nonces taken for them in read order. A record is
// opened once: in place (the metadata; every record of a frame opened
// whole) or straight into a destination, the decode pool's page
// (handoff.PageWrite.Open, kv.Pool.FillPageSum), so a page's plaintext is
// written once, where it stays.
type sealedWrite struct {
	buf        []byte
	offs, lens []int
	ks         []sealKey
	hdr        [headerLen]byte
	opened     []bool
	// mu guards failed: the decode side may open a frame's records on
	// several goroutines at once (handoff.Writes.Open), each its own
	// records (opened[i] is only ever touched by record i's opener).
	mu sync.Mutex
	// failed is the first record that did not open: the frame is bad and
	// the connection must close (nothing after it can be trusted).
	failed error
}

// fail records err as the frame's failure unless one is recorded.
func (sw *sealedWrite) fail(err error) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.failed == nil {
		sw.failed = err
	}
	return err
}

// failure is the frame's first failure so far.
func (sw *sealedWrite) failure() error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.failed
}

// open authenticates record i and writes its plaintext to dst (len(dst)
// must be the record's length), or in place when dst is nil, and returns
// it. On an error dst may hold unverified bytes: the caller scrubs them.
func (sw *sealedWrite) open(i int, dst []byte) ([]byte, error) {
	if sw.opened[i] {
		return nil, protoErr("write frame record %d opened twice", i)
	}
	sw.opened[i] = true
	l := sw.lens[i]
	rec := sw.buf[sw.offs[i] : sw.offs[i]+l+tagLen]
	out := rec[:0]
	if dst != nil {
		if len(dst) != l {
			return nil, sw.fail(protoErr("write frame record %d of %d bytes for a destination of %d", i, l, len(dst)))
		}
		out = dst[:0]
	}
	var ad [headerLen + 4]byte
	copy(ad[:], sw.hdr[:])
	binary.BigEndian.PutUint32(ad[headerLen:], uint32(l))
	pt, err := sw.ks[i].aead.Open(out, sw.ks[i].nonce[:], rec, ad[:])
	if err != nil {
		return nil, sw.fail(errNoOpen())
	}
	return pt[:l:l], nil
}

// writes opens the metadata record and decodes the frame's writes, each
// write that carries page data with Open set to open its record (nothing
// of a record is used before its tag verifies, I15). A frame whose
// records do not follow the layout is a protocol error; a record that
// does not decode inside intact framing is a bad message.
func (sw *sealedWrite) writes() ([]handoff.PageWrite, error) {
	m, err := sw.open(0, nil)
	if err != nil {
		return nil, err
	}
	ws, rec, err := decWriteMeta(m, sw.lens)
	if err != nil {
		return nil, err
	}
	for i := range ws {
		if k := rec[i]; k > 0 {
			ws[i].Size = sw.lens[k]
			ws[i].Open = func(dst []byte) error {
				_, err := sw.open(k, dst)
				return err
			}
		}
	}
	return ws, nil
}

// rest opens every record the call did not open into a page (a write the
// decode side refused before its bytes, or one after it), in place, so a
// frame is verified whole however its call went: a frame with a record
// that does not open closes the connection, as it always did. It returns
// the first record's failure, this call's or an earlier one's.
func (sw *sealedWrite) rest() error {
	for i := range sw.lens {
		if sw.failure() != nil {
			break
		}
		if !sw.opened[i] {
			// Verified only: the write was not applied, and its plaintext
			// does not stay in a pooled buffer.
			pt, _ := sw.open(i, nil)
			clear(pt)
		}
	}
	return sw.failure()
}
