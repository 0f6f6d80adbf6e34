package tcp

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"strings"

	"sluice/internal/handoff"
	"sluice/internal/kv"
	"sluice/internal/model"
	"sluice/internal/sample"
)

// enc appends big-endian fields.
type enc struct{ b []byte }

func (e *enc) u8(v byte)      { e.b = append(e.b, v) }
func (e *enc) u32(v uint32)   { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *enc) u64(v uint64)   { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *enc) i64(v int)      { e.u64(uint64(int64(v))) }
func (e *enc) id(v kv.ID)     { e.b = append(e.b, v[:]...) }
func (e *enc) bytes(v []byte) { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *enc) str(v string)   { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
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
		d.err = protoErr("message truncated")
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

// int reads a non-negative int bounded by max.
func (d *dec) int(max int) int {
	v := int64(d.u64())
	if d.err == nil && (v < 0 || v > int64(max)) {
		d.err = protoErr("field value %d out of range", v)
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
		d.err = protoErr("bad boolean")
	}
	return false
}

// count reads a element count, rejecting counts that cannot fit in what is
// left (each element takes at least min bytes): a frame cannot make us allocate more than it carries.
func (d *dec) count(min int) int {
	n := d.u32()
	if d.err == nil && int64(n)*int64(min) > int64(len(d.b)) {
		d.err = protoErr("element count %d larger than the frame", n)
		return 0
	}
	return int(n)
}

func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = protoErr("%d trailing bytes", len(d.b))
	}
	return d.err
}

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
		d.err = protoErr("model name of %d bytes", len(f.Name))
	}
	return f
}

func encReserve(m *handoff.Reserve) []byte {
	var e enc
	e.id(m.Handoff)
	e.str(m.Tenant)
	e.i64(m.PromptTokens)
	e.i64(m.MaxTokens)
	e.model(m.Model)
	return e.b
}

func decReserve(p []byte) (*handoff.Reserve, error) {
	d := dec{b: p}
	m := &handoff.Reserve{Handoff: d.id(), Tenant: d.str(), PromptTokens: d.int(maxInt), MaxTokens: d.int(maxInt)}
	m.Model = d.model()
	return m, d.end()
}

func encReservation(e *enc, m *handoff.Reservation) {
	e.id(m.Handoff)
	e.i64(m.PageSize)
	e.i64(m.ExpectTokens)
	e.u64(m.Incarnation)
	e.model(m.Model)
	e.u32(uint32(len(m.Pages)))
	for _, p := range m.Pages {
		e.u32(p.Page)
		e.u64(p.Gen)
	}
}

