package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// computePiece is llama.cpp's token_to_piece with special=true: the bytes a
// token stands for. Control, unknown and user-defined tokens are their text;
// SPM tokens have U+2581 turned back into spaces and <0xNN> into the byte;
// BPE tokens are mapped back from GPT-2's byte-level characters. Unused and
// undefined tokens have no piece.
func (t *Tokenizer) computePiece(id int32) string {
	text := t.tokens[id]
	a := t.attrs[id]
	if a&(attrControl|attrUnknown|attrUserDef) != 0 {
		return text
	}
	switch t.kind {
	case kindSPM:
		if a&attrNormal != 0 {
			return strings.ReplaceAll(text, spmSpace, " ")
		}
		if a&attrByte != 0 {
			if b, ok := parseByteToken(text); ok {
				return string([]byte{b})
			}
			if len(text) == 1 {
				return text
			}
		}
	case kindBPE:
		if a&attrNormal != 0 {
			return byteLevelDecode(text)
		}
	}
	return ""
}

// parseByteToken reads "<0xNN>".
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// TokenText is the piece of one token: the bytes it stands for, with
// control tokens shown as their text ("<s>", "<|im_end|>"). Out-of-range ids
// give "". The bytes may be part of a UTF-8 character.
func (t *Tokenizer) TokenText(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// piece is the text a token contributes to generated output: nothing for
// control and unknown tokens (llama.cpp's special=false).
func (t *Tokenizer) piece(id int32) string {
	if id < 0 || int(id) >= len(t.pieces) || t.attrs[id]&(attrControl|attrUnknown) != 0 {
		return ""
	}
	return t.pieces[id]
}

// Decode turns ids back into text, the inverse of Encode: control and
// unknown tokens contribute nothing, and for vocabularies that add a space
// prefix (SentencePiece-style) the one space Encode put in front of the text
// is removed again, so Decode(Encode(s, true, false)) == s. The result holds
// the raw bytes, which need not be valid UTF-8 for arbitrary ids; a stream
// of generated tokens should go through a StreamDecoder instead.
//
// Unlike llama.cpp's detokenize, Decode applies no clean-up of spaces before
// punctuation (that would break the round trip).
func (t *Tokenizer) Decode(ids []int32) string {
	var b strings.Builder
	first := true
	for _, id := range ids {
		p := t.piece(id)
		if first && id == t.bos {
			continue
		}
		if first && t.addSpacePrefix && t.kind == kindSPM && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		first = false
		b.WriteString(p)
	}
	return b.String()
}

// StreamDecoder turns generated tokens into text as they arrive. It only
// ever returns complete, valid UTF-8: bytes of a character that spans
// tokens are held until the character is complete, and bytes that can never
// form a character become U+FFFD (one per maximal invalid sequence, as
// Python's and the WHATWG decoders do). Pieces are concatenated as they are
// (no space is stripped), which is how llama.cpp prints generated text.
type StreamDecoder struct {
	t       *Tokenizer
	pending []byte
}

// NewStreamDecoder starts a decoder for one stream of tokens. A
// StreamDecoder is not safe for concurrent use.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Push adds one token and returns the text that is now complete ("" while a
// character is still partial).
func (d *StreamDecoder) Push(id int32) string {
	d.pending = append(d.pending, d.t.piece(id)...)
	return d.drain(false)
}

// Flush returns what is still held: a character cut off by the end of the
// stream becomes U+FFFD.
func (d *StreamDecoder) Flush() string { return d.drain(true) }

func (d *StreamDecoder) drain(final bool) string {
	p := d.pending
	var out []byte
	i := 0
	for i < len(p) {
		if p[i] < utf8.RuneSelf {
			out = append(out, p[i])
			i++
			continue
		}
		r, sz := utf8.DecodeRune(p[i:])
		if r != utf8.RuneError || sz > 1 {
			out = append(out, p[i:i+sz]...)
			i += sz
			continue
		}
		k := validPrefixLen(p[i:])
		if k == len(p)-i && !final {
			break // the start of a character: wait for the rest
		}
		out = append(out, "\uFFFD"...)
		i += max(k, 1)
	}
	rest := copy(d.pending, p[i:])
	d.pending = d.pending[:rest]
	return string(out)
}

// validPrefixLen is the length of the longest prefix of p (at most 3 bytes)
// that can begin a valid UTF-8 encoding but is not yet one.
func validPrefixLen(p []byte) int {
	if len(p) == 0 {
		return 0
	}
	c := p[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 3
	case c == 0xED:
		need, hi = 3, 0x9F
	case c == 0xF0:
		need, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 4
	case c == 0xF4:
		need, hi = 4, 0x8F
	default:
		return 0
	}
	n := 1
	for n < need && n < len(p) {
		b := p[n]
		if n == 1 && (b < lo || b > hi) || n > 1 && (b < 0x80 || b > 0xBF) {
			break
		}
		n++
	}
	if n == need {
		return 0 // a complete character: not a partial prefix
	}
	return n
}
