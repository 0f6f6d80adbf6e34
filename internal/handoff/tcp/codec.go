package tcp

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strings"
	"time"

	"sluice/internal/grammar"
	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
)

// enc appends big-endian fields. It refuses what the matching decoder
// would refuse (an int outside [0, maxInt], a length that does not fit its
// u32): the first such field sets err, and the caller fails that one call
// before a byte is sent, instead of sending a frame the peer must refuse.
type enc struct {
	b   []byte
	err error
}

func (e *enc) u8(v byte)    { e.b = append(e.b, v) }
func (e *enc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) id(v kv.ID)   { e.b = append(e.b, v[:]...) }

// int writes a non-negative int that dec.int(maxInt) reads back; what is
// the value called in the error (a field name).
func (e *enc) int(v int, what string) {
	if e.err == nil && (v < 0 || int64(v) > maxInt) {
		e.err = handoff.ErrBadMessage.With("%s %d is outside the wire range [0, %d]", what, v, maxInt)
	}
	e.u64(uint64(int64(v)))
}

// length writes a byte or element count as a u32.
func (e *enc) length(n int, what string) {
	if e.err == nil && int64(n) > math.MaxUint32 {
		e.err = handoff.ErrBadMessage.With("%s of %d elements does not fit the wire's u32 count", what, n)
	}
	e.u32(uint32(n))
}

func (e *enc) bytes(v []byte) { e.length(len(v), "byte string"); e.b = append(e.b, v...) }
func (e *enc) str(v string)   { e.length(len(v), "string"); e.b = append(e.b, v...) }
func (e *enc) bool(v bool) {
	if v {
		e.u8(1)
	} else {
		e.u8(0)
	}
}

// dec reads fields; the first short read sets err and every later read
// returns zero values, so decoders check err once at the end.
type dec struct {
	b   []byte
	err error
}