func decReservationFrom(d *dec) *handoff.Reservation {
	m := &handoff.Reservation{Handoff: d.id(), PageSize: d.int(maxInt), ExpectTokens: d.int(maxInt), Incarnation: d.u64()}
	m.Model = d.model()
	n := d.count(12)
	if d.err != nil {
		return m
	}
	m.Pages = make([]kv.PageRef, n)
	for i := range m.Pages {
		m.Pages[i] = kv.PageRef{Page: d.u32(), Gen: d.u64()}
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
func encWrites(ws []handoff.PageWrite) ([][]byte, []bool) {
	parts := make([][]byte, 1, len(ws)+1)
	isData := make([]bool, 1, len(ws)+1)
	e := enc{b: make([]byte, 0, 4+writeRecLen*len(ws))}
	e.u32(uint32(len(ws)))
	for i := range ws {
		w := &ws[i]
		e.id(w.Handoff)
		e.i64(w.Block)
		e.u32(w.Page.Page)
		e.u64(w.Page.Gen)
		e.i64(w.Slots)
		e.u32(w.Checksum)
		e.bool(w.Placed)
		e.u32(uint32(len(w.Data)))
		if len(w.Data) > 0 {
			parts = append(parts, w.Data)
			isData = append(isData, true)
		}
	}
	parts[0] = e.b
	return parts, isData
}

// decWriteRecords decodes count records (their Data still unread) and the
// data length each announces.
func decWriteRecords(count int, recs []byte) ([]handoff.PageWrite, []int, error) {
	d := dec{b: recs}
	ws := make([]handoff.PageWrite, count)
	lens := make([]int, count)
	for i := range ws {
		ws[i] = handoff.PageWrite{Handoff: d.id(), Block: d.int(maxInt),
			Page: kv.PageRef{Page: d.u32(), Gen: d.u64()}, Slots: d.int(maxInt), Checksum: d.u32(), Placed: d.bool()}
		lens[i] = int(d.u32())
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

// decWritesChecked decodes a Write frame and checks its CRC over the header
// and the metadata prefix (everything but the page data).
func decWritesChecked(f *frame) ([]handoff.PageWrite, error) {
	ws, err := decWrites(f.payload)
	if err != nil {
		return nil, err
	}
	meta := 4 + writeRecLen*len(ws)
	c := crc32.Update(0, castagnoli, f.hdr12[:])
	c = crc32.Update(c, castagnoli, f.payload[:meta])
	if c != f.crc {
		return nil, protoErr("frame checksum %08x, header says %08x", c, f.crc)
	}
	return ws, nil
}

func decWrites(p []byte) ([]handoff.PageWrite, error) {
	if len(p) < 4 {
		return nil, protoErr("message truncated")
	}
	count, meta, err := writeCount(p, len(p))
	if err != nil {
		return nil, err
	}
	ws, lens, err := decWriteRecords(count, p[4:meta])
	if err != nil {
		return nil, err
	}
	d := dec{b: p[meta:]}
	for i := range ws {
		if data := d.need(lens[i]); len(data) > 0 {
			ws[i].Data = data
		}
	}
	return ws, d.end()
}

func encCommit(m *handoff.Commit) []byte {
	var e enc
	e.id(m.Handoff)
	e.i64(m.Tokens)
	e.bytes(m.Digest)
	e.u32(uint32(m.FirstToken))
	encLogprobs(&e, m.FirstLogprobs)
	return e.b
}

func decCommit(p []byte) (*handoff.Commit, error) {
	d := dec{b: p}
	m := &handoff.Commit{Handoff: d.id(), Tokens: d.int(maxInt)}
	if dg := d.bytes(); len(dg) > 0 {
		m.Digest = append([]byte(nil), dg...)
	}
	m.FirstToken = int32(d.u32())
	m.FirstLogprobs = decLogprobs(&d)
	return m, d.end()
}

func encAbort(m *handoff.Abort) []byte {
	var e enc
	e.id(m.Handoff)
	e.str(m.Reason)
	return e.b
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

func encSampling(e *enc, s sample.Params) {
	e.f32(s.Temperature)
	e.i64(s.TopK)
	e.f32(s.TopP)
	e.u64(s.Seed)
	e.f32(s.MinP)
	e.f32(s.PresencePenalty)
	e.f32(s.FrequencyPenalty)
	e.f32(s.RepetitionPenalty)
	e.u32(uint32(len(s.LogitBias)))
	for _, b := range s.LogitBias {
		e.u32(uint32(b.ID))
		e.f32(b.Bias)
	}
	e.bool(s.Logprobs)
	e.u8(byte(s.TopLogprobs))
}

// decSampling bounds what sizes allocations and loops: the bias list and
// the top-logprobs count. The values' domains are checked by the worker
// with sample.Params.Validate.
func decSampling(d *dec) sample.Params {
	s := sample.Params{Temperature: d.f32(), TopK: d.int(maxInt), TopP: d.f32(), Seed: d.u64(),
		MinP: d.f32(), PresencePenalty: d.f32(), FrequencyPenalty: d.f32(), RepetitionPenalty: d.f32()}
	n := d.count(8)
	if d.err == nil && n > sample.MaxLogitBias {
		d.err = protoErr("logit bias of %d entries; at most %d", n, sample.MaxLogitBias)
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
		d.err = protoErr("top logprobs %d; at most %d", s.TopLogprobs, sample.MaxTopLogprobs)
	}
	return s
}

// encLogprobs writes a presence byte, then the token's logprob and its
// alternatives.
func encLogprobs(e *enc, l *sample.Logprobs) {
	e.bool(l != nil)
	if l == nil {
		return
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
			d.err = protoErr("logprob %v outside [%d, 0]", v, sample.LogprobFloor)
		}
		return v
	}
	l := &sample.Logprobs{Logprob: val()}
	n := int(d.u8())
	if d.err == nil && n > sample.MaxTopLogprobs {
		d.err = protoErr("%d top logprobs; at most %d", n, sample.MaxTopLogprobs)
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
	e.u32(uint32(len(ids)))
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

func encStreamOpen(id kv.ID, p handoff.StreamParams) []byte {
	var e enc
	e.id(id)
	encSampling(&e, p.Sampling)
	e.bool(p.IgnoreEOS)
	encIDs(&e, p.Prompt)
	encIDs(&e, p.Generated)
	return e.b
}

func decStreamOpen(p []byte) (kv.ID, handoff.StreamParams, error) {
	d := dec{b: p}
	id := d.id()
	sp := handoff.StreamParams{Sampling: decSampling(&d), IgnoreEOS: d.bool()}
	sp.Prompt = decIDs(&d)
	sp.Generated = decIDs(&d)
	return id, sp, d.end()
}

func encToken(t handoff.Token) []byte {
	var e enc
	e.u32(uint32(t.ID))
	e.bool(t.Done)
	e.str(t.Finish)
	e.i64(t.PromptTokens)
	e.i64(t.CompletionTokens)
	code, msg := handoff.ToWire(t.Err)
	e.str(code)
	e.str(msg)
	encLogprobs(&e, t.Logprobs)
	return e.b
}

func decToken(p []byte) (handoff.Token, error) {
	d := dec{b: p}
	t := handoff.Token{ID: int32(d.u32()), Done: d.bool(), Finish: d.str(), PromptTokens: d.int(maxInt), CompletionTokens: d.int(maxInt)}
	code, msg := d.str(), d.str()
	t.Err = handoff.FromWire(code, msg)
	t.Logprobs = decLogprobs(&d)
	return t, d.end()
}

func encPrefill(m *handoff.PrefillRequest) []byte {
	var e enc
	e.id(m.Handoff)
	e.str(m.Tenant)
	e.u32(uint32(len(m.Tokens)))
	for _, t := range m.Tokens {
		e.u32(uint32(t))
	}
	e.bool(m.Reservation != nil)
	if m.Reservation != nil {
		encReservation(&e, m.Reservation)
	}
	encSampling(&e, m.Sampling)
	e.model(m.Model)
	e.i64(m.SampleOffset)
	return e.b
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
	return m, d.end()
}

func encPrefillRes(m *handoff.PrefillResult) []byte {
	var e enc
	e.u32(uint32(m.FirstToken))
	e.i64(m.Tokens)
	return e.b
}

func decPrefillRes(p []byte) (*handoff.PrefillResult, error) {
	d := dec{b: p}
	m := &handoff.PrefillResult{FirstToken: int32(d.u32()), Tokens: d.int(maxInt)}
	return m, d.end()
}

func encError(err error) []byte {
	var e enc
	code, msg := handoff.ToWire(err)
	e.str(code)
	e.str(msg)
	return e.b
}

func decError(p []byte) error {
	d := dec{b: p}
	code, msg := d.str(), d.str()
	if err := d.end(); err != nil {
		return err
	}
	if code == "" {
		return protoErr("error frame without a code")
	}
	return handoff.FromWire(code, msg)
}
