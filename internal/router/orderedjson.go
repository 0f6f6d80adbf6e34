package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// decodeOrdered decodes one JSON value as Python's json.loads does:
// objects as *jsonObject in their order (a repeated key keeps its first
// place and its last value), integers as int (pyBigInt past an int),
// other numbers as float64 (1.0 stays a float, 1e400 is +Inf), strings
// as encoding/json unquotes them (an invalid UTF-8 byte or a lone
// surrogate becomes U+FFFD).
//
// encoding/json's own validation refuses malformed input first (and
// anything nested past its 10,000 levels, which is maxOrderedDepth),
// with its error; orderedScanner then builds the value in one pass over
// bytes known to be valid. It costs about what json.Unmarshal into an
// any does: the json.Decoder.Token walk it replaced was 5-25 times
// slower and allocated a token per value (1 MB of [0,0,...] took 0.5 s
// of the router's CPU and 100 MB of garbage under load, rt12).
func decodeOrdered(data []byte) (any, error) {
	if !json.Valid(data) {
		var v any
		if err := json.Unmarshal(data, &v); err != nil { // invalid: the syntax error, nothing decoded
			return nil, err
		}
		return nil, errOrderedSyntax
	}
	s := orderedScanner{data: data}
	v, err := s.value(0)
	if err != nil {
		return nil, err
	}
	if s.next() != 0 {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// errOrderedSyntax is orderedScanner's answer to bytes that are not
// JSON, which decodeOrdered's validation never lets through to it.
var errOrderedSyntax = errors.New("invalid JSON")

// orderedScanner reads one JSON value from data at i. It checks what it
// relies on (never reading past data, nesting at most maxOrderedDepth)
// but is no validator: decodeOrdered runs it on valid JSON only.
type orderedScanner struct {
	data []byte
	i    int
}

// next skips white space and is the byte there, 0 at the end.
func (s *orderedScanner) next() byte {
	for ; s.i < len(s.data); s.i++ {
		switch c := s.data[s.i]; c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}

func (s *orderedScanner) value(depth int) (any, error) {
	switch c := s.next(); c {
	case '{', '[':
		if depth >= maxOrderedDepth {
			return nil, fmt.Errorf("JSON nested deeper than %d", maxOrderedDepth)
		}
		s.i++
		if c == '[' {
			return s.array(depth)
		}
		return s.object(depth)
	case '"':
		return s.str()
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	case 'n':
		return nil, s.literal("null")
	}
	return s.number()
}

func (s *orderedScanner) literal(word string) error {
	if len(s.data)-s.i < len(word) || string(s.data[s.i:s.i+len(word)]) != word {
		return errOrderedSyntax
	}
	s.i += len(word)
	return nil
}

// array reads the elements after a '[' nested depth deep.
func (s *orderedScanner) array(depth int) (any, error) {
	list := []any{}
	if s.next() == ']' {
		s.i++
		return list, nil
	}
	for {
		v, err := s.value(depth + 1)
		if err != nil {
			return nil, err
		}
		list = append(list, v)
		switch s.next() {
		case ',':
			s.i++
		case ']':
			s.i++
			return list, nil
		default:
			return nil, errOrderedSyntax
		}
	}
}

// object reads the members after a '{' nested depth deep.
func (s *orderedScanner) object(depth int) (any, error) {
	o := &jsonObject{vals: map[string]any{}}
	if s.next() == '}' {
		s.i++
		return o, nil
	}
	for {
		if s.next() != '"' {
			return nil, errOrderedSyntax
		}
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if s.next() != ':' {
			return nil, errOrderedSyntax
		}
		s.i++
		v, err := s.value(depth + 1)
		if err != nil {
			return nil, err
		}
		// jsonObject.set with one map access: a repeated key keeps its
		// place and takes the new value.
		n := len(o.vals)
		o.vals[k] = v
		if len(o.vals) > n {
			o.keys = append(o.keys, k)
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return o, nil
		default:
			return nil, errOrderedSyntax
		}
	}
}

// str reads the string whose opening quote is at i.
func (s *orderedScanner) str() (string, error) {
	start := s.i + 1
	n := bytes.IndexByte(s.data[start:], '"')
	if n < 0 {
		return "", errOrderedSyntax
	}
	lit := s.data[start : start+n]
	if bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		s.i = start + n + 1
		return string(lit), nil
	}
	return s.unquote(start, n)
}

// unquote reads the string from start (after its opening quote) as
// encoding/json unquotes it: escapes decoded, a surrogate pair joined, a
// lone surrogate or a byte that is not UTF-8 as U+FFFD. The text to the
// first '"' is n bytes, about what the string takes.
func (s *orderedScanner) unquote(start, n int) (string, error) {
	d := s.data
	b := make([]byte, 0, n+utf8.UTFMax)
	for i := start; i < len(d); {
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			// b is never written again: the string shares its bytes.
			return unsafe.String(unsafe.SliceData(b), len(b)), nil
		case c == '\\':
			if i+1 >= len(d) {
				return "", errOrderedSyntax
			}
			switch e := d[i+1]; e {
			case '"', '\\', '/', '\'':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := getu4(d[i:])
				if r < 0 {
					return "", errOrderedSyntax
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if pair := utf16.DecodeRune(r, getu4(d[i:])); pair != utf8.RuneError {
						b = utf8.AppendRune(b, pair)
						i += 6
						continue
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				return "", errOrderedSyntax
			}
			i += 2
		case c < ' ':
			return "", errOrderedSyntax
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			b = utf8.AppendRune(b, r)
			i += size
		}
	}
	return "", errOrderedSyntax
}

// getu4 is the code unit of the \uXXXX at the start of e, -1 if none.
func getu4(e []byte) rune {
	if len(e) < 6 || e[0] != '\\' || e[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range e[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// number reads the number at i as pyNumber does, an integer of at most
// 18 digits without a string of its digits.
func (s *orderedScanner) number() (any, error) {
	d := s.data
	start, i := s.i, s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	digits := i
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	if i == digits {
		return nil, errOrderedSyntax
	}
	if i == len(d) || d[i] != '.' && d[i] != 'e' && d[i] != 'E' {
		s.i = i
		if i-digits > 18 {
			return pyNumber(string(d[start:i])), nil
		}
		n := 0
		for _, c := range d[digits:i] {
			n = n*10 + int(c-'0')
		}
		if d[start] == '-' {
			n = -n
		}
		return n, nil
	}
	// A fraction or an exponent: a float, its syntax checked by decodeOrdered's validation.
	for i < len(d) && ('0' <= d[i] && d[i] <= '9' || d[i] == '.' || d[i] == 'e' || d[i] == 'E' || d[i] == '+' || d[i] == '-') {
		i++
	}
	s.i = i
	return pyNumber(string(d[start:i])), nil
}