func (d *dec) need(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = msgErr("message truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) u8() byte {
	if v := d.need(1); v != nil {
		return v[0]
	}
	return 0
}
func (d *dec) u32() uint32 {
	if v := d.need(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}
func (d *dec) u64() uint64 {
	if v := d.need(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// int reads a non-negative int bounded by max. A value out of range is a
// bad message, not a bad frame: the frame's length and checksum held, so
// the connection is still aligned and only this call is refused.
func (d *dec) int(max int) int {
	v := int64(d.u64())
	if d.err == nil && (v < 0 || v > int64(max)) {
		d.err = handoff.ErrBadMessage.With("field value %d is outside [0, %d]", v, max)
		return 0
	}
	return int(v)
}
func (d *dec) id() (v kv.ID) {
	copy(v[:], d.need(16))
	return
}

// bytes aliases the frame payload (no copy); the payload is owned by this message.
func (d *dec) bytes() []byte {
	n := d.u32()
	return d.need(int(n))
}
func (d *dec) str() string { return string(d.bytes()) }
func (d *dec) bool() bool {
	switch d.u8() {
	case 0:
		return false
	case 1:
		return true
	}
	if d.err == nil {
		d.err = msgErr("bad boolean")
	}
	return false
}

// count reads a element count, rejecting counts that cannot fit in what is
// left (each element takes at least min bytes): a frame cannot make us allocate more than it carries.
func (d *dec) count(min int) int {
	n := d.u32()
	if d.err == nil && int64(n)*int64(min) > int64(len(d.b)) {
		d.err = msgErr("element count %d larger than the message", n)
		return 0
	}
	return int(n)
}

// msgErr is a message body that does not decode inside a frame whose
// framing held (length, checksum, MAC): the call is refused, the
// connection stays up for every other call.
func msgErr(format string, args ...any) error {
	return handoff.ErrBadMessage.With(format, args...)
}

func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = msgErr("%d trailing bytes", len(d.b))
	}
	return d.err
}

// maxInt bounds every int on the wire: a value a 32-bit peer can hold, far
// above any real token count, page size or block index.
const maxInt = math.MaxInt32

// maxModelName bounds a fingerprint's name on the wire: it only ever
// appears in error messages.
const maxModelName = 1024

// model fingerprints travel as sum [16] then name (str), I13. The name is
// for messages only (Fingerprint.Same compares sums), so a longer one is
// cut to maxModelName bytes here rather than refused by the peer.
func (e *enc) model(f model.Fingerprint) {
	name := f.Name
	if len(name) > maxModelName {
		name = strings.ToValidUTF8(name[:maxModelName], "")
	}
	e.b = append(e.b, f.Sum[:]...)
	e.str(name)
}

func (d *dec) model() (f model.Fingerprint) {
	copy(f.Sum[:], d.need(16))
	if f.Name = d.str(); d.err == nil && len(f.Name) > maxModelName {
		d.err = msgErr("model name of %d bytes", len(f.Name))
	}
	return f
}

func encReserve(m *handoff.Reserve) ([]byte, error) {
	var e enc
	e.id(m.Handoff)
	e.str(m.Tenant)
	e.int(m.PromptTokens, "prompt_tokens")
	e.int(m.MaxTokens, "max_tokens")
	e.model(m.Model)
	encIDs(&e, m.Tokens)
	e.str(m.CacheScope)
	e.int(m.Weight, "weight")
	e.bool(m.NoRevoke)
	return e.b, e.err
}

func decReserve(p []byte) (*handoff.Reserve, error) {
	d := dec{b: p}
	m := &handoff.Reserve{Handoff: d.id(), Tenant: d.str(), PromptTokens: d.int(maxInt), MaxTokens: d.int(maxInt)}
	m.Model = d.model()
	m.Tokens = decIDs(&d)
	m.CacheScope = d.str()
	m.Weight = d.int(handoff.MaxWeight)
	m.NoRevoke = d.bool()
	if d.err == nil && len(m.Tokens) != 0 && len(m.Tokens) != m.PromptTokens {
		d.err = msgErr("reserve: %d prompt ids for a prompt of %d tokens", len(m.Tokens), m.PromptTokens)
	}
	if d.err == nil && len(m.CacheScope) > handoff.MaxCacheScope {
		d.err = msgErr("reserve: cache scope of %d bytes, at most %d", len(m.CacheScope), handoff.MaxCacheScope)
	}
	return m, d.end()
}

func encReservation(e *enc, m *handoff.Reservation) {
	e.id(m.Handoff)
	e.int(m.PageSize, "page_size")
	e.int(m.ExpectTokens, "expect_tokens")
	e.u64(m.Incarnation)
	e.model(m.Model)
	e.int(m.PrefixTokens, "prefix_tokens")
	e.length(len(m.Pages), "page list")
	for _, p := range m.Pages {
		e.u32(p.Page)
		e.u64(p.Gen)
	}
}

func decReservationFrom(d *dec) *handoff.Reservation {
	m := &handoff.Reservation{Handoff: d.id(), PageSize: d.int(maxInt), ExpectTokens: d.int(maxInt), Incarnation: d.u64()}
	m.Model = d.model()
	m.PrefixTokens = d.int(maxInt)
	n := d.count(12)
	if d.err != nil {
		return m
	}
	m.Pages = make([]kv.PageRef, n)
	for i := range m.Pages {
		m.Pages[i] = kv.PageRef{Page: d.u32(), Gen: d.u64()}
	}
	if d.err == nil {
		// A decode prefix the prefill must not act on (unaligned, the
		// whole prompt, more pages than listed) is refused at the wire.
		if err := m.CheckPrefix(); err != nil {
			d.err = msgErr("reservation: %v", err)
		}
	}
	return m
}

func decReservation(p []byte) (*handoff.Reservation, error) {
	d := dec{b: p}
	m := decReservationFrom(&d)
	return m, d.end()
}

// A Write frame's payload puts every write's metadata first and the page
// data after it, so a reader checks the frame CRC (which covers the header
// and all metadata, never the page data, see frame.go) before it reads a
// single data byte, and can then read each page straight off the socket
// into a small buffer and apply it while it is in cache (streamWrites):
//
//	count   u32
//	count x record (writeRecLen bytes): handoff [16], block i64, page u32,
//	        gen u64, slots i64, checksum u32, placed u8, data length u32
//	the records' data, concatenated in record order
const writeRecLen = 16 + 8 + 4 + 8 + 8 + 4 + 1 + 4

// encWrites returns the payload as parts so page bytes are written to the
// socket straight from where they are (no copy into a frame buffer), and
// which parts are page data (outside the frame CRC, see the wire format).
func encWrites(ws []handoff.PageWrite) ([][]byte, []bool, error) {
	parts := make([][]byte, 1, len(ws)+1)
	isData := make([]bool, 1, len(ws)+1)
	e := enc{b: make([]byte, 0, 4+writeRecLen*len(ws))}
	e.length(len(ws), "write batch")
	for i := range ws {
		w := &ws[i]
		e.id(w.Handoff)
		e.int(w.Block, "block")
		e.u32(w.Page.Page)
		e.u64(w.Page.Gen)
		e.int(w.Slots, "slots")
		e.u32(w.Checksum)
		e.bool(w.Placed)
		e.length(len(w.Data), "page data")
		if len(w.Data) > 0 {
			parts = append(parts, w.Data)
			isData = append(isData, true)
		}
	}
	parts[0] = e.b
	return parts, isData, e.err
}

// decWriteRecords decodes count records (their Data still unread) and the
// data length each announces. The lengths are read from their fixed place
// in every record even when a field of a record does not decode, so a
// caller can still skip the data and keep the connection aligned (the
// error is then a bad message, answered on the call).
func decWriteRecords(count int, recs []byte) ([]handoff.PageWrite, []int, error) {
	d := dec{b: recs}
	ws := make([]handoff.PageWrite, count)
	lens := make([]int, count)
	for i := range ws {
		ws[i] = handoff.PageWrite{Handoff: d.id(), Block: d.int(maxInt),
			Page: kv.PageRef{Page: d.u32(), Gen: d.u64()}, Slots: d.int(maxInt), Checksum: d.u32(), Placed: d.bool()}
		d.u32()
		if end := (i + 1) * writeRecLen; end <= len(recs) {
			lens[i] = int(binary.BigEndian.Uint32(recs[end-4 : end]))
		}
	}
	return ws, lens, d.end()
}

// writeCount reads the record count at the start of a Write payload of n
// bytes and returns the length of the metadata prefix (count and records).
func writeCount(b []byte, n int) (int, int, error) {
	count := int64(binary.BigEndian.Uint32(b))
	meta := 4 + count*writeRecLen
	if meta > int64(n) {
		return 0, 0, protoErr("element count %d larger than the frame", count)
	}
	return int(count), int(meta), nil
}

// decWriteRecs decodes an encrypted Write frame from its opened records
// (frame.go): the metadata, then exactly one record per write that carries
// data, of exactly its length. Anything else is a protocol error, as is
// damaged framing on a plain connection.
func decWriteRecs(recs [][]byte) ([]handoff.PageWrite, error) {
	lens := make([]int, len(recs))
	for i, r := range recs {
		lens[i] = len(r)
	}
	ws, rec, err := decWriteMeta(recs[0], lens)
	if err != nil {
		return nil, err
	}
	for i := range ws {
		if k := rec[i]; k > 0 {
			ws[i].Data = recs[k]
		}
	}
	return ws, nil
}

// decWriteMeta decodes an encrypted Write frame's metadata record m
// against its records' lengths (recLens[0] is m's own) and returns the
// writes and, for each, the index of the record holding its data (0:
// none). The layout is checked whole before any data record is used.
func decWriteMeta(m []byte, recLens []int) ([]handoff.PageWrite, []int, error) {
	if len(m) < 4 {
		return nil, nil, protoErr("write frame metadata record of %d bytes", len(m))
	}
	count, meta, err := writeCount(m, len(m))
	if err != nil {
		return nil, nil, err
	}
	if meta != len(m) {
		return nil, nil, protoErr("write frame metadata record of %d bytes for %d writes", len(m), count)
	}
	ws, lens, derr := decWriteRecords(count, m[4:])
	rec := make([]int, len(ws))
	k := 1
	for i := range ws {
		if lens[i] == 0 {
			continue
		}
		if k == len(recLens) || recLens[k] != lens[i] {
			return nil, nil, protoErr("write %d announces %d bytes of data, its record does not match", i, lens[i])
		}
		rec[i] = k
		k++
	}
	if k != len(recLens) {
		return nil, nil, protoErr("write frame of %d records for %d", len(recLens), k)
	}
	if derr != nil {
		return nil, nil, derr
	}
	return ws, rec, nil
}

// decWritesChecked decodes a Write frame read whole (the encrypted path,
// where the AEAD tag has verified every byte and the header carries no
// CRC; or a connection-level frame) and checks its CRC, when it has one,
// over the header and the metadata prefix (everything but the page data). A framing fault
// (count beyond the frame, checksum, lengths that do not add up) is a
// protocol error; a record whose fields do not decode is a bad message.
func decWritesChecked(f *frame) ([]handoff.PageWrite, error) {
	if f.recs != nil {
		return decWriteRecs(f.recs)
	}
	p := f.payload
	if len(p) < 4 {
		return nil, protoErr("write frame of %d bytes", len(p))
	}
	count, meta, err := writeCount(p, len(p))
	if err != nil {
		return nil, err
	}
	if !f.sealed {
		c := crc32.Update(0, castagnoli, f.hdr12[:])
		c = crc32.Update(c, castagnoli, p[:meta])
		if c != f.crc {
			return nil, protoErr("frame checksum %08x, header says %08x", c, f.crc)
		}
	}
	ws, lens, derr := decWriteRecords(count, p[4:meta])
	total := int64(meta)
	for _, l := range lens {
		total += int64(l)
	}
	if total != int64(len(p)) {
		return nil, protoErr("write frame of %d bytes announces %d", len(p), total)
	}
	if derr != nil {
		return nil, derr
	}
	off := meta
	for i := range ws {
		if lens[i] > 0 {
			ws[i].Data = p[off : off+lens[i] : off+lens[i]]
			off += lens[i]
		}
	}
	return ws, nil
}

func encCommit(m *handoff.Commit) ([]byte, error) {
	var e enc
	e.id(m.Handoff)
	e.int(m.Tokens, "tokens")
	e.bytes(m.Digest)
	e.u32(uint32(m.FirstToken))
	encLogprobs(&e, m.FirstLogprobs)
	encTiming(&e, m.Timing)
	return e.b, e.err
}

func decCommit(p []byte) (*handoff.Commit, error) {
	d := dec{b: p}
	m := &handoff.Commit{Handoff: d.id(), Tokens: d.int(maxInt)}
	if dg := d.bytes(); len(dg) > 0 {
		m.Digest = append([]byte(nil), dg...)
	}
	m.FirstToken = int32(d.u32())
	m.FirstLogprobs = decLogprobs(&d)
	m.Timing = decTiming(&d)
	return m, d.end()
}

// encTiming writes a first token's Timing (version 16): a presence
// byte, then, when present, its five durations in nanoseconds, each
// bounded to [0, handoff.MaxTiming] (operator data: a figure past the
// bound is cut, never a reason to fail the commit or the token).
func encTiming(e *enc, t *handoff.Timing) {
	e.bool(t != nil)
	if t == nil {
		return
	}
	b := t.Bounded()
	for _, d := range []time.Duration{b.PrefillQueue, b.PrefillWait, b.PrefillCompute, b.Push, b.DecodeWait} {
		e.u64(uint64(d))
	}
}

// decTiming reads encTiming's; a duration outside [0, MaxTiming] is a
// bad message, as any field out of its range.
func decTiming(d *dec) *handoff.Timing {
	if !d.bool() {
		return nil
	}
	var t handoff.Timing
	for _, p := range []*time.Duration{&t.PrefillQueue, &t.PrefillWait, &t.PrefillCompute, &t.Push, &t.DecodeWait} {
		v := d.u64()
		if d.err == nil && v > uint64(handoff.MaxTiming) {
			d.err = handoff.ErrBadMessage.With("first-token timing of %d ns is outside [0, %d]", v, int64(handoff.MaxTiming))
		}
		*p = time.Duration(v)
	}
	if d.err != nil {
		return nil
	}
	return &t
}

func encAbort(m *handoff.Abort) ([]byte, error) {
	var e enc
	e.id(m.Handoff)
	e.str(m.Reason)
	return e.b, e.err
}

func decAbort(p []byte) (*handoff.Abort, error) {
	d := dec{b: p}
	m := &handoff.Abort{Handoff: d.id(), Reason: d.str()}
	return m, d.end()
}

func encID(id kv.ID) []byte { return append([]byte(nil), id[:]...) }

func decID(p []byte) (kv.ID, error) {
	d := dec{b: p}
	id := d.id()
	return id, d.end()
}

func (e *enc) f32(v float32) { e.u32(math.Float32bits(v)) }
func (d *dec) f32() float32  { return math.Float32frombits(d.u32()) }

// encSampling carries the floats as their bits (any value round-trips;
// the sampler, not the wire, judges them) and refuses what the decoder
// would refuse: a top_k beyond the wire's int, more logit biases or top
// logprobs than allowed.
func encSampling(e *enc, s sample.Params) {
	if e.err == nil && len(s.LogitBias) > sample.MaxLogitBias {
		e.err = handoff.ErrBadMessage.With("logit bias of %d entries; at most %d", len(s.LogitBias), sample.MaxLogitBias)
	}
	if e.err == nil && (s.TopLogprobs < 0 || s.TopLogprobs > sample.MaxTopLogprobs) {
		e.err = handoff.ErrBadMessage.With("top logprobs %d outside [0, %d]", s.TopLogprobs, sample.MaxTopLogprobs)
	}
	e.f32(s.Temperature)
	e.int(s.TopK, "top_k")
	e.f32(s.TopP)
	e.u64(s.Seed)
	e.f32(s.MinP)
	e.f32(s.PresencePenalty)
	e.f32(s.FrequencyPenalty)
	e.f32(s.RepetitionPenalty)
	e.length(len(s.LogitBias), "logit bias")
	for _, b := range s.LogitBias {
		e.u32(uint32(b.ID))
		e.f32(b.Bias)
	}
	e.bool(s.Logprobs)
	e.u8(byte(s.TopLogprobs))
	if e.err == nil && len(s.Format.Schema) > grammar.MaxSchemaBytes {
		e.err = handoff.ErrBadMessage.With("output schema of %d bytes; at most %d", len(s.Format.Schema), grammar.MaxSchemaBytes)
	}
	e.u8(byte(s.Format.Kind))
	e.str(s.Format.Schema)
	e.bool(s.Format.Think)
	e.u32(uint32(s.Format.ThinkOpen))
	e.u32(uint32(s.Format.ThinkClose))
}

// decSampling bounds what sizes allocations and loops: the bias list and
// the top-logprobs count. The values' domains are checked by the worker
// with sample.Params.Validate.
func decSampling(d *dec) sample.Params {
	s := sample.Params{Temperature: d.f32(), TopK: d.int(maxInt), TopP: d.f32(), Seed: d.u64(),
		MinP: d.f32(), PresencePenalty: d.f32(), FrequencyPenalty: d.f32(), RepetitionPenalty: d.f32()}
	n := d.count(8)
	if d.err == nil && n > sample.MaxLogitBias {
		d.err = msgErr("logit bias of %d entries; at most %d", n, sample.MaxLogitBias)
	}
	if d.err == nil && n > 0 {
		s.LogitBias = make([]sample.Bias, n)
		for i := range s.LogitBias {
			s.LogitBias[i] = sample.Bias{ID: int32(d.u32()), Bias: d.f32()}
		}
	}
	s.Logprobs = d.bool()
	s.TopLogprobs = int(d.u8())
	if d.err == nil && s.TopLogprobs > sample.MaxTopLogprobs {
		d.err = msgErr("top logprobs %d; at most %d", s.TopLogprobs, sample.MaxTopLogprobs)
	}
	// The schema's text only: each worker compiles and checks it (I14).
	s.Format.Kind = sample.FormatKind(d.u8())
	if n := d.count(1); d.err == nil && n > grammar.MaxSchemaBytes {
		d.err = msgErr("output schema of %d bytes; at most %d", n, grammar.MaxSchemaBytes)
	} else if d.err == nil {
		s.Format.Schema = string(d.need(n))
	}
	// The markers' ids only; Validate checks them against the vocabulary.
	s.Format.Think = d.bool()
	s.Format.ThinkOpen, s.Format.ThinkClose = int32(d.u32()), int32(d.u32())
	return s
}

// encLogprobs writes a presence byte, then the token's logprob and its
// alternatives.
func encLogprobs(e *enc, l *sample.Logprobs) {
	e.bool(l != nil)
	if l == nil {
		return
	}
	// What decLogprobs refuses is refused here, on this call alone.
	ok := func(v float32) bool { return v >= sample.LogprobFloor && v <= 0 }
	if e.err == nil && len(l.Top) > sample.MaxTopLogprobs {
		e.err = handoff.ErrBadMessage.With("%d top logprobs; at most %d", len(l.Top), sample.MaxTopLogprobs)
	}
	if e.err == nil && !ok(l.Logprob) {
		e.err = handoff.ErrBadMessage.With("logprob %v outside [%d, 0]", l.Logprob, sample.LogprobFloor)
	}
	for _, t := range l.Top {
		if e.err == nil && !ok(t.Logprob) {
			e.err = handoff.ErrBadMessage.With("logprob %v outside [%d, 0]", t.Logprob, sample.LogprobFloor)
		}
	}
	e.f32(l.Logprob)
	e.u8(byte(len(l.Top)))
	for _, t := range l.Top {
		e.u32(uint32(t.ID))
		e.f32(t.Logprob)
	}
}

// decLogprobs refuses values outside [LogprobFloor, 0] (NaN included):
// they reach a client's JSON, which cannot carry NaN or Inf.
func decLogprobs(d *dec) *sample.Logprobs {
	if !d.bool() || d.err != nil {
		return nil
	}
	val := func() float32 {
		v := d.f32()
		if d.err == nil && !(v >= sample.LogprobFloor && v <= 0) {
			d.err = msgErr("logprob %v outside [%d, 0]", v, sample.LogprobFloor)
		}
		return v
	}
	l := &sample.Logprobs{Logprob: val()}
	n := int(d.u8())
	if d.err == nil && n > sample.MaxTopLogprobs {
		d.err = msgErr("%d top logprobs; at most %d", n, sample.MaxTopLogprobs)
	}
	if d.err != nil {
		return nil
	}
	if n > 0 {
		l.Top = make([]sample.TokenLogprob, n)
		for i := range l.Top {
			l.Top[i] = sample.TokenLogprob{ID: int32(d.u32()), Logprob: val()}
		}
	}
	return l
}

func encIDs(e *enc, ids []int32) {
	e.length(len(ids), "token list")
	for _, t := range ids {
		e.u32(uint32(t))
	}
}

// decIDs reads a token list, never longer than the frame carries.
func decIDs(d *dec) []int32 {
	n := d.count(4)
	if d.err != nil || n == 0 {
		return nil
	}
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(d.u32())
	}
	return ids
}

func encStreamOpen(id kv.ID, p handoff.StreamParams) ([]byte, error) {
	var e enc
	e.id(id)
	encSampling(&e, p.Sampling)
	e.bool(p.IgnoreEOS)
	encIDs(&e, p.Prompt)
	encIDs(&e, p.Generated)
	return e.b, e.err
}

func decStreamOpen(p []byte) (kv.ID, handoff.StreamParams, error) {
	d := dec{b: p}
	id := d.id()
	sp := handoff.StreamParams{Sampling: decSampling(&d), IgnoreEOS: d.bool()}
	sp.Prompt = decIDs(&d)
	sp.Generated = decIDs(&d)
	return id, sp, d.end()
}

func encToken(t handoff.Token) ([]byte, error) {
	var e enc
	e.u32(uint32(t.ID))
	e.bool(t.Done)
	e.str(t.Finish)
	e.int(t.PromptTokens, "prompt_tokens")
	e.int(t.CompletionTokens, "completion_tokens")
	code, msg := handoff.ToWire(t.Err)
	e.str(code)
	e.str(msg)
	encLogprobs(&e, t.Logprobs)
	encTiming(&e, t.Timing)
	return e.b, e.err
}

func decToken(p []byte) (handoff.Token, error) {
	d := dec{b: p}
	t := handoff.Token{ID: int32(d.u32()), Done: d.bool(), Finish: d.str(), PromptTokens: d.int(maxInt), CompletionTokens: d.int(maxInt)}
	code, msg := d.str(), d.str()
	t.Err = handoff.FromWire(code, msg)
	t.Logprobs = decLogprobs(&d)
	t.Timing = decTiming(&d)
	return t, d.end()
}

func encPrefill(m *handoff.PrefillRequest) ([]byte, error) {
	var e enc
	e.id(m.Handoff)
	e.str(m.Tenant)
	e.length(len(m.Tokens), "token list")
	for _, t := range m.Tokens {
		e.u32(uint32(t))
	}
	e.bool(m.Reservation != nil)
	if m.Reservation != nil {
		encReservation(&e, m.Reservation)
	}
	encSampling(&e, m.Sampling)
	e.model(m.Model)
	e.int(m.SampleOffset, "sample_offset")
	e.str(m.CacheScope)
	e.str(m.Decode)
	e.int(m.Weight, "weight")
	return e.b, e.err
}

func decPrefill(p []byte) (*handoff.PrefillRequest, error) {
	d := dec{b: p}
	m := &handoff.PrefillRequest{Handoff: d.id(), Tenant: d.str()}
	n := d.count(4)
	if d.err != nil {
		return nil, d.err
	}
	m.Tokens = make([]int32, n)
	for i := range m.Tokens {
		m.Tokens[i] = int32(d.u32())
	}
	if d.bool() {
		m.Reservation = decReservationFrom(&d)
	}
	m.Sampling = decSampling(&d)
	m.Model = d.model()
	m.SampleOffset = d.int(maxInt)
	m.CacheScope = d.str()
	m.Decode = d.str()
	m.Weight = d.int(handoff.MaxWeight)
	if d.err == nil && len(m.Decode) > handoff.MaxWorkerName {
		d.err = protoErr("decode worker name of %d bytes, at most %d", len(m.Decode), handoff.MaxWorkerName)
	}
	return m, d.end()
}

// maxLoad bounds every Load field: no pool or queue comes near 2^31.
const maxLoad = 1<<31 - 1

func encLoad(m *handoff.Load) ([]byte, error) {
	var e enc
	e.int(m.FreePages, "free_pages")
	e.int(m.TotalPages, "total_pages")
	e.int(m.Running, "running")
	e.int(m.CachedPages, "cached_pages")
	e.int(m.Context, "context")
	return e.b, e.err
}

func decLoad(p []byte) (*handoff.Load, error) {
	d := dec{b: p}
	m := &handoff.Load{FreePages: d.int(maxLoad), TotalPages: d.int(maxLoad), Running: d.int(maxLoad), CachedPages: d.int(maxLoad), Context: d.int(maxLoad)}
	if d.err == nil && (m.FreePages > m.TotalPages || m.CachedPages > m.TotalPages) {
		d.err = msgErr("load report: %d free and %d cached pages of %d", m.FreePages, m.CachedPages, m.TotalPages)
	}
	return m, d.end()
}

func encPrefillRes(m *handoff.PrefillResult) ([]byte, error) {
	var e enc
	e.u32(uint32(m.FirstToken))
	e.int(m.Tokens, "tokens")
	e.int(m.CachedTokens, "cached_tokens")
	return e.b, e.err
}

func decPrefillRes(p []byte) (*handoff.PrefillResult, error) {
	d := dec{b: p}
	m := &handoff.PrefillResult{FirstToken: int32(d.u32()), Tokens: d.int(maxInt)}
	m.CachedTokens = d.int(maxInt)
	return m, d.end()
}

// encError encodes an error for the peer. It cannot fail: a message too
// long for the frame is cut (the code, which callers match, is kept whole).
func encError(err error) []byte {
	var e enc
	code, msg := handoff.ToWire(err)
	if len(msg) > maxErrorMsg {
		msg = msg[:maxErrorMsg] + "..."
	}
	e.str(code)
	e.str(msg)
	return e.b
}

// maxErrorMsg bounds an error's message on the wire, so an error that
// quotes a huge input still fits any frame limit.
const maxErrorMsg = 512

func decError(p []byte) error {
	d := dec{b: p}
	code, msg := d.str(), d.str()
	if err := d.end(); err != nil {
		return err
	}
	if code == "" {
		return msgErr("error frame without a code")
	}
	return handoff.FromWire(code, msg)
}
